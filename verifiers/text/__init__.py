"""Text verifiers: exact/regex answer matching and multiple-choice."""
