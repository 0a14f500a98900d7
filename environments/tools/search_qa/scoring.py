"""Grading a search_qa transcript: exact match or token F1 of the final answer against the gold aliases.

Only the model's own final words are read: the assistant text after the last tool observation
(`final_answer_text`), after its last `</think>`. What scores 0, and the reason the verdict gives:

- `no_answer`: nothing after the last observation, an unclosed `<think>`, or no `<answer>...</answer>` (a
  `\\boxed{}` is read when no tag is present);
- `answer_with_tool_call`: the message after the last observation calls a tool again, in any dialect, even
  in a call that cannot be read (the episode was cut off mid-search, not answered; a session would have run
  the call or answered it with a parse error);
- `no_search`: no `search` call got results before the final answer (answering from memory, before
  searching, or after a search that failed or matched nothing: only a tool observation that lists an article
  as the environment writes one, `[d01912] Title` first, counts, see `environment.search_answered`); the
  reference's `require_search: false` lifts this for a user's own tasks;
- `fake_observation`: the final text holds an observation tag (`<tool_response>`, `<information>`,
  `<result>`, `<observation>`, `<search_results>`) or a chat-template turn marker: evidence only Proctor writes;
- `hedged`: several different answers (several `<answer>` tags that disagree, or one answer listing
  candidates joined by any separator: `or`, `and`, `&`, `+`, `/`, `;`, `|`, `,`, brackets, one per line or
  bullet, a dash), unless the whole answer is itself a gold alias (under `f1` a list of candidates would
  otherwise earn part of the reward: three names score an F1 of 0.5);
- `answer_too_long`: more than MAX_ANSWER_CHARS characters or MAX_ANSWER_WORDS words; under `f1`, also more
  tokens than F1_LENGTH_FACTOR times the longest gold alias's (names strung together without a separator);
- `wrong_answer`: it does not match.

Normalisation is SQuAD's (lower case, punctuation and the articles a/an/the dropped, whitespace collapsed),
after Unicode NFKC. Everything is a linear scan of the text.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from dataclasses import dataclass
from typing import Any

from proctor.verifiers.reading import after_think, all_answer_tags, has_answer_tag, last_boxed

MAX_ANSWER_CHARS = 200
MAX_ANSWER_WORDS = 16
FAKE_TAGS = (
    "<tool_response",
    "</tool_response>",
    "<information>",
    "</information>",
    "<result>",
    "</result>",
    "<observation>",
    "</observation>",
    "<search_results",
    "</search_results>",
    "<|im_start|>",
    "<|start_header_id|>",
    "<start_of_turn>",
)
"""Text only an observation or a new chat turn carries; in the model's own final text it scores 0."""

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans({char: " " for char in string.punctuation + "“”‘’«»–—…"})
_HEDGE = re.compile(
    r"\b(?:or|and|and/or|vs|versus|plus|either|nor)\b"  # words that join alternatives
    r"|[/;|,&+\\()\[\]{}<>\n\r\t\v\f\u2028\u2029]"  # separators, brackets, any line or tab break
    r"|[•·‧∙◦▪▫■□●○★☆►▸※→⇒]"  # bullets and arrows
    r"|[–—―‒]|\s[-~*]+\s|^\s*[-*~]+\s|(?<=\d)-(?=\d)",  # dashes, bullet lines, a range of years
    re.IGNORECASE | re.MULTILINE,
)
"""What joins the candidates of a list: `A or B`, `A & B`, `A + B`, `A/B`, `A; B`, `A, B`, `A (B)`, one per
line or bullet, `A - B`, `1850-1851`. Whatever is left of the answer once these split it must be one part."""
F1_LENGTH_FACTOR = 2
"""Under `f1` an answer of more tokens than this times the longest gold alias's scores 0 (`answer_too_long`):
words added to a right name only lower its F1 (precision), but several names strung together without any
separator would otherwise keep part of the reward."""


def normalise_answer(text: str) -> str:
    """SQuAD's normalisation: NFKC, lower case, punctuation to spaces, articles dropped, spaces collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(answer: str, golds: list[str]) -> bool:
    """Whether the normalised answer equals a normalised gold alias."""
    found = normalise_answer(answer)
    return any(found == normalise_answer(gold) for gold in golds)


def f1_score(answer: str, golds: list[str]) -> float:
    """The best token F1 of the answer against any gold alias (SQuAD's)."""
    tokens = normalise_answer(answer).split()
    best = 0.0
    for gold in golds:
        gold_tokens = normalise_answer(gold).split()
        common = sum((Counter(tokens) & Counter(gold_tokens)).values())
        if common:
            precision, recall = common / len(tokens), common / len(gold_tokens)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def fake_observation(text: str) -> str | None:
    """The first observation tag or turn marker the text holds (case-insensitive), or None."""
    lowered = text.lower()
    for tag in FAKE_TAGS:
        if tag in lowered:
            return tag
    return None


def hedged(answer: str, golds: list[str]) -> bool:
    """Whether one answer lists several candidates (joined by any separator of `_HEDGE`: `or`, `and`, `&`,
    `+`, `/`, `;`, `|`, `,`, brackets, line breaks, bullets, dashes) and is not itself a gold alias. Parts
    with no letter or digit (a stray bullet, a trailing comma) are not candidates."""
    if exact_match(answer, golds):
        return False
    parts = [part for part in _HEDGE.split(unicodedata.normalize("NFKC", answer)) if normalise_answer(part)]
    return len(parts) >= 2


def too_long_for_f1(answer: str, golds: list[str]) -> dict[str, int] | None:
    """Under `f1`: the answer's token count and its limit (F1_LENGTH_FACTOR times the longest gold alias's)
    when it is longer, else None."""
    tokens = len(normalise_answer(answer).split())
    limit = F1_LENGTH_FACTOR * max(len(normalise_answer(gold).split()) for gold in golds)
    return {"tokens": tokens, "limit": limit} if tokens > limit else None


@dataclass(frozen=True)
class Reading:
    """The final answer read from the final text, or why there is none (`reason`)."""

    answer: str | None
    reason: str | None = None
    details: dict[str, Any] | None = None


def read_answer(final_text: str, golds: list[str]) -> Reading:
    """The answer in the final text: the `<answer>` tag (or a box), checked for fakes, hedges and length."""
    text = after_think(final_text)
    if text is None or not text.strip():
        return Reading(None, "no_answer")
    tag = fake_observation(text)
    if tag is not None:
        return Reading(None, "fake_observation", {"tag": tag})
    if has_answer_tag(text):
        answers = [a.strip() for a in all_answer_tags(text)]
        answers = [a for a in answers if a]
        if not answers:
            return Reading(None, "no_answer")
        distinct = {normalise_answer(a) for a in answers}
        if len(distinct) > 1:
            return Reading(None, "hedged", {"answers": len(answers)})
        answer = answers[-1]
    else:
        boxed = last_boxed(text)
        if boxed is None or not boxed.strip():
            return Reading(None, "no_answer")
        answer = boxed.strip()
    if len(answer) > MAX_ANSWER_CHARS or len(answer.split()) > MAX_ANSWER_WORDS:
        return Reading(None, "answer_too_long", {"chars": len(answer)})
    if hedged(answer, golds):
        return Reading(None, "hedged", {"answer": answer})
    return Reading(answer)
