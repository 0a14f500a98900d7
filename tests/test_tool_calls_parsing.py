"""The neutral tool-call parser (`proctor.verifiers.reading.tool_calls`): each dialect, the `auto` order, errors
reported and never repaired, quoted calls, and linear time on 1 MB adversarial inputs (measured as a ratio)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from proctor.verifiers.reading.tool_calls import (
    MAX_ARGUMENT_DEPTH,
    MAX_CALLS,
    MAX_PYTHONIC_CHARS,
    ParsedCalls,
    bracket_depth,
    detect_dialect,
    looks_like_pythonic_call,
    parse_hermes,
    parse_message,
    parse_openai,
    parse_pythonic,
    parse_qwen_xml,
    parse_text,
)


def hermes(name: str, arguments: object) -> str:
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def codes(parsed: ParsedCalls) -> list[str]:
    return [error.code for error in parsed.errors]


def openai_call(name: str, arguments: object, call_id: str = "call_0") -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# -- OpenAI tool_calls ----------------------------------------------------------------------------------------------


def test_openai_tool_calls_are_read_with_ids_and_dotted_names():
    parsed = parse_openai(
        [
            openai_call("math.add", '{"a": 1, "b": -2.5}'),
            openai_call("get_weather", '{"city": "Paris"}', "c2"),
        ]
    )
    assert parsed.ok and parsed.dialect == "openai"
    assert [(c.name, c.arguments, c.id) for c in parsed.calls] == [
        ("math.add", {"a": 1, "b": -2.5}, "call_0"),
        ("get_weather", {"city": "Paris"}, "c2"),
    ]


def test_openai_arguments_given_as_an_object_are_read_as_parsed():
    assert parse_openai([openai_call("f", {"a": [1, 2]})]).calls[0].arguments == {"a": [1, 2]}


@pytest.mark.parametrize(
    ("arguments", "code"),
    [
        ('{"city": "Paris",}', "invalid_json"),  # a trailing comma is not repaired
        ("", "invalid_json"),
        ("{'city': 'Paris'}", "invalid_json"),
        ('["Paris"]', "not_an_object"),
        ('"{\\"city\\": \\"Paris\\"}"', "not_an_object"),  # double-encoded: never decoded twice
        ('{"x": NaN}', "non_finite_number"),
        ('{"x": Infinity}', "non_finite_number"),
        ('{"x": -Infinity}', "non_finite_number"),
        ('{"x": 1, "x": 2}', "duplicate_key"),
        ('{"x": {"y": 1, "y": 1}}', "duplicate_key"),
        ('{"x": ' + "[" * 100 + "]" * 100 + "}", "too_deep"),
        ('{"x": ' + "1" * 5000 + "}", "invalid_json"),  # past Python's integer digit limit
    ],
)
def test_openai_arguments_that_are_not_a_clean_json_object_are_errors(arguments: str, code: str):
    parsed = parse_openai([openai_call("f", arguments)])
    assert parsed.calls == [] and codes(parsed) == [code]
    assert parsed.errors[0].index == 0 and parsed.errors[0].dialect == "openai"


def test_a_bad_openai_call_does_not_hide_the_good_ones_or_itself():
    parsed = parse_openai([openai_call("f", "{}"), openai_call("g", "{oops"), {"type": "function"}])
    assert [c.name for c in parsed.calls] == ["f"]
    assert [(e.index, e.code) for e in parsed.errors] == [(1, "invalid_json"), (2, "bad_call")]


def test_json_string_values_are_never_coerced():
    parsed = parse_openai([openai_call("f", '{"n": "1", "b": "true", "x": "1.5"}')])
    assert parsed.calls[0].arguments == {"n": "1", "b": "true", "x": "1.5"}


# -- Hermes / Qwen <tool_call> ------------------------------------------------------------------------------------


def test_hermes_reads_several_calls_and_surrounding_prose():
    text = (
        "Let me check both.\n"
        + hermes("get_weather", {"city": "Paris"})
        + "\n"
        + hermes("a.b.c", {})
        + "\nDone."
    )
    parsed = parse_hermes(text)
    assert parsed.ok and [(c.name, c.arguments) for c in parsed.calls] == [
        ("get_weather", {"city": "Paris"}),
        ("a.b.c", {}),
    ]


def test_hermes_last_call_left_open_runs_to_the_end():
    # A generation stopped at the stop string `</tool_call>` has no closing tag.
    parsed = parse_hermes('<tool_call>{"name": "f", "arguments": {"a": 1}}')
    assert parsed.ok and parsed.calls[0].arguments == {"a": 1}


def test_hermes_accepts_parameters_for_arguments_but_not_both():
    assert parse_hermes('<tool_call>{"name": "f", "parameters": {"a": 1}}</tool_call>').calls[
        0
    ].arguments == {"a": 1}
    both = parse_hermes('<tool_call>{"name": "f", "parameters": {}, "arguments": {}}</tool_call>')
    assert codes(both) == ["bad_call"]


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ('{"name": "f", "arguments": {"a": }}', "invalid_json"),
        ('{"name": "f", "arguments": "{\\"a\\": 1}"}', "not_an_object"),
        ('[{"name": "f", "arguments": {}}]', "not_an_object"),
        ('{"arguments": {}}', "bad_name"),
        ('{"name": "", "arguments": {}}', "bad_name"),
        ('{"name": "f", "arguments": {}, "reward": 1}', "bad_call"),
        ('{"name": "f", "arguments": {"a": NaN}}', "non_finite_number"),
        ('{"name": "f", "name": "g", "arguments": {}}', "duplicate_key"),
    ],
)
def test_hermes_errors_are_reported_not_dropped(body: str, code: str):
    parsed = parse_hermes(f"<tool_call>{body}</tool_call>")
    assert parsed.dialect == "hermes" and parsed.calls == [] and codes(parsed) == [code]


def test_hermes_error_in_one_call_is_reported_beside_the_good_call():
    parsed = parse_hermes(hermes("f", {}) + '<tool_call>{"name": "g", "arguments": {</tool_call>')
    assert [c.name for c in parsed.calls] == ["f"] and [(e.index, e.code) for e in parsed.errors] == [
        (1, "invalid_json")
    ]


@pytest.mark.parametrize(
    "text",
    [
        "```\n" + hermes("f", {}) + "\n```",
        "Example:\n```json\n" + hermes("f", {}) + "\n```\nthat is all",
        "~~~\n" + hermes("f", {}) + "\n~~~",
        "Write `" + hermes("f", {}).replace("\n", " ") + "` to call it.",
        "> " + hermes("f", {}).replace("\n", " "),
    ],
)
def test_a_call_in_a_code_block_inline_code_or_a_quote_is_an_error(text: str):
    parsed = parse_text(text)
    assert parsed.calls == [] and codes(parsed) == ["quoted_call"]


@pytest.mark.parametrize(
    "text",
    [
        "```python\nget_weather(city='Paris')\n```",
        "```\n[get_weather(city='Paris'), a.b(x=1)]\n```",
        "Run `a.b(x=1)` for that.",
        "> get_weather(city='Paris')",
    ],
)
def test_a_pythonic_call_of_an_offered_tool_shown_as_code_is_an_error(text: str):
    tools = {"get_weather": {}, "a.b": {}}
    assert codes(parse_text(text, tools=tools)) == ["quoted_call"]
    assert parse_text(text) == ParsedCalls()  # without tools, nothing says the code is a call


@pytest.mark.parametrize(
    "text",
    ["Try `len(x)`.", "```python\nprint(get_weather)\n```", "You could call get_weather(city='Paris')."],
)
def test_code_that_calls_no_offered_tool_is_text(text: str):
    assert parse_text(text, tools={"get_weather": {}}) == ParsedCalls()


def test_a_call_after_a_closed_code_block_is_a_call():
    text = "Here is the plan:\n```python\nx = 1\n```\n" + hermes("f", {"a": 1})
    assert parse_text(text).ok and parse_text(text).calls[0].name == "f"


# -- Qwen3-Coder XML -----------------------------------------------------------------------------------------------

QWEN = (
    "<tool_call>\n<function=book.hotel>\n<parameter=city>\nParis\n</parameter>\n<parameter=nights>\n3\n"
    '</parameter>\n<parameter=guest>\n{"name": "Ada"}\n</parameter>\n<parameter=note>\n 42 \n</parameter>\n'
    "</function>\n</tool_call>"
)
HOTEL = {
    "book.hotel": {
        "type": "object",
        "properties": {
            "city": {"type": "string"},
            "nights": {"type": "integer"},
            "guest": {"type": "object"},
            "note": {"type": "string"},
        },
    }
}


def test_qwen_xml_values_are_coerced_by_the_schema_and_strings_stay_text():
    parsed = parse_qwen_xml(QWEN, HOTEL)
    assert parsed.ok and parsed.dialect == "qwen_xml"
    assert parsed.calls[0].name == "book.hotel"
    assert parsed.calls[0].arguments == {
        "city": "Paris",
        "nights": 3,
        "guest": {"name": "Ada"},
        "note": " 42 ",
    }


def test_qwen_xml_without_a_schema_keeps_every_value_as_text():
    assert parse_qwen_xml(QWEN).calls[0].arguments["nights"] == "3"


@pytest.mark.parametrize(
    ("schema", "raw", "expected"),
    [
        ({"type": "number"}, "2.5", 2.5),
        ({"type": "float"}, "-1", -1),
        ({"type": "boolean"}, "true", True),
        ({"type": "array"}, "[1, 2]", [1, 2]),
        ({"type": "null"}, "null", None),
        ({"type": ["string", "integer"]}, "7", "7"),  # a string type wins: no guessing
        ({"type": "int"}, "7", 7),  # Python-minded aliases, any case
        ({"type": "Bool"}, "false", False),
        ({"type": "str"}, "7", "7"),
        ({"type": "any"}, "7", "7"),
    ],
)
def test_qwen_xml_coercion_per_type(schema: dict, raw: str, expected: object):
    text = f"<function=f>\n<parameter=p>\n{raw}\n</parameter>\n</function>"
    parsed = parse_qwen_xml(text, {"f": {"properties": {"p": schema}}})
    assert parsed.ok and parsed.calls[0].arguments == {"p": expected}


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ("<function=f>\n<parameter=n>\nthree\n</parameter>\n</function>", "parameter_type"),
        ("<function=f>\n<parameter=n>\nNaN\n</parameter>\n</function>", "parameter_type"),
        (
            "<function=f>\n<parameter=n>\n1\n</parameter>\n<parameter=n>\n2\n</parameter>\n</function>",
            "duplicate_key",
        ),
        ("<function=f>\nsome words<parameter=n>\n1\n</parameter>\n</function>", "stray_text"),
        ("<tool_call>\n<function=f>\n</function>\n<function=g>\n</function>\n</tool_call>", "bad_call"),
        ("<function=f\n<parameter=n>1</parameter></function>", "bad_name"),
    ],
)
def test_qwen_xml_errors(text: str, code: str):
    parsed = parse_qwen_xml(text, {"f": {"properties": {"n": {"type": "integer"}}}})
    assert codes(parsed) == [code]


def test_qwen_xml_bare_functions_and_several_calls():
    text = "Calling.\n<function=f>\n<parameter=n>\n1\n</parameter>\n</function>\n<function=g>\n</function>"
    parsed = parse_text(text, tools={"f": {"properties": {"n": {"type": "integer"}}}})
    assert parsed.dialect == "qwen_xml" and [(c.name, c.arguments) for c in parsed.calls] == [
        ("f", {"n": 1}),
        ("g", {}),
    ]


# -- pythonic ----------------------------------------------------------------------------------------------------------


def test_pythonic_calls_with_literals_dotted_names_and_lists():
    parsed = parse_pythonic('[math.add(a=1, b=-2.5), f(s="x", l=[1, (2, 3)], d={"k": None}, t=True, z=+4)]')
    assert parsed.ok and parsed.dialect == "pythonic"
    assert [(c.name, c.arguments) for c in parsed.calls] == [
        ("math.add", {"a": 1, "b": -2.5}),
        ("f", {"s": "x", "l": [1, [2, 3]], "d": {"k": None}, "t": True, "z": 4}),
    ]


@pytest.mark.parametrize(
    ("text", "code"),
    [
        ('get_weather("Paris")', "positional_argument"),
        ("f(a=x)", "not_a_literal"),
        ("f(a=1 + 2)", "not_a_literal"),
        ('f(a=float("nan"))', "not_a_literal"),
        ("f(a=1e999)", "not_a_literal"),  # inf: not a finite number
        ("f(a={1: 2})", "not_a_literal"),
        ("f(a={1, 2})", "not_a_literal"),
        ("f(**{'a': 1})", "bad_call"),
        ("f(a=1, a=2)", "duplicate_key"),
        ("f(a=1", "invalid_python"),
        ("f(a=1) and more words", "invalid_python"),
        ("[f(a=1), 3]", "bad_call"),
        ("f(a=" + "[" * 200 + "]" * 200 + ")", "too_deep"),
        ("f(a=[" + "1," * 200_000 + "])", "too_long"),
    ],
)
def test_pythonic_errors(text: str, code: str):
    parsed = parse_text(text)
    assert parsed.dialect == "pythonic" and parsed.calls == [] and codes(parsed) == [code]


def test_pythonic_is_never_evaluated(tmp_path: Path):
    marker = tmp_path / "pwned"
    text = f'f(a=__import__("os").system("touch {marker}"))'
    parsed = parse_text(text)
    assert codes(parsed) == ["not_a_literal"] and not marker.exists()


@pytest.mark.parametrize(
    "text",
    [
        "I would call get_weather(city='Paris').",
        "Paris (France)",
        "",
        "   ",
        "(a)",
        "[]",
        "1(a=2)",
        "The answer is 4.",
    ],
)
def test_text_that_is_not_wholly_a_call_holds_no_call(text: str):
    parsed = parse_text(text)
    assert parsed == ParsedCalls() and not looks_like_pythonic_call(text.strip())


# -- auto and forced dialects ------------------------------------------------------------------------------------------


def test_auto_order():
    assert detect_dialect(hermes("f", {})) == "hermes"
    assert detect_dialect(QWEN) == "qwen_xml"
    assert detect_dialect("<function=f>\n</function>") == "qwen_xml"
    assert detect_dialect("f(a=1)") == "pythonic"
    # The first <tool_call> decides: a Hermes call followed by XML is read as Hermes (and the XML is an error).
    mixed = parse_text(hermes("f", {}) + "\n<tool_call>\n<function=g>\n</function>\n</tool_call>")
    assert (
        mixed.dialect == "hermes"
        and [c.name for c in mixed.calls] == ["f"]
        and codes(mixed) == ["invalid_json"]
    )


def test_tool_calls_field_wins_over_text_in_auto():
    parsed = parse_message([openai_call("f", "{}")], hermes("g", {}))
    assert parsed.dialect == "openai" and [c.name for c in parsed.calls] == ["f"]
    assert parse_message([], hermes("g", {})).dialect == "hermes"


def test_forced_dialects_read_only_their_own_form():
    assert parse_message([openai_call("f", "{}")], hermes("g", {}), "hermes").calls[0].name == "g"
    assert parse_message(None, hermes("g", {}), "openai") == ParsedCalls()
    assert parse_text("f(a=1)", "hermes") == ParsedCalls()
    assert parse_text(hermes("f", {}), "pythonic") == ParsedCalls()
    assert codes(parse_text(QWEN, "hermes")) == ["invalid_json"]
    assert parse_message(None, None) == ParsedCalls()  # an unterminated <think>: nothing to read


def test_too_many_calls_is_an_error():
    text = "\n".join(hermes("f", {}) for _ in range(MAX_CALLS + 5))
    assert codes(parse_text(text)) == ["too_many_calls"]
    assert codes(parse_openai([openai_call("f", "{}")] * (MAX_CALLS + 1))) == ["too_many_calls"]


def test_bracket_depth_skips_strings():
    assert bracket_depth('{"a": "[[[[", "b": [1, {"c": 2}]}') == 3
    assert bracket_depth("[" * (MAX_ARGUMENT_DEPTH + 1)) == MAX_ARGUMENT_DEPTH + 1


# -- linear time -------------------------------------------------------------------------------------------------------

MB = 1_000_000


def _best_time(parse: Callable[[str], object], text: str, repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        parse(text)
        best = min(best, time.perf_counter() - started)
    return best


ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "opens without closes": lambda n: "<tool_call>" * (n // 11),
    "one open, quotes": lambda n: '<tool_call>{"name": "' + '"' * n,
    "function tags": lambda n: "<function=" * (n // 10),
    "parameter tags": lambda n: "<tool_call>\n<function=f>\n" + "<parameter=" * (n // 11),
    "brackets": lambda n: '<tool_call>{"name": "f", "arguments": ' + "[" * n,
    "pythonic brackets": lambda n: "f(a=" + "[" * n,
    "pythonic long list": lambda n: "f(a=[" + "1," * (n // 2) + "])",
    "backticks before calls": lambda n: "`" * n + hermes("f", {}) * 100,
    "fence lines": lambda n: "```\n" * (n // 4) + hermes("f", {}),
    "many small calls": lambda n: hermes("f", {"a": "x" * (n // 100)}) * 100,
    "escapes": lambda n: '<tool_call>{"name": "f", "arguments": {"a": "' + "\\" * n + '"}}</tool_call>',
}


@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_parsing_is_linear_on_adversarial_input(kind: str):
    make = ADVERSARIAL[kind]

    def parse(text: str) -> object:
        return parse_message(None, text, "auto", {"f": {"properties": {"a": {"type": "integer"}}}})

    small, large = make(MB // 10), make(MB)
    assert len(large) >= MB * 0.9
    # A 1 ms floor, so timer noise on a run that takes microseconds cannot inflate the ratio.
    small_s = max(_best_time(parse, small), 1e-3)
    large_s = _best_time(parse, large)
    # 10x the input: a linear scan takes about 10x; a quadratic one would take about 100x.
    assert large_s / small_s < 35, (kind, small_s, large_s)


# -- no input makes the parser raise --------------------------------------------------------------------------------

SEEDS = [
    hermes("get_weather", {"city": "Paris", "days": [1, {"a": None}]}) + "\n" + hermes("f", {}),
    QWEN,
    "<function=f>\n<parameter=n>\n1\n</parameter>\n</function>",
    '[math.add(a=1, b=-2.5), f(s="x", l=[1, (2, 3)], d={"k": None})]',
    "Prose first.\n```\ncode\n```\n> quote `tick` " + hermes("f", {"a": "b"}),
]
NOISE = "<>/{}[]()\"'`=,:\\\n tool_call function parameter NaN -1e999 ```"


def test_random_mutations_never_raise():
    import random

    rng = random.Random(18)
    tools = {
        "f": {"properties": {"n": {"type": "integer"}, "a": {"type": "object"}}},
        "book.hotel": HOTEL["book.hotel"],
    }
    for _ in range(3000):
        text = list(rng.choice(SEEDS))
        for _ in range(rng.randint(1, 6)):
            position = rng.randrange(len(text) + 1)
            if rng.random() < 0.5 and text:
                del text[min(position, len(text) - 1)]
            else:
                text.insert(position, rng.choice(NOISE.split(" ") if rng.random() < 0.3 else list(NOISE)))
        mutated = "".join(text)
        for dialect in ("auto", "hermes", "qwen_xml", "pythonic"):
            parsed = parse_text(mutated, dialect, tools)  # type: ignore[arg-type]
            assert isinstance(parsed, ParsedCalls)
            assert all(isinstance(call.arguments, dict) for call in parsed.calls)


def test_pythonic_parsing_is_linear_up_to_its_cap():
    def make(n: int) -> str:
        return "f(a=[" + "1," * (n // 2) + "])"

    small, large = make(MAX_PYTHONIC_CHARS // 10 - 10), make(MAX_PYTHONIC_CHARS - 10)
    assert parse_text(large).ok and len(parse_text(large).calls[0].arguments["a"]) > 90_000
    ratio = _best_time(parse_text, large) / max(_best_time(parse_text, small), 1e-3)
    assert ratio < 35, ratio


@pytest.mark.parametrize(
    "text",
    [
        "f(2) = 5, so the answer is \\boxed{5}.",
        "gcd(12, 18) = 6, hence \\boxed{6}",
        "P(A) = 1/2 so the answer is 0.5",
    ],
)
def test_prose_opening_with_function_notation_is_text_not_a_malformed_call(text: str) -> None:
    """Red team 18, F1: under auto, only an offered tool's name makes call-shaped text a (malformed) call."""
    tools = {"python": {"type": "object", "properties": {"code": {"type": "string"}}}}
    parsed = parse_text(text, "auto", tools)
    assert parsed.calls == [] and parsed.errors == []
    assert parse_text(
        text, "auto", None
    ).errors  # with no tools to tell them apart, call-shaped text stays strict


def test_a_cut_short_call_to_an_offered_tool_is_still_an_error() -> None:
    tools = {"python": {"type": "object", "properties": {"code": {"type": "string"}}}}
    parsed = parse_text('python(code="print(1)"', "auto", tools)
    assert parsed.calls == [] and parsed.errors
    assert parse_text('python(code="print(1)"', "pythonic", None).errors  # an explicit dialect stays strict
