"""`openai.grader`: OpenAI's grader specs as a verifier. The reference is the grader spec plus the dataset item,
`{"grader": {...}, "item": {...}}`; the response is the model sample. `/v1/graders/run` and the openai SDK's
`/v1/fine_tuning/alpha/graders/run` are a thin mapping onto the same code (proctor.api.graders), so
`/v1/score`, `proctor rescore`, `proctor.score` and the adapters grade exactly as those routes do.

Specs: `string_check`, `text_similarity`, `score_model`, `label_model`, `python` and `multi` with
`calculate_output`. Text similarity is the `text.similarity` verifier scored through the engine (its pool and
cache), except `meteor` (NLTK's METEOR without WordNet synonyms, see meteor()); model graders use the judge
client (cache, retries, bounded concurrency) on the configured OpenAI-compatible judge, image parts sent as
image content parts and audio parts refused (422 naming the field); `python` graders run grade(sample, item)
in the sandbox, never in the service process; `calculate_output` is parsed by `verifiers/formula.py`, never
`eval`.

Templates: `{{item.path}}` and `{{sample.output_text}}` / `{{sample.output_json.path}}` (dots and [n]
indexes); a non-string value is inserted as JSON.

What goes wrong, and how it is answered:
- the spec or a template variable is invalid, a python grader's source defines no grade(), a message has an
  audio (or unknown) content part, or `grader`/`item`/`reference_answer` nests more than MAX_NESTING levels:
  422 naming the field; the sample's `output_json` asked for but the sample is not JSON (or nests deeper than
  MAX_NESTING): reward 0, `errors.sample_parse_error`;
- an input_image URL that is not https:// (a plain public DNS name, port 443 or none, no user-info) or a
  bounded data:image/...;base64, URL (image_url_problem): a 422 naming the content part (a literal URL) or
  `item` (rendered from it); rendered from the sample: reward 0, `errors.sample_parse_error`
  (`scores.sample_image_error` says why);
- `calculate_output` may have no value somewhere over the sub-rewards' ranges (interval arithmetic,
  `formula.domain_problem`): 422 at validation; failing anyway at run time is a server failure, never a grade;
- a model grader's reply is unparseable or a refusal: reward 0, `model_grader_parse_error` /
  `model_grader_refusal_error` (a wrong verdict, as for the judge verifiers); a python grade() that raises,
  runs out of time or returns no number: reward 0, `python_grader_runtime_error`;
- the judge (or the embeddings endpoint, the pool, the sandbox) fails: a server failure (the routes answer 503
  with `errors.model_grader_server_error` / `python_grader_server_error` / `other_error`; the verifier a
  non-ok status the trainer masks), never reward 0.

As a verifier, the reward is OpenAI's reward clipped into [0, 1] (a `score_model` range or a python grader
may give more); `details.openai` holds OpenAI's whole run response (reward unclipped, sub_rewards, errors).
"""

from __future__ import annotations

import ast
import asyncio
import contextvars
import json
import math
import re
import secrets
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from proctor.contract import MAX_NESTING, RequestError, Status, Verdict, check_nesting, request_error_from
from proctor.engine import Engine, current_engine, measure
from proctor.registry import BaseOptions, Example, VerifierSpec, register_verifier
from proctor.sandboxes.backends import resolve_backend
from proctor.sandboxes.job import Command, File, Job, RunLimits, RunVerdict
from proctor.settings import get_settings
from proctor.verifiers.formula import Formula, FormulaError, Interval, domain_problem, parse_formula
from proctor.verifiers.judge import parse
from proctor.verifiers.judge.client import JudgeError, Sampling, check_judge_url, complete, judge_config
from proctor.verifiers.judge.items import forked_harness, result_document

TEXT_METRICS = {
    "fuzzy_match": "fuzzy_match",
    "bleu": "bleu",
    "gleu": "gleu",
    "cosine": "cosine",
    "rouge_1": "rouge_1",
    "rouge_2": "rouge_2",
    "rouge_3": "rouge_3",
    "rouge_4": "rouge_4",
    "rouge_5": "rouge_5",
    "rouge_l": "rouge_l",
}
# METEOR is computed here (NLTK's implementation) rather than by text.similarity; see meteor().
LOCAL_METRICS = frozenset({"meteor"})
UNSUPPORTED_METRICS: dict[str, str] = {}
ERROR_FLAGS = (
    "formula_parse_error",
    "sample_parse_error",
    "truncated_observation_error",
    "unresponsive_reward_error",
    "invalid_variable_error",
    "other_error",
    "python_grader_server_error",
    "python_grader_runtime_error",
    "model_grader_server_error",
    "model_grader_refusal_error",
    "model_grader_parse_error",
)
GRADER_TYPES = frozenset({"string_check", "text_similarity", "score_model", "label_model", "python", "multi"})
_TEMPLATE = re.compile(r"\{\{\s*([^{}]*?)\s*\}\}")
_PATH_PART = re.compile(r"([^.\[\]]+)|\[(\d+)\]")
T = TypeVar("T")


# -- grader specs ------------------------------------------------------------------------------------------


class _Grader(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="", max_length=200)


class StringCheckGrader(_Grader):
    """Compare two templated strings: eq, ne, like (contains), ilike (contains, any case)."""

    type: Literal["string_check"]
    input: str
    reference: str
    operation: Literal["eq", "ne", "like", "ilike"]


class TextSimilarityGrader(_Grader):
    """A similarity metric between the templated input and reference."""

    type: Literal["text_similarity"]
    input: str
    reference: str
    evaluation_metric: str
    pass_threshold: float | None = None

    @model_validator(mode="after")
    def _known_metric(self) -> TextSimilarityGrader:
        if self.evaluation_metric in UNSUPPORTED_METRICS:
            raise ValueError(
                f"evaluation_metric {self.evaluation_metric} is not supported: "
                f"{UNSUPPORTED_METRICS[self.evaluation_metric]}"
            )
        if self.evaluation_metric not in TEXT_METRICS and self.evaluation_metric not in LOCAL_METRICS:
            raise ValueError(
                f"unknown evaluation_metric {self.evaluation_metric!r}; "
                f"one of {sorted({*TEXT_METRICS, *LOCAL_METRICS})}"
            )
        return self


TEXT_PARTS = frozenset({"input_text", "output_text", "text"})


MAX_IMAGE_DATA_URL_BYTES = 8 * 1024 * 1024
MAX_IMAGE_HTTPS_URL_CHARS = 8 * 1024
_DATA_IMAGE = re.compile(r"data:image/(?:png|jpeg|gif|webp);base64,[A-Za-z0-9+/]*={0,2}")


# The authority of an https:// image URL: a plain ASCII DNS name, then at most the port 443. Nothing a WHATWG
# URL parser (the judge server's fetcher) would rewrite into another host passes: no '%' escapes, no
# non-ASCII (full-width letters, the ideographic full stop), no IP literal in any spelling, no trailing dot.
_IMAGE_AUTHORITY = re.compile(r"(?P<host>[A-Za-z0-9.-]+)(?::(?P<port>[0-9]+))?")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?")
_BLOCKED_SUFFIXES = (".localhost", ".local", ".internal")


