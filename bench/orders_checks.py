"""tool.orders: which cheats each style of grader accepts (Proctor's, tau-bench-style, tau2-style).

Run with `.venv/bin/python bench/orders_checks.py` (about 20 s; `--seeds 0 3` picks the task sets, `--gate N`
the number of tasks for the trivial policies, `--out PATH` also writes the Markdown section there). Every gold
transcript (one per task kind) and every cheat transcript of `environment.cheat_transcripts` is graded three
ways, on the same transcript and the same task:

(a) **Proctor**: `scoring.grade` (replay; database equal to the gold one; no forbidden write in the action log;
    required facts stated as values and looked up).

(b) **tau-bench-style**, written here from our reading of tau-bench's reward (`Env.calculate_reward`): the
    database after the agent's calls must hash equal to the database after the gold actions, and each
    expected output must be a substring of some assistant message (lower-cased, commas removed). There is no
    check of confirmation, of refused calls, or of which customer's order a call touched. Our task's facts
    stand in for tau-bench's `outputs` (the value as the tools write it: `206.00`, `2026-06-19`).

(c) **tau2-style**, from our reading of tau2-bench's evaluators: the product of the database check (replay
    gold actions on a fresh environment and the agent's calls on another, compare hashes), the action check
    (each gold action must match some agent tool call; `Action.compare_with_tool_call` with `compare_args`
    unset compares only the keys the *agent's* call has, so a gold argument the agent left out is ignored) and
    the communicate check (each `communicate_info` string a substring of some assistant message, lower-cased,
    commas removed). Tool calls are counted whether they succeeded or not, as tau2 lists them from the
    trajectory.

Both peers' databases come from the same replay Proctor uses (every call the session ran, in order), so the
columns differ only in the rules above. The trivial policies (no call, every tool, random arguments, repeating
the request) are averaged over `--gate` test tasks under each grader.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from proctor.contract import ChatMessage, content_text  # noqa: E402
from proctor.environments.tools.orders.database import db_digest  # noqa: E402
from proctor.environments.tools.orders.environment import (  # noqa: E402
    ORDERS,
    cheat_transcripts,
    gold_transcript,
    kind_tasks,
    trivial_transcripts,
)
from proctor.environments.tools.orders.scoring import grade, parsed_calls, replay  # noqa: E402
from proctor.environments.tools.orders.tasks import OrdersReference  # noqa: E402


def _messages(raw: list[dict[str, Any]]) -> list[ChatMessage]:
    return [ChatMessage.model_validate(m) for m in raw]


def _assistant_texts(transcript: list[ChatMessage]) -> list[str]:
    return [content_text(m.content) for m in transcript if m.role == "assistant" and m.content]


def _substring(value: str, texts: list[str]) -> bool:
    needle = value.lower().replace(",", "")
    return any(needle in text.lower().replace(",", "") for text in texts)


def tau_bench_style(reference: OrdersReference, transcript: list[ChatMessage]) -> dict[str, Any]:
    """Database hash equality and expected-output substrings; no action-log check."""
    conversation = replay(reference, transcript)
    db_ok = db_digest(conversation.shop.db) == db_digest(conversation.gold_db)
    texts = _assistant_texts(transcript)
    outputs_ok = all(_substring(fact.value, texts) for fact in reference.facts)
    return {"reward": float(db_ok and outputs_ok), "db": db_ok, "outputs": outputs_ok}


def _agent_calls(transcript: list[ChatMessage]) -> list[tuple[str, dict[str, Any]]]:
    calls = []
    for message in transcript:
        if message.role == "assistant":
            calls += [(call.name, call.arguments) for call in parsed_calls(message).calls]
    return calls


def tau2_style(reference: OrdersReference, transcript: list[ChatMessage]) -> dict[str, Any]:
    """Database check x action check (agent's keys only) x communicate substrings."""
    conversation = replay(reference, transcript)
    db_ok = db_digest(conversation.shop.db) == db_digest(conversation.gold_db)
    calls = _agent_calls(transcript)

    def matches(gold_name: str, gold_args: dict[str, Any], name: str, args: dict[str, Any]) -> bool:
        if gold_name != name:
            return False
        keys = list(args)  # compare_args unset: the agent's own keys
        return {k: args.get(k) for k in keys} == {k: gold_args.get(k) for k in keys}

    actions_ok = all(
        any(matches(action.name, action.arguments, name, args) for name, args in calls)
        for action in reference.actions
    )
    communicate_ok = all(_substring(fact.value, _assistant_texts(transcript)) for fact in reference.facts)
    return {
        "reward": float(db_ok and actions_ok and communicate_ok),
        "db": db_ok,
        "action": actions_ok,
        "communicate": communicate_ok,
    }


def _mark(value: float) -> str:
    return "**accepts**" if value == 1.0 else "rejects"


def run(seeds: list[int], gate: int) -> tuple[str, dict[str, Any]]:
    """Grade golds, cheats and trivial policies three ways; the Markdown section and the raw numbers."""
    started = time.perf_counter()
    rows: list[tuple[str, str, float, float, float, str, bool]] = []
    for seed in seeds:
        tasks = kind_tasks(seed)
        cases: list[tuple[str, dict[str, Any], list[dict[str, Any]]]] = [
            (f"gold ({kind})", task.reference, gold_transcript(task)) for kind, task in tasks.items()
        ]
        cases += [(f"cheat: {note}", ref, tr) for note, (ref, tr) in cheat_transcripts(tasks).items()]
        for note, raw_ref, raw in cases:
            reference = OrdersReference.model_validate(raw_ref)
            transcript = _messages(raw)
            ours = grade(reference, transcript)
            tau = tau_bench_style(reference, transcript)
            tau2 = tau2_style(reference, transcript)
            rows.append((f"{note} [seed {seed}]", reference.kind, ours.reward, tau["reward"], tau2["reward"],
                         ours.reason or "", tau2["action"]))  # fmt: skip
    gate_tasks = ORDERS.make_tasks("test", 0, gate)
    rng = random.Random(0)
    trivial: dict[str, list[float]] = {}
    for task in gate_tasks:
        reference = OrdersReference.model_validate(task.reference)
        for note, raw in trivial_transcripts(task, rng).items():
            transcript = _messages(raw)
            sums = trivial.setdefault(note, [0.0, 0.0, 0.0])
            sums[0] += grade(reference, transcript).reward
            sums[1] += tau_bench_style(reference, transcript)["reward"]
            sums[2] += tau2_style(reference, transcript)["reward"]
    elapsed = time.perf_counter() - started

    golds = [r for r in rows if r[0].startswith("gold")]
    cheats = [r for r in rows if r[0].startswith("cheat")]
    lines = [
        "## tool.orders: which cheats each grader accepts",
        "",
        f"`.venv/bin/python bench/orders_checks.py --seeds {' '.join(map(str, seeds))} --gate {gate}` "
        f"({elapsed:.0f} s, one process). Each row is one transcript, graded by Proctor's `tool.orders` grader, "
        "a tau-bench-style check (database hash + expected output as a substring of any assistant message) and "
        "a tau2-style check (database x action match over the agent's own argument keys x communicate-info "
        "substring), each written from our reading of those projects' reward code (see the script's docstring). "
        "All three see the same replayed database.",
        "",
        "The last column is tau2's action check alone (a gold action counts as done when some call matches it "
        "on the keys the agent sent), shown apart because it is the rule the design brief names.",
        "",
        "| transcript | kind | Proctor | tau-bench-style | tau2-style | Proctor's reason | tau2 action check |",
        "|---|---|---|---|---|---|---|",
    ]
    for note, kind, ours_r, tau_r, tau2_r, reason, action in rows:
        lines.append(
            f"| {note} | {kind} | {_mark(ours_r)} | {_mark(tau_r)} | {_mark(tau2_r)} | {reason} | "
            f"{'passes' if action else 'fails'} |"
        )
    summary = {
        "golds": len(golds),
        "golds_accepted": [sum(r[i] for r in golds) for i in (2, 3, 4)],
        "cheats": len(cheats),
        "cheats_accepted": [sum(r[i] for r in cheats) for i in (2, 3, 4)],
        "trivial_mean": {
            note: [round(v / len(gate_tasks), 4) for v in sums] for note, sums in trivial.items()
        },
    }
    lines += [
        "",
        f"Golds accepted (Proctor / tau-bench-style / tau2-style): "
        f"{' / '.join(str(int(v)) for v in summary['golds_accepted'])} of {len(golds)}. "
        f"Cheats accepted: {' / '.join(str(int(v)) for v in summary['cheats_accepted'])} of {len(cheats)}.",
        "",
        f"Trivial policies, mean reward over {len(gate_tasks)} test tasks (Proctor / tau-bench-style / tau2-style):",
        "",
        "| policy | Proctor | tau-bench-style | tau2-style |",
        "|---|---:|---:|---:|",
    ]
    for note, means in summary["trivial_mean"].items():
        lines.append(f"| {note} | {means[0]:.3f} | {means[1]:.3f} | {means[2]:.3f} |")
    return "\n".join(lines) + "\n", summary


def main() -> None:
    """Print the table; `--out` also writes it."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 3])
    parser.add_argument("--gate", type=int, default=100)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    section, summary = run(args.seeds, args.gate)
    print(section)
    print(json.dumps(summary))
    if args.out is not None:
        args.out.write_text(section)


if __name__ == "__main__":
    main()
