"""The `toolcall` verifier: the matching policy, the reference's 422s, every class of reward hack a policy could
try, and the verifier through the real HTTP service (`/v1/score` and `/v1/score/batch`)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from proctor.contract import RequestError, Score, Status
from proctor.engine import Engine, prepare
from proctor.settings import Settings
from proctor.verifiers.toolcall.matching import max_matching

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    },
}
STOCK = {
    "name": "stock.price",
    "parameters": {"type": "dict", "properties": {"ticker": {"type": "string"}}, "required": ["ticker"]},
}
MOVE = {
    "name": "robot.move",
    "parameters": {
        "type": "object",
        "properties": {"dx": {"type": "integer"}, "dy": {"type": "float"}, "label": {"type": "string"}},
        "required": ["dx"],
    },
}
NESTED = {
    "name": "order",
    "parameters": {
        "type": "object",
        "properties": {
            "customer": {
                "type": "object",
                "properties": {
                    "name": {"type": "string"},
                    "address": {
                        "type": "object",
                        "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
                        "required": ["city"],
                    },
                },
                "required": ["name"],
            },
            "items": {"type": "array", "items": {"type": "string"}},
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
            "meta": {"type": "any"},
        },
        "required": ["customer"],
    },
}

W = {"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["celsius", ""], "days": [1, ""]}}
REF = {"tools": [WEATHER, STOCK], "calls": [W]}
NONE = {"tools": [WEATHER, STOCK], "calls": []}


def move_ref(**arguments: list[Any]) -> dict[str, Any]:
    return {"tools": [MOVE], "calls": [{"name": "robot.move", "arguments": arguments}]}


def assistant(*calls: tuple[str, Any], content: str | None = None) -> list[dict[str, Any]]:
    tool_calls = [
        {
            "id": f"call_{i}",
            "type": "function",
            "function": {"name": name, "arguments": args if isinstance(args, str) else json.dumps(args)},
        }
        for i, (name, args) in enumerate(calls)
    ]
    return [
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": content, "tool_calls": tool_calls},
    ]


def hermes(name: str, arguments: Any) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


@pytest.fixture(scope="module")
def engine() -> Iterator[Engine]:
    engine = Engine(Settings(cache_size=0, pool_workers=2))
    yield engine
    engine.close()


@pytest.fixture
def score(engine: Engine):
    def run(response: Any, reference: Any, **options: Any) -> Score:
        result = engine.score(
            {"verifier": "toolcall", "response": response, "reference": reference, "options": options}
        )
        assert result.status is Status.ok, result
        return result

    return run


def reward(score, response: Any, reference: Any, **options: Any) -> float:
    return score(response, reference, **options).reward


# -- matching policy ---------------------------------------------------------------------------------------------------


def test_right_call_in_every_dialect(score):
    qwen = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n1\n</parameter>\n</function>\n</tool_call>"
    for response, dialect in [
        (assistant(("get_weather", {"city": "Paris"})), "openai"),
        (hermes("get_weather", {"city": "Paris"}), "hermes"),
        (qwen, "qwen_xml"),
        ('get_weather(city="Paris", days=1)', "pythonic"),
    ]:
        result = score(response, REF)
        assert result.reward == 1.0 and result.details["dialect"] == dialect, result
        assert result.components == {"name": 1.0, "keys": 1.0, "values": 1.0}


def test_a_plain_string_is_the_final_assistant_text(score):
    assert reward(score, "Checking.\n" + hermes("get_weather", {"city": "Paris"}), REF) == 1.0


def test_last_assistant_message_is_graded(score):
    right = assistant(("get_weather", {"city": "Paris"}))
    wrong = assistant(("get_weather", {"city": "Rome"}))
    observation = {"role": "tool", "tool_call_id": "call_0", "name": "get_weather", "content": "21C"}
    assert reward(score, [*right, observation, wrong[1]], REF) == 0.0
    assert reward(score, [*wrong, observation, right[1]], REF) == 1.0
    assert reward(score, [*right, observation], REF) == 1.0  # a trailing observation is not an assistant turn
    assert score([{"role": "user", "content": "hi"}], NONE).reason == "no_assistant_message"


def test_argument_order_case_and_surrounding_whitespace_do_not_matter(score):
    assert reward(score, assistant(("get_weather", {"unit": "CELSIUS", "city": "  paris\n"})), REF) == 1.0


def test_optional_arguments_defaults_and_omission(score):
    assert reward(score, assistant(("get_weather", {"city": "Paris"})), REF) == 1.0
    # Omitting an argument the gold needs fails, unless the schema's default is an acceptable value.
    need_unit = {
        "tools": [WEATHER],
        "calls": [{"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["fahrenheit"]}}],
    }
    assert score(assistant(("get_weather", {"city": "Paris"})), need_unit).reason == "wrong_arguments"
    default_ok = {
        "tools": [WEATHER],
        "calls": [{"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["celsius"]}}],
    }
    assert reward(score, assistant(("get_weather", {"city": "Paris"})), default_ok) == 1.0
    # Sending the default where the gold says "leave it out" is the same call.
    omit_only = {
        "tools": [WEATHER],
        "calls": [{"name": "get_weather", "arguments": {"city": ["Paris"], "unit": [""]}}],
    }
    assert reward(score, assistant(("get_weather", {"city": "Paris", "unit": "celsius"})), omit_only) == 1.0
    assert (
        reward(score, assistant(("get_weather", {"city": "Paris", "unit": "fahrenheit"})), omit_only) == 0.0
    )


def test_an_argument_the_gold_does_not_list_must_not_be_sent(score):
    result = score(assistant(("get_weather", {"city": "Paris", "country": "FR"})), REF)
    assert result.reward == 0.0 and result.reason == "wrong_arguments"
    assert result.components == {"name": 1.0, "keys": 0.0, "values": 0.0}
    narrow = {"tools": [WEATHER], "calls": [{"name": "get_weather", "arguments": {"city": ["Paris"]}}]}
    assert reward(score, assistant(("get_weather", {"city": "Paris", "days": 1})), narrow) == 0.0


def test_undeclared_gold_argument_is_accepted_when_it_may_be_left_out(score):
    reference = {
        "tools": [WEATHER],
        "calls": [{"name": "get_weather", "arguments": {"city": ["Paris"], "legacy": [""]}}],
    }
    assert reward(score, assistant(("get_weather", {"city": "Paris"})), reference) == 1.0
    assert reward(score, assistant(("get_weather", {"city": "Paris", "legacy": ""})), reference) == 0.0


def test_enums(score):
    assert reward(score, assistant(("get_weather", {"city": "Paris", "unit": "Celsius"})), REF) == 1.0
    any_unit = {
        "tools": [WEATHER],
        "calls": [
            {"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["celsius", "kelvin", ""]}}
        ],
    }
    with pytest.raises(RequestError) as caught:
        prepare({"verifier": "toolcall", "response": "x", "reference": any_unit})
    assert caught.value.field == "reference.calls.0.arguments.unit.1"


@pytest.mark.parametrize(
    ("sent", "gold", "options", "expected"),
    [
        ({"dx": 150.0}, {"dx": [150]}, {}, 1.0),  # JSON Schema: 150.0 is an integer
        ({"dx": 150.0}, {"dx": [150]}, {"integral_floats": False}, 0.0),
        ({"dx": 150.5}, {"dx": [150]}, {}, 0.0),
        ({"dx": 1, "dy": 2}, {"dx": [1], "dy": [2.0]}, {}, 1.0),  # an integer is a valid number
        ({"dx": True}, {"dx": [1]}, {}, 0.0),  # a bool is never a number
        ({"dx": 1, "dy": False}, {"dx": [1], "dy": [0.0]}, {}, 0.0),
        ({"dx": "1"}, {"dx": [1]}, {}, 0.0),  # never coerced from a string
        ({"dx": 1, "label": 1}, {"dx": [1], "label": ["1"]}, {}, 0.0),  # nor a string from a number
        ({"dx": -3}, {"dx": [-3]}, {}, 1.0),
        ({"dx": 3}, {"dx": [-3]}, {}, 0.0),
    ],
)
def test_numeric_policy(score, sent, gold, options, expected):
    assert reward(score, assistant(("robot.move", sent)), move_ref(**gold), **options) == expected


@pytest.mark.parametrize(
    ("sent", "gold", "expected"),
    [
        ("-1.5", "-1.5", 1.0),
        ("1.5", "-1.5", 0.0),  # a sign is never dropped (BFCL's "-1.5" equals "15")
        ("15", "-1.5", 0.0),
        ("3.5", "35", 0.0),  # nor a decimal point
        ("35", "3.5", 0.0),
        ("New York", "new york", 1.0),
        ("New-York", "New York", 0.0),  # punctuation inside a string is kept
        (" Ünïcode ", "üNÏCODE", 1.0),
        ("New  York", "New York", 1.0),  # a run of whitespace inside is one space
        ("NewYork", "New York", 0.0),  # but no space is not a space
    ],
)
def test_string_policy(score, sent, gold, expected):
    reference = move_ref(dx=[1], label=[gold])
    assert reward(score, assistant(("robot.move", {"dx": 1, "label": sent})), reference) == expected


def test_nested_objects_at_depth(score):
    gold = {
        "customer": [{"name": ["Ada"], "address": [{"city": ["London"], "zip": ["N1", ""]}]}],
        "items": [["tea", "cake"], ""],
    }
    reference = {"tools": [NESTED], "calls": [{"name": "order", "arguments": gold}]}

    def sent(customer: dict, **rest: Any) -> list[dict[str, Any]]:
        return assistant(("order", {"customer": customer, **rest}))

    assert reward(score, sent({"address": {"city": "london"}, "name": "ada"}), reference) == 1.0
    assert reward(score, sent({"name": "Ada", "address": {"city": "London", "zip": "N1"}}), reference) == 1.0
    assert reward(score, sent({"name": "Ada", "address": {"city": "Paris"}}), reference) == 0.0
    assert reward(score, sent({"name": "Ada", "address": {"city": "London", "zip": "E1"}}), reference) == 0.0
    assert reward(score, sent({"name": "Ada", "address": {"city": "London", "floor": 2}}), reference) == 0.0
    assert reward(score, sent({"name": "Ada"}), reference) == 0.0  # the gold needs an address
    assert (
        reward(score, sent({"name": "Ada", "address": {"city": "London"}}, items=["tea", "cake"]), reference)
        == 1.0
    )
    assert (
        reward(score, sent({"name": "Ada", "address": {"city": "London"}}, items=["cake", "tea"]), reference)
        == 0.0
    )


def test_lists_in_order_unless_a_set(score):
    tags = {
        "tools": [NESTED],
        "calls": [{"name": "order", "arguments": {"customer": [{"name": ["A"]}], "tags": [["x", "y"]]}}],
    }
    assert reward(score, assistant(("order", {"customer": {"name": "A"}, "tags": ["Y", "x"]})), tags) == 1.0
    assert reward(score, assistant(("order", {"customer": {"name": "A"}, "tags": ["x"]})), tags) == 0.0
    assert (
        reward(score, assistant(("order", {"customer": {"name": "A"}, "tags": ["x", "y", "y"]})), tags) == 0.0
    )
    items = {
        "tools": [NESTED],
        "calls": [{"name": "order", "arguments": {"customer": [{"name": ["A"]}], "items": [["x", "y"]]}}],
    }
    assert reward(score, assistant(("order", {"customer": {"name": "A"}, "items": ["y", "x"]})), items) == 0.0
    marked = {**items, "calls": [{**items["calls"][0], "unordered": ["items"]}]}
    assert (
        reward(score, assistant(("order", {"customer": {"name": "A"}, "items": ["y", "x"]})), marked) == 1.0
    )


def test_any_typed_values_compare_with_their_types(score):
    reference = {
        "tools": [NESTED],
        "calls": [{"name": "order", "arguments": {"customer": [{"name": ["A"]}], "meta": [{"k": 1}]}}],
    }
    assert (
        reward(score, assistant(("order", {"customer": {"name": "A"}, "meta": {"k": 1.0}})), reference) == 1.0
    )
    assert (
        reward(score, assistant(("order", {"customer": {"name": "A"}, "meta": {"k": "1"}})), reference) == 0.0
    )
    assert (
        reward(score, assistant(("order", {"customer": {"name": "A"}, "meta": {"k": True}})), reference)
        == 0.0
    )


def test_bfcl_shorthand_and_type_aliases(score):
    reference = {"tools": [STOCK], "calls": [{"stock.price": {"ticker": ["AAPL"]}}]}
    assert reward(score, "stock.price(ticker='aapl')", reference) == 1.0


# -- parallel calls ----------------------------------------------------------------------------------------------------

P2 = {
    "tools": [WEATHER, STOCK],
    "calls": [
        {"name": "get_weather", "arguments": {"city": ["Paris"]}},
        {"name": "stock.price", "arguments": {"ticker": ["AAPL"]}},
    ],
}


def test_parallel_calls_in_any_order(score):
    forward = assistant(("get_weather", {"city": "Paris"}), ("stock.price", {"ticker": "AAPL"}))
    backward = assistant(("stock.price", {"ticker": "AAPL"}), ("get_weather", {"city": "Paris"}))
    assert reward(score, forward, P2) == reward(score, backward, P2) == 1.0
    assert reward(score, backward, {**P2, "order_matters": True}) == 0.0
    assert reward(score, forward, {**P2, "order_matters": True}) == 1.0


def test_parallel_assignment_is_exact_where_greedy_fails(score):
    # Gold 0 accepts either unit, gold 1 only fahrenheit. The first call fits both; a greedy checker gives it to
    # gold 0 and then finds nothing for gold 1. Any order of the calls must pass.
    reference = {
        "tools": [WEATHER],
        "calls": [
            {"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["celsius", "fahrenheit"]}},
            {"name": "get_weather", "arguments": {"city": ["Paris"], "unit": ["fahrenheit"]}},
        ],
    }
    f = ("get_weather", {"city": "Paris", "unit": "fahrenheit"})
    c = ("get_weather", {"city": "Paris", "unit": "celsius"})
    assert reward(score, assistant(f, c), reference) == 1.0
    assert reward(score, assistant(c, f), reference) == 1.0
    assert reward(score, assistant(c, c), reference) == 0.0


def test_max_matching_is_maximum():
    # 0-{0,1}, 1-{0}: the first left node must give way.
    owner = max_matching([[0, 1], [0]], 2)
    assert sorted(owner) == [0, 1]
    assert max_matching([[0], [0], [0]], 1) == [0]
    edges = [[j for j in range(8) if (i + j) % 3 != 0] for i in range(8)]
    owner = max_matching(edges, 8)
    assert all(o >= 0 for o in owner) and len(set(owner)) == 8


@pytest.mark.parametrize(
    ("calls", "reason"),
    [
        ([("get_weather", {"city": "Paris"})], "wrong_call_count"),  # one missing
        (
            [("get_weather", {"city": "Paris"})] * 2 + [("stock.price", {"ticker": "AAPL"})],
            "wrong_call_count",
        ),
        ([("get_weather", {"city": "Paris"}), ("stock.price", {"ticker": "AAPL"})] * 2, "wrong_call_count"),
        ([("get_weather", {"city": "Paris"}), ("get_weather", {"city": "Paris"})], "wrong_function"),
    ],
)
def test_missing_duplicated_and_extra_calls_score_zero(score, calls, reason):
    result = score(assistant(*calls), P2)
    assert result.reward == 0.0 and result.reason == reason


def test_calling_every_tool_scores_zero(score):
    every = assistant(("get_weather", {"city": "Paris"}), ("stock.price", {"ticker": "AAPL"}))
    assert score(every, REF).reason == "wrong_call_count"
    assert score(every, NONE).reason == "unexpected_call"


# -- irrelevance -------------------------------------------------------------------------------------------------------


def test_no_call_expected(score):
    assert reward(score, "I cannot book flights with these tools.", NONE) == 1.0
    assert (
        reward(score, [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"}], NONE)
        == 1.0
    )
    assert score(assistant(("get_weather", {"city": "Paris"})), NONE).reason == "unexpected_call"
    assert score("", NONE).reason == "empty_response"
    assert score("<think>No tool fits.</think>  ", NONE).reason == "empty_response"
    assert score("<think>I should not call anything", NONE).reason == "empty_response"


def test_a_call_shown_as_code_is_no_answer_where_no_call_is_expected(score):
    for response in [
        "```python\nget_weather(city='Paris')\n```",
        "I would run `stock.price(ticker='AAPL')` but it does not apply.",
        "```\n" + hermes("get_weather", {"city": "Paris"}) + "\n```",
    ]:
        result = score(response, NONE)
        assert result.reward == 0.0 and result.details["errors"][0]["code"] == "quoted_call", result
    # Code that calls no offered tool is ordinary text.
    assert reward(score, "In Python, `len(x)` counts items; no tool is needed.", NONE) == 1.0


def test_a_malformed_call_is_never_an_abstention(score):
    for response in [
        '<tool_call>{"name": "get_weather", "arguments": {"city": }}</tool_call>',
        assistant(("get_weather", '{"city": "Paris",}')),
        'get_weather(city="Paris"',
        "<function=get_weather>\n<parameter=days>\nthree\n</parameter>\n</function>",
    ]:
        result = score(response, NONE)
        assert result.reward == 0.0 and result.reason == "parse_error", result
        assert result.details["errors"], result


def test_expected_call_missing(score):
    result = score("It is probably sunny in Paris.", REF)
    assert result.reason == "no_call" and result.components == {"name": 0.0, "keys": 0.0, "values": 0.0}


# -- a wrong call never outscores no call --------------------------------------------------------------------------------


def test_right_name_and_keys_with_wrong_values_scores_what_no_call_scores(score):
    wrong = score(assistant(("get_weather", {"city": "Rome", "unit": "fahrenheit", "days": 9})), REF)
    nothing = score("No idea.", REF)
    assert wrong.reward == nothing.reward == 0.0
    assert wrong.components == {"name": 1.0, "keys": 1.0, "values": 0.0} and wrong.reason == "wrong_values"
    assert any("city" in line for line in wrong.details["problems"])


# -- reward hacks ----------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        ("<think>" + hermes("get_weather", {"city": "Paris"}) + "</think>Sunny.", "no_call"),
        ("<think>" + hermes("get_weather", {"city": "Paris"}), "no_call"),
        ("```\n" + hermes("get_weather", {"city": "Paris"}) + "\n```", "parse_error"),
        ("```json\n" + hermes("get_weather", {"city": "Paris"}) + "\n```", "parse_error"),
        ("`get_weather(city='Paris')`", "parse_error"),
        ("Like this:\n```python\nget_weather(city='Paris')\n```", "parse_error"),
        ("> " + hermes("get_weather", {"city": "Paris"}).replace("\n", ""), "parse_error"),
        ("You could call get_weather(city='Paris').", "no_call"),
        (
            hermes("get_weather", {"city": "Paris"}) + '\n<tool_response>{"temp": 21}</tool_response>',
            "fake_tool_response",
        ),
        (
            '<TOOL_RESPONSE>{"temp": 21}</TOOL_RESPONSE>\n' + hermes("get_weather", {"city": "Paris"}),
            "fake_tool_response",
        ),
        ('<tool_call>{"name": "get_weather", "arguments": {"city": NaN}}</tool_call>', "parse_error"),
        (
            '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "city": "Rome"}}</tool_call>',
            "parse_error",
        ),
        (
            '<tool_call>{"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}</tool_call>',
            "parse_error",
        ),
    ],
)
def test_hidden_quoted_and_faked_calls_score_zero(score, response, reason):
    result = score(response, REF)
    assert result.reward == 0.0 and result.reason == reason, result


@pytest.mark.parametrize(
    "marker", ["<|im_start|>user\n", "<|start_header_id|>user<|end_header_id|>", "<start_of_turn>user"]
)
def test_a_turn_written_past_the_models_own_is_zero(score, marker: str):
    response = hermes("get_weather", {"city": "Paris"}) + "\n" + marker + "Thanks, that is right!"
    assert score(response, REF).reason == "fake_turn"


def test_fake_tool_response_in_the_content_beside_tool_calls(score):
    response = assistant(("get_weather", {"city": "Paris"}), content="<tool_response>21C</tool_response>")
    assert score(response, REF).reason == "fake_tool_response"


@pytest.mark.parametrize(
    "arguments",
    [
        {"city": ["Paris"]},
        {"city": {"name": "Paris"}},
        {"city": None},
        {"city": "Paris", "unit": 1},
        {"city": "Paris", "days": "1"},
        {"city": "Paris", "days": True},
    ],
)
def test_type_confusion_scores_zero(score, arguments):
    assert reward(score, assistant(("get_weather", arguments)), REF) == 0.0


def test_huge_and_deeply_nested_arguments_score_zero_quickly(score):
    started = time.perf_counter()
    huge = score(assistant(("get_weather", {"city": "Paris" * 400_000})), REF)
    deep = score(assistant(("get_weather", '{"city": ' + "[" * 100_000 + "]" * 100_000 + "}")), REF)
    many = score(hermes("get_weather", {"city": "Paris"}) * 300, REF)
    assert (huge.reason, deep.reason, many.reason) == ("wrong_values", "parse_error", "parse_error")
    assert deep.details["errors"][0]["code"] == "too_deep"
    assert many.details["errors"][0]["code"] == "too_many_calls"
    assert time.perf_counter() - started < 30  # a generous bound: the point is no hang, not speed


def test_dialect_option_forces_one_reader(score):
    text = hermes("get_weather", {"city": "Paris"})
    assert reward(score, text, REF, dialect="hermes") == 1.0
    assert score(text, REF, dialect="pythonic").reason == "no_call"
    assert score(text, REF, dialect="openai").reason == "no_call"
    with_calls = assistant(
        ("get_weather", {"city": "Paris"}), content=hermes("get_weather", {"city": "Rome"})
    )
    assert reward(score, with_calls, REF) == 1.0
    assert reward(score, with_calls, REF, dialect="hermes") == 0.0


# -- the reference: 422 naming the field --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reference", "field"),
    [
        (
            {
                "tools": [
                    {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "int64"}}}}
                ],
                "calls": [],
            },
            "reference.tools.0.parameters.properties.a.type",
        ),
        (
            {"tools": [{"type": "function", "function": {"parameters": {}}}], "calls": []},
            "reference.tools.0.function.name",
        ),
        (
            {"tools": [{"name": "f", "parameters": {"type": "string"}}], "calls": []},
            "reference.tools.0.parameters",
        ),
        ({"tools": [WEATHER, WEATHER], "calls": []}, "reference.tools.1.name"),
        ({"tools": [WEATHER], "calls": [{"name": "nope", "arguments": {}}]}, "reference.calls.0.name"),
        (
            {"tools": [WEATHER], "calls": [{"name": "get_weather", "arguments": {"city": [3]}}]},
            "reference.calls.0.arguments.city.0",
        ),
        (
            {"tools": [WEATHER], "calls": [{"name": "get_weather", "arguments": {"city": ["Paris", ""]}}]},
            "reference.calls.0.arguments.city",
        ),
        (
            {"tools": [WEATHER], "calls": [{"name": "get_weather", "arguments": {"unit": ["celsius"]}}]},
            "reference.calls.0.arguments",
        ),
        (
            {
                "tools": [WEATHER],
                "calls": [{"name": "get_weather", "arguments": {"city": ["P"], "zone": ["x"]}}],
            },
            "reference.calls.0.arguments.zone",
        ),
        (
            {"tools": [WEATHER], "calls": [{"name": "get_weather", "arguments": {"city": "Paris"}}]},
            "reference.calls.0.arguments.city",
        ),
        (
            {"tools": [WEATHER], "calls": [{"name": "get_weather", "arguments": {"city": []}}]},
            "reference.calls.0.arguments.city",
        ),
        (
            {"tools": [NESTED], "calls": [{"name": "order", "arguments": {"customer": [{"name": [1]}]}}]},
            "reference.calls.0.arguments.customer.0.name.0",
        ),
        (
            {
                "tools": [NESTED],
                "calls": [{"name": "order", "arguments": {"customer": [{"address": [{"city": ["x"]}]}]}}],
            },
            "reference.calls.0.arguments.customer.0",
        ),
        (
            {
                "tools": [WEATHER],
                "calls": [{"name": "get_weather", "arguments": {"city": ["P"]}, "unordered": ["days"]}],
            },
            "reference.calls.0.unordered",
        ),
        ({"tools": [WEATHER], "calls": [W], "extra": 1}, "reference.extra"),
    ],
)
def test_invalid_reference_is_a_422_naming_the_field(reference, field):
    with pytest.raises(RequestError) as caught:
        prepare({"verifier": "toolcall", "response": "x", "reference": reference})
    assert caught.value.status == 422 and caught.value.field == field, caught.value.message


@pytest.mark.parametrize(
    ("message", "field"),
    [
        ({"role": "user", "content": "x", "tool_calls": []}, "response.0.tool_calls"),
        ({"role": "assistant", "tool_call_id": "c"}, "response.0.tool_call_id"),
        (
            {
                "role": "assistant",
                "tool_calls": [{"type": "function", "function": {"name": "f", "arguments": 1}}],
            },
            "response.0.tool_calls.0.function.arguments",
        ),
        (
            {
                "role": "assistant",
                "tool_calls": [{"type": "tool", "function": {"name": "f", "arguments": "{}"}}],
            },
            "response.0.tool_calls.0.type",
        ),
        (
            {"role": "assistant", "tool_calls": [{"function": {"name": "", "arguments": "{}"}}]},
            "response.0.tool_calls.0.function.name",
        ),
        (
            {"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{}", "x": 1}}]},
            "response.0.tool_calls.0.function.x",
        ),
        ({"role": "tool", "tool_call_id": 5, "content": "x"}, "response.0.tool_call_id"),
    ],
)
def test_malformed_tool_messages_are_a_422_naming_the_field(message, field):
    with pytest.raises(RequestError) as caught:
        prepare({"verifier": "toolcall", "response": [message], "reference": NONE})
    assert caught.value.status == 422 and caught.value.field == field, caught.value.message


def test_other_chat_fields_stay_accepted():
    prepared = prepare(
        {
            "verifier": "text.match",
            "response": [
                {"role": "user", "content": "q", "name": "alice", "custom": {"any": 1}},
                {"role": "assistant", "content": "Answer: 4", "reasoning_content": "..."},
            ],
            "reference": "4",
        }
    )
    assert prepared.response == "Answer: 4"


# -- through the real service ------------------------------------------------------------------------------------------


def test_over_http_score_and_batch(live_server: str):
    right = {
        "verifier": "toolcall",
        "response": assistant(("get_weather", {"city": "Paris"})),
        "reference": REF,
        "id": "right",
    }
    with httpx.Client(base_url=live_server, timeout=60) as client:
        single = client.post("/v1/score", json=right)
        assert single.status_code == 200, single.text
        assert single.json()["reward"] == 1.0 and single.json()["verifier"].startswith("toolcall@")
        bad = client.post(
            "/v1/score", json={**right, "reference": {"tools": [WEATHER], "calls": [{"name": "nope"}]}}
        )
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "reference.calls.0.name"
        user_calls = [{"role": "user", "content": "x", "tool_calls": []}]
        bad_message = client.post("/v1/score", json={**right, "response": user_calls})
        # FastAPI parses /v1/score's body itself and names a union's parent field; the message names the rest.
        assert bad_message.status_code == 422 and bad_message.json()["error"]["field"] == "response"
        assert "only assistant messages carry tool_calls" in bad_message.json()["error"]["message"]
        items = [
            right,
            {**right, "id": "wrong", "response": assistant(("get_weather", {"city": "Rome"}))},
            {**right, "id": "bad-ref", "reference": {"tools": [], "calls": [W]}},
            {**right, "id": "hermes", "response": hermes("get_weather", {"city": "Paris"})},
            {**right, "id": "none", "response": "No tool fits.", "reference": NONE},
            {**right, "id": "bad-message", "response": user_calls},
        ]
        batch = client.post("/v1/score/batch", json={"items": items})
        assert batch.status_code == 200, batch.text
        results = batch.json()["results"]
    assert [r["id"] for r in results] == ["right", "wrong", "bad-ref", "hermes", "none", "bad-message"]
    assert [r.get("reward") for r in results] == [1.0, 0.0, None, 1.0, 1.0, None]
    assert results[1]["reason"] == "wrong_values"
    assert results[2]["error"]["status"] == 422 and results[2]["error"]["field"] == "reference.calls.0.name"
    assert results[5]["error"]["status"] == 422 and results[5]["error"]["field"] == "response.0.tool_calls"


# -- the documentation's examples run ----------------------------------------------------------------------------------

DOC = Path(__file__).resolve().parents[1] / "docs" / "verifiers" / "toolcall.md"


def _doc_blocks(language: str) -> list[str]:
    blocks, current, inside = [], [], False
    for line in DOC.read_text().splitlines():
        if not inside and line.strip() == f"```{language}":
            inside, current = True, []
        elif inside and line.strip() == "```":
            inside = False
            blocks.append("\n".join(current))
        elif inside:
            current.append(line)
    return blocks


def test_documented_json_examples_score_as_the_page_says(engine: Engine):
    requests = [json.loads(block) for block in _doc_blocks("json")]
    # In page order: the opening example, no call expected, two calls in another order, a sign error.
    assert [engine.score(request).reward for request in requests] == [1.0, 1.0, 1.0, 0.0]


def test_documented_python_example_runs():
    (block,) = _doc_blocks("python")
    exec(compile(block, str(DOC), "exec"), {})  # the block asserts its own reward


# -- no argument makes the verifier raise ---------------------------------------------------------------------------


def _random_value(rng, depth: int = 0) -> Any:
    kind = rng.randrange(9 if depth < 3 else 6)
    if kind == 6:
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(3))]
    if kind == 7:
        keys = ["name", "address", "city", "zip", "x"]
        return {rng.choice(keys): _random_value(rng, depth + 1) for _ in range(rng.randrange(3))}
    if kind == 8:
        return {"city": rng.choice(["London", "london ", 1]), "zip": rng.choice(["N1", None])}
    return [
        None,
        rng.choice([True, False]),
        rng.randint(-5, 5),
        rng.choice([0.5, -1.5, 150.0, 1e308, -0.0]),
        rng.choice(["", " ", "Paris", "-1.5", "celsius", "A"]),
        10**30,
    ][kind]


def test_random_arguments_never_raise():
    import random

    from proctor.registry import get_verifier
    from proctor.verifiers.toolcall.verifier import ToolcallOptions, score_toolcall

    spec = get_verifier("toolcall")
    gold = {
        "customer": [{"name": ["Ada"], "address": [{"city": ["London"], "zip": ["N1", ""]}]}],
        "items": [["a"], ""],
        "tags": [["x", "y"], ""],
        "meta": [{"k": 1}, ""],
    }
    references = [
        spec.parse_reference(REF),
        spec.parse_reference({"tools": [NESTED], "calls": [{"name": "order", "arguments": gold}] * 2}),
        spec.parse_reference(move_ref(dx=[1, -3], dy=[2.5, ""], label=["a", ""])),
    ]
    keys = ["city", "unit", "days", "customer", "items", "tags", "meta", "dx", "dy", "label", "other"]
    rng = random.Random(18)
    options = ToolcallOptions()
    for _ in range(2000):
        reference = rng.choice(references)
        calls = []
        for _ in range(rng.randrange(4)):
            name = rng.choice(["get_weather", "order", "robot.move", "stock.price"])
            arguments = {rng.choice(keys): _random_value(rng) for _ in range(rng.randrange(5))}
            calls.append((name, json.dumps(arguments)))
        verdict = score_toolcall(assistant(*calls)[1:], reference, options)
        assert verdict.reward in (0.0, 1.0) and set(verdict.components) == {"name", "keys", "values"}
        assert verdict.reward == 0.0 or verdict.components["values"] == 1.0