def image_host_problem(host: str) -> str | None:
    """Why `host` is not a plain public DNS name an image URL may name, or None: labels of [a-z0-9-]
    (case-insensitive), 1 to 63 characters, not starting or ending with '-'; at least two labels, the last
    alphabetic; at most 253 characters; no trailing dot; not `localhost` nor under `.localhost`, `.local` or
    `.internal`. So no IP literal (v4 or v6, any spelling) and nothing a URL parser would decode first."""
    if not host.isascii() or not host:
        return "an image URL's host must be a plain ASCII DNS name"
    name = host.lower()
    if len(name) > 253:
        return "an image URL's host may have at most 253 characters"
    labels = name.split(".")
    if len(labels) < 2 or not all(_DNS_LABEL.fullmatch(label) for label in labels):
        return f"an image URL must name a host by a DNS name (labels of a-z, 0-9, '-'), not {host!r}"
    if not labels[-1].isalpha():
        return f"an image URL must name a host by name, not an IP address or a numeric name ({host!r})"
    if name == "localhost" or name.endswith(_BLOCKED_SUFFIXES):
        return f"an image URL must not name a local or internal host ({host!r})"
    return None


def image_url_problem(url: str) -> str | None:
    """Why a rendered input_image URL may not go to the judge, or None. Only `https://` URLs whose host is a
    plain public DNS name (image_host_problem: no IP literal, '%', non-ASCII, `localhost`, `*.local`,
    `*.internal`), with no user-info, port 443 or none, at most MAX_IMAGE_HTTPS_URL_CHARS, and
    `data:image/(png|jpeg|gif|webp);base64,` URLs of at most MAX_IMAGE_DATA_URL_BYTES pass: a judge server
    that fetches image URLs must never be sent `file://`, `http://169.254.169.254/...`, a loopback spelled
    any way a URL parser accepts, or an unbounded data URL (SSRF, memory)."""
    if url.startswith("data:"):
        if len(url) > MAX_IMAGE_DATA_URL_BYTES:
            return f"a data: URL of {len(url)} characters is over the {MAX_IMAGE_DATA_URL_BYTES} byte bound"
        if _DATA_IMAGE.fullmatch(url) is None:
            return "a data: URL must be data:image/(png|jpeg|gif|webp);base64,<base64>"
        return None
    if not url.startswith("https://"):
        return "an image URL must be https:// or a data:image/...;base64, URL"
    if len(url) > MAX_IMAGE_HTTPS_URL_CHARS:
        return f"an https:// image URL may have at most {MAX_IMAGE_HTTPS_URL_CHARS} characters"
    if any(ord(char) <= 32 or char == "\\" for char in url):
        return "an image URL must not hold whitespace, control characters or backslashes"
    authority = re.split(r"[/?#]", url[len("https://") :], maxsplit=1)[0]
    if "@" in authority:
        return "an image URL must not hold user-info (user@host)"
    if not authority:
        return "an https:// image URL needs a host"
    parts = _IMAGE_AUTHORITY.fullmatch(authority)
    if parts is None:
        return f"an image URL's host must be a plain ASCII DNS name, not {authority[:100]!r}"
    if parts["port"] is not None and parts["port"] != "443":
        return "an image URL may name no port but 443"
    return image_host_problem(parts["host"])


def _check_part(part: Any) -> None:
    """One content part is text (a string, input_text, output_text) or an image (input_image with image_url);
    audio and anything else are refused (ValueError, so a 422 naming the field): never dropped silently."""
    if isinstance(part, str):
        return
    kind = part.get("type")
    if kind in TEXT_PARTS:
        if not isinstance(part.get("text"), str):
            raise ValueError(f"a {kind} part needs a string `text`")
    elif kind == "input_image":
        if not isinstance(part.get("image_url"), str) or not part["image_url"]:
            raise ValueError("an input_image part needs a string `image_url`")
        if (
            _TEMPLATE.search(part["image_url"]) is None
        ):  # a literal URL is checked now; a template once rendered
            problem = image_url_problem(part["image_url"])
            if problem is not None:
                raise ValueError(f"input_image image_url: {problem}")
        if part.get("detail", "auto") not in {"auto", "low", "high"}:
            raise ValueError("input_image detail must be auto, low or high")
    elif kind == "input_audio":
        raise ValueError(
            "audio inputs (input_audio) are not supported: the judge is a chat-completions model that is not "
            "sent audio; transcribe it into an input_text part"
        )
    else:
        raise ValueError(f"unknown content part type {kind!r}; one of input_text, output_text, input_image")


class InputMessage(BaseModel):
    """One templated message of a model grader's prompt: text parts and image parts (sent to the judge as
    image content parts); audio is a 422 naming the field."""

    model_config = ConfigDict(extra="forbid")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | dict[str, Any] | list[str | dict[str, Any]]
    type: Literal["message"] | None = None

    @field_validator("content")
    @classmethod
    def _known_parts(cls, value: Any) -> Any:
        for part in [value] if isinstance(value, (str, dict)) else value:
            _check_part(part)
        return value


class SamplingParams(BaseModel):
    """OpenAI's sampling_params for model graders (reasoning_effort is accepted and ignored)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    seed: int | None = None
    max_completions_tokens: int | None = Field(default=None, ge=1, le=32_768)
    reasoning_effort: str | None = None


class ScoreModelGrader(_Grader):
    """A judge model gives a number in `range`; its reply is {"result": x} or the bare number."""

    type: Literal["score_model"]
    model: str = ""
    input: list[InputMessage] = Field(min_length=1)
    range: tuple[float, float] = (0.0, 1.0)
    pass_threshold: float | None = None
    sampling_params: SamplingParams | None = None

    @model_validator(mode="after")
    def _range(self) -> ScoreModelGrader:
        if not self.range[0] < self.range[1]:
            raise ValueError("range must be [min, max] with min < max")
        return self


class LabelModelGrader(_Grader):
    """A judge model picks one of `labels`; reward 1 when it is one of `passing_labels`."""

    type: Literal["label_model"]
    model: str = ""
    input: list[InputMessage] = Field(min_length=1)
    labels: list[str] = Field(min_length=1)
    passing_labels: list[str] = Field(min_length=1)
    sampling_params: SamplingParams | None = None

    @model_validator(mode="after")
    def _passing_are_labels(self) -> LabelModelGrader:
        unknown = set(self.passing_labels) - set(self.labels)
        if unknown:
            raise ValueError(f"passing_labels {sorted(unknown)} are not among labels")
        return self


class PythonGrader(_Grader):
    """`grade(sample, item) -> float` in `source`, run in the sandbox (never in the service process).

    `image_tag` is accepted and ignored: the sandbox's Python (the standard library only) runs every grader."""

    type: Literal["python"]
    source: str = Field(min_length=1, max_length=200_000)
    image_tag: str | None = None

    @field_validator("source")
    @classmethod
    def _defines_grade(cls, value: str) -> str:
        try:
            tree = ast.parse(value)  # parsed, never run, in the service process
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            raise ValueError(f"source is not valid Python: {type(exc).__name__}: {exc}") from None
        if not any(isinstance(node, ast.FunctionDef) and node.name == "grade" for node in tree.body):
            raise ValueError("source must define a top-level function grade(sample, item) -> float")
        return value


SimpleGrader = Annotated[
    StringCheckGrader | TextSimilarityGrader | ScoreModelGrader | LabelModelGrader | PythonGrader,
    Field(discriminator="type"),
]


