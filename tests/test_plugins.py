"""Third-party verifiers register through the `proctor.verifiers` entry-point group."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

PLUGIN = '''
from proctor import Example, Verdict, VerifierSpec, register_verifier


def score_reverse(response, reference, options):
    """Reward 1 when the response is the reference reversed."""
    return Verdict.right() if response.strip() == reference[::-1] else Verdict.wrong("mismatch")


register_verifier(VerifierSpec(
    name="thirdparty.reverse", version="0.1", score=score_reverse, reference=str, execution="pool",
    examples=(Example("olleh", "hello", 1.0), Example("hello", "hello", 0.0)),
))
'''


def test_an_installed_distribution_registers_its_verifier_through_the_entry_point(tmp_path: Path):
    package = tmp_path / "reverse_plugin"
    package.mkdir()
    (package / "__init__.py").write_text(PLUGIN)
    dist_info = tmp_path / "reverse_plugin-0.1.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text("Metadata-Version: 2.1\nName: reverse-plugin\nVersion: 0.1\n")
    (dist_info / "entry_points.txt").write_text("[proctor.verifiers]\nreverse = reverse_plugin\n")
    env = {k: v for k, v in os.environ.items() if k != "PROCTOR_PLUGINS"}
    env["PYTHONPATH"] = str(tmp_path)
    listed = subprocess.run(
        [sys.executable, "-m", "proctor", "verifiers", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "thirdparty.reverse" in {v["name"] for v in json.loads(listed.stdout)}
    scored = subprocess.run(
        [
            sys.executable,
            "-m",
            "proctor",
            "score",
            "--verifier",
            "thirdparty.reverse",
            "--response",
            "olleh",
            "--reference",
            "hello",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert scored.returncode == 0, scored.stderr
    score = json.loads(scored.stdout)  # scored in a pool worker, which loads the plugin the same way
    assert (score["status"], score["reward"], score["verifier"]) == ("ok", 1.0, "thirdparty.reverse@0.1")
