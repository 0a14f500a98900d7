"""End-of-turn tokens: where a chat model's turn ends, and what the engine cuts before any verifier reads.

A generation returned with its stop token (`skip_special_tokens=False`, as OpenRLHF decodes and slime keeps by
default, or a server that echoes the stop string) ends in one of these; a model that runs past its turn
writes the next turn after one. Neither is the answer. `cut_end_of_turn` applies the one rule, for every
verifier and route except `/run_code` (docs/service/end-of-turn.md):

- a token that cannot be ordinary text (`<|im_end|>`, `<end_of_turn>`, DeepSeek's `<｜end▁of▁sentence｜>`)
  ends the turn where it first occurs: it and everything after it are cut;
- a token that reads as an HTML or XML tag (`</s>`, `<eos>`: `<`, an optional `/`, letters, digits or
  hyphens, `>`) is cut only at the very end, because programs and markup contain it
  (`"<s>old</s> new"`, a string literal in a program);
- then the run of tokens (and the blanks between them) that ends what is left is cut.

Blanks before the first cut token stay, and nothing else changes. Every step is linear in the text: the first
step is one C-level substring search per token, the last matches all the tokens at once (a compiled trie over
the reversed text), so a position costs at most one token's length however many tokens there are.

This lives in the core because the engine applies it before a verifier runs (the engine sits below the
verifiers); the neutral reader, `proctor.verifiers.reading.turns`, re-exports it for verifiers and
environments.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from functools import lru_cache

END_OF_TURN_TOKENS: tuple[str, ...] = (
    "<|im_end|>",  # ChatML (Qwen, Phi-4, many fine-tunes)
    "<|eot_id|>",  # Llama 3
    "<|eom_id|>",  # Llama 3.1, end of a tool-calling message
    "<|end_of_text|>",  # Llama 3 base models
    "<|end|>",  # Phi-3, gpt-oss
    "<|return|>",  # gpt-oss
    "<end_of_turn>",  # Gemma
    "<|endoftext|>",  # GPT-2 family, Qwen base models, Falcon
    "<|EOT|>",  # DeepSeek-Coder
    "<|END_OF_TURN_TOKEN|>",  # Cohere Command R
    "<｜end▁of▁sentence｜>",  # DeepSeek V3 / R1
    "</s>",  # Llama 2, Mistral (markup-like: cut only at the end)
    "<eos>",  # Gemma (markup-like: cut only at the end)
)
"""The built-in end-of-turn and end-of-sequence tokens, as text (`PROCTOR_END_TOKENS` replaces the list)."""

_MARKUP = re.compile(r"</?[A-Za-z][A-Za-z0-9-]*>")


def is_markup(token: str) -> bool:
    """Whether a token also reads as an HTML/XML tag (`</s>`, `<eos>`): such a token is cut only at the end."""
    return _MARKUP.fullmatch(token) is not None


@dataclass(frozen=True)
class Cut:
    """What `cut_end_of_turn` kept, and what it removed."""

    text: str
    """The text a verifier reads."""
    token: str | None = None
    """The token at the start of the removed part; None when nothing was cut."""
    cut_chars: int = 0
    """Characters removed from the end of the original text."""


def _trie(items: list[tuple[int, str]]) -> str:
    """A regex over (list index, reversed token) pairs that, at a position, matches the lowest-index token.

    Tokens are grouped by their next character (groups exclude each other, so their order does not matter);
    a token that ends at this node matches whenever the node is reached, so it comes last and hides every
    token after it in the list.
    """
    done = min((index for index, rest in items if not rest), default=None)
    groups: dict[str, list[tuple[int, str]]] = {}
    for index, rest in items:
        if rest and (done is None or index < done):
            groups.setdefault(rest[0], []).append((index, rest[1:]))
    branches = [re.escape(char) + _trie(group) for char, group in groups.items()]
    if done is not None and branches:
        branches.append("")
    if len(branches) < 2:
        return "".join(branches)
    return "(?:" + "|".join(branches) + ")"


_CHUNK = 4096
"""Tokens one match of the trailing pattern may strip (bounds the regex engine's own stack)."""


@lru_cache(maxsize=64)
def _trailing_pattern(tokens: tuple[str, ...]) -> re.Pattern[str] | None:
    """Blanks then one token, repeated, over the reversed text; group 1 is the last token matched (reversed)."""
    items = [(index, token[::-1]) for index, token in enumerate(tokens) if token]
    if not items:
        return None
    return re.compile(rf"(?:\s*+({_trie(items)})){{0,{_CHUNK}}}+")


def _trailing(text: str, tokens: tuple[str, ...]) -> tuple[int, str | None]:
    """Where the run of tokens (and the blanks between them) that ends text starts, and its first token.

    At each step the token that ends the text (blanks before it skipped) and comes first in `tokens` is cut.
    The tokens are matched as one compiled trie against the reversed text, so each step costs at most the
    longest token's length in the regex engine, whatever the number of tokens: linear in the text.
    """
    pattern = _trailing_pattern(tokens)
    if pattern is None or not text.rstrip().endswith(tokens):  # `\s` is str.isspace: nothing to strip
        return len(text), None
    reverse, position, first = text[::-1], 0, None
    while True:
        match = pattern.match(reverse, position)
        if match is None or match.group(1) is None:
            return len(text) - position, first
        position, first = match.end(), match.group(1)[::-1]


@lru_cache(maxsize=64)
def _hard_tokens(tokens: tuple[str, ...]) -> tuple[tuple[str, ...], frozenset[str]]:
    """The tokens that cut where they first occur (not markup-like), and their first characters: a text with
    none of those characters needs no search per token (the built-in list: one scan for `<`)."""
    hard = tuple(token for token in tokens if token and not is_markup(token))
    return hard, frozenset(token[0] for token in hard)


def strip_end_of_turn(text: str, tokens: tuple[str, ...] = END_OF_TURN_TOKENS) -> str:
    """The text without the run of end-of-turn tokens (and the blanks between them) that ends it.

    Blanks before the first removed token stay; a text that ends in no token is returned unchanged. Tokens in
    the middle are left alone (`cut_end_of_turn` is the engine's whole rule).
    """
    return text[: _trailing(text, tokens)[0]]


def cut_end_of_turn(text: str, tokens: tuple[str, ...] = END_OF_TURN_TOKENS) -> Cut:
    """The text up to the first end-of-turn token that cannot be ordinary text, without trailing tokens.

    See the module's docstring for the rule; an empty `tokens` cuts nothing.
    """
    end, first = len(text), None
    hard, starts = _hard_tokens(tokens)
    for token in hard if any(start in text for start in starts) else ():
        index = text.find(token, 0, end + len(token))
        if index != -1 and (index < end or (index == end and first is not None and len(token) > len(first))):
            end, first = index, token
    cut, trailing = _trailing(text[:end], tokens)
    if trailing is not None:
        first = trailing
    if first is None:
        return Cut(text)
    return Cut(text[:cut], first, len(text) - cut)


def parse_end_tokens(value: str | None) -> tuple[str, ...]:
    """A token list from `PROCTOR_END_TOKENS`: unset means the built-in list, empty means none.

    A value starting with `[` is a JSON list of strings; anything else is comma-separated (blanks around each
    token are dropped). Raises ValueError for a JSON value that is not a list of non-empty strings.
    """
    return END_OF_TURN_TOKENS if value is None else _parse_text(value)


@lru_cache(maxsize=16)
def _parse_text(value: str) -> tuple[str, ...]:
    stripped = value.strip()
    if stripped.startswith("["):
        try:
            loaded = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise ValueError(f"not a JSON list of tokens: {exc}") from None
        if not isinstance(loaded, list):
            raise ValueError("not a JSON list of tokens")
        return _checked(loaded)
    return tuple(token.strip() for token in stripped.split(",") if token.strip())


def _checked(tokens: list[object]) -> tuple[str, ...]:
    if not all(isinstance(token, str) and token for token in tokens):
        raise ValueError("every end token must be a non-empty string")
    return tuple(tokens)  # type: ignore[arg-type]
