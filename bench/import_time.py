"""Cold start: a fresh process that imports proctor and scores one `text.match` item, this tree against a baseline.

What a CLI call, a pool worker's first item or a user's script pays before its first reward. Both trees run
from a plain checkout on `PYTHONPATH` (the baseline is a `git worktree` of `--baseline`; when that commit still
mapped its folders into the package through setuptools, the same folders are linked in, so both sides do the
same import work without an install), alternating run by run so machine noise falls on both alike.

    python bench/import_time.py --baseline 68b1dc0 --runs 30
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, append_results, git_commit  # noqa: E402

LINKED_FOLDERS = ("verifiers", "sandboxes", "environments", "api", "trainer", "datasets")
PROGRAM = (
    "import proctor\n"
    "score = proctor.score('text.match', response='The answer is \\\\boxed{42}', reference='42')\n"
    "assert score.reward == 1.0, score\n"
    "import sys; print(sum(1 for name in sys.modules if name.startswith('proctor')))\n"
)


def checkout(commit: str, into: Path) -> Path:
    """A detached worktree of `commit` whose `proctor.*` imports resolve from the folder itself."""
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(into), commit], cwd=ROOT, check=True, capture_output=True
    )
    for folder in LINKED_FOLDERS:
        link = into / "proctor" / folder
        if (into / folder).is_dir() and not link.exists():
            link.symlink_to(Path("..") / folder)
    return into


def one_run(tree: Path) -> tuple[float, int]:
    """Wall seconds of one fresh interpreter doing PROGRAM from `tree`, and the proctor modules it loaded."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
    env["PYTHONPATH"] = str(tree)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], cwd=tree, env=env, capture_output=True, text=True, check=True
    )
    return time.perf_counter() - started, int(done.stdout.strip().splitlines()[-1])


def main() -> None:
    """Measure both trees, print the table and append it to bench/RESULTS.md."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--baseline", required=True, help="commit to compare with (e.g. the one before a change)"
    )
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        baseline = checkout(args.baseline, Path(scratch) / "baseline")
        try:
            trees = {"baseline": baseline, "this tree": ROOT}
            for tree in trees.values():  # warm the page cache and the bytecode caches first
                one_run(tree)
            times: dict[str, list[float]] = {name: [] for name in trees}
            modules: dict[str, int] = {}
            for _ in range(args.runs):
                for name, tree in trees.items():
                    seconds, count = one_run(tree)
                    times[name].append(seconds)
                    modules[name] = count
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(baseline)], cwd=ROOT, check=False)
    base, now = statistics.median(times["baseline"]), statistics.median(times["this tree"])
    rows = "\n".join(
        f"| {name} | {statistics.median(values) * 1000:.0f} | {min(values) * 1000:.0f} | {modules[name]} |"
        for name, values in times.items()
    )
    report = (
        f"## cold start: import proctor and score one text.match item "
        f"({date.today()}, commit {git_commit()} vs {args.baseline})\n\n"
        f"A fresh `python -c` per run ({args.runs} runs each, alternating), from a plain checkout on PYTHONPATH; "
        f"reproduce with `python bench/import_time.py --baseline {args.baseline} --runs {args.runs}`.\n\n"
        "| tree | median ms | min ms | proctor modules loaded |\n|---|---:|---:|---:|\n"
        f"{rows}\n\nThis tree takes {now / base:.2f}x the baseline's median time.\n"
    )
    print(report)
    append_results(report)


if __name__ == "__main__":
    main()