@lru_cache(maxsize=1024)
def formula_problem(expression: str, ranges: tuple[tuple[str, float, float], ...]) -> str | None:
    """Why a `calculate_output` is refused, or None: it does not parse, or it may have no value somewhere over
    the sub-rewards' ranges (interval arithmetic, `formula.domain_problem`: sound, so a sample cannot pick its
    way to a failing run later). Cached: a training run sends the same spec with every sample."""
    try:
        formula = Formula(expression, {name for name, _, _ in ranges})
    except FormulaError as exc:
        return f"calculate_output: {exc}"
    problem = domain_problem(formula, {name: Interval(low, high) for name, low, high in ranges})
    if problem is None:
        return None
    spans = ", ".join(f"{name} in [{low:g}, {high:g}]" for name, low, high in ranges)
    return f"calculate_output {expression!r} cannot be evaluated over the sub-rewards' ranges ({spans}): {problem}"


class MultiGrader(_Grader):
    """Named sub-graders combined by a `calculate_output` formula over their names."""

    type: Literal["multi"]
    graders: dict[str, SimpleGrader] = Field(min_length=1, max_length=16)
    calculate_output: str = Field(min_length=1, max_length=2_000)

    @model_validator(mode="after")
    def _formula(self) -> MultiGrader:
        for name in self.graders:
            if not name.isidentifier():
                raise ValueError(f"grader name {name!r} must be an identifier to appear in calculate_output")
        ranges = self.sub_reward_ranges()
        problem = formula_problem(
            self.calculate_output, tuple((name, low, high) for name, (low, high) in ranges.items())
        )
        if problem is not None:
            raise ValueError(problem)
        return self

    def sub_reward_ranges(self) -> dict[str, tuple[float, float]]:
        """Each sub-grader's possible rewards: [0, 1], or a score_model's `range` widened to include 0 (the
        reward of a sample or judge reply it cannot grade)."""
        return {
            name: (min(grader.range[0], 0.0), max(grader.range[1], 0.0))
            if isinstance(grader, ScoreModelGrader)
            else (0.0, 1.0)
            for name, grader in self.graders.items()
        }


AnyGrader = Annotated[
    StringCheckGrader
    | TextSimilarityGrader
    | ScoreModelGrader
    | LabelModelGrader
    | PythonGrader
    | MultiGrader,
    Field(discriminator="type"),
]
_GRADER = TypeAdapter(AnyGrader)


class JudgeOverride(BaseModel):
    """Proctor extension: which judge serves the model graders of this request."""

    model_config = ConfigDict(extra="forbid")

    base_url: str | None = Field(
        default=None, description="The configured judge URL or one on PROCTOR_JUDGE_ALLOWED_URLS."
    )
    model: str | None = None
    api_key: str | None = Field(
        default=None,
        description="Bearer key (default: PROCTOR_JUDGE_API_KEY, sent only to the configured URL).",
    )

    @field_validator("base_url")
    @classmethod
    def _allowed_url(cls, value: str | None) -> str | None:
        # Checked here so a URL the request may not use is a 422 naming judge.base_url before any connection:
        # only the configured judge or one on PROCTOR_JUDGE_ALLOWED_URLS, and the configured key never follows.
        return value if value is None else check_judge_url(value)


def parse_grader(raw: dict[str, Any]) -> Any:
    """A validated grader spec; RequestError(422) naming the field (`grader.…`)."""
    try:
        return _GRADER.validate_python(raw)
    except ValidationError as exc:
        error = request_error_from(exc, "grader")
    # pydantic puts the discriminator's value ("string_check", ...) into the location; it is not a field.
    field = ".".join(part for part in (error.field or "grader").split(".") if part not in GRADER_TYPES)
    message = error.message.replace(f"invalid {error.field}:", f"invalid {field}:")
    raise RequestError(422, message, field)


# -- templating ----------------------------------------------------------------------------------------------


class TemplateError(Exception):
    """A template variable that cannot be resolved (invalid_variable_error)."""


class SampleNotJson(Exception):
    """`sample.output_json` was asked for but the model sample is not JSON (sample_parse_error)."""


class SampleImageError(Exception):
    """An input_image URL rendered from the model sample is not one the judge may be sent (sample_parse_error)."""


def _lookup(root: Any, path: str, full: str) -> Any:
    value = root
    for match in _PATH_PART.finditer(path):
        key, index = match.group(1), match.group(2)
        if index is not None:
            if not isinstance(value, list) or int(index) >= len(value):
                raise TemplateError(f"{{{{{full}}}}}: no element {index}")
            value = value[int(index)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            raise TemplateError(f"{{{{{full}}}}}: no field {key!r}")
    return value


_SAMPLE_JSON: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "openai_grader_sample_json", default=None
)
"""The sample's parsed JSON (or why it is not JSON), shared by every template of one run_grader call."""


def _sample_json(sample: str) -> Any:
    """`parse.bounded_json(sample)`, parsed once per run (every {{sample.output_json…}} variable of every
    sub-grader used to parse the whole sample again: 64 variables over a 20 MiB sample held the event loop
    3.6 s); ValueError when it is not usable JSON."""
    memo = _SAMPLE_JSON.get()
    if memo is not None and memo.get("sample") is sample:
        if "error" in memo:
            raise ValueError(memo["error"])
        return memo["value"]
    try:
        value = parse.bounded_json(sample)
    except ValueError as exc:
        if memo is not None:
            memo.clear()
            memo.update(sample=sample, error=str(exc))
        raise
    if memo is not None:
        memo.clear()
        memo.update(sample=sample, value=value)
    return value


MAX_RENDERED_CHARS = 32 * 1024 * 1024
"""The characters that all templates of one grader spec may render for one sample, together (every sub-grader
of a `multi`, every message of a model grader). A variable may repeat, so a small body could otherwise ask for
gigabytes (`"{{item.a}}" * 4000` over a 200 KB field). Past it from the spec and the item alone: a 422 naming
the field; past it only with the sample's text: reward 0, `sample_parse_error`. Lengths are counted from the
parts before any string is built."""


class RenderTooLarge(Exception):
    """The templates would render past MAX_RENDERED_CHARS; `from_item` is the part the spec and item make."""

    def __init__(self, total: int, from_item: int):
        super().__init__(total, from_item)
        self.total = total
        self.from_item = from_item


class _RunState:
    """What one run_grader call shares with its sub-graders (and their threads): the characters rendered so far,
    in all and without the sample's text, and whether the inputs are large enough to render off the loop."""

    def __init__(self, large: bool):
        self.large = large
        self.rendered = 0
        self.from_item = 0
        self.overflow: RenderTooLarge | None = None
        self.lock = threading.Lock()

    def charge(self, total: int, from_sample: int) -> None:
        """Count one rendered template; RenderTooLarge once the run would pass MAX_RENDERED_CHARS."""
        with self.lock:
            self.rendered += total
            self.from_item += total - from_sample
            if self.rendered > MAX_RENDERED_CHARS:
                self.overflow = RenderTooLarge(self.rendered, self.from_item)
                raise self.overflow


_RUN: contextvars.ContextVar[_RunState | None] = contextvars.ContextVar("openai_grader_run", default=None)


