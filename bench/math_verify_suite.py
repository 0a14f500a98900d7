"""Math-Verify's own test cases as a public yardstick for Proctor's `math` verifier.

Run with `.venv/bin/python bench/math_verify_suite.py` (prints a Markdown section; `--write` appends it to
bench/RESULTS.md, `--no-write` is the default and writes nothing). The rows, bench/data/math_verify_tests.jsonl,
are the (gold, prediction, expected verdict) cases of math-verify 0.9.0's tests/ folder, converted by
bench/convert_math_verify_tests.py (see bench/data/README.md). In one run it:

- scores every row with Proctor: an Engine with the cache off, `verifier: "math"`, the row's prediction as
  the response and its gold as the reference. Feeding rule: `options: {"extraction": "lenient"}` for EVERY
  row and nothing else changed. The tests check equivalence (and Math-Verify's extraction of a bare answer),
  not anchoring, and most predictions are a bare expression or a `$...$` span with no box or anchor, which
  Proctor's default `anchored` extraction rightly calls no answer. Precision rows (`precision=N`) and the
  `strict=False` row keep Proctor's defaults (numbers match by the digits stated; no option maps to
  Math-Verify's float_rounding or non-strict variable matching), so they measure Proctor's own policy;
- scores every row with Math-Verify on the row's config (the same extraction targets and verify() arguments
  the test used: `LatexExtractionConfig(boxed_match_priority=0)` for "latex", `ExprExtractionConfig()` for
  "expr", `float_rounding`, `strict`, `allow_set_relation_comp`; "parse-defaults" is plain parse()/verify()),
  as a sanity check that the expected verdicts reproduce with the installed math-verify.

A gold Proctor rejects (an item error, HTTP 422 on the API) counts separately, not as agreement or
disagreement. The report gives rows, agreement overall and per source file, the 422 count, Math-Verify's
reproduction rate, and every disagreement (id, gold, prediction, expected, Proctor's reward/status/rule).
"""

from __future__ import annotations

import argparse
import collections
import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

from common import ROOT, append_results, git_commit  # bench/common.py: the script's folder is on sys.path

DATASET = ROOT / "bench" / "data" / "math_verify_tests.jsonl"
OPTIONS = {"extraction": "lenient"}


def load_rows(path: Path = DATASET) -> list[dict[str, Any]]:
    """The converted rows: id, source, gold, prediction, expected, config, note."""
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def request_of(row: dict[str, Any]) -> dict[str, Any]:
    """The `math` score request for one row (the feeding rule of the module docstring)."""
    return {
        "id": row["id"],
        "verifier": "math",
        "response": row["prediction"],
        "reference": row["gold"],
        "options": OPTIONS,
    }


# -- Proctor ---------------------------------------------------------------------------------------


