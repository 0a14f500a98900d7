"""text.match: extraction, normalisation, each op, RE2 safety, huge inputs, and the bundled demo dataset."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from proctor.contract import RequestError, Status
from proctor.engine import Engine
from proctor.settings import Settings
from proctor.verifiers.reading import (
    MAX_BOX_CHARS,
    after_think,
    all_answer_tags,
    all_boxed,
    clip,
    extract_answer,
    last_answer_line,
    last_answer_tag,
    last_boxed,
    last_line,
    match_brace,
)
from proctor.verifiers.text.match import (
    MAX_REGEX_CHARS,
    MatchOptions,
    MatchReference,
    compare,
    normalize_answer,
    pattern_error,
)
from proctor.verifiers.text.normalize import collapse_whitespace, normalize, strip_punctuation, strip_wrappers

DEMO = Path(__file__).resolve().parents[1] / "datasets" / "text" / "demo.jsonl"
BIG = 10 * 1024 * 1024


@pytest.fixture(scope="module")
def engine():
    engine = Engine(Settings(cache_size=0))
    yield engine
    engine.close()


def score(engine, response, reference, options=None):
    return engine.score(
        {"verifier": "text.match", "response": response, "reference": reference, "options": options or {}}
    )


def bounded(fn, *args, timeout=60):
    """Run fn in a thread and wait a bounded time, so a hang fails the test instead of stalling the suite."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(fn, *args).result(timeout=timeout)


# -- think blocks -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "graded"),
    [
        ("plain answer", "plain answer"),
        ("<think>x</think>after", "after"),
        ("<think>a</think>mid<think>b</think> last", " last"),
        ("no open tag</think>tail", "tail"),
        ("<think>never closed", None),
        ("<think>a</think> answer <think> reopened", None),
        ("before <think>x</think>", ""),
        ("", ""),
    ],
)
def test_after_think(response, graded):
    assert after_think(response) == graded


# -- boxes ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "content"),
    [
        ("\\boxed{42}", "42"),
        ("so \\boxed{\\frac{1}{2}} done", "\\frac{1}{2}"),
        ("\\fbox{7}", "7"),
        ("\\boxed{1} then \\boxed{2} then \\fbox{3}", "3"),
        ("\\fbox{1} then \\boxed{2}", "2"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed {x}", "x"),
        ("\\boxed 42$ rest", "42"),
        ("\\boxed{\\boxed{9}}", "9"),
        ("\\boxed{}", ""),
        ("\\boxed{42", None),
        ("\\boxed{1} and then \\boxed{2", None),
        ("\\boxedx{3}", None),
        ("\\boxed{5} \\boxedx{3}", "5"),
        ("\\boxed", None),
        ("no box here", None),
    ],
)
def test_last_boxed(text, content):
    assert last_boxed(text) == content


def test_deeply_nested_braces_are_matched_without_recursion():
    depth = 40_000
    text = "\\boxed{" + "{" * depth + "x" + "}" * depth + "}"
    assert last_boxed(text) == "{" * depth + "x" + "}" * depth


def test_box_closing_beyond_the_limit_counts_as_unterminated():
    text = "\\boxed{" + "a" * (MAX_BOX_CHARS + 10) + "}"
    assert last_boxed(text) is None
    assert last_boxed(text, limit=MAX_BOX_CHARS + 20) == "a" * (MAX_BOX_CHARS + 10)


def test_match_brace_ignores_escaped_braces():
    text = "{a\\}b{c}}"
    assert match_brace(text, 0) == len(text) - 1
    assert match_brace("{never", 0) is None


def test_all_boxed_in_order_with_nesting_and_unterminated_left_out():
    assert all_boxed("\\boxed{A} x \\fbox{B} \\boxed{C") == ["A", "B"]
    assert all_boxed("\\boxed{\\boxed{B}}") == ["\\boxed{B}", "B"]
    assert all_boxed("".join(f"\\boxed{{{i}}}" for i in range(100)), max_items=3) == ["97", "98", "99"]


# -- answer tags and lines ------------------------------------------------------------------------------


def test_answer_tags():
    assert last_answer_tag("<answer>1</answer> <answer>2</answer>") == "2"
    assert last_answer_tag("<answer>1</answer> <answer>2") == "2"  # stopped by the stop string
    assert last_answer_tag("no tags") is None
    assert last_answer_tag("</answer> only a close") is None
    assert all_answer_tags("<answer>1</answer><answer>2</answer><answer>3") == ["1", "2", "3"]


