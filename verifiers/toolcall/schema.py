"""Function specs and their JSON Schema, read once into a small typed tree the matcher walks.

A spec is OpenAI's `{"type": "function", "function": {name, description, parameters}}` or the bare `{name,
description, parameters}`. `parameters` is JSON Schema; BFCL's type names are aliases (`dict` is `object`,
`float` is `number`, `tuple` and `list` are `array`, `any` is no type), as are `int`, `str` and `bool`. The
keywords read are `type` (a name or a list of names), `properties`, `required`, `items` (a schema, or a list
for positional items), `enum`, `default`, `uniqueItems` (the list is compared as a set), `additionalProperties`,
`anyOf` / `oneOf` (any branch), `nullable` and `const`; others (descriptions, bounds, formats) are ignored.
An unknown type name, or a keyword of the wrong shape, is a SchemaError naming where it is, which the
reference model turns into a 422.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

TYPE_ALIASES = {
    "string": "string",
    "str": "string",
    "integer": "integer",
    "int": "integer",
    "number": "number",
    "float": "number",
    "boolean": "boolean",
    "bool": "boolean",
    "null": "null",
    "array": "array",
    "tuple": "array",
    "list": "array",
    "object": "object",
    "dict": "object",
}
"""JSON Schema's type names and the aliases BFCL and Python-minded specs use."""

_MISSING = object()

Path = tuple[str | int, ...]
"""Where a keyword sits in a reference, as a 422's field path."""


class SchemaError(ValueError):
    """A malformed function spec or schema keyword, with the path to it."""

    def __init__(self, loc: Path, message: str):
        super().__init__(message)
        self.loc = loc
        self.message = message


@dataclass
class Schema:
    """One JSON Schema node, aliases resolved; `types` None means any JSON value."""

    types: frozenset[str] | None = None
    properties: dict[str, Schema] | None = None
    required: frozenset[str] = frozenset()
    items: Schema | None = None
    prefix_items: list[Schema] | None = None
    enum: list[Any] | None = None
    default: Any = _MISSING
    is_set: bool = False
    additional: bool | Schema | None = None
    """additionalProperties as stated; None when unstated (closed when `properties` are declared)."""
    any_of: list[Schema] | None = None

    @property
    def has_default(self) -> bool:
        """Whether the schema states a default value."""
        return self.default is not _MISSING

    @property
    def structured(self) -> bool:
        """An object schema that declares its properties: its gold values list acceptable values per key."""
        return self.properties is not None and (self.types is None or "object" in self.types)

    def allows(self, key: str) -> bool:
        """Whether an object of this schema may carry `key`: declared, or additional properties allowed."""
        if self.properties is not None and key in self.properties:
            return True
        if self.additional is None:
            # A tool's arguments are closed unless the schema opens them: an undeclared argument is invented.
            return self.properties is None
        return self.additional is not False

    def child(self, key: str) -> Schema:
        """The schema of property `key` (a declared one, else additionalProperties', else any value)."""
        if self.properties is not None and key in self.properties:
            return self.properties[key]
        return self.additional if isinstance(self.additional, Schema) else ANY


ANY = Schema()


@dataclass
class Tool:
    """A function a call may name: its name and its parameters' schema (always an object schema)."""

    name: str
    parameters: Schema
    raw_parameters: dict[str, Any] = field(default_factory=dict)


def read_tool(spec: Any, where: Path) -> Tool:
    """One function spec (OpenAI's wrapped form or bare); SchemaError naming the keyword when it is malformed."""
    if not isinstance(spec, Mapping):
        raise SchemaError(where, "a function spec must be an object")
    if "function" in spec:
        if spec.get("type", "function") != "function":
            raise SchemaError((*where, "type"), "only 'function' tools are supported")
        spec, where = spec["function"], (*where, "function")
        if not isinstance(spec, Mapping):
            raise SchemaError(where, "a function spec must be an object")
    name = spec.get("name")
    if not isinstance(name, str) or not name.strip() or len(name) > 256:
        raise SchemaError((*where, "name"), "a tool needs a name of 1 to 256 characters")
    parameters = spec.get("parameters", {"type": "object", "properties": {}})
    schema = read_schema(parameters, (*where, "parameters"))
    if schema.types is not None and schema.types != frozenset({"object"}):
        raise SchemaError((*where, "parameters"), "the parameters must be an object schema")
    if schema.properties is None:
        schema.properties = {}
    return Tool(name=name, parameters=schema, raw_parameters=dict(parameters))