def proctor_results(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per row: accepted (None for an item error), reward, status, rule, error."""
    from proctor.contract import ItemError
    from proctor.engine import Engine
    from proctor.settings import Settings

    engine = Engine(Settings(cache_size=0))
    try:
        results = engine.score_batch([request_of(row) for row in rows])
    finally:
        engine.close()
    out: list[dict[str, Any]] = []
    for result in results:
        if isinstance(result, ItemError):
            message = result.error.message
            out.append(
                {
                    "accepted": None,
                    "reward": None,
                    "status": f"error {result.error.status}",
                    "rule": None,
                    "error": message,
                }
            )
            continue
        details = result.details
        out.append(
            {
                "accepted": result.status.value == "ok" and result.reward >= 1.0,
                "reward": result.reward,
                "status": result.status.value if result.status.value != "ok" else (result.reason or "ok"),
                "rule": details.get("rule"),
                "extracted": details.get("extracted"),
                "error": None,
            }
        )
    return out


# -- Math-Verify -----------------------------------------------------------------------------------


def math_verify_verdict(row: dict[str, Any]) -> bool:
    """Math-Verify's verdict on one row with the extraction targets and verify() arguments its test used."""
    from math_verify import ExprExtractionConfig, LatexExtractionConfig, parse, verify

    parts = row["config"].split(";")
    if parts[0] == "parse-defaults":
        return bool(verify(parse(row["gold"]), parse(row["prediction"])))
    targets: list[Any] = []
    for kind in parts[0].split("+"):
        targets.append(
            LatexExtractionConfig(boxed_match_priority=0) if kind == "latex" else ExprExtractionConfig()
        )
    kwargs: dict[str, Any] = {"float_rounding": 6, "strict": True, "allow_set_relation_comp": False}
    for part in parts[1:]:
        if part.startswith("precision="):
            kwargs["float_rounding"] = int(part.split("=")[1])
        elif part == "strict=False":
            kwargs["strict"] = False
        elif part == "allow_set_relation_comp":
            kwargs["allow_set_relation_comp"] = True
        else:
            raise ValueError(f"unknown config part {part!r}")
    return bool(verify(parse(row["gold"], targets), parse(row["prediction"], targets), **kwargs))


def math_verify_results(rows: list[dict[str, Any]]) -> list[bool | None]:
    """Math-Verify's verdict per row; None where it raised."""
    logging.disable(logging.CRITICAL)  # Math-Verify logs a warning for every text it cannot parse
    out: list[bool | None] = []
    for row in rows:
        try:
            out.append(math_verify_verdict(row))
        except Exception:  # noqa: BLE001 - a crash is reported as "no verdict", not fatal to the run
            out.append(None)
    return out


# -- report ----------------------------------------------------------------------------------------


def _short(text: str | None, limit: int = 70) -> str:
    if text is None:
        return ""
    flat = " ".join(str(text).split())
    flat = flat if len(flat) <= limit else flat[: limit - 1] + "…"
    return "`" + flat.replace("`", "'").replace("|", "\\|") + "`"


def report(
    rows: list[dict[str, Any]], proctor: list[dict[str, Any]], peer: list[bool | None]
) -> tuple[str, list[str]]:
    """The Markdown section and the disagreement lines."""
    per_file: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    disagreements: list[str] = []
    for row, mine, theirs in zip(rows, proctor, peer, strict=True):
        source = row["source"].split("::")[0]
        tally = per_file[source]
        tally["rows"] += 1
        tally["peer_ok"] += theirs == row["expected"]
        if mine["accepted"] is None and mine["status"] == "error 422":
            tally["rejected"] += 1
            outcome = "422"
        elif mine["accepted"] is None:  # any other item error: a broken run, never a verdict
            tally["errors"] += 1
            outcome = "error"
        elif mine["accepted"] == row["expected"]:
            tally["agree"] += 1
            continue
        else:
            tally["disagree"] += 1
            outcome = "disagree"
        disagreements.append(
            f"| {row['id']} | {row['source']} | {_short(row['gold'])} | {_short(row['prediction'])} | "
            f"{int(row['expected'])} | {outcome} | {mine['reward'] if mine['reward'] is not None else '-'} | "
            f"{mine['status']} | {_short(mine['rule'] or mine['error'], 60)} |"
        )
    total: collections.Counter[str] = collections.Counter()
    for tally in per_file.values():
        total.update(tally)
    scored = total["rows"] - total["rejected"] - total["errors"]
    lines = [
        f"## Math-Verify's own tests as a yardstick for `math` ({dt.date.today().isoformat()}, commit {git_commit()})",
        "",
        f"{total['rows']} (gold, prediction, verdict) cases converted from math-verify 0.9.0's tests/ "
        "(bench/data/math_verify_tests.jsonl, bench/convert_math_verify_tests.py); Proctor scored every row "
        f"with `options: {json.dumps(OPTIONS)}`; Math-Verify re-run on each row's own config.",
        "",
        "| source | rows | Proctor agrees | disagrees | gold rejected (422) | Math-Verify reproduces |",
        "|---|---|---|---|---|---|",
    ]
    for source in sorted(per_file):
        t = per_file[source]
        lines.append(
            f"| {source} | {t['rows']} | {t['agree']} | {t['disagree']} | {t['rejected']} | {t['peer_ok']}/{t['rows']} |"
        )
    lines.append(
        f"| **all** | {total['rows']} | **{total['agree']}** ({total['agree'] / max(scored, 1):.1%} of "
        f"{scored} scored; {total['agree'] / total['rows']:.1%} of all rows) | {total['disagree']} | "
        f"{total['rejected']} | {total['peer_ok']}/{total['rows']} |"
    )
    if total["errors"]:
        lines += [
            "",
            f"**{total['errors']} rows came back as item errors other than 422: this run is broken.**",
        ]
    lines += [
        "",
        "Disagreements and rejected golds:",
        "",
        "| id | source | gold | prediction | expected | outcome | reward | status | rule / error |",
        "|---|---|---|---|---|---|---|---|---|",
        *disagreements,
        "",
    ]
    return "\n".join(lines), disagreements


def main() -> None:
    """Score the rows with both verifiers, print the section, append it to RESULTS.md with --write."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATASET)
    parser.add_argument("--write", action="store_true", help="append the section to bench/RESULTS.md")
    parser.add_argument("--no-write", action="store_true", help="print only (the default)")
    parser.add_argument("--json", type=Path, help="also dump per-row results here")
    args = parser.parse_args()
    rows = load_rows(args.data)
    proctor = proctor_results(rows)
    peer = math_verify_results(rows)
    section, _ = report(rows, proctor, peer)
    broken = any(mine["accepted"] is None and mine["status"] != "error 422" for mine in proctor)
    print(section)
    if args.json is not None:
        dump = [
            {**row, "proctor": mine, "math_verify": theirs}
            for row, mine, theirs in zip(rows, proctor, peer, strict=True)
        ]
        args.json.write_text(json.dumps(dump, indent=1, ensure_ascii=False))
    if broken:
        raise SystemExit("math_verify_suite: item errors other than 422; nothing written")
    if args.write and not args.no_write:
        append_results(section)


if __name__ == "__main__":
    main()
