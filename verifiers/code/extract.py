"""Find the program in a model's response: the last fenced block in the task's language, else the last fenced
block, else the whole response (after the last </think>; an unterminated <think> means no code)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from proctor.sandboxes.languages import Language, get_language

# The fence alone; the info string after it is read in Python. The one-regex form, `[ \t]*([^\n`]*?)[ \t]*$`,
# backtracked on a line such as "```" + 5000 spaces + "x`" for minutes (three ways to split each run of spaces).
_OPEN = re.compile(r"[ \t]{0,3}(`{3,}|~{3,})")
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

Method = Literal["fence_language", "fence", "whole", "none"]


@dataclass(frozen=True)
class Block:
    """One fenced block: its info string (the word after the fence, lower-cased) and its body."""

    info: str
    code: str


@dataclass(frozen=True)
class Extracted:
    """The program text and how it was found; `code` is empty when there is none."""

    code: str
    method: Method


def after_thinking(text: str) -> str | None:
    """The text after the last </think>; None when a <think> is never closed (the model never answered)."""
    close = text.rfind(THINK_CLOSE)
    if close >= 0:
        return text[close + len(THINK_CLOSE) :]
    if THINK_OPEN in text:
        return None
    return text


def _opening(line: str) -> tuple[str, str] | None:
    """(fence, info string) when `line` opens a fenced block (an info string holds no backtick)."""
    opened = _OPEN.match(line)
    if opened is None:
        return None
    info = line[opened.end() :].strip(" \t")
    return None if "`" in info else (opened.group(1), info)


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block (``` or ~~~, CommonMark style), in order; an unclosed last fence runs to the end."""
    blocks: list[Block] = []
    lines = text.splitlines()
    index = 0
    while index < len(lines):
        opened = _opening(lines[index])
        if opened is None:
            index += 1
            continue
        fence, info = opened
        closing = re.compile(rf"^[ \t]{{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        index += 1
        while index < len(lines) and not closing.match(lines[index]):
            body.append(lines[index])
            index += 1
        index += 1  # past the closing fence (or the end)
        word = info.split()[0].lower() if info.split() else ""
        blocks.append(Block(info=word.lstrip("{.").rstrip("}"), code="\n".join(body) + "\n"))
    return blocks


def _is_language(info: str, language: Language) -> bool:
    try:
        return get_language(info).name == language.name
    except KeyError:
        return False


def extract_code(response: str, language: Language) -> Extracted:
    """The program to judge; `method` says where it came from, and `code` is empty when there is no code."""
    text = after_thinking(response)
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
