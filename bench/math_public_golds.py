"""Public-data check of Proctor's `math` verifier: golds it refuses, golds that miss their own boxed copy, and
labelled model outputs it scores against the label.

Run with `.venv/bin/python bench/math_public_golds.py ROWS.jsonl [--rewrites] [--peer] [--out-dir DIR]`.
ROWS.jsonl is data the user supplies, one JSON object a line: `gold` (required), and optionally `dataset` (a
name for grouping), `id`, `response` (a model output) and `label` (true/1 when that output is correct). Nothing
is written to the repository; the report is printed, and with `--out-dir` the failure lists are written there
as refused.jsonl, mismatch.jsonl, rewrites.jsonl and outputs_disagree.jsonl. For each row it:

- scores `The final answer is $\\boxed{GOLD}$.` against reference GOLD with an Engine (cache off, default
  options): an item error is a refused gold (the service's 422), a reward under 1 a self-mismatch;
- with `--rewrites`, also scores natural rewritings a model would produce (`\\dfrac`->`\\frac`, `\\text{}`
  units dropped, `\\left( \\right)`->`()`, `$` dropped, `^\\circ` dropped, thousands separators dropped) against
  the same gold; the rewritings are mechanical, so a failing one is a lead to read, not a verdict;
- for rows with `response` and `label`, scores the response with Proctor and (with `--peer`) with Math-Verify
  0.9.0 called the way verl calls it (`math_metric`, gold wrapped in `\\boxed{}`), and lists where Proctor
  disagrees with the label, and whether Math-Verify agreed with the label there; with `--peer` each failing gold
  is also given to Math-Verify against its own boxed copy.

Failures are grouped by a heuristic cause read off the gold's text and Proctor's refusal message (the first
matching entry of CAUSES wins; prose golds, a sentence rather than an answer, are set apart first), most frequent
first, with a few verbatim (JSON-escaped) examples each. Example, on golds pulled from public eval sets:
`.venv/bin/python bench/math_public_golds.py /tmp/golds.jsonl --rewrites --peer --out-dir /tmp/out`.
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # proctor importable when run from anywhere

BATCH = 256
EXAMPLES = 5

# (cause, pattern on the gold, pattern on Proctor's refusal message): the first entry whose gold pattern or
# message pattern matches wins, so the more specific causes come first.
MATH_WORDS = {
    "sin",
    "cos",
    "tan",
    "cot",
    "sec",
    "csc",
    "log",
    "ln",
    "exp",
    "max",
    "min",
    "lim",
    "det",
    "mod",
    "gcd",
    "lcm",
    "arcsin",
    "arccos",
    "arctan",
    "sinh",
    "cosh",
    "tanh",
    "if",
    "and",
    "or",
    "for",
    "all",
    "of",
    "in",
    "at",
    "cm",
    "mm",
    "km",
    "kg",
    "ft",
    "mph",
    "hr",
    "hours",
    "minutes",
    "seconds",
    "degrees",
    "dollars",
    "cents",
    "inches",
    "feet",
    "meters",
    "units",
    "square",
    "cubic",
    "mathrm",
    "text",
}
CAUSES: list[tuple[str, str, str]] = [
    (
        "matrix / vector written with \\begin{array} or a labelled matrix (B^{-1}=[...])",
        r"\\begin\{array\}\{[rlc]+\}[^}]*\\\\|\\begin\{[pbvBV]?matrix",
        r"matrix inside|unexpected '\['",
    ),
    ("piecewise / cases / aligned", r"\\begin\{(cases|aligned|align)|\\left\\\{\\begin\{array", ""),
    (
        "\\sum / \\int / \\lim / \\prod / \\bigcup",
        r"\\(sum|int|iint|oint|lim|prod|bigcup|bigcap)(?![A-Za-z])",
        "",
    ),
    ("series with \\cdots / \\ldots", r"\\(cdots|ldots|dots)", ""),
    ("\\pm / \\mp", r"\\pm|\\mp|±", "pm inside"),
    ("primes: derivatives y', degrees-minutes-seconds 63^\\circ 45'", r"\\prime|'", "prime"),
    ("\\approx / \\sim / \\equiv prefix or relation", r"\\(approx|sim|simeq|equiv)(?![A-Za-z])", ""),
    (
        "accents: \\bar \\hat \\vec \\dot \\overrightarrow",
        r"\\(bar|hat|vec|dot|ddot|overrightarrow|tilde)(?![A-Za-z])",
        "",
    ),
    ("single-letter variable read as a unit (\\frac{3 m}{2}, \\frac{1}{4m}, L C s)", r"", r"a unit inside"),
    ("several labelled values (d=.., M=(..); x=.., y=..)", r"=[^=]*,[^=]*=", r"bracket inside|rel inside"),
    (
        "inequality then interval after ':' (x<-7:(-\\infty,-7))",
        r"[<>]|\\leq|\\geq|leqslant|geqslant",
        "ratio inside",
    ),
    (
        "geometry / other unknown command (\\triangle, \\angle, \\odot, \\hbar, \\perp)",
        r"",
        r"unknown command",
    ),
    ("\\max / \\min in a subscript (m_{\\max })", r"_\{\\(max|min)", ""),
    ("float literal with a trailing dot (-1./3)", r"\d\./", ""),
    ("\\phantom", r"\\phantom", ""),
    ("units in \\mathrm / \\text", r"\\(text|mathrm|mbox|rm)\s*\{", ""),
    ("degrees (^\\circ)", r"\\circ|°", ""),
    (
        "thousands separators (10,455 / 1\\,000 / 32{,}349)",
        r"\d\{,\}\d|\d\\,\d{3}|^-?\d{1,3}(,\d{3})+(\.\d+)?$",
        "",
    ),
    ("labelled relation (AB=4, x=3)", r"^[^=<>]{1,40}=[^=]", ""),
    ("\\text{ and } / or lists", r"\\text\s*\{\s*(and|or)\s*\}|\b(and|or)\b", ""),
    ("sets / tuples / lists", r",", ""),
]


def brace_problem(gold: str) -> bool:
    """Whether the gold's braces are unbalanced or it ends in a lone backslash."""
    depth = 0
    i = 0
    while i < len(gold):
        ch = gold[i]
        if ch == "\\":
            i += 2
            continue
        depth += (ch == "{") - (ch == "}")
        if depth < 0:
            return True
        i += 1
    return depth != 0 or re.search(r"(?<!\\)\\\s*$", gold) is not None


