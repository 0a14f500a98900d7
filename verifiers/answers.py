"""What the verifiers that grade one final answer share (`text.match`, `text.choice`, `math`).

A reference model that takes a bare string as its answer (`AnswerReference`), and the verdict for what was
found (`unanswered`, `graded`), whose `format` component says whether an answer was found and `answer`
whether it was right.
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, GetJsonSchemaHandler, model_validator
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from proctor.contract import Verdict


class AnswerReference(BaseModel):
    """A reference model that also accepts a bare string, meaning {"answer": that string}."""

    model_config = ConfigDict(extra="forbid")

    SHORTHAND_SCHEMA: ClassVar[dict[str, Any]] = {"type": "string"}
    """The JSON schema of the bare-string form, listed beside the object form."""

    @model_validator(mode="before")
    @classmethod
    def _plain_string(cls, data: Any) -> Any:
        return {"answer": data} if isinstance(data, str) else data

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        return {"anyOf": [dict(cls.SHORTHAND_SCHEMA), handler(schema)]}


def unanswered(reason: str, details: dict[str, Any]) -> Verdict:
    """Reward 0 for a response with no usable answer (no_answer, hedged ...): format 0, answer 0."""
    return Verdict(
        reward=0.0, correct=False, reason=reason, components={"format": 0.0, "answer": 0.0}, details=details
    )


def graded(right: bool, details: dict[str, Any], reason: str = "wrong_answer") -> Verdict:
    """Reward 1 or 0 for an answer that was found (format 1); `reason` says why a wrong one scored 0."""
    reward = 1.0 if right else 0.0
    return Verdict(
        reward=reward,
        correct=right,
        reason=None if right else reason,
        components={"format": 1.0, "answer": reward},
        details=details,
    )
