"""Fenced blocks (``` or ~~~, CommonMark style): where code, SQL and Verilog answers are written."""

from __future__ import annotations

import re
from dataclasses import dataclass

# The fence alone; the info string after it is read in Python. The one-regex form, `[ \t]*([^\n`]*?)[ \t]*$`,
# backtracked on a line such as "```" + 5000 spaces + "x`" for minutes (three ways to split each run of spaces).
_OPEN = re.compile(r"[ \t]{0,3}(`{3,}|~{3,})")


@dataclass(frozen=True)
class Block:
    """One fenced block: its info string (the word after the fence, lower-cased) and its body."""

    info: str
    code: str


def _opening(line: str) -> tuple[str, str] | None:
    """(fence, info string) when `line` opens a fenced block (an info string holds no backtick)."""
    opened = _OPEN.match(line)
    if opened is None:
        return None
    info = line[opened.end() :].strip(" \t")
    return None if "`" in info else (opened.group(1), info)


def fenced_blocks(text: str) -> list[Block]:
    """Every fenced block, in order; an unclosed last fence runs to the end."""
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