def prose_words(gold: str) -> int:
    """How many plain words the gold holds outside LaTeX commands (a sentence, not an answer, has several)."""
    text = re.sub(r"\\[A-Za-z]+|\{[^{}]*\}", " ", gold)
    return sum(
        1 for word in re.findall(r"(?<![A-Za-z\\])[A-Za-z]{2,}", text) if word.lower() not in MATH_WORDS
    )


def cause_of(gold: str, message: str = "") -> str:
    """A heuristic cause for a failing gold, read off its text and Proctor's refusal message."""
    if not gold.strip():
        return "empty gold"
    if brace_problem(gold):
        return "unbalanced braces / trailing backslash"
    if re.search(r"\\\\[a-zA-Z]", gold) and "\\\\\n" not in gold and "begin" not in gold:
        return "doubled backslashes (\\\\frac)"
    if prose_words(gold) >= 3 or re.search(r"(?<!\\)\$[^$]*(?<!\\)\$.*(?<!\\)\$", gold):
        return "prose / worked explanation as the gold (several words or several $..$ spans)"
    if re.search(r"[\u4e00-\u9fff]", gold):
        return "chinese words"
    for name, gold_pattern, message_pattern in CAUSES:
        if (gold_pattern and re.search(gold_pattern, gold)) or (
            message_pattern and re.search(message_pattern, message)
        ):
            return name
    return "other: " + re.sub(r".*cannot be understood: ", "", message)[:60] if message else "other"


def drop_units(gold: str) -> str:
    """The gold with its unit words (`\\text{ cm}`, `\\mbox{ inches}^2`, `\\mathrm{~m}`) dropped, or unchanged when
    that would leave a dangling operator (compound units such as `\\mathrm{ft} / \\mathrm{s}`)."""
    if re.search(r"/\s*\\(?:mathrm|text|mbox)", gold):
        return gold
    out = re.sub(
        r"\s*\\(?:text|mbox)\s*\{\s+(?!(?:or|and)\s*\})[A-Za-z][A-Za-z ]*\}(\^\{?[23]\}?)?", "", gold
    )
    out = re.sub(r"\s*\\mathrm\s*\{~[A-Za-z]+\}(\^\{?[23]\}?)?", "", out)
    return gold if re.search(r"[-/^\\]\s*$", out) or not out.strip() else out


