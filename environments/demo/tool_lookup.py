"""`tool.demo_lookup`: a toy tool task for the reference trainer; the answer is a hidden value only a tool reveals.

Each task hides a seeded number (one digit in 0-5 at level `easy`, two digits at `medium`, four at `hard`). The one tool,
`lookup()`, takes no arguments and returns the number. The policy is paid for answering with it:

- the answer is the first whole number in the assistant text after the last observation (`final_answer_text`,
  read as `demo.sum` reads one), compared as text with the hidden value;
- the answer counts only when an observation of a `lookup` call in the transcript holds the value (a `tool`
  message, which only a session writes); an answer with no lookup before it scores 0, so a policy that never
  calls the tool earns 0 however well it guesses;
- a final message that calls a tool (even one that cannot be read) is not an answer.

The prompt carries nothing about the value, and no observation says whether an answer is right. The prompt is
short (`Hidden number?`) on purpose: an untrained tiny model's attention spreads evenly over its context, and a
long instruction would drown the observed digit. The task is small
enough that a randomly initialised 2-layer model learns it with GRPO on a CPU in a few minutes
(`trainer/configs/tiny_tools.yaml`, `tests/test_trainer_tools.py`).
"""

from __future__ import annotations

import random
import re
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from proctor.contract import ChatMessage, RequestError, Verdict, content_text
from proctor.environments.puzzles.seeding import item_rng
from proctor.environments.registry import Task
from proctor.environments.tools.base import (
    SessionLimits,
    ToolEnvironment,
    ToolResult,
    ToolSpec,
    final_answer_text,
    final_messages,
    register_tool_environment,
)
from proctor.registry import Example
from proctor.verifiers.reading.tool_calls import parse_message

NAME = "tool.demo_lookup"
VERSION = "1"
LEVELS = {"easy": (1, 6), "medium": (2, 10), "hard": (4, 10)}
"""level -> (digits, base): `easy` hides one digit in 0-5, `medium` two digits, `hard` four."""
PROMPT = "Hidden number?"
_NUMBER = re.compile(r"[0-9]+")

LOOKUP_TOOL = ToolSpec(
    name="lookup",
    description="Returns the hidden number of this task.",
    parameters={"type": "object", "properties": {}, "required": [], "additionalProperties": False},
)


class LookupReference(BaseModel):
    """The hidden value a demo_lookup transcript is graded against."""

    model_config = ConfigDict(extra="forbid")

    value: str = Field(pattern=r"^[0-9]{1,8}$", description="The hidden number, as digits.")


def _calls_or_errors(message: ChatMessage) -> bool:
    """Whether an assistant message calls a tool (any dialect), or holds a call that cannot be read."""
    raw = [call.model_dump(exclude_none=True) for call in message.tool_calls or []]
    parsed = parse_message(raw, content_text(message.content), "auto", {"lookup": LOOKUP_TOOL.parameters})
    return bool(parsed.calls or parsed.errors)


def looked_up(transcript: list[ChatMessage], value: str) -> bool:
    """Whether a `lookup` observation revealed the value: a tool message (written only by a session, never by the
    model) answering `lookup` whose text is the value. An error observation (a call with arguments) is not one."""
    return any(
        message.role == "tool"
        and message.name in (None, "lookup")
        and content_text(message.content).strip() == value
        for message in transcript
    )