@pytest.mark.parametrize(
    ("text", "answer"),
    [
        ("Answer: 42", "42"),
        ("work\nFinal answer: Paris\n", "Paris"),
        ("Answer: 1\nAnswer: 2", "2"),
        ("**Answer:** 42", "42"),
        ("**Final Answer**: x", "x"),
        ("The final answer is: 7", "7"),
        ("Answer: **Mount Everest**.", "**Mount Everest**."),
        ("  > answer : y", "y"),
        ("the answer is 7.", "7."),
        ("Therefore, the final answer is **7**", "**7**"),
        ("So the answer is: 7", "7"),
        ("**The final answer is** 7", "7"),
        ("The answer isn't clear", None),  # "is" must be a whole word
        ("Maybe the answer is 7", None),  # not at the start of the line
        ("answers: no", None),
        ("So, Answer: 7", "7"),
        ("Well, Answer: mid-line", None),
    ],
)
def test_last_answer_line(text, answer):
    assert last_answer_line(text) == answer


def test_last_line():
    assert last_line("a\nb\n\n  c  \n\n") == "c"
    assert last_line(" \n\t\n") is None


# -- extract_answer -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "method", "text", "used"),
    [
        ("<answer>x</answer> \\boxed{y}\nAnswer: z", "auto", "y", "boxed"),
        ("<answer>x</answer>\nAnswer: z", "auto", "x", "answer_tag"),
        ("work\nAnswer: z", "auto", "z", "answer_line"),
        ("just text", "auto", "just text", "whole"),
        ("\\boxed{1} then \\boxed{2", "auto", None, "boxed"),  # the last box is broken: no fallback
        ("<think>\\boxed{1}</think> Answer: 2", "auto", "2", "answer_line"),
        ("<think>\\boxed{1}", "auto", None, "think_unterminated"),
        ("Answer: 5", "boxed", None, "boxed"),
        ("\\boxed{5}", "answer_line", None, "answer_line"),
        ("a\nb", "last_line", "b", "last_line"),
        ("\\boxed{5}", "none", "\\boxed{5}", "whole"),
        ("", "auto", None, "whole"),
        ("   ", "auto", None, "whole"),
    ],
)
def test_extract_answer(response, method, text, used):
    extraction = extract_answer(response, method)
    assert (extraction.text, extraction.method) == (text, used)


def test_clip_shortens_and_makes_json_safe():
    assert clip("short") == "short"
    clipped = clip("x" * 1000)
    assert clipped.startswith("x" * 200) and "800 more chars" in clipped and len(clipped) < 250
    assert clip("a\ud800b") == "a?b"
    assert clip(None) is None


# -- normalisation --------------------------------------------------------------------------------------


def test_normalize_pieces():
    assert collapse_whitespace("  a \n\t b  ") == "a b"
    assert strip_punctuation("U.S.A., «oui»! 3-4") == "USA oui 34"
    assert strip_punctuation("結果。") == "結果"
    assert normalize("STRASSE") == normalize("Straße")
    assert normalize("ABC", case_sensitive=True) == "ABC"
    assert normalize("a  b", whitespace=False) == "a  b"


@pytest.mark.parametrize(
    ("text", "unwrapped"),
    [
        ("**42**", "42"),
        ("$42$.", "42"),
        ("\\text{Paris}", "Paris"),
        ("**$\\boxed{7}$**.", "7"),
        ('"hello"', "hello"),
        ("`x`", "x"),
        ("Paris.", "Paris"),
        ("**42", "**42"),  # unpaired: left alone
        ("\\text{a}+\\text{b}", "\\text{a}+\\text{b}"),  # the braces do not wrap the whole answer
        ("3.14", "3.14"),
    ],
)
def test_strip_wrappers(text, unwrapped):
    assert strip_wrappers(text) == unwrapped


# -- ops ------------------------------------------------------------------------------------------------


def _ref(answer, op="eq"):
    return MatchReference.model_validate({"answer": answer, "op": op})


@pytest.mark.parametrize(
    ("answer", "gold", "op", "options", "expected"),
    [
        ("paris", "Paris", "eq", {}, True),
        ("paris", "Paris", "eq", {"case_sensitive": True}, False),
        ("mount   everest", ["Everest", "Mount Everest"], "eq", {}, True),
        ("usa", "U.S.A.", "eq", {}, False),
        ("usa", "U.S.A.", "eq", {"strip_punctuation": True}, True),
        ("-5", "5", "eq", {}, False),
        ("lyon", ["Paris", "Marseille"], "ne", {}, True),
        ("paris", ["Paris", "Marseille"], "ne", {}, False),
        ("the capital is paris", "Paris", "contains", {}, True),
        ("the capital is rome", "Paris", "contains", {}, False),
        ("2024-05-01", "\\d{4}-\\d{2}-\\d{2}", "regex", {}, True),
        ("on 2024-05-01", "\\d{4}-\\d{2}-\\d{2}", "regex", {}, False),
        ("on 2024-05-01", "\\d{4}-\\d{2}-\\d{2}", "regex", {"match": "search"}, True),
        ("YES", "yes|no", "regex", {}, True),
        ("YES", "yes|no", "regex", {"case_sensitive": True}, False),
        ("maybe", ["yes", "no", "mayb."], "regex", {}, True),
    ],
)
def test_compare(answer, gold, op, options, expected):
    parsed = MatchOptions(**options)
    normalized = normalize_answer(answer, parsed, for_regex=op == "regex")
    assert compare(normalized, _ref(gold, op), parsed) is expected