def _pieces(template: str, item: Any, sample: str | None) -> tuple[list[str], int]:
    """The parts `template` renders to (literal text and variable values, not yet joined) and how many of their
    characters came from the sample; TemplateError / SampleNotJson when a variable cannot be resolved. With
    `sample` None the sample's variables count as empty (what the spec and item alone render)."""
    pieces: list[str] = []
    from_sample = 0
    # A repeated non-string value is dumped once; the value is kept with its text, so its id is not reused.
    dumped: dict[int, tuple[Any, str]] = {}
    position = 0
    for match in _TEMPLATE.finditer(template):
        pieces.append(template[position : match.start()])
        position = match.end()
        full = match.group(1)
        namespace, _, path = full.partition(".")
        if namespace == "item":
            value = _lookup(item, path, full) if path else item
        elif namespace == "sample":
            if sample is None:
                if path != "output_text" and not (
                    path == "output_json" or path.startswith(("output_json.", "output_json["))
                ):
                    raise TemplateError(
                        f"{{{{{full}}}}}: the sample namespace has output_text and output_json"
                    )
                continue
            if path == "output_text":
                value = sample
            elif path == "output_json" or path.startswith(("output_json.", "output_json[")):
                try:
                    document = _sample_json(sample)
                except ValueError as exc:  # not JSON, nested deeper than MAX_NESTING, an oversized integer
                    raise SampleNotJson(f"the model sample is not usable JSON: {str(exc)[:200]}") from None
                try:
                    value = _lookup(document, path[len("output_json") :].lstrip("."), full)
                except TemplateError as exc:  # the sample's JSON lacks the path: the model's miss, graded 0
                    raise SampleNotJson(f"the model sample's JSON has no {exc}") from None
            else:
                raise TemplateError(f"{{{{{full}}}}}: the sample namespace has output_text and output_json")
        else:
            raise TemplateError(f"{{{{{full}}}}}: only the item and sample namespaces exist")
        if isinstance(value, str):
            text = value
        else:
            memo = dumped.get(id(value))
            if memo is None:
                memo = dumped[id(value)] = (value, json.dumps(value, ensure_ascii=False))
            text = memo[1]
        pieces.append(text)
        if namespace == "sample":
            from_sample += len(text)
    pieces.append(template[position:])
    return pieces, from_sample


def rendered_chars(template: str, item: Any, sample: str | None = None) -> int:
    """How many characters `template` renders to, counted from its parts without building the string."""
    return sum(map(len, _pieces(template, item, sample)[0]))


def render(template: str, item: Any, sample: str) -> str:
    """Substitute {{item.*}} and {{sample.*}} variables; TemplateError / SampleNotJson when one cannot be, and
    RenderTooLarge, before the string is built, when the run's templates would pass MAX_RENDERED_CHARS."""
    pieces, from_sample = _pieces(template, item, sample)
    total = sum(map(len, pieces))
    run = _RUN.get()
    if run is not None:
        run.charge(total, from_sample)
    elif total > MAX_RENDERED_CHARS:
        raise RenderTooLarge(total, total - from_sample)
    return "".join(pieces)


def check_render_sizes(grader: Any, item: Any, field: str = "grader") -> None:
    """What the spec's templates render from the item alone, all together, stays within MAX_RENDERED_CHARS
    (a 422 naming the template's field otherwise), so the sample's text is all a run can add to it."""
    total = 0
    for where, text in _templates(grader, field):
        if _TEMPLATE.search(text) is None:
            total += len(text)
        else:
            try:
                total += rendered_chars(text, item)
            except TemplateError as exc:
                raise RequestError(422, f"invalid_variable_error: {exc}", "item") from None
        if total > MAX_RENDERED_CHARS:
            raise RequestError(
                422,
                f"invalid {where}: the spec's templates render over {total} characters from the item, past the "
                f"bound of {MAX_RENDERED_CHARS} for all templates of one spec (a variable repeated over a long "
                "item field?)",
                where,
            )


def _templates(grader: Any, field: str) -> list[tuple[str, str]]:
    """(field, template) for every template the spec renders at run time."""
    if isinstance(grader, MultiGrader):
        return [
            pair
            for name, sub in grader.graders.items()
            for pair in _templates(sub, f"{field}.graders.{name}")
        ]
    if isinstance(grader, (StringCheckGrader, TextSimilarityGrader)):
        return [(f"{field}.input", grader.input), (f"{field}.reference", grader.reference)]
    if isinstance(grader, (ScoreModelGrader, LabelModelGrader)):
        out: list[tuple[str, str]] = []
        for i, message in enumerate(grader.input):
            out.append((f"{field}.input.{i}.content", _content_text(message.content)))
            out.extend((f"{field}.input.{i}.content", url) for url in _image_urls(message.content))
        return out
    return []


def reference_problem(template: str, item: Any) -> str | None:
    """Why a string_check or text_similarity `reference` read from the item cannot be compared with, or None.

    An {{item.…}} variable in it that is null would render as the text `null`, which a sample can write; one
    that renders empty from the item alone passes every sample under `like`/`ilike` (`"" in text`), and under
    `eq` the empty sample (a sample of a bare end-of-turn token is cut to ""). Either is the item's gap, never
    a grade: a 422 naming `item`, as for a missing field. A literal reference (no variable) is the spec's own.
    """
    if _TEMPLATE.search(template) is None:
        return None
    for match in _TEMPLATE.finditer(template):
        full = match.group(1)
        namespace, _, path = full.partition(".")
        if namespace == "item" and (_lookup(item, path, full) if path else item) is None:
            return f"{{{{{full}}}}} is null: the item has no reference to compare with"
    # Whether anything but whitespace renders, read from the parts: no string is built (nor counted).
    if not _reads_sample(template) and not any(
        piece and not piece.isspace() for piece in _pieces(template, item, None)[0]
    ):
        return f"the reference {template!r} renders empty from the item: there is nothing to compare with"
    return None


def _check_reference(grader: StringCheckGrader | TextSimilarityGrader, item: Any) -> None:
    problem = reference_problem(grader.reference, item)
    if problem is not None:
        raise RequestError(422, f"invalid_variable_error: {problem}", "item")


def check_templates(grader: Any, field: str = "grader") -> None:
    """Every template variable names the item or sample namespace (a 422 naming the field otherwise)."""
    if isinstance(grader, MultiGrader):
        for name, sub in grader.graders.items():
            check_templates(sub, f"{field}.graders.{name}")
        return
    texts: list[tuple[str, str]] = []
    if isinstance(grader, (StringCheckGrader, TextSimilarityGrader)):
        texts = [("input", grader.input), ("reference", grader.reference)]
    elif isinstance(grader, (ScoreModelGrader, LabelModelGrader)):
        for i, message in enumerate(grader.input):
            texts.append((f"input.{i}.content", _content_text(message.content)))
            texts.extend((f"input.{i}.content", url) for url in _image_urls(message.content))
    for where, text in texts:
        for match in _TEMPLATE.finditer(text):
            namespace = match.group(1).partition(".")[0]
            if namespace not in {"item", "sample"}:
                raise RequestError(
                    422,
                    f"invalid {field}.{where}: {{{{{match.group(1)}}}}} is not in the item or sample namespace",
                    f"{field}.{where}",
                )