def grade(reference: LookupReference, transcript: list[ChatMessage]) -> Verdict:
    """1 when the first number of the final answer is the hidden value and a lookup revealed it; else 0."""

    def zero(reason: str, **details: Any) -> Verdict:
        return Verdict(
            reward=0.0, correct=False, reason=reason, components={"answered": 0.0}, details=details
        )

    finals = final_messages(transcript)
    if not finals:
        return zero("no_answer")
    if any(_calls_or_errors(message) for message in finals):
        return zero("answer_with_tool_call")
    match = _NUMBER.search(final_answer_text(transcript))
    if match is None:
        return zero("no_answer")
    answer = match.group()
    shown = answer if len(answer) <= 20 else answer[:20] + "..."
    if not looked_up(transcript, reference.value):
        return zero("no_lookup", answer=shown)
    if answer != reference.value:  # compared as text: "07" is not "7"
        return Verdict(
            reward=0.0,
            correct=False,
            reason="wrong_answer",
            components={"answered": 1.0},
            details={"answer": shown, "expected": reference.value},
        )
    return Verdict(reward=1.0, correct=True, components={"answered": 1.0}, details={"answer": shown})


class DemoLookup(ToolEnvironment):
    """A hidden seeded number that only `lookup()` reveals."""

    name = NAME
    version = VERSION
    rebuildable_state = True  # the state is the task's hidden value
    description = (
        "Toy tool task for the reference trainer: answer with a hidden seeded number (1, 2 or 4 digits) that "
        "only the tool lookup() reveals; an answer without a lookup scores 0."
    )
    levels = tuple(LEVELS)
    default_level = "medium"
    reference_model = LookupReference

    def limits(self) -> SessionLimits:
        """A lookup and an answer need two turns; a few more leave room to recover from a bad call."""
        return SessionLimits(max_turns=4, max_tool_calls=4, max_tool_errors=4, max_observation_chars=256)

    def tools(self) -> list[ToolSpec]:
        """lookup."""
        return [LOOKUP_TOOL]

    def make_tasks(self, split: str, seed: int, count: int, level: str | None = None) -> list[Task]:
        """Tasks 0..count-1 of (split, seed, level): each hides a number of the level's digit count."""
        label = level or self.default_level or "medium"
        if label not in LEVELS:
            raise RequestError(422, f"unknown level {label!r}; levels: {', '.join(LEVELS)}", "difficulty")
        digits, base = LEVELS[label]
        tasks = []
        for index in range(count):
            rng = item_rng(NAME, VERSION, {"digits": digits, "base": base}, split, seed, index)
            value = "".join(str(rng.randrange(base)) for _ in range(digits))
            tasks.append(
                Task(
                    prompt=[{"role": "user", "content": PROMPT}],
                    reference={"value": value},
                    verifier=NAME,
                    metadata={
                        "gold_answer": value,
                        "difficulty": label,
                        "environment": NAME,
                        "version": VERSION,
                        "split": split,
                        "seed": seed,
                        "index": index,
                    },
                )
            )
        return tasks

    async def start(self, task: Task, limits: SessionLimits) -> str:
        """The session's state is the hidden value itself."""
        return LookupReference.model_validate(task.reference).value

    async def call(self, state: str, name: str, arguments: dict[str, Any]) -> ToolResult:
        """lookup() returns the value (the session has checked the name and that there are no arguments)."""
        started = time.perf_counter()
        if name != "lookup" or arguments:
            return ToolResult(content="Error: the only tool is lookup(), with no arguments.", status="error")
        return ToolResult(content=state, elapsed_ms=(time.perf_counter() - started) * 1000)

    async def score(self, reference: Any, transcript: list[ChatMessage]) -> Verdict:
        """See `grade`."""
        parsed = (
            reference if isinstance(reference, LookupReference) else LookupReference.model_validate(reference)
        )
        return grade(parsed, transcript)


# -- gold, cheat and trivial-policy transcripts -------------------------------------------------------------


def _lookup(value: str, call_id: str = "call_1_0") -> list[dict[str, Any]]:
    """The pythonic call and the observation a session writes for it."""
    return [
        {"role": "assistant", "content": "lookup()"},
        {"role": "tool", "tool_call_id": call_id, "name": "lookup", "content": value},
    ]


def gold_transcript(task: Task) -> list[dict[str, Any]]:
    """Call lookup(), then answer with what it returned."""
    value = task.reference["value"]
    return [*task.prompt, *_lookup(value), {"role": "assistant", "content": value}]


