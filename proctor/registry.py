"""The verifier registry: each verifier registers itself, with its models and examples, at the bottom of its module.

Looking up a built-in name imports only the module that registers it (BUILTIN_VERIFIERS); any other name, and
`all_verifiers()`, run `load_verifiers()` once per process, which imports every built-in module (importing a
package never registers anything by itself), the entry points and the plugins. The
environment registry (`proctor.environments.registry`) and the puzzle family catalogue
(`proctor.environments.puzzles.base`) register their verifiers here.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError

from proctor.contract import RequestError, Verdict, request_error_from

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "proctor.verifiers"
BUILTIN_VERIFIERS: dict[str, str] = {
    "text.match": "proctor.verifiers.text.match",
    "text.choice": "proctor.verifiers.text.choice",
    "text.similarity": "proctor.verifiers.text.similarity",
    "math": "proctor.verifiers.math.verifier",
    "code": "proctor.verifiers.code.verifier",
    "sql": "proctor.verifiers.sql.verifier",
    "verilog": "proctor.verifiers.verilog.verifier",
    "judge.rubric": "proctor.verifiers.judge.rubric",
    "judge.principles": "proctor.verifiers.judge.principles",
    "judge.equivalence": "proctor.verifiers.judge.equivalence",
    "judge.pairwise": "proctor.verifiers.judge.pairwise",
    "multi": "proctor.verifiers.multi",
    "openai.grader": "proctor.verifiers.openai_grader",
    "toolcall": "proctor.verifiers.toolcall.verifier",
    "tool.math_python": "proctor.environments.tools.math_python",
    "tool.math_python_persistent": "proctor.environments.tools.math_python",
    "tool.search_qa": "proctor.environments.tools.search_qa.environment",
    "tool.orders": "proctor.environments.tools.orders.environment",
    "tool.sql_explore": "proctor.environments.tools.sql_explore.environment",
    "tool.demo_lookup": "proctor.environments.demo.tool_lookup",
    "demo.": "proctor.environments.demo.tasks",  # a name ending in "." covers every name with that prefix
    "puzzle.": "proctor.environments.puzzles",  # imports every puzzle family module (environments/puzzles/__init__.py)
}
"""Which module registers each built-in verifier, so looking one up imports only the module it needs."""

BUILTIN_MODULES = tuple(dict.fromkeys(BUILTIN_VERIFIERS.values()))
"""The modules that register the built-in verifiers and environments, imported by load_verifiers()."""


class BaseOptions(BaseModel):
    """Options every verifier accepts; verifier option models subclass this."""

    model_config = ConfigDict(extra="forbid")

    deadline_s: float | None = Field(
        default=None, gt=0, le=600, description="Hard deadline for scoring this item (pool verifiers)."
    )
    end_tokens: list[Annotated[str, StringConstraints(min_length=1, max_length=64)]] | None = Field(
        default=None,
        max_length=64,
        description="End-of-turn tokens cut from the response before the verifier reads it: each one that "
        "cannot be ordinary text cuts the response where it first occurs, markup-like ones (`</s>`, `<eos>`) "
        "only at the end. At most 64 tokens of 1 to 64 characters. Unset: the service's list "
        "(PROCTOR_END_TOKENS); an empty list cuts nothing.",
    )


ScoreFn = Callable[[Any, Any, Any], Verdict | Awaitable[Verdict]]  # async for IO-bound verifiers (judges)
"""(response, reference, options) -> Verdict; response is a str unless the spec accepts messages."""


@dataclass(frozen=True)
class Example:
    """A response the verifier must score `expect` on (1.0 for gold answers, 0.0 for cheats)."""

    response: Any
    reference: Any
    expect: float
    options: dict[str, Any] = field(default_factory=dict)
    note: str = ""


@dataclass(frozen=True)
class VerifierSpec:
    """Everything the engine, the API and the CLI need to know about one verifier."""

    name: str
    version: str
    score: ScoreFn
    reference: Any
    options: type[BaseOptions] = BaseOptions
    description: str = ""
    examples: tuple[Example, ...] = ()
    execution: Literal["inline", "pool"] = "pool"
    deadline_s: float = 5.0
    accepts_messages: bool = False

    @property
    def qualified_name(self) -> str:
        """name@version, as reported in every Score."""
        return f"{self.name}@{self.version}"

    @property
    def reference_adapter(self) -> TypeAdapter:
        """A pydantic adapter for the reference type (a model, a union, or a plain type)."""
        return _adapter(self.reference)

    def parse_reference(self, reference: Any) -> Any:
        """Validate a raw reference; raises RequestError(422) naming the field."""
        return _validate(self.reference_adapter, reference, "reference")

    def parse_options(self, options: dict[str, Any]) -> BaseOptions:
        """Validate raw options; raises RequestError(422) naming the field."""
        return _validate(_adapter(self.options), options or {}, "options")

    def describe(self) -> dict[str, Any]:
        """Name, version, description and JSON schemas, as listed by /v1/verifiers and the CLI."""
        return {
            "name": self.name,
            "version": self.version,
            "description": self.description,
            "execution": self.execution,
            "accepts_messages": self.accepts_messages,
            "reference_schema": self.reference_adapter.json_schema(),
            "options_schema": _adapter(self.options).json_schema(),
        }


_adapters: dict[int, tuple[Any, TypeAdapter]] = {}
_verifiers: dict[str, VerifierSpec] = {}
_loaded = False
_lock = threading.RLock()


def _adapter(annotation: Any) -> TypeAdapter:
    # Keyed by id() because unions are not always hashable; the stored annotation guards against id reuse.
    cached = _adapters.get(id(annotation))
    if cached is None or cached[0] is not annotation:
        cached = _adapters[id(annotation)] = (annotation, TypeAdapter(annotation))
    return cached[1]


def _validate(adapter: TypeAdapter, value: Any, prefix: str) -> Any:
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        raise request_error_from(exc, prefix) from None


def register_verifier(spec: VerifierSpec) -> VerifierSpec:
    """Add a verifier to the registry; registering the same name twice with another version is an error."""
    with _lock:
        existing = _verifiers.get(spec.name)
        if existing is not None and existing.score is not spec.score:
            raise ValueError(f"verifier {spec.name!r} is already registered as {existing.qualified_name}")
        _adapter(spec.reference)  # fail at import time, not at the first request, on a bad annotation
        _verifiers[spec.name] = spec
    return spec


def load_plugins(names: str) -> None:
    """Import the plugin modules named in `names` (comma-separated); each registers its verifiers."""
    for module in _split_modules(names):
        importlib.import_module(module)


def load_verifiers(extra_plugins: str = "") -> None:
    """Import the built-in verifier modules (BUILTIN_MODULES), every `proctor.verifiers` entry point and the plugin modules.

    Plugins come from PROCTOR_PLUGINS and from `extra_plugins` (comma-separated), which lets a service built
    from Settings in code hand its plugins to pool workers that do not share its environment.
    """
    global _loaded
    load_plugins(extra_plugins)
    if _loaded:
        return
    with _lock:
        if _loaded:
            return
        for module in BUILTIN_MODULES:
            importlib.import_module(module)
        for module in _plugin_modules():
            importlib.import_module(module)  # a named plugin that fails to import is a configuration error
        for point in entry_points(group=ENTRY_POINT_GROUP):
            try:
                loaded = point.load()
                if callable(loaded) and not isinstance(loaded, type):
                    loaded()
            except Exception:  # a broken plugin must not take the built-in verifiers down with it
                log.exception("could not load verifier plugin %s", point.value)
        _loaded = True


def _split_modules(names: str) -> list[str]:
    return [name.strip() for name in names.split(",") if name.strip()]


def _plugin_modules() -> list[str]:
    from proctor.settings import get_settings

    return _split_modules(get_settings().plugins)


def builtin_module(name: str) -> str | None:
    """The built-in module that registers verifier `name`, or None when no built-in module does."""
    if name in BUILTIN_VERIFIERS and not name.endswith("."):
        return BUILTIN_VERIFIERS[name]
    prefix = name[: name.find(".") + 1]
    return BUILTIN_VERIFIERS.get(prefix) if prefix else None


def get_verifier(name: str) -> VerifierSpec:
    """Look a verifier up by name; unknown names raise RequestError(404) listing the known ones.

    A built-in name imports only its own module (one `text.match` item does not pay for sqlglot, yosys
    helpers and 30 puzzle families); any other name loads everything (plugins, entry points) first.
    """
    spec = _verifiers.get(name)
    if spec is None and not _loaded and (module := builtin_module(name)) is not None:
        importlib.import_module(module)
        spec = _verifiers.get(name)
    if spec is None:
        load_verifiers()
        spec = _verifiers.get(name)
    if spec is None:
        known = ", ".join(sorted(_verifiers)) or "none"
        raise RequestError(404, f"unknown verifier {name!r}; known verifiers: {known}", field="verifier")
    return spec


def all_verifiers() -> list[VerifierSpec]:
    """Every registered verifier, sorted by name."""
    load_verifiers()
    return [_verifiers[name] for name in sorted(_verifiers)]
