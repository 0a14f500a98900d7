"""Think blocks: the part of a response that is graded is what follows the reasoning.

One rule for every verifier and environment: only the text after the last `</think>` counts, and a response
whose last `<think>` is never closed (`<think>` with no `</think>` after it, including one reopened after an
earlier block) never gave an answer.
"""

from __future__ import annotations

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"


def after_think(response: str) -> str | None:
    """The part of a response that is graded: all of it, or what follows the last </think>.

    An unterminated <think> (one with no </think> after it) means the model never gave an answer: None.
    A lone `</think>` (a chat template opened the block) counts as the end of the reasoning.
    """
    close = response.rfind(THINK_CLOSE)
    tail = response if close < 0 else response[close + len(THINK_CLOSE) :]
    if THINK_OPEN in tail:
        return None
    return tail
