"""Find the program in a model's response: the last fenced block in the task's language, else the last fenced
block, else the whole response (after the last </think>; an unterminated <think> means no code)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from proctor.sandboxes.languages import Language, get_language
from proctor.verifiers.reading import after_think, fenced_blocks

Method = Literal["fence_language", "fence", "whole", "none"]


@dataclass(frozen=True)
class Extracted:
    """The program text and how it was found; `code` is empty when there is none."""

    code: str
    method: Method


def _is_language(info: str, language: Language) -> bool:
    try:
        return get_language(info).name == language.name
    except KeyError:
        return False


def extract_code(response: str, language: Language) -> Extracted:
    """The program to judge; `method` says where it came from, and `code` is empty when there is no code."""
    text = after_think(response)
    if text is None:
        return Extracted("", "none")
    blocks = fenced_blocks(text)
    if blocks:
        in_language = [block for block in blocks if _is_language(block.info, language)]
        chosen = in_language[-1] if in_language else blocks[-1]
        code = chosen.code if chosen.code.strip() else ""
        return Extracted(code, "fence_language" if in_language else "fence")
    if not text.strip():
        return Extracted("", "none")
    return Extracted(text if text.endswith("\n") else text + "\n", "whole")