SEP = r"(?<=\d)(\{,\}|,\\!|\\,|,)(?=\d{3})"
THOUSANDS = re.compile(r"(\\\$)?-?\d{1,3}((\{,\}|,\\!|\\,|,)\d{3})+(\.\d+)?")
REWRITES: list[tuple[str, Any]] = [
    ("\\dfrac->\\frac", lambda s: re.sub(r"\\[dt]frac", r"\\frac", s)),
    (
        "drop \\text{} units",
        drop_units,
    ),
    ("\\left( \\right)->()", lambda s: re.sub(r"\\(left|right)\s*(?=[()\[\]|])", "", s)),
    ("drop $ signs", lambda s: s.replace("\\$", "").replace("$", "")),
    ("drop ^\\circ", lambda s: re.sub(r"\^\s*\{?\\circ\}?|°", "", s)),
    ("drop thousands separators", lambda s: re.sub(SEP, "", s) if THOUSANDS.fullmatch(s.strip()) else s),
]


def load_rows(path: Path) -> list[dict[str, Any]]:
    """The user's rows; a gold that is not a string (a JSON number, a list) is turned into text."""
    rows = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh):
            if not line.strip():
                continue
            row = json.loads(line)
            gold = row["gold"]
            if isinstance(gold, list):
                gold = ", ".join(str(g) for g in gold)
            row["gold"] = str(gold)
            row.setdefault("dataset", path.stem)
            row.setdefault("id", n)
            rows.append(row)
    return rows