def _parts(content: str | dict[str, Any] | list[str | dict[str, Any]]) -> list[str | dict[str, Any]]:
    return [content] if isinstance(content, (str, dict)) else content


def _content_text(content: str | dict[str, Any] | list[str | dict[str, Any]]) -> str:
    """The text parts, concatenated (image parts are not text)."""
    return "".join(
        part if isinstance(part, str) else str(part["text"])
        for part in _parts(content)
        if isinstance(part, str) or part.get("type") in TEXT_PARTS
    )


def _image_urls(content: str | dict[str, Any] | list[str | dict[str, Any]]) -> list[str]:
    return [
        str(part["image_url"])
        for part in _parts(content)
        if isinstance(part, dict) and part.get("type") == "input_image"
    ]


# -- running -------------------------------------------------------------------------------------------------


class Outcome:
    """One grader's result, accumulated into OpenAI's response shape."""

    def __init__(self, grader: Any):
        self.grader = grader
        self.reward = 0.0
        self.errors: dict[str, Any] = dict.fromkeys(ERROR_FLAGS, False)
        self.errors.update(
            python_grader_server_error_type=None,
            python_grader_runtime_error_details=None,
            model_grader_server_error_details=None,
        )
        self.usage: dict[str, dict[str, int]] = {}
        self.sampled_model: str | None = None
        self.server_failure: str | None = None
        self.sub_rewards: dict[str, float] = {}
        self.scores: dict[str, Any] = {}

    def merge(self, other: Outcome) -> None:
        """Take a sub-grader's errors and usage into this (multi) outcome."""
        for key, value in other.errors.items():
            if value and not self.errors.get(key):
                self.errors[key] = value
        for model, usage in other.usage.items():
            mine = self.usage.setdefault(model, {})
            for name, value in usage.items():
                mine[name] = mine.get(name, 0) + value
        self.sampled_model = self.sampled_model or other.sampled_model
        self.server_failure = self.server_failure or other.server_failure

    def body(self, started: float) -> dict[str, Any]:
        """OpenAI's run response."""
        usage_total: dict[str, int] = {}
        for usage in self.usage.values():
            for name, value in usage.items():
                usage_total[name] = usage_total.get(name, 0) + value
        return {
            "reward": self.reward,
            "metadata": {
                "name": self.grader.name,
                "type": self.grader.type,
                "errors": self.errors,
                "execution_time": round(time.perf_counter() - started, 6),
                "scores": self.scores,
                "token_usage": usage_total or None,
                "sampled_model_name": self.sampled_model,
            },
            "sub_rewards": self.sub_rewards,
            "model_grader_token_usage_per_model": self.usage,
        }


def string_check(operation: str, text: str, reference: str) -> bool:
    """OpenAI's string_check: eq, ne (case-sensitive), like (contains), ilike (contains, any case)."""
    if operation == "eq":
        return text == reference
    if operation == "ne":
        return text != reference
    if operation == "like":
        return reference in text
    return reference.lower() in text.lower()


async def run_grader(
    grader: Any, item: Any, sample: str, engine: Engine, judge: JudgeOverride | None
) -> Outcome:
    """Run one grader spec on one sample; template problems raise RequestError(422)."""
    if _SAMPLE_JSON.get() is None:  # the outermost call: its sub-graders share one parse of the sample
        # and one count of what their templates rendered. Past inline_max_chars of sample and item, rendering
        # (a sample's JSON parse, values dumped, strings joined and compared) runs on a thread, never the loop.
        large = _large_run(grader, item, sample, engine.settings.inline_max_chars)
        state = _RunState(large)
        memo, run = _SAMPLE_JSON.set({}), _RUN.set(state)
        try:
            outcome = await run_grader(grader, item, sample, engine, judge)
            if state.overflow is not None and not outcome.server_failure:
                # The sample took the run past the bound: the whole spec is graded 0, not just the sub-grader
                # that happened to render last (a formula such as `good * (1 - banned)` would otherwise pay a
                # sample for being long enough to knock out the check that penalises it).
                outcome.reward = 0.0
                outcome.errors["sample_parse_error"] = True
                outcome.scores["sample_parse_error"] = _overflow_message(state.overflow)
            return outcome
        finally:
            _RUN.reset(run)
            _SAMPLE_JSON.reset(memo)
    outcome = Outcome(grader)
    try:
        if isinstance(grader, MultiGrader):
            await _run_multi(grader, item, sample, engine, judge, outcome)
        elif isinstance(grader, StringCheckGrader):
            await _run_string_check(grader, item, sample, engine, outcome)
        elif isinstance(grader, TextSimilarityGrader):
            await _run_similarity(grader, item, sample, engine, outcome)
        elif isinstance(grader, PythonGrader):
            await asyncio.to_thread(_run_python, grader, item, sample, outcome)
        else:
            await _run_model(grader, item, sample, judge, outcome)
    except TemplateError as exc:
        raise RequestError(422, f"invalid_variable_error: {exc}", "item") from None
    except SampleNotJson as exc:
        outcome.errors["sample_parse_error"] = True
        outcome.scores["sample_parse_error"] = str(exc)
        outcome.reward = 0.0
    except SampleImageError as exc:
        outcome.errors["sample_parse_error"] = True
        outcome.scores["sample_image_error"] = str(exc)
        outcome.reward = 0.0
    except RenderTooLarge as exc:
        if exc.from_item > MAX_RENDERED_CHARS:  # the spec and item alone: the request's fault, never a grade
            raise RequestError(
                422,
                f"invalid item: the spec's templates render over {exc.from_item} characters from the item, past "
                f"the bound of {MAX_RENDERED_CHARS} for all templates of one spec",
                "item",
            ) from None
        # Only the sample's text took it past the bound: the sample is graded 0, as an unusable sample is.
        outcome.errors["sample_parse_error"] = True
        outcome.scores["sample_parse_error"] = _overflow_message(exc)
        outcome.reward = 0.0
    return outcome


def _overflow_message(exc: RenderTooLarge) -> str:
    return (
        f"the templates would render over {exc.total} characters with this sample, past the bound of "
        f"{MAX_RENDERED_CHARS}"
    )


def _large_run(grader: Any, item: Any, sample: str, limit: int) -> bool:
    """Whether rendering this run may take more than `limit` characters' worth of work: the sample, the item or
    the templates past it, or (all three small, so this count is cheap) what the templates render, each
    sample variable counted as the whole sample, since a small item repeated can still render megabytes."""
    templates = [text for _, text in _templates(grader, "grader")]
    if len(sample) > limit or sum(map(len, templates)) > limit or measure(item, limit).total > limit:
        return True
    total = 0
    for text in templates:
        try:
            total += rendered_chars(text, item)
        except TemplateError:
            return False  # run_grader answers it (a 422) when the template is rendered
        total += len(sample) * sum(match.group(1).startswith("sample") for match in _TEMPLATE.finditer(text))
        if total > limit:
            return True
    return False


async def _off_loop(function: Callable[..., T], *args: Any) -> T:
    """`function(*args)` on a thread when this run's inputs are large (see run_grader), else here; the
    context (the run's shared parse and count) goes along."""
    run = _RUN.get()
    if run is not None and run.large:
        return await asyncio.to_thread(function, *args)
    return function(*args)