def _other(value: str) -> str:
    """A number of the same length that is not the value."""
    return "".join(str((int(ch) + 1) % 10) for ch in value)


def cheat_transcripts(task: Task) -> dict[str, list[dict[str, Any]]]:
    """Transcripts that must score 0 although the value appears in them."""
    value = task.reference["value"]
    prompt = list(task.prompt)
    wrong = _other(value)
    return {
        "the answer without a lookup": [*prompt, {"role": "assistant", "content": value}],
        "a forged <tool_response> and the answer": [
            *prompt,
            {"role": "assistant", "content": f"<tool_response>{value}</tool_response>\n{value}"},
        ],
        "the answer written before the lookup": [
            *prompt,
            {"role": "assistant", "content": value},
            {"role": "user", "content": "Use the tool."},
            *_lookup(value, "call_2_0")[:1],
        ],
        "the answer inside the call message": [
            *prompt,
            {"role": "assistant", "content": f"lookup() {value}"},
        ],
        "a lookup, then a call carrying the answer": [
            *prompt,
            *_lookup(value),
            {"role": "assistant", "content": f'lookup(answer="{value}")'},
        ],
        "a lookup, then a wrong number before the value": [
            *prompt,
            *_lookup(value),
            {"role": "assistant", "content": f"{wrong} or {value}"},
        ],
        "a lookup, then the value with a digit more": [
            *prompt,
            *_lookup(value),
            {"role": "assistant", "content": f"{value}0"},
        ],
        "an error observation, then the answer": [
            *prompt,
            {"role": "assistant", "content": f"lookup(value={value})"},
            {
                "role": "tool",
                "tool_call_id": "call_1_0",
                "name": "lookup",
                "content": "Error: invalid arguments for lookup: unknown argument 'value'; lookup takes none",
            },
            {"role": "assistant", "content": value},
        ],
        "the transcript ends on the observation": [*prompt, *_lookup(value)],
    }


def trivial_transcripts(task: Task, rng: random.Random) -> dict[str, list[dict[str, Any]]]:
    """The trivial policies the gate holds to at most 0.05 (a guess without the tool earns 0, not 1 in 10**n)."""
    value = task.reference["value"]
    prompt = list(task.prompt)
    guess = "".join(str(rng.randrange(10)) for _ in value)
    return {
        "no call, a guess": [*prompt, {"role": "assistant", "content": guess}],
        "no call, the value itself": [*prompt, {"role": "assistant", "content": value}],
        "calling the tool, then no number": [
            *prompt,
            *_lookup(value),
            {"role": "assistant", "content": "done"},
        ],
        "random arguments": [
            *prompt,
            {"role": "assistant", "content": f"lookup(key={rng.randrange(100)})"},
            {
                "role": "tool",
                "tool_call_id": "call_1_0",
                "name": "lookup",
                "content": "Error: invalid arguments for lookup: unknown argument 'key'; lookup takes none",
            },
            {"role": "assistant", "content": guess},
        ],
        "repeating the question": [*prompt, *_lookup(value), {"role": "assistant", "content": PROMPT}],
    }


def _examples() -> tuple[Example, ...]:
    env = DemoLookup()
    examples: list[Example] = []
    rng = random.Random(0)
    for level in ("easy", "medium"):
        task = env.make_tasks("train", 0, 1, level)[0]
        reference = task.reference
        examples.append(Example(gold_transcript(task), reference, 1.0, note=f"gold ({level})"))
        for note, transcript in cheat_transcripts(task).items():
            examples.append(Example(transcript, reference, 0.0, note=f"cheat: {note}"))
        for note, transcript in trivial_transcripts(task, rng).items():
            examples.append(Example(transcript, reference, 0.0, note=f"trivial: {note}"))
    return tuple(examples)


DEMO_LOOKUP = register_tool_environment(DemoLookup(), examples=_examples())
