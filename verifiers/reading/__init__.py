"""Reading a model's response: one home for every verifier and environment.

Each concern is one module, all pure functions linear in their input (no recursion, no backtracking), so a
10 MB response or a million nested braces cannot hang or crash the service:

- `think`: think blocks (`after_think`: only what follows the last `</think>` is graded; an unterminated
  `<think>` is no answer);
- `boxes`: `\\boxed{}` / `\\fbox{}` and the brace scanner;
- `tags`: `<answer>...</answer>`;
- `lines`: "Answer: x" lines and the last line;
- `fences`: fenced code blocks;
- `turns`: end-of-turn tokens (`<|im_end|>`, `<|eot_id|>`, ...), which the engine cuts before any verifier
  reads a response;
- `answer`: `extract_answer` (one method, or `auto`) and `clip` for a Score's details.

Nothing here imports a verifier family or registers anything.
"""

from proctor.verifiers.reading.answer import DETAIL_CHARS, Extraction, ExtractMethod, clip, extract_answer
from proctor.verifiers.reading.boxes import MAX_BOX_CHARS, all_boxed, has_box, last_boxed, match_brace
from proctor.verifiers.reading.fences import Block, fenced_blocks
from proctor.verifiers.reading.lines import has_answer_line, last_answer_line, last_line
from proctor.verifiers.reading.tags import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    all_answer_tags,
    has_answer_tag,
    last_answer_tag,
)
from proctor.verifiers.reading.think import THINK_CLOSE, THINK_OPEN, after_think
from proctor.verifiers.reading.turns import END_OF_TURN_TOKENS, cut_end_of_turn, strip_end_of_turn

__all__ = [
    "ANSWER_CLOSE",
    "ANSWER_OPEN",
    "DETAIL_CHARS",
    "END_OF_TURN_TOKENS",
    "MAX_BOX_CHARS",
    "THINK_CLOSE",
    "THINK_OPEN",
    "Block",
    "ExtractMethod",
    "Extraction",
    "after_think",
    "all_answer_tags",
    "all_boxed",
    "clip",
    "cut_end_of_turn",
    "extract_answer",
    "fenced_blocks",
    "has_answer_line",
    "has_answer_tag",
    "has_box",
    "last_answer_line",
    "last_answer_tag",
    "last_boxed",
    "last_line",
    "match_brace",
    "strip_end_of_turn",
]