async def _run_multi(
    grader: MultiGrader, item: Any, sample: str, engine: Engine, judge: JudgeOverride | None, outcome: Outcome
) -> None:
    names = list(grader.graders)
    subs = await asyncio.gather(*(run_grader(grader.graders[n], item, sample, engine, judge) for n in names))
    for name, sub in zip(names, subs, strict=True):
        outcome.merge(sub)
        outcome.sub_rewards[name] = sub.reward
    if outcome.server_failure:
        return
    # The formula was checked over these ranges when the spec was validated; clamping keeps every value
    # inside them, so a sub-grader that strays cannot take the formula where it was not checked.
    ranges = grader.sub_reward_ranges()
    values = {
        name: min(ranges[name][1], max(ranges[name][0], reward))
        for name, reward in outcome.sub_rewards.items()
    }
    try:
        outcome.reward = parse_formula(grader.calculate_output, frozenset(names)).evaluate(values)
    except FormulaError as exc:
        # Cannot happen for a validated formula; if it does, it is Proctor's failure, never the sample's grade
        # nor the client's request (a 503 the trainer retries or masks, like verifier_error for `multi`).
        outcome.errors["formula_parse_error"] = True
        outcome.errors["other_error"] = True
        outcome.errors["model_grader_server_error_details"] = f"calculate_output failed: {exc}"
        outcome.server_failure = f"calculate_output failed after validation: {exc}"


async def _run_string_check(
    grader: StringCheckGrader, item: Any, sample: str, engine: Engine, outcome: Outcome
) -> None:
    """string_check compares the rendered strings exactly as OpenAI does (string_check()): no extraction, no
    normalisation, no `</think>` reading. Not `text.match`: every verifier reads only what follows the last
    `</think>`, so `ne "Paris"` would pass `Paris</think>Rome` and `eq` would pass `London</think>Paris`. The
    sample has had its end-of-turn tokens cut already (the routes and /v1/score do that for every verifier).
    A reference the item leaves null or empty is a 422 (reference_problem), never a comparison."""
    outcome.reward = await _off_loop(_string_check_sync, grader, item, sample)


def _string_check_sync(grader: StringCheckGrader, item: Any, sample: str) -> float:
    _check_reference(grader, item)
    text, reference = render(grader.input, item, sample), render(grader.reference, item, sample)
    return float(string_check(grader.operation, text, reference))


def _similarity_texts(grader: TextSimilarityGrader, item: Any, sample: str) -> tuple[str, str]:
    _check_reference(grader, item)
    return render(grader.input, item, sample), render(grader.reference, item, sample)


async def _run_similarity(
    grader: TextSimilarityGrader, item: Any, sample: str, engine: Engine, outcome: Outcome
) -> None:
    text, reference = await _off_loop(_similarity_texts, grader, item, sample)
    if not reference.strip():
        raise RequestError(422, "the rendered reference is empty", "grader.reference")
    if grader.evaluation_metric == "meteor":
        outcome.reward = await asyncio.to_thread(meteor, text, reference)
        if grader.pass_threshold is not None:
            outcome.scores["passed"] = outcome.reward >= grader.pass_threshold
        return
    request = {
        "verifier": "text.similarity",
        "response": text,
        "reference": reference,
        # The rendered text is compared as it is: end-of-turn cutting is the outer request's business.
        "options": {"metric": TEXT_METRICS[grader.evaluation_metric], "extract": "none", "end_tokens": []},
    }
    # prepare_async: a large rendered text is read (validated, hashed for the cache key) on a thread.
    score = await engine.score_nested(await engine.prepare_async(request))
    if score.status is not Status.ok:
        flag = "model_grader_server_error" if score.status is Status.judge_error else "other_error"
        outcome.errors[flag] = True
        outcome.errors["model_grader_server_error_details"] = f"{score.status.value}: {score.reason}"
        outcome.server_failure = f"text_similarity failed: {score.status.value} ({score.reason})"
        return
    outcome.reward = float(score.details.get("score", score.reward))
    if grader.pass_threshold is not None:
        outcome.scores["passed"] = outcome.reward >= grader.pass_threshold


def _reads_sample(template: str) -> bool:
    return any(match.group(1).partition(".")[0] == "sample" for match in _TEMPLATE.finditer(template))


def rendered_image_url(template: str, item: Any, sample: str, field: str = "item") -> str:
    """An input_image URL rendered and checked (image_url_problem): a bad URL the model sample produced is
    SampleImageError (reward 0, sample_parse_error); one from the spec or the item alone is a 422."""
    url = render(template, item, sample)
    problem = image_url_problem(url)
    if problem is None:
        return url
    if _reads_sample(template):
        raise SampleImageError(f"input_image image_url {template!r} rendered from the sample: {problem}")
    raise RequestError(422, f"invalid {field}: input_image image_url {template!r}: {problem}", field)


def check_image_urls(grader: Any, item: Any, field: str = "grader") -> None:
    """Every input_image URL that the spec and the item alone decide is rendered and checked before anything
    runs: a 422 naming `item` (the URL came from it) or the content part (a literal URL). URLs that read the
    sample are checked when the sample is rendered into them."""
    if isinstance(grader, MultiGrader):
        for name, sub in grader.graders.items():
            check_image_urls(sub, item, f"{field}.graders.{name}")
        return
    if not isinstance(grader, (ScoreModelGrader, LabelModelGrader)):
        return
    for i, message in enumerate(grader.input):
        for template in _image_urls(message.content):
            if _reads_sample(template):
                continue
            where = "item" if _TEMPLATE.search(template) else f"{field}.input.{i}.content"
            try:
                rendered_image_url(template, item, "", where)
            except TemplateError as exc:
                raise RequestError(422, f"invalid_variable_error: {exc}", "item") from None
            except RenderTooLarge as exc:
                raise RequestError(
                    422,
                    f"invalid {where}: input_image image_url {template[:100]!r} renders {exc.total} characters, "
                    f"past the bound of {MAX_RENDERED_CHARS}",
                    where,
                ) from None


def _message_content(message: InputMessage, item: Any, sample: str) -> str | list[dict[str, Any]]:
    """A message's content for the judge: a string when it is all text; else chat-completions content parts in
    order, text parts as `text` and input_image parts as `image_url` (templates rendered in both)."""
    parts = _parts(message.content)
    if all(isinstance(part, str) or part.get("type") in TEXT_PARTS for part in parts):
        return render(_content_text(message.content), item, sample)
    out: list[dict[str, Any]] = []
    for part in parts:
        if isinstance(part, str) or part.get("type") in TEXT_PARTS:
            text = part if isinstance(part, str) else str(part["text"])
            out.append({"type": "text", "text": render(text, item, sample)})
        else:  # input_image: the only other kind validation lets through
            image = {
                "url": rendered_image_url(str(part["image_url"]), item, sample),
                "detail": part.get("detail", "auto"),
            }
            out.append({"type": "image_url", "image_url": image})
    return out