def test_gold_that_normalises_to_nothing_matches_nothing():
    options = MatchOptions(strip_punctuation=True)
    assert compare("x", _ref("...", "contains"), options) is False
    assert compare("x", _ref("...", "eq"), options) is False


@pytest.mark.parametrize(
    ("response", "reference", "options", "reward", "reason"),
    [
        ("The answer is \\boxed{42}.", "42", {}, 1.0, None),
        ("Answer: **42**.", "42", {}, 1.0, None),
        ("Answer: 41", "42", {}, 0.0, "wrong_answer"),
        ("", "42", {}, 0.0, "no_answer"),
        ("\\boxed{...}", "42", {"strip_punctuation": True}, 0.0, "no_answer"),
        ("Answer: 2024-05-01 ", {"answer": "\\d{4}-\\d{2}-\\d{2}", "op": "regex"}, {}, 1.0, None),
        ("Answer: Paris", {"answer": "Paris", "op": "ne"}, {}, 0.0, "wrong_answer"),
        ("<think>\\boxed{42}</think>", "42", {}, 0.0, "no_answer"),
    ],
)
def test_score(engine, response, reference, options, reward, reason):
    result = score(engine, response, reference, options)
    assert result.status is Status.ok
    assert (result.reward, result.reason) == (reward, reason)
    assert result.correct is (reward == 1.0)
    assert result.verifier == "text.match@1.0.0"


def test_components_and_details(engine):
    right = score(engine, "work\n\\boxed{ 42 }", "42")
    assert right.components == {"format": 1.0, "answer": 1.0}
    assert right.details == {"method": "boxed", "extracted": " 42 ", "normalized": "42"}
    wrong = score(engine, "\\boxed{41}", "42")
    assert wrong.components == {"format": 1.0, "answer": 0.0}
    empty = score(engine, "", "42")
    assert empty.components == {"format": 0.0, "answer": 0.0}
    assert empty.details["extracted"] is None


def test_chat_transcript_grades_the_last_assistant_message(engine):
    messages = [
        {"role": "user", "content": "6*7?"},
        {"role": "assistant", "content": "\\boxed{41}"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": [{"type": "text", "text": "\\boxed{42}"}]},
    ]
    assert score(engine, messages, "42").reward == 1.0


def test_plain_string_and_object_references_share_a_cache_key():
    from proctor.engine import prepare

    plain = prepare({"verifier": "text.match", "response": "x", "reference": "42"})
    full = prepare({"verifier": "text.match", "response": "x", "reference": {"answer": ["42"], "op": "eq"}})
    assert plain.key == full.key


def test_reference_schema_lists_the_bare_string_and_the_object_form():
    from proctor.registry import get_verifier

    schema = get_verifier("text.match").describe()["reference_schema"]
    string_form, object_form = schema["anyOf"]
    assert string_form == {"type": "string", "minLength": 1, "description": "The gold answer."}
    assert set(object_form["properties"]) == {"op", "answer"} and object_form["required"] == ["answer"]
    assert MatchReference.model_validate("42") == MatchReference.model_validate({"answer": "42"})
    with pytest.raises(ValueError, match="extra"):
        MatchReference.model_validate({"answer": "42", "bogus": 1})


# -- bad requests ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "options", "field"),
    [
        ({"answer": "(a)\\1", "op": "regex"}, {}, "reference.answer"),  # backreference
        ({"answer": "(?=a)b", "op": "regex"}, {}, "reference.answer"),  # look-ahead
        ({"answer": ["ok", "(unclosed"], "op": "regex"}, {}, "reference.answer"),
        ({"answer": "x" * 20_000, "op": "regex"}, {}, "reference.answer"),
        ({"answer": "42", "bogus": 1}, {}, "reference.bogus"),
        ({"answer": "42", "op": "like"}, {}, "reference.op"),
        ({"answer": []}, {}, "reference.answer"),
        ({"op": "eq"}, {}, "reference.answer"),
        ("", {}, "reference.answer.0"),
        (42, {}, "reference"),
        ("42", {"extract": "first_line"}, "options.extract"),
        ("42", {"ignore_case": True}, "options.ignore_case"),
        ("42", {"match": "prefix"}, "options.match"),
    ],
)
def test_bad_reference_or_options_is_a_422_naming_the_field(engine, reference, options, field):
    with pytest.raises(RequestError) as caught:
        score(engine, "x", reference, options)
    assert caught.value.status == 422
    assert caught.value.field == field


