"""Text verifiers: exact/regex answer matching (`text.match`), multiple-choice (`text.choice`) and similarity
to reference text (`text.similarity`); each module registers its verifier when imported."""