def read_schema(raw: Any, where: Path) -> Schema:
    """A JSON Schema node read into a Schema (aliases resolved); SchemaError naming the bad keyword."""
    if raw is True or raw == {}:
        return Schema()
    if not isinstance(raw, Mapping):
        raise SchemaError(where, "a schema must be an object")
    schema = Schema()
    if "type" in raw:
        schema.types = _types(raw["type"], (*where, "type"))
    if raw.get("nullable") is True and schema.types is not None:
        schema.types = schema.types | {"null"}
    if "properties" in raw:
        properties = raw["properties"]
        if not isinstance(properties, Mapping):
            raise SchemaError((*where, "properties"), "must be an object")
        schema.properties = {
            str(key): read_schema(value, (*where, "properties", str(key)))
            for key, value in properties.items()
        }
    if "required" in raw:
        required = raw["required"]
        if not isinstance(required, list) or not all(isinstance(key, str) for key in required):
            raise SchemaError((*where, "required"), "must be a list of names")
        schema.required = frozenset(required)
    items = raw.get("items")
    if isinstance(items, list):
        schema.prefix_items = [read_schema(item, (*where, "items", i)) for i, item in enumerate(items)]
    elif items is not None:
        schema.items = read_schema(items, (*where, "items"))
    if "enum" in raw:
        if not isinstance(raw["enum"], list) or not raw["enum"]:
            raise SchemaError((*where, "enum"), "must be a non-empty list")
        schema.enum = list(raw["enum"])
    if "const" in raw:
        schema.enum = [raw["const"]]
    if "default" in raw:
        schema.default = raw["default"]
    if raw.get("uniqueItems") is True:
        schema.is_set = True
    additional = raw.get("additionalProperties")
    if isinstance(additional, bool) or additional is None:
        schema.additional = additional
    else:
        schema.additional = read_schema(additional, (*where, "additionalProperties"))
    for keyword in ("anyOf", "oneOf"):
        if keyword in raw:
            branches = raw[keyword]
            if not isinstance(branches, list) or not branches:
                raise SchemaError((*where, keyword), "must be a non-empty list of schemas")
            schema.any_of = [read_schema(branch, (*where, keyword, i)) for i, branch in enumerate(branches)]
    return schema


def _types(raw: Any, where: Path) -> frozenset[str] | None:
    names = raw if isinstance(raw, list) else [raw]
    resolved: set[str] = set()
    for name in names:
        if not isinstance(name, str):
            raise SchemaError(where, "a type must be a name")
        if name.lower() == "any":
            return None
        if name.lower() not in TYPE_ALIASES:
            known = ", ".join(sorted(TYPE_ALIASES)) + ", any"
            raise SchemaError(where, f"unknown type {name!r} (known: {known})")
        resolved.add(TYPE_ALIASES[name.lower()])
    return frozenset(resolved)


# -- validity -------------------------------------------------------------------------------------------------


def type_of(value: Any, integral_floats: bool) -> set[str]:
    """The JSON Schema types a value has: a bool is only a boolean; 150.0 is also an integer when allowed."""
    if value is None:
        return {"null"}
    if isinstance(value, bool):
        return {"boolean"}
    if isinstance(value, int):
        return {"integer", "number"}
    if isinstance(value, float):
        integral = integral_floats and math.isfinite(value) and value.is_integer()
        return {"number", "integer"} if integral else {"number"}
    if isinstance(value, str):
        return {"string"}
    if isinstance(value, list):
        return {"array"}
    if isinstance(value, dict):
        return {"object"}
    return set()


def problem(value: Any, schema: Schema, integral_floats: bool = True) -> str | None:
    """Why a value does not satisfy a schema (None when it does). Strings are never read as numbers."""
    if schema.any_of is not None and all(problem(value, branch, integral_floats) for branch in schema.any_of):
        return "matches none of anyOf/oneOf"
    if schema.types is not None and not (type_of(value, integral_floats) & schema.types):
        return f"{_describe(value)} is not {' or '.join(sorted(schema.types))}"
    if schema.enum is not None and not any(same_enum_value(value, option) for option in schema.enum):
        return f"{_describe(value)} is not one of the enum values"
    if isinstance(value, list):
        if schema.prefix_items is not None and len(value) != len(schema.prefix_items):
            return f"the list needs exactly {len(schema.prefix_items)} items"
        for index, item in enumerate(value):
            item_schema = schema.prefix_items[index] if schema.prefix_items is not None else schema.items
            if item_schema is not None:
                found = problem(item, item_schema, integral_floats)
                if found is not None:
                    return f"item {index}: {found}"
    if isinstance(value, dict):
        missing = sorted(schema.required - set(value))
        if missing:
            return f"missing required key {missing[0]!r}"
        for key, item in value.items():
            if not schema.allows(key):
                return f"key {key!r} is not declared"
            found = problem(item, schema.child(key), integral_floats)
            if found is not None:
                return f"key {key!r}: {found}"
    return None


def same_enum_value(value: Any, option: Any) -> bool:
    """Enum membership with the string policy (case and surrounding whitespace ignored), typed otherwise."""
    if isinstance(value, str) and isinstance(option, str):
        return normalize_string(value) == normalize_string(option)
    return canonical(value, ANY) == canonical(option, ANY)


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:40] + "..."


# -- canonical forms --------------------------------------------------------------------------------------------


def normalize_string(text: str) -> str:
    """Case-folded, surrounding whitespace removed, each run of whitespace inside one space; no character
    is dropped (signs, digits, decimal points and other punctuation stay, and `New York` is not `NewYork`)."""
    return " ".join(text.split()).casefold()


def canonical(value: Any, schema: Schema) -> Any:
    """A hashable form of a value under which equal values are equal: strings normalised, numbers by value
    (1 == 1.0), booleans and null apart from numbers, lists in order unless the schema makes them sets."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("num", value)  # Python compares int and float exactly, and 1 and 1.0 hash alike
    if isinstance(value, str):
        return ("str", normalize_string(value))
    if isinstance(value, list):
        items = [canonical(item, _item_schema(schema, index)) for index, item in enumerate(value)]
        if schema.is_set:
            counts: dict[Any, int] = {}
            for item in items:
                counts[item] = counts.get(item, 0) + 1
            return ("set", frozenset(counts.items()))
        return ("list", tuple(items))
    if isinstance(value, dict):
        return ("dict", frozenset((key, canonical(item, schema.child(key))) for key, item in value.items()))
    return ("other", repr(value))


def _item_schema(schema: Schema, index: int) -> Schema:
    if schema.prefix_items is not None and index < len(schema.prefix_items):
        return schema.prefix_items[index]
    return schema.items or ANY
