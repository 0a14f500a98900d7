"""Reading a trainer's dataset label (OpenRLHF, slime) as a score request, and finding the response in a query.

A label names its own verifier when it is an object (or a string that parses as a JSON object) with both
`verifier` and `reference` keys, plus optional `options`; their values go to the engine as given, so a bad one
is rejected naming its field. Anything else is a *bare* label: the reference of the default verifier
(`PROCTOR_DEFAULT_VERIFIER`, default `text.match`):

- a string is the reference as is;
- a number (GSM8K's answers are ints) becomes its canonical decimal string, the form text.match and math
  read: an int as `str(n)` (`42`, `-3`), an integral float as the int (`42.0` -> `"42"`), any other float as
  Python's shortest round-trip repr (`0.5`, `1e-07`); NaN and infinities are refused;
- a list is several gold answers, any of which may match: `{"answer": [...]}` (text.match's form; numbers in
  it are turned into strings as above);
- an object with neither `verifier` nor `reference` is the default verifier's reference object as is (e.g.
  `{"answer": "42", "op": "contains"}` for text.match); one with only one of the two keys, or a string that
  parses as such an object, is refused, since it was meant to name a verifier (never scored as a literal
  string, which would be a silent reward of 0);
- a boolean or None is refused (BadLabel): there is no answer to compare with.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from proctor.contract import Score, Status


class BadLabel(ValueError):
    """A label that is no reference at all (None, a boolean, NaN, half a label object)."""


def _label_object(raw: Any) -> Any:
    if not isinstance(raw, str):
        return raw
    if not raw.lstrip().startswith("{"):
        return None
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):  # deeply nested JSON is still only a string, never a crash
        return None


def canonical_number(value: int | float) -> str:
    """The decimal string of a numeric label: `42` and `42.0` -> "42", `0.5` -> "0.5"; NaN/inf are BadLabel."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadLabel(f"a numeric label must be finite, got {value!r}")
        if value.is_integer():
            return str(int(value))
        return repr(value)
    return str(int(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def bare_reference(raw: Any) -> Any:
    """The default verifier's reference for a bare label (see the module's rules)."""
    if raw is None:
        raise BadLabel("the label is missing (null): there is no reference to score against")
    if isinstance(raw, bool):
        raise BadLabel("a label must be a string, a number, a list or an object, got a boolean")
    if isinstance(raw, str):
        return raw
    if _is_number(raw):
        return canonical_number(raw)
    if isinstance(raw, (list, tuple)):
        return {"answer": [canonical_number(item) if _is_number(item) else item for item in raw]}
    if isinstance(raw, Mapping):
        if "verifier" in raw or "reference" in raw:
            raise BadLabel('a label object needs both "verifier" and "reference" keys')
        return dict(raw)
    raise BadLabel(f"a label must be a string, a number, a list or an object, got {type(raw).__name__}")


def label_request(raw: Any, response: str, default_verifier: str) -> tuple[dict[str, Any], bool]:
    """The score request for a response under its label `raw`, and whether the label named its own verifier.

    Raises BadLabel for a label that is no reference (see the module's rules).
    """
    body = _label_object(raw)
    if isinstance(body, Mapping) and ("verifier" in body) != ("reference" in body):
        raise BadLabel('a label object needs both "verifier" and "reference" keys')  # a JSON string's too
    if isinstance(body, Mapping) and "verifier" in body and "reference" in body:
        request = {"verifier": body["verifier"], "response": response, "reference": body["reference"]}
        if "options" in body:
            request["options"] = body["options"]
        return request, True
    return {"verifier": default_verifier, "response": response, "reference": bare_reference(raw)}, False


# -- the response inside a decoded prompt + response --------------------------------------------------------

ASSISTANT_HEADERS = (
    "<|im_start|>assistant",  # ChatML: Qwen, Yi, InternLM, SmolLM ...
    "<|start_header_id|>assistant<|end_header_id|>",  # Llama 3
    "<start_of_turn>model",  # Gemma
    "<|start|>assistant",  # gpt-oss (harmony)
    "<｜Assistant｜>",  # DeepSeek V3 / R1 (full-width bars)
    "<|Assistant|>",
    "<|assistant|>",  # Phi-3, Zephyr, GLM
    "[/INST]",  # Mistral, Llama 2
    "Assistant:",  # plain-text templates
)
"""Where an assistant turn opens, in the chat templates trainers use; the last one in a prompt starts its header."""

CUT_SLACK = 16
"""How many characters at the start of a left-truncated query may differ from the prompt (a cut token)."""

BOS_TOKENS = (
    "<|begin_of_text|>",  # Llama 3
    "<｜begin▁of▁sentence｜>",  # DeepSeek V3 / R1
    "<|startoftext|>",
    "<bos>",  # Gemma
    "<s>",  # Llama 2, Mistral
    "[gMASK]<sop>",  # GLM
)
"""Beginning-of-sequence tokens a tokenizer may add when it encodes, so they open a query decoded with them."""

PROMPT_TAIL = 16
"""How many of the prompt's last characters locate a left-truncated prompt in the query (a search key)."""

PROMPT_TRIES = 64
"""How many occurrences of a search key (the prompt's tail, its final assistant header) are checked, counted
from the query's start; this bounds the work on repetitive text. The model's copies of a key all come after
the prompt's own occurrence, so a response can never crowd that one out of the checked set."""

PROMPT_MISMATCH = (
    "the query neither starts with its prompt, nor with the end of it (left truncation, a BOS token), nor holds "
    "it or its final assistant header: the prompt was rendered with another chat template than the query, so "
    "the response cannot be told from the prompt and nothing was scored"
)


class PromptMismatch(ValueError):
    """No rule of strip_prompt locates the response in the query: scoring the whole query would score the prompt."""


def prompt_mismatch_score(verifier: str, id: Any = None) -> Score:
    """The failed score of an item whose response strip_prompt cannot locate: the on_failure policy decides."""
    return Score(
        id=id,
        verifier=verifier,
        status=Status.verifier_error,
        reward=0.0,
        reason="prompt_mismatch",
        details={"error": PROMPT_MISMATCH},
    )


def final_assistant_header(prompt: str) -> str | None:
    """The prompt's final assistant header: from the last assistant-turn opener in it to the prompt's end.

    So it holds what the chat template put after the opener too (`\\n`, `<think>\\n`). None without an opener.
    """
    start = max(prompt.rfind(opener) for opener in ASSISTANT_HEADERS)
    return prompt[start:] if start >= 0 else None


def _ends_with(text: str, query: str, start: int, end: int) -> bool:
    """Whether `query[start:end]` is the end of `text`, compared in place.

    The lengths first, then up to PROMPT_TAIL characters at either end of the span, and only then the whole
    span, once (the one copy made is of `text`'s end, of the span's length).
    """
    length = end - start
    if length <= 0:
        return length == 0
    if length > len(text):
        return False
    offset = len(text) - length
    edge = min(length, PROMPT_TAIL)
    return (
        query.startswith(text[len(text) - edge :], end - edge, end)
        and query.startswith(text[offset : offset + edge], start, end)
        and query.startswith(text[offset:] if offset else text, start, end)
    )


def _after_prompt_suffix(query: str, prompt: str) -> int | None:
    """Where the response starts when the query begins with the end of the prompt, else None.

    The query is `prompt[k:] + response` (left truncation), maybe after a BOS token and up to CUT_SLACK other
    characters (a token cut in two decodes to U+FFFD). An occurrence of the prompt's last PROMPT_TAIL
    characters in the query counts when everything from the query's start (those lead characters aside) up
    to it is the end of the prompt (`_ends_with`). Occurrences are checked from the query's start, at most
    PROMPT_TRIES of them: the prompt's own comes before anything the response writes, so a response can
    neither hide it nor come before it, and whether the prompt is found never depends on the response.

    When the prompt's tail occurs only once in the prompt, the first occurrence that counts is exactly where
    the prompt ends. When it recurs (a periodic prompt such as `"ab" * n`, repeated turns), where the prompt
    ends can be ambiguous, and the latest occurrence that counts is taken, of those checked from the start
    and of PROMPT_TRIES more checked from the end back: text at the response's start that merely continues
    the prompt's repetition is then read as the prompt's, but no prompt text is read as the response (unless
    what is left of the prompt holds more than PROMPT_TRIES occurrences of its tail). A later occurrence whose
    preceding text agrees with more of the prompt's end than the whole span of that one is taken instead
    (`_stronger_end`: the counting one may rest on the chat template's boilerplate alone).
    """
    lead = CUT_SLACK + max((len(bos) for bos in BOS_TOKENS if query.startswith(bos)), default=0)
    tail = prompt[-PROMPT_TAIL:]
    limit = len(prompt) + lead  # the prompt (and the lead) ends by here
    repeats = prompt.find(tail) < len(prompt) - len(tail)
    found: int | None = None
    position = query.find(tail, 0, limit)
    for _ in range(PROMPT_TRIES):
        if position < 0:
            break
        if _ends_with(prompt, query, min(lead, position), position + len(tail)):
            found = position + len(tail)
            if not repeats:
                return found
        position = query.find(tail, position + 1, limit)
    if found is None:
        return None
    floor = found - len(tail) + 1  # only occurrences that end after the latest one that counts so far
    position = query.rfind(tail, floor, limit)
    for _ in range(PROMPT_TRIES):
        if position < 0:
            break
        if _ends_with(prompt, query, min(lead, position), position + len(tail)):
            found = position + len(tail)
            break
        position = query.rfind(tail, floor, position + len(tail) - 1)
    return _stronger_end(query, prompt, found, lead, limit)


def _common_suffix(text: str, query: str, end: int) -> int:
    """How many of `text`'s last characters `query[:end]` ends with (a binary search of in-place compares)."""
    low, high = 0, min(len(text), end)
    while low < high:
        middle = (low + high + 1) // 2
        if query.startswith(text[len(text) - middle :], end - middle, end):
            low = middle
        else:
            high = middle - 1
    return low


def _stronger_end(query: str, prompt: str, found: int, lead: int, limit: int) -> int:
    """`found`, unless a later occurrence of the prompt's (recurring) tail agrees with more of the prompt's end.

    The occurrence that counts may rest on little evidence: everything from the query's start to it is the end
    of the prompt, but that can be only the chat template's boilerplate (`?<|im_end|>\n<|im_start|>assistant\n`)
    when the query was left-cut just before an earlier assistant turn. If the query's template renders the
    history differently from the prompt's, the prompt's real end does not count, and that earlier turn would be
    taken for the prompt's end, the rest of the prompt (that turn's answer first) scored as the response. So a
    later occurrence (of PROMPT_TRIES checked) whose text before it agrees with more of the prompt's end than
    the whole span of the one that counts is where the prompt ends. This only moves the boundary later.
    """
    tail = prompt[-PROMPT_TAIL:]
    evidence = found - min(lead, found - len(tail))
    best, best_end = evidence, found
    position = query.find(tail, found - len(tail) + 1, limit)
    for _ in range(PROMPT_TRIES):
        if position < 0:
            break
        end = position + len(tail)
        if end > best and _ends_with(prompt, query, end - best - 1, end):  # agrees with more than the best
            best, best_end = _common_suffix(prompt, query, end), end
        position = query.find(tail, position + 1, limit)
    return best_end


def strip_prompt(query: str, prompt: str) -> str:
    """The response part of a decoded prompt + response (OpenRLHF's `query`).

    1. The query starts with the prompt (or the prompt is empty): the rest of it.
    2. It starts with the end of the prompt instead (the trainer cut the prompt's tokens on the left to fit
       `max_len`; a BOS token and a broken first character may come before): what follows that end of the
       prompt (`_after_prompt_suffix`, searched from the query's start, so a response cannot hide it).
    3. It holds the whole prompt later on (a BOS token added at decode): what follows its first occurrence.
    4. The response follows the first occurrence of the prompt's final assistant header
       (final_assistant_header) in the query, of the first PROMPT_TRIES, whose preceding text is the end of
       the prompt before that header (the query's first CUT_SLACK characters may differ: that is where the
       tokens were cut). So a header the model wrote in its own response (a run-on turn), which comes after
       the prompt's, is passed over, and so are the prompt's earlier assistant turns. When no occurrence
       qualifies, the last occurrence.
    5. None of these: PromptMismatch. The whole query is never scored, since it holds prompt text (a hint,
       the question's own numbers) that a verifier would read as the answer.

    Every rule checks a bounded number of occurrences, each compared in place (`_ends_with`), so the work is
    a bounded multiple of the query's length whatever it repeats.
    """
    if not prompt or query.startswith(prompt):
        return query[len(prompt) :]
    end = _after_prompt_suffix(query, prompt)
    if end is not None:
        return query[end:]
    found = query.find(prompt)
    if found >= 0:
        return query[found + len(prompt) :]
    end = _after_final_header(query, prompt)
    if end is None:
        raise PromptMismatch(PROMPT_MISMATCH)
    return query[end:]


def _after_final_header(query: str, prompt: str) -> int | None:
    """Rule 4 of strip_prompt: where the response starts after the prompt's final assistant header, else None.

    The first of the header's first PROMPT_TRIES occurrences that the end of the prompt before the header
    precedes (CUT_SLACK characters of leeway at the query's start; a later one preceded by more of it wins,
    `_stronger_header`), else its last occurrence. The last can
    be one the response wrote, which only moves the boundary into the response, never back into the prompt.
    """
    header = final_assistant_header(prompt)
    position = query.find(header) if header else -1
    if not header or position < 0:
        return None
    before = prompt[: len(prompt) - len(header)]
    for _ in range(PROMPT_TRIES):
        if position < 0:
            break
        if _ends_with(before, query, min(position, CUT_SLACK), position):
            return _stronger_header(query, before, header, position)
        position = query.find(header, position + 1)
    return query.rfind(header) + len(header)


def _stronger_header(query: str, before: str, header: str, found: int) -> int:
    """Where the response starts after the header at `found`, unless a later occurrence of it (of PROMPT_TRIES
    checked) is preceded by more of `before`'s end than that one's whole span: a query left-cut within CUT_SLACK
    characters of an earlier turn's header (`[/INST]`) qualifies with no evidence at all, and when the query's
    template renders the history differently the real final header does not qualify, so that earlier turn
    and the rest of the prompt were scored as the response. This only moves the boundary later."""
    best, best_position = found - min(found, CUT_SLACK), found
    position = query.find(header, found + 1)
    for _ in range(PROMPT_TRIES):
        if position < 0:
            break
        if position > best and _ends_with(before, query, position - best - 1, position):
            best, best_position = _common_suffix(before, query, position), position
        position = query.find(header, position + 1)
    return best_position + len(header)
