"""`multi` and the safe formula language, through the real engine (inline, pool and async components)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest

from proctor.contract import RequestError, Status, Verdict
from proctor.engine import Engine, prepare
from proctor.registry import BaseOptions, VerifierSpec, register_verifier
from proctor.settings import Settings, get_settings
from proctor.verifiers.formula import Formula, FormulaError, cosine_scale, overlong

FMT = {
    "verifier": "text.match",
    "reference": {"answer": ".+", "op": "regex"},
    "options": {"extract": "answer_tag"},
}
ANSWER = {"verifier": "math", "reference": "\\frac{1}{2}"}


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine(Settings(cache_size=1000, pool_workers=1))
    yield engine
    engine.close()


def multi(response: str, **reference) -> dict:
    return {"verifier": "multi", "response": response, "reference": reference}


# -- the formula language -------------------------------------------------------------------------------------


def test_formula_arithmetic_functions_and_conditionals():
    variables = {"a": 0.5, "b": 1.0}
    assert Formula("0.2 * a + 0.8 * b", {"a", "b"}).evaluate(variables) == pytest.approx(0.9)
    assert Formula("a ^ 2", {"a"}).evaluate(variables) == 0.25
    assert Formula("b if a >= 0.5 else 0", {"a", "b"}).evaluate(variables) == 1.0
    assert Formula(
        "min(a, b) + max(a, 0) - abs(-1) + floor(1.7) + sqrt(4) + clip(3, 0, 1)", {"a", "b"}
    ).evaluate(variables) == pytest.approx(0.5 + 0.5 - 1 + 1 + 2 + 1)
    assert Formula("a > 0 and not b < 1", {"a", "b"}).evaluate(variables) == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "__import__('os').system('true')",
        "().__class__",
        "a.real",
        "(lambda: 1)()",
        "[1][0]",
        "'text'",
        "unknown + 1",
        "a if True else 0",
        "open('x')",
        "a; b",
        "a << 2",
        "max(*[1, 2])",
        "1" + " + 1" * 500,
        "(" * 300 + "1" + ")" * 300,
    ],
)
def test_formula_rejects_everything_off_the_whitelist(text):
    with pytest.raises(FormulaError):
        Formula(text, {"a", "b"})


@pytest.mark.parametrize(
    "text", ["a / 0", "9 ** 9 ** 9", "log(0)", "sqrt(-1)", "min()", "exp(1000) * exp(1000) * 1e300"]
)
def test_formula_values_that_are_not_finite_numbers_are_errors(text):
    with pytest.raises(FormulaError):
        Formula(text, {"a"}).evaluate({"a": 1.0})


def test_formula_round_cannot_hang_the_service():
    # round(int, -n) makes Python compute 10**n; round(5, -10**7) took 17 s, -10**9 far longer.
    outcome: list[object] = []

    def evaluate() -> None:
        try:
            outcome.append(Formula("round(5, -10**7)", set()).evaluate({}))
        except FormulaError as exc:
            outcome.append(exc)

    worker = threading.Thread(target=evaluate, daemon=True)
    worker.start()
    worker.join(timeout=5)  # a bounded wait for hang detection, not a timing assertion
    assert not worker.is_alive() and isinstance(outcome[0], FormulaError)
    assert Formula("round(a, 2)", {"a"}).evaluate({"a": 0.12345}) == pytest.approx(0.12)
    assert Formula("round(a)", {"a"}).evaluate({"a": 2.6}) == 3.0


def test_formula_rejects_a_function_used_as_a_value():
    with pytest.raises(FormulaError, match="is a function"):
        Formula("abs + a", {"a"})


def test_length_shaping_functions():
    assert overlong(100, 1000, 200) == 0.0
    assert overlong(900, 1000, 200) == pytest.approx(-0.5)
    assert overlong(1000, 1000, 200) == pytest.approx(-1.0)
    assert overlong(5000, 1000, 200) == -1.0
    assert cosine_scale(1, 0, 1000) == pytest.approx(2.0)
    assert cosine_scale(1, 1000, 1000) == pytest.approx(1.0)
    assert cosine_scale(0, 0, 1000) == pytest.approx(-10.0)
    assert cosine_scale(0, 1000, 1000) == pytest.approx(0.0)
    assert cosine_scale(1, 1001, 1000) == -10.0
    assert cosine_scale(1, 200, 1000) > cosine_scale(1, 600, 1000)
    assert cosine_scale(0, 200, 1000) < cosine_scale(0, 600, 1000)


# -- the verifier -----------------------------------------------------------------------------------------------


def test_weighted_sum_over_inline_and_pool_components(engine):
    components = {"fmt": {**FMT, "weight": 1}, "answer": {**ANSWER, "weight": 3}}
    both = engine.score(multi("<answer>0.5</answer>", components=components))
    assert both.status is Status.ok and both.reward == 1.0
    assert both.components == {"fmt": 1.0, "answer": 1.0}
    only_format = engine.score(multi("<answer>7</answer>", components=components))
    assert only_format.reward == pytest.approx(0.25) and only_format.reason == "partial"
    assert only_format.details["components"]["answer"]["verifier"] == "math@1.0.0"


def test_formula_gates_the_answer_on_the_format(engine):
    components = {"fmt": FMT, "answer": ANSWER}
    gated = engine.score(multi("The answer is \\boxed{1/2}", components=components, formula="fmt * answer"))
    assert gated.reward == 0.0 and gated.components["answer"] == 1.0


@pytest.mark.parametrize(
    ("response", "length", "expected"),
    [
        ("\\boxed{1/2}", 100, 1.0),  # correct, within budget
        ("\\boxed{1/2}", 900, (1 - 0.5 + 2) / 3),  # correct, half-way down the soft ramp
        ("\\boxed{1/2}", 2000, 2 / 3),  # correct but past the budget
        ("\\boxed{3}", 100, 1 / 3),  # wrong, within budget
        ("\\boxed{3}", 2000, 0.0),  # wrong and past the budget
    ],
)
def test_dapo_overlong_preset(engine, response, length, expected):
    reference = {
        "components": {"answer": ANSWER},
        "preset": "dapo_overlong",
        "length": length,
        "max_length": 1000,
        "cache_length": 200,
    }
    result = engine.score({"verifier": "multi", "response": response, "reference": reference})
    assert result.status is Status.ok and result.reward == pytest.approx(expected)


def test_cosine_length_preset_prefers_short_right_and_long_wrong(engine):
    def reward(response: str, length: int) -> float:
        reference = {
            "components": {"answer": ANSWER},
            "preset": "cosine_length",
            "length": length,
            "max_length": 1000,
        }
        return engine.score({"verifier": "multi", "response": response, "reference": reference}).reward

    assert (
        reward("\\boxed{1/2}", 100)
        > reward("\\boxed{1/2}", 900)
        > reward("\\boxed{3}", 900)
        > reward("\\boxed{3}", 100)
    )
    assert reward("\\boxed{1/2}", 0) == 1.0 and reward("\\boxed{1/2}", 1001) == 0.0


def test_length_defaults_to_words(engine):
    reference = {"components": {"fmt": FMT}, "formula": "fmt * (length <= 3)"}
    assert engine.score(multi("<answer>a b</answer>", **reference)).reward == 1.0
    assert engine.score(multi("one two three <answer>x</answer>", **reference)).reward == 0.0


def test_a_failing_component_fails_the_whole_score(engine, monkeypatch):
    monkeypatch.delenv("PROCTOR_JUDGE_BASE_URL", raising=False)
    get_settings.cache_clear()
    components = {
        "fmt": FMT,
        "judged": {"verifier": "judge.rubric", "reference": {"items": [{"criterion": "c"}]}},
    }
    result = engine.score(multi("<answer>x</answer>", components=components))
    assert result.status is Status.judge_error and result.reward == 0.0 and result.correct is None
    assert result.details["component"] == "judged"


def test_a_formula_that_fails_between_probe_points_is_422_not_a_masked_score(engine):
    # Red team: the probe points missed length 7, so a 7-word response turned its score into a masked
    # verifier_error instead of a 0. Interval arithmetic over length's whole range refuses the formula.
    with pytest.raises(RequestError) as rejected:
        engine.score(
            multi("one two three <answer>x</answer>", components={"fmt": FMT}, formula="fmt / (length - 7)")
        )
    message = rejected.value.message
    assert rejected.value.status == 422 and rejected.value.field.startswith("reference")
    assert "'fmt / (length - 7)'" in message and "divides by length - 7, which can be 0" in message


def test_a_runtime_formula_error_is_still_a_verifier_error(engine, monkeypatch):
    # Validated formulas cannot fail at scoring time; should the check ever miss one, the score is masked.
    from proctor.verifiers import multi as multi_module

    monkeypatch.setattr(multi_module, "check_ranges", lambda *args: None)
    result = engine.score(
        multi("one two three <answer>x</answer>", components={"fmt": FMT}, formula="fmt / (length - 4)")
    )
    assert result.status is Status.verifier_error and result.reason == "formula_error"


@pytest.mark.parametrize(
    ("reference", "field_part"),
    [
        ({"components": {"x": {"verifier": "nope"}}}, "unknown verifier"),
        ({"components": {"x": {"verifier": "math", "reference": None}}}, "component x"),
        ({"components": {"x": FMT}, "formula": "x + y"}, "unknown variable 'y'"),
        ({"components": {"x": FMT}, "formula": "x", "preset": "dapo_overlong"}, "not both"),
        ({"components": {"x": FMT}, "preset": "dapo_overlong"}, "'answer'"),
        ({"components": {"x-y": FMT}}, "identifier"),
        ({"components": {"x": {"verifier": "multi", "reference": {}}}}, "multi cannot contain multi"),
        ({"components": {"x": {**FMT, "options": {"bogus": 1}}}}, "component x"),
        ({"components": {"x": FMT}, "formula": "x + overlong(length, max_length, 10)"}, "'max_length'"),
        ({"components": {"x": FMT}, "formula": "x - abs"}, "is a function"),
    ],
)
def test_bad_references_are_422(engine, reference, field_part):
    with pytest.raises(RequestError) as rejected:
        engine.score(multi("x", **reference))
    assert rejected.value.status == 422 and rejected.value.field.startswith("reference")
    assert field_part in rejected.value.message


async def test_async_paths_and_component_caching(engine):
    components = {
        "fmt": FMT,
        "answer": ANSWER,
        "rubric": {
            "verifier": "judge.rubric",
            "reference": {"items": [{"criterion": "box", "kind": "regex", "pattern": "boxed"}]},
        },
    }
    requests = [
        multi(f"<answer>\\boxed{{{value}}}</answer>", components=components) for value in ("1/2", "0.5", "2")
    ]
    results = await engine.score_batch_async(requests)
    assert [r.reward for r in results] == pytest.approx([1.0, 1.0, 2 / 3])
    single = await engine.score_async(prepare(multi("<answer>\\boxed{1/2}</answer>", components=components)))
    assert single.cached  # the multi score itself
    part = engine.score(
        {"verifier": "math", "response": "<answer>\\boxed{2}</answer>", "reference": "\\frac{1}{2}"}
    )
    assert part.cached  # its math component was cached by the batch


# -- the engine's async (IO-bound) verifier path -------------------------------------------------------------------


async def _boom(response: str, reference: str, options: BaseOptions) -> Verdict:
    raise RuntimeError(f"boom on {response}")


async def _echo(response: str, reference: str, options: BaseOptions) -> Verdict:
    await asyncio.sleep(0)
    return Verdict.right() if response == reference else Verdict.wrong("mismatch")


register_verifier(
    VerifierSpec(name="test.async_boom", version="1", score=_boom, reference=str, execution="pool")
)
register_verifier(
    VerifierSpec(name="test.async_echo", version="1", score=_echo, reference=str, execution="pool")
)


async def test_async_verifiers_never_go_to_the_pool_and_their_exceptions_are_verifier_errors(engine):
    boom = {"verifier": "test.async_boom", "response": "x", "reference": "x"}
    assert engine.score(boom).status is Status.verifier_error
    assert (await engine.score_async(prepare(boom))).reason == "verifier_exception"
    big = {"verifier": "test.async_echo", "response": "y" * 200_000, "reference": "y" * 200_000}
    assert engine.score(big).reward == 1.0  # past inline_max_chars, yet awaited rather than sent to the pool
    mixed = [
        boom,
        big,
        {"verifier": "test.async_echo", "response": "a", "reference": "b"},
        {"verifier": "nope", "response": "r"},
    ]
    for results in (engine.score_batch(mixed), await engine.score_batch_async(mixed)):
        assert [getattr(r, "status", None) for r in results[:3]] == [
            Status.verifier_error,
            Status.ok,
            Status.ok,
        ]
        assert results[2].reward == 0.0 and results[3].error.status == 404


# -- length never masks a score; formulas are checked over their variables' ranges (issue 14, item 5) ----------


def test_float_powers_are_evaluated_and_underflow_is_a_value():
    assert Formula("0.5 ^ (length / 100)", {"length"}).evaluate({"length": 7000.0}) == pytest.approx(0.5**70)
    assert Formula("0.5 ** length", {"length"}).evaluate({"length": 1e7}) == 0.0  # underflow: 0, not an error
    assert Formula("2 ^ -2000", set()).evaluate({}) == 0.0
    assert Formula("a ^ 0.5", {"a"}).evaluate({"a": 0.25}) == 0.5
    for text in ("2 ^ 2000", "(-8) ^ (1 / 3)", "0 ^ -1", "10 ** 10 ** 9"):
        with pytest.raises(FormulaError):
            Formula(text, set()).evaluate({})


LENGTH_DECAY = {"components": {"answer": {"verifier": "text.match", "reference": "42"}}}


@pytest.mark.parametrize(("answer", "reward"), [("41", 0.0), ("42", 0.5**70)])
def test_a_long_response_is_scored_not_masked(engine, answer, reward):
    response = "word " * 6_999 + f"\\boxed{{{answer}}}"  # 7,000 words
    result = engine.score(multi(response, **LENGTH_DECAY, formula="answer * 0.5 ** (length / 100)"))
    assert result.status is Status.ok and result.details["length"] == 7_000
    assert result.reward == pytest.approx(reward, abs=1e-30)


@pytest.mark.parametrize(
    ("reference", "words"),
    [
        ({"formula": "answer * 2 ** length"}, "2 ** length: overflows"),  # for a long enough response
        ({"formula": "answer + 2 ** (length / 1000)"}, "overflows"),  # ... even this slowly
        ({"formula": "1 / answer"}, "divides by answer, which can be 0"),
        ({"formula": "log(answer)"}, "log(answer): the logarithm's argument can be 0"),
        ({"formula": "answer / length"}, "divides by length"),  # an empty response has 0 words
        ({"formula": "answer * 2 ** length", "length": 5_000}, "length = 5000"),
    ],
)
def test_a_formula_with_no_value_somewhere_in_its_ranges_is_422(engine, reference, words):
    with pytest.raises(RequestError) as rejected:
        engine.score(multi("\\boxed{42}", **LENGTH_DECAY, **reference))
    assert rejected.value.status == 422 and rejected.value.field.startswith("reference")
    assert "over its variables' ranges" in rejected.value.message and words in rejected.value.message


def test_a_given_length_is_checked_at_its_value_only(engine):
    result = engine.score(
        multi("\\boxed{42}", **LENGTH_DECAY, formula="answer * 2 ** length", length=3, range=[0, 8])
    )
    assert result.status is Status.ok and result.reward == 1.0


def test_the_longest_response_is_bounded_by_the_body_limit(monkeypatch):
    from proctor.verifiers.multi import check_ranges, max_words

    monkeypatch.setenv("PROCTOR_MAX_BODY_BYTES", "2000")
    get_settings.cache_clear()
    try:
        assert max_words() == 1000
        # 2 ** 1000 is finite: with a 2,000-byte body limit no response has more than 1,000 words.
        assert (
            check_ranges("answer * 2 ** length / 2 ** 1000", ("answer",), None, None, None, max_words())
            is None
        )
        assert check_ranges("answer * 2 ** length", ("answer",), None, None, None, 1100) is not None
    finally:
        monkeypatch.undo()
        get_settings.cache_clear()