PYTHON_LIMITS = RunLimits(cpu_s=10.0, memory_mb=512, processes=8, output_bytes=64 * 1024)
PYTHON_RESULT = ".proctor_grade.json"
# The grade comes back in a file the trusted harness writes after grade() returned in a child process that
# never held the nonce (forked_harness: the parent is non-dumpable, forks before it reads the nonce from stdin,
# and keeps only a finite number the child sends on a pipe); never on stdout, which the grader (and, through
# its prints, the sample) writes. So a grader that prints the sample and exits cannot forge a reward, and one
# that exec()s the sample's code gives that code no nonce or result path to forge a grade with. It does not
# make such a grader safe: code exec()d in grade()'s process can still choose the reply grade()'s child sends
# (patch json.dumps, write the pipe and exit); a grader must run a sample's code in a subprocess of its own.
_PYTHON_HARNESS = forked_harness(
    PYTHON_RESULT,
    "value",
    "type(value) in (int, float) and math.isfinite(value)",
    """\
namespace = {"__name__": "grader"}
with open("grader.py", encoding="utf-8") as source:
    code = compile(source.read(), "grader.py", "exec")
with open("input.json", encoding="utf-8") as data:
    given = json.load(data)
exec(code, namespace)
result = namespace["grade"](given["sample"], given["item"])
ok = isinstance(result, (int, float)) and not isinstance(result, bool)
value = float(result) if ok else None
reply = value if value is None or math.isfinite(value) else None""",
)