def test_pattern_error_explains():
    assert pattern_error("\\d+") is None
    assert "escape" in pattern_error("(a)\\1")
    assert pattern_error("\ud800") is not None


def test_a_regex_is_not_applied_to_the_pattern_when_op_is_eq(engine):
    # Without op=regex the same text is just a gold string: "(a)\1" is valid and compared literally.
    assert score(engine, "Answer: (a)\\1", "(a)\\1").reward == 1.0


# -- hostile inputs ---------------------------------------------------------------------------------------


def test_catastrophic_backtracking_pattern_finishes(engine):
    response = "Answer: " + "a" * 30_000 + "!"
    for options in ({"strip_wrappers": False}, {"strip_wrappers": False, "match": "search"}):
        result = bounded(score, engine, response, {"answer": "(a+)+$", "op": "regex"}, options)
        assert result.status is Status.ok and result.reward == 0.0
    assert bounded(score, engine, "a" * 30_000, {"answer": "(a+)+$", "op": "regex"}).reward == 1.0


def test_lone_surrogate_in_response_is_scored(engine):
    result = score(engine, "Answer: a\ud800b", {"answer": "a.b", "op": "regex"})
    assert result.status is Status.ok and result.reward == 1.0


@pytest.mark.parametrize(
    ("response", "reward", "reason"),
    [
        ("x" * BIG + " \\boxed{42}", 1.0, None),
        ("\\boxed{" + "{" * BIG, 0.0, "no_answer"),
        ("\\boxed{" * (BIG // 7), 0.0, "no_answer"),
        ("answer" + " " * BIG + ": 42", 1.0, None),
        ("answer" + " " * BIG + "x", 0.0, "wrong_answer"),
        ("<think>" + "y" * BIG + "</think>Answer: 42", 1.0, None),
        ("Answer: 1\n" * (BIG // 10), 0.0, "wrong_answer"),
    ],
    ids=[
        "long-prefix",
        "open-braces",
        "nested-boxes",
        "blank-run",
        "blank-run-no-colon",
        "long-think",
        "many-lines",
    ],
)
def test_ten_megabyte_responses(engine, response, reward, reason):
    result = bounded(score, engine, response, "42")
    assert result.status is Status.ok
    assert (result.reward, result.reason) == (reward, reason)
    assert len(json.dumps(result.details)) < 2000  # details stay small whatever the response


def test_ten_megabyte_regex_and_punctuation(engine):
    response = "Answer: " + "ab." * (MAX_REGEX_CHARS // 3)
    # The trailing "." is a wrapper (sentence punctuation) and is removed before matching.
    result = bounded(score, engine, response, {"answer": "(ab\\.)*ab", "op": "regex"})
    assert result.reward == 1.0
    response = "Answer: " + "ab." * (BIG // 3)
    result = bounded(score, engine, response, {"answer": "(a|b|\\.)*a(a|b|\\.){200}", "op": "regex"})
    assert (result.reward, result.reason) == (0.0, "answer_too_long")
    assert result.components == {"format": 1.0, "answer": 0.0}
    result = bounded(
        score, engine, response, {"answer": "abab", "op": "contains"}, {"strip_punctuation": True}
    )
    assert result.reward == 1.0


# -- the bundled demo dataset -----------------------------------------------------------------------------


def _demo_rows():
    return [json.loads(line) for line in DEMO.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_demo_dataset_covers_both_verifiers_with_cheats():
    rows = _demo_rows()
    assert len(rows) >= 50
    assert len({row["id"] for row in rows}) == len(rows)
    for verifier in ("text.match", "text.choice"):
        rewards = [row["expected_reward"] for row in rows if row["verifier"] == verifier]
        assert rewards.count(1.0) >= 8 and rewards.count(0.0) >= 8


@pytest.mark.parametrize("row", _demo_rows(), ids=lambda row: row["id"])
def test_demo_row_scores_its_expected_reward(engine, row):
    result = engine.score(
        {
            "verifier": row["verifier"],
            "response": row["response"],
            "reference": row["reference"],
            "options": row.get("options", {}),
            "id": row["id"],
        }
    )
    assert result.status is Status.ok
    assert result.reward == row["expected_reward"]
    assert result.id == row["id"]