def verdicts(engine: Any, requests: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Score requests in batches; each verdict is {refused, reward, status, rule, message}."""
    from proctor.contract import ItemError

    out = []
    for start in range(0, len(requests), BATCH):
        for result in engine.score_batch(requests[start : start + BATCH]):
            if isinstance(result, ItemError):
                out.append(
                    {
                        "refused": True,
                        "reward": 0.0,
                        "status": f"error {result.error.status}",
                        "rule": "",
                        "message": result.error.message[:300],
                    }
                )
            else:
                out.append(
                    {
                        "refused": False,
                        "reward": result.reward,
                        "status": result.status.value,
                        "rule": str(result.details.get("rule", result.reason or "")),
                        "message": "",
                    }
                )
    return out


def boxed(gold: str) -> str:
    """The gold as a model would finish with it."""
    return "The final answer is $\\boxed{" + gold + "}$."


def peer_scores(pairs: list[tuple[str, str]]) -> list[float]:
    """Math-Verify 0.9.0 as verl calls it; any exception is 0."""
    import logging

    logging.disable(logging.CRITICAL)
    from math_verify.metric import math_metric
    from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig

    verify = math_metric(
        gold_extraction_target=(LatexExtractionConfig(),),
        pred_extraction_target=(ExprExtractionConfig(), LatexExtractionConfig()),
    )
    scores = []
    for response, gold in pairs:
        try:
            scores.append(float(verify(["\\boxed{" + gold + "}"], [response])[0]))
        except BaseException:  # noqa: BLE001 - verl scores any exception 0
            scores.append(0.0)
    return scores


def truthy(label: Any) -> bool:
    """A label as a bool: true, 1, "1", "true", "correct"."""
    if isinstance(label, str):
        return label.strip().lower() in {"1", "true", "yes", "correct"}
    return bool(label)


def grouped(records: list[dict[str, Any]], title: str) -> str:
    """Records grouped by cause, most frequent first, with verbatim (JSON-escaped) examples."""
    lines = [f"## {title}: {len(records)}"]
    groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for rec in records:
        groups[rec["cause"]].append(rec)
    for cause, recs in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        peer = [r["peer_self_match"] for r in recs if "peer_self_match" in r]
        note = f" (Math-Verify matches {sum(peer)} of them to their own boxed copy)" if peer else ""
        lines.append(f"- {cause}: {len(recs)}{note}")
        for rec in recs[:EXAMPLES]:
            extra = rec.get("message") or rec.get("rule") or ""
            lines.append(
                f"    {rec['dataset']}: {json.dumps(rec['gold'], ensure_ascii=False)}  [{extra[:120]}]"
            )
    return "\n".join(lines)


def write_jsonl(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """One JSON object a line."""
    with path.open("w", encoding="utf-8") as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("rows", type=Path, help="JSONL of {gold, [dataset, id, response, label]}")
    parser.add_argument("--rewrites", action="store_true", help="also score natural rewritings of each gold")
    parser.add_argument(
        "--peer", action="store_true", help="also score labelled responses and failing golds with Math-Verify"
    )
    parser.add_argument("--out-dir", type=Path, help="write the failure lists here")
    args = parser.parse_args()

    from proctor.engine import Engine
    from proctor.settings import Settings

    rows = load_rows(args.rows)
    engine = Engine(Settings(cache_size=0))
    try:
        golds = verdicts(
            engine,
            [
                {"id": i, "verifier": "math", "response": boxed(r["gold"]), "reference": r["gold"]}
                for i, r in enumerate(rows)
            ],
        )
        refused, mismatch, rewrites = [], [], []
        per_dataset: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
        for row, v in zip(rows, golds, strict=True):
            counts = per_dataset[row["dataset"]]
            counts["golds"] += 1
            rec = {
                "dataset": row["dataset"],
                "id": row["id"],
                "gold": row["gold"],
                "cause": cause_of(row["gold"], v["message"]),
                **v,
            }
            if v["refused"]:
                counts["refused"] += 1
                refused.append(rec)
            elif v["reward"] < 1.0:
                counts["mismatch"] += 1
                mismatch.append(rec)

        if args.peer and (refused or mismatch):  # does Math-Verify take these golds' own boxed copies?
            failing = refused + mismatch
            for rec, score in zip(
                failing, peer_scores([(boxed(r["gold"]), r["gold"]) for r in failing]), strict=True
            ):
                rec["peer_self_match"] = score >= 1.0

        if args.rewrites:
            asks, keys = [], []
            for i, row in enumerate(rows):
                if golds[i]["refused"]:
                    continue
                for name, fn in REWRITES:
                    new = fn(row["gold"])
                    if new != row["gold"] and new.strip():
                        keys.append((row, name, new))
                        asks.append(
                            {
                                "id": len(asks),
                                "verifier": "math",
                                "response": boxed(new),
                                "reference": row["gold"],
                            }
                        )
            for (row, name, new), v in zip(keys, verdicts(engine, asks), strict=True):
                if v["reward"] < 1.0:
                    rewrites.append(
                        {
                            "dataset": row["dataset"],
                            "id": row["id"],
                            "gold": row["gold"],
                            "rewrite": name,
                            "response_answer": new,
                            "cause": name,
                            **v,
                        }
                    )

        labelled = [r for r in rows if "response" in r and "label" in r]
        disagree = []
        out_counts: collections.Counter[str] = collections.Counter()
        if labelled:
            mine = verdicts(
                engine,
                [
                    {"id": i, "verifier": "math", "response": r["response"], "reference": r["gold"]}
                    for i, r in enumerate(labelled)
                ],
            )
            peer = peer_scores([(r["response"], r["gold"]) for r in labelled]) if args.peer else None
            for i, (row, v) in enumerate(zip(labelled, mine, strict=True)):
                label = truthy(row["label"])
                ok = (v["reward"] >= 1.0) == label
                out_counts["rows"] += 1
                out_counts["proctor_right"] += ok
                peer_ok = None
                if peer is not None:
                    peer_ok = (peer[i] >= 1.0) == label
                    out_counts["peer_right"] += peer_ok
                if not ok:
                    kind = "false negative" if label else "false positive"
                    cause = f"{'gold refused (422)' if v['refused'] else kind}: {cause_of(row['gold'], v['message'])}"
                    disagree.append(
                        {
                            "dataset": row["dataset"],
                            "id": row["id"],
                            "gold": row["gold"],
                            "label": label,
                            "peer_agrees_with_label": peer_ok,
                            "cause": cause,
                            "response_tail": row["response"][-400:],
                            **v,
                        }
                    )
    finally:
        engine.close()

    print("# Proctor `math` on public golds\n")
    print("| dataset | golds | refused | self-mismatch |\n|---|---:|---:|---:|")
    total: collections.Counter[str] = collections.Counter()
    for name, counts in sorted(per_dataset.items()):
        total.update(counts)
        print(f"| {name} | {counts['golds']} | {counts['refused']} | {counts['mismatch']} |")
    print(f"| **all** | {total['golds']} | {total['refused']} | {total['mismatch']} |\n")
    print(grouped(refused, "refused golds (422)") + "\n")
    print(grouped(mismatch, "golds not matching their own boxed copy") + "\n")
    if args.rewrites:
        print(grouped(rewrites, "natural rewritings scored < 1 (grouped by rewrite)") + "\n")
    if labelled:
        n = out_counts["rows"]
        line = f"labelled outputs: {n}, Proctor agrees with label on {out_counts['proctor_right']}"
        if args.peer:
            line += f", Math-Verify on {out_counts['peer_right']}"
        print(line)
        print(grouped(disagree, "outputs where Proctor disagrees with the label"))
    if args.out_dir:
        args.out_dir.mkdir(parents=True, exist_ok=True)
        write_jsonl(args.out_dir / "refused.jsonl", refused)
        write_jsonl(args.out_dir / "mismatch.jsonl", mismatch)
        if args.rewrites:
            write_jsonl(args.out_dir / "rewrites.jsonl", rewrites)
        if labelled:
            write_jsonl(args.out_dir / "outputs_disagree.jsonl", disagree)


if __name__ == "__main__":
    main()