def _input_json(given: dict[str, Any]) -> str:
    """python_job's input.json: UTF-8 as written, unless the sample or item holds a lone surrogate (a JSON body may
    send `"\\ud800"`), which no UTF-8 file can hold: then escaped (ensure_ascii), so grade() still reads the
    text as sent instead of the job failing to be written (a sandbox_error, a 503 that masks the sample)."""
    text = json.dumps(given, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(given)
    return text


def python_job(source: str, item: Any, sample: str, nonce: str = "") -> Job:
    """The sandbox job that runs a python grader's grade(sample, item): `sample` has `output_text` and
    `output_json` (the sample parsed as JSON, or None when it is not JSON); `item` is the dataset item. The
    harness writes {"value", "mac"} to PYTHON_RESULT after grade() returned in a child that never held the
    nonce; the nonce reaches the parent on stdin."""
    try:
        output_json = parse.bounded_json(sample)
    except ValueError:
        output_json = None
    given = {"sample": {"output_text": sample, "output_json": output_json}, "item": item}
    return Job(
        files=[
            File(path="harness.py", content=_PYTHON_HARNESS),
            File(path="grader.py", content=source),
            File(path="input.json", content=_input_json(given)),
        ],
        commands=[
            Command(
                argv=["/usr/bin/python3", "-I", "harness.py"], stdin=nonce, limits=PYTHON_LIMITS, name="grade"
            )
        ],
        env={"PYTHONDONTWRITEBYTECODE": "1", "PYTHONIOENCODING": "utf-8"},
        fetch=[PYTHON_RESULT],
    )


def _run_python(grader: PythonGrader, item: Any, sample: str, outcome: Outcome) -> None:
    """Run grade() in the sandbox. The sandbox failing is a server failure (503, python_grader_server_error);
    grade() raising, running out of time or memory, exiting, or returning no finite number is reward 0 with
    python_grader_runtime_error and its details (200, as OpenAI answers). The grade is read from the result
    file only (see _PYTHON_HARNESS), never from the grader's stdout."""
    nonce = secrets.token_hex(16)
    result = resolve_backend(None).run(python_job(grader.source, item, sample, nonce))
    command = result.commands[0] if result.commands else None
    if command is None or any(c.verdict is RunVerdict.sandbox_error for c in result.commands):
        failed = next((c for c in result.commands if c.verdict is RunVerdict.sandbox_error), None)
        detail = failed.detail if failed else "the sandbox ran nothing"
        outcome.errors["python_grader_server_error"] = True
        outcome.errors["python_grader_server_error_type"] = "sandbox_error"
        outcome.server_failure = f"python grader: sandbox_error: {detail}"
        return
    document = (
        result_document(result.files, PYTHON_RESULT, nonce, "value")
        if command.verdict is RunVerdict.ok
        else None
    )
    found, value = document is not None, (document or {}).get("value")
    if found and isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        outcome.reward = float(value)
        return
    if command.verdict is not RunVerdict.ok:
        details = f"grade() ended with {command.verdict.value}: {command.stderr[-500:]}"
    elif not found:
        details = "grade() did not return (the grader exited before it returned a value)"
    else:
        details = "grade() returned no finite number (it must return a float)"
    outcome.errors["python_grader_runtime_error"] = True
    outcome.errors["python_grader_runtime_error_details"] = details
    outcome.reward = 0.0


_WORD = re.compile(r"\w+|[^\w\s]")


class _NoSynonyms:
    """Stands in for NLTK's WordNet reader (its data is not shipped): no synonym matches."""

    def synsets(self, *args: Any, **kwargs: Any) -> list[Any]:
        return []


def meteor(text: str, reference: str) -> float:
    """METEOR (Banerjee and Lavie, 2005; NLTK's implementation, alpha 0.9, beta 3, gamma 0.5) over lower-cased
    word and punctuation tokens, with its exact and Porter-stem matching stages; the WordNet synonym stage
    matches nothing, since NLTK's WordNet data is not shipped (so `glad` never matches `happy`)."""
    from nltk.translate.meteor_score import meteor_score

    hypothesis, references = _WORD.findall(text.lower()), _WORD.findall(reference.lower())
    if not hypothesis or not references:
        return 0.0
    return float(meteor_score([references], hypothesis, wordnet=_NoSynonyms()))


def _messages(grader: ScoreModelGrader | LabelModelGrader, item: Any, sample: str) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    for message in grader.input:
        role = "system" if message.role == "developer" else message.role
        messages.append({"role": role, "content": _message_content(message, item, sample)})
    if isinstance(grader, LabelModelGrader):
        instruction = (
            f'Answer with one JSON object {{"result": <label>}} where the label is one of {grader.labels}.'
        )
    else:
        instruction = f'Answer with one JSON object {{"result": <number from {grader.range[0]:g} to {grader.range[1]:g}>}}.'
    # Appended to the last user message: many chat templates accept a system message only in first place.
    users = [index for index, message in enumerate(messages) if message["role"] == "user"]
    if users and isinstance(messages[users[-1]]["content"], list):
        messages[users[-1]]["content"].append({"type": "text", "text": "\n\n" + instruction})
    elif users:
        messages[users[-1]]["content"] += "\n\n" + instruction
    else:
        messages.append({"role": "user", "content": instruction})
    return messages


def _sampling(params: SamplingParams | None) -> Sampling:
    if params is None:
        return Sampling()
    return Sampling(
        temperature=params.temperature if params.temperature is not None else 0.0,
        max_tokens=params.max_completions_tokens or 1024,
        top_p=params.top_p,
        seed=params.seed,
    )


async def _run_model(
    grader: ScoreModelGrader | LabelModelGrader,
    item: Any,
    sample: str,
    judge: JudgeOverride | None,
    outcome: Outcome,
) -> None:
    messages = await _off_loop(_messages, grader, item, sample)
    settings = get_settings()
    override = judge or JudgeOverride()
    sampling = _sampling(grader.sampling_params)
    try:
        # The configured judge model serves specs written for hosted models, unless the request names one.
        config = judge_config(
            override.base_url, override.model or settings.judge_model or grader.model, override.api_key
        )
        reply = await complete(config, messages, sampling)
    except JudgeError as exc:
        outcome.errors["model_grader_server_error"] = True
        outcome.errors["model_grader_server_error_details"] = f"{exc.reason}: {exc.message}"
        outcome.server_failure = f"{exc.reason}: {exc.message}"
        return
    outcome.sampled_model = reply.model
    if not reply.cached:
        outcome.usage[reply.model] = dict(reply.usage)
    if reply.truncated:
        # No verdict, and not the sample's fault: a machinery failure (503), as for the judge verifiers. Checked
        # before the refusal below: a reasoning judge cut off while thinking answers content null (finish_reason
        # length), which is no refusal and must never grade the sample 0.
        failure = (
            f"judge_truncated: the judge's reply was cut off at max_tokens={sampling.max_tokens} "
            "(finish_reason length) before it gave a verdict; raise sampling_params.max_completions_tokens"
        )
        outcome.errors["model_grader_server_error"] = True
        outcome.errors["model_grader_server_error_details"] = failure
        outcome.server_failure = failure
        return
    if reply.text is None:
        outcome.errors["model_grader_refusal_error"] = True
        return
    try:
        if isinstance(grader, ScoreModelGrader):
            outcome.reward = parse.model_score(reply.text, *grader.range)
            if grader.pass_threshold is not None:
                outcome.scores["passed"] = outcome.reward >= grader.pass_threshold
        else:
            label = parse.model_label(reply.text, grader.labels)
            outcome.scores["label"] = label
            outcome.reward = float(label in grader.passing_labels)
    except parse.Unparseable as exc:
        outcome.errors["model_grader_parse_error"] = True
        outcome.scores["parse_error"] = str(exc)
        outcome.reward = 0.0


# -- the verifier --------------------------------------------------------------------------------------------


def check_item_variables(grader: Any, item: Any, field: str = "grader") -> None:
    """Every {{item.…}} variable of the spec resolves in this item (a 422 naming `item` otherwise), so a run
    never fails on the reference's own gap."""
    if isinstance(grader, MultiGrader):
        for name, sub in grader.graders.items():
            check_item_variables(sub, item, f"{field}.graders.{name}")
        return
    texts: list[str] = []
    if isinstance(grader, (StringCheckGrader, TextSimilarityGrader)):
        texts = [grader.input, grader.reference]
    elif isinstance(grader, (ScoreModelGrader, LabelModelGrader)):
        for message in grader.input:
            texts.append(_content_text(message.content))
            texts.extend(_image_urls(message.content))
    for text in texts:
        for match in _TEMPLATE.finditer(text):
            full = match.group(1)
            namespace, _, path = full.partition(".")
            if namespace == "item" and path:
                try:
                    _lookup(item, path, full)
                except TemplateError as exc:
                    raise RequestError(422, f"invalid_variable_error: {exc}", "item") from None
    if isinstance(grader, (StringCheckGrader, TextSimilarityGrader)):
        _check_reference(grader, item)


class GraderReference(BaseModel):
    """An OpenAI grader spec and the dataset item its {{item.…}} templates read."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    grader: dict[str, Any] = Field(description="One of OpenAI's grader specs (validated by the server).")
    item: Any = Field(default=None, description="The dataset item (the `item` namespace); default {}.")
    _spec: Any = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _valid(self) -> GraderReference:
        check_nesting(self.grader, "grader", MAX_NESTING)
        check_nesting(self.item, "item", MAX_NESTING)
        try:
            spec = parse_grader(self.grader)
            check_templates(spec)
            check_item_variables(spec, {} if self.item is None else self.item)
            check_render_sizes(spec, {} if self.item is None else self.item)
            check_image_urls(spec, {} if self.item is None else self.item)
            self._spec = spec
        except RequestError as exc:
            # Not a ValueError, so pydantic lets it through: the 422 names the field inside the reference.
            field = f"reference.{exc.field}" if exc.field else "reference"
            raise RequestError(
                422, exc.message.replace(f"invalid {exc.field}", f"invalid {field}"), field
            ) from None
        return self

    def spec(self) -> Any:
        """The validated grader spec (parsed once, when the reference was validated)."""
        return self._spec if self._spec is not None else parse_grader(self.grader)


def _failure_status(outcome: Outcome) -> Status:
    if outcome.errors.get("python_grader_server_error"):
        return Status.sandbox_error
    if outcome.errors.get("model_grader_server_error"):
        return Status.judge_error
    return Status.verifier_error


async def score_openai_grader(response: str, reference: GraderReference, options: BaseOptions) -> Verdict:
    """Run the spec on the response (the model sample) through the engine that scores this request."""
    started = time.perf_counter()
    grader = reference.spec()
    item = {} if reference.item is None else reference.item
    outcome = await run_grader(grader, item, response, current_engine(), None)
    body = outcome.body(started)
    if outcome.server_failure:
        return Verdict.failure(
            _failure_status(outcome), "grader_server_error", error=outcome.server_failure, openai=body
        )
    reward = min(1.0, max(0.0, outcome.reward))
    reason = None if reward >= 1.0 else "partial" if reward > 0 else "no_reward"
    components = {name: float(value) for name, value in outcome.sub_rewards.items()}
    return Verdict(
        reward=reward,
        correct=reward >= 1.0,
        reason=reason,
        components=components,
        details={"openai": body},
    )


_CITY = {
    "type": "string_check",
    "name": "city",
    "operation": "eq",
    "input": "{{sample.output_text}}",
    "reference": "{{item.city}}",
}
_TOOL = {
    "type": "multi",
    "name": "tool call",
    "graders": {
        "name": {
            "type": "string_check",
            "name": "n",
            "operation": "eq",
            "input": "{{sample.output_json.name}}",
            "reference": "{{item.name}}",
        },
        "args": {
            "type": "text_similarity",
            "name": "a",
            "evaluation_metric": "fuzzy_match",
            "input": "{{sample.output_json.args}}",
            "reference": "{{item.args}}",
        },
    },
    "calculate_output": "0.5 * name + 0.5 * args",
}
_TOOL_ITEM = {"name": "get_weather", "args": {"city": "Paris"}}

_EXAMPLES = (
    Example("Paris", {"grader": _CITY, "item": {"city": "Paris"}}, 1.0, note="string_check eq"),
    Example(
        '{"name": "get_weather", "args": {"city": "Paris"}}',
        {"grader": _TOOL, "item": _TOOL_ITEM},
        1.0,
        note="multi: tool call",
    ),
    Example("Paris, France", {"grader": _CITY, "item": {"city": "Paris"}}, 0.0, note="eq is exact"),
    Example(
        "{{item.city}}",
        {"grader": _CITY, "item": {"city": "Paris"}},
        0.0,
        note="a sample's template text is not rendered",
    ),
    Example(
        '{"name": "get_weather"}',
        {"grader": {**_TOOL, "calculate_output": "name * args"}, "item": _TOOL_ITEM},
        0.0,
        note="missing args: sample_parse_error, reward 0",
    ),
)

SPEC = register_verifier(
    VerifierSpec(
        name="openai.grader",
        version="1.0.0",
        score=score_openai_grader,
        reference=GraderReference,
        options=BaseOptions,
        description="OpenAI's grader specs (string_check, text_similarity, score_model, label_model, python, "
        "multi with calculate_output) on the model sample; the reference is the spec plus the dataset item.",
        examples=_EXAMPLES,
        execution="inline",
        deadline_s=300.0,
    )
)
