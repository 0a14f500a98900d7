"""The rescore job: score every row of a JSONL or Parquet file, in order, resumably, and summarise.

Output is streamed in chunks to a JSONL file (the output itself, or OUTPUT.partial.jsonl beside a Parquet
output); each chunk is appended, flushed and fsynced before the next is written. A run killed at any
moment therefore leaves whole rows followed by at most one partial line, and `--resume` cuts that line,
checks the rows already written against the input's first rows, and continues after them.
"""

from __future__ import annotations

import json
import sys
from collections import Counter, deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import Any, Protocol

from proctor import io
from proctor.contract import ErrorBody, ItemError, Score
from proctor.passk import mean_pass_at_k

DEFAULT_KS = (1, 8, 64, 256)
_MISSING = object()


class RescoreError(Exception):
    """A failure of the run itself; `code` is the exit status (2 usage, 1 runtime)."""

    def __init__(self, message: str, code: int = 1):
        super().__init__(message)
        self.code = code


@dataclass
class RescoreConfig:
    """Everything `proctor rescore` was asked to do."""

    input: Path
    output: Path
    verifier: str | None = None
    response_field: str = "response"
    reference_field: str = "reference"
    workers: int | None = None
    server: str | None = None
    token: str | None = None
    resume: bool = False
    force: bool = False
    group_field: str | None = None
    ks: tuple[int, ...] = DEFAULT_KS
    compare_field: str | None = None
    batch_size: int = 512
    progress: bool | None = None
    summary_json: Path | None = None
    engine: str = "local"  # "local" (this process, or --server) or "ray" (tasks on a Ray cluster)
    address: str | None = None  # the Ray cluster for engine "ray"; None starts a local instance


# -- fields ---------------------------------------------------------------------------------------------


def get_field(row: dict[str, Any], name: str) -> Any:
    """The row's value for `name`: the key itself, else a dotted path into nested objects; _MISSING if absent."""
    if name in row:
        return row[name]
    value: Any = row
    for part in name.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def build_request(row: dict[str, Any], config: RescoreConfig) -> dict[str, Any] | ItemError:
    """The score request for one input row, or an ItemError naming what the row lacks."""
    row_id = row.get("id")
    if isinstance(row_id, bool) or not isinstance(row_id, (str, int)):
        row_id = None  # the id is echoed only when the contract can carry it
    verifier = row.get("verifier") or config.verifier
    if not verifier:
        return _row_error(row_id, "the row has no 'verifier' field and --verifier is not set", "verifier")
    response = get_field(row, config.response_field)
    if response is _MISSING or response is None:  # Parquet writes a missing key as null
        return _row_error(row_id, f"the row has no {config.response_field!r} field", config.response_field)
    reference = get_field(row, config.reference_field)
    request: dict[str, Any] = {
        "verifier": verifier,
        "response": response,
        "reference": None if reference is _MISSING else reference,
        "id": row_id,
    }
    if row.get("options") is not None:
        request["options"] = row["options"]
    return request


def _row_error(row_id: Any, message: str, field_name: str) -> ItemError:
    return ItemError(id=row_id, error=ErrorBody(status=422, message=message, field=field_name))


# -- scorers --------------------------------------------------------------------------------------------


class Scorer(Protocol):
    """Scores a batch of request dicts in order (in this process or through a service)."""

    def check(self, verifier: str | None) -> None: ...

    def score_batch(self, items: list[dict[str, Any]]) -> list[Score | ItemError]: ...

    def close(self) -> None: ...


class EngineScorer:
    """In-process scoring with the engine and its killable worker pool, as the service does it."""

    concurrency = 2  # two chunks in flight keep the pool busy while the previous chunk is written

    def __init__(self, workers: int | None):
        from pydantic import ValidationError

        from proctor.engine import Engine
        from proctor.settings import Settings

        try:
            settings = Settings(pool_workers=workers) if workers else Settings()
        except ValidationError as exc:
            raise RescoreError(f"invalid settings: {_first_error(exc)}", 2) from None
        self.engine = Engine(settings)

    def check(self, verifier: str | None) -> None:
        """Raise RescoreError(2) when the default verifier is not registered."""
        from proctor.contract import RequestError
        from proctor.registry import get_verifier

        if not verifier:
            return
        try:
            get_verifier(verifier)
        except RequestError as exc:
            raise RescoreError(exc.message, 2) from None

    def score_batch(self, items: list[dict[str, Any]]) -> list[Score | ItemError]:
        """Score in order; bad items come back as ItemError."""
        return self.engine.score_batch(items)

    def close(self) -> None:
        """Stop the worker pool."""
        self.engine.close()


class ServerScorer:
    """Scoring through a running Proctor service with proctor.client.Client."""

    concurrency = 4

    def __init__(self, url: str, token: str | None):
        from proctor.client import Client

        self.url = url
        try:
            self.client = Client(url, token=token)
            # The start-up check retries once only: an unreachable service should fail the run in seconds.
            self._probe = Client(url, token=token, max_retries=1, timeout=10.0)
        except ValueError as exc:
            raise RescoreError(f"--server: {exc}", 2) from None

    def check(self, verifier: str | None) -> None:
        """Fail fast when the service is unreachable or does not know the default verifier."""
        try:
            known = [entry["name"] for entry in self._probe.verifiers()]
        except Exception as exc:  # any transport failure means the run cannot start
            raise RescoreError(f"cannot reach the Proctor service at {self.url}: {_describe(exc)}") from None
        if verifier and verifier not in known:
            names = ", ".join(sorted(known)) or "none"
            raise RescoreError(f"unknown verifier {verifier!r}; known verifiers: {names}", 2)

    def score_batch(self, items: list[dict[str, Any]]) -> list[Score | ItemError]:
        """Score in order through /v1/score/batch."""
        try:
            return list(self.client.score_batch(items))
        except Exception as exc:  # the run stops; rows written so far stay and --resume continues
            raise RescoreError(f"scoring through {self.url} failed: {_describe(exc)}") from None

    def close(self) -> None:
        """Close the HTTP connections."""
        self.client.close()
        self._probe.close()


def _describe(exc: BaseException) -> str:
    from proctor.client import ProctorError

    if isinstance(exc, ProctorError):
        return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


def _first_error(exc: Any) -> str:
    first = exc.errors(include_url=False)[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


# -- summary --------------------------------------------------------------------------------------------


@dataclass
class Summary:
    """Running totals over the output rows, for the report printed at the end."""

    group_field: str | None = None
    compare_field: str | None = None
    ks: tuple[int, ...] = DEFAULT_KS
    rows: int = 0
    resumed_rows: int = 0
    rejected: int = 0
    ok_rows: int = 0
    reward_sum: float = 0.0
    statuses: Counter = field(default_factory=Counter)
    reasons: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    groups: dict[str, list[int]] = field(default_factory=dict)
    ungrouped: int = 0
    no_verdict_in_groups: int = 0
    compare: Counter = field(default_factory=Counter)

    def add(self, row: dict[str, Any], score: dict[str, Any]) -> None:
        """Count one row: `row` is the input row, `score` the Score or ItemError JSON written for it."""
        self.rows += 1
        if "error" in score:
            self.rejected += 1
            error = score["error"]
            self.errors[f"{error.get('status')} {error.get('field') or '-'}: {error.get('message')}"] += 1
            reward = None
            correct = False
            verdict = False
        else:
            status = score["status"]
            self.statuses[status] += 1
            if score.get("reason"):
                self.reasons[score["reason"]] += 1
            verdict = status == "ok"
            reward = float(score["reward"]) if verdict else None
            if verdict:
                self.ok_rows += 1
                self.reward_sum += reward
            correct = verdict and (reward == 1.0 or score.get("correct") is True)
        if self.group_field is not None:
            self._add_group(row, verdict, correct)
        if self.compare_field is not None:
            self._add_compare(row, reward)

    def _add_group(self, row: dict[str, Any], verdict: bool, correct: bool) -> None:
        key = get_field(row, self.group_field)
        if key is _MISSING or key is None:
            self.ungrouped += 1
            return
        if not verdict:  # a machinery failure is no verdict: leave it out of n rather than count it wrong
            self.no_verdict_in_groups += 1
            return
        counts = self.groups.setdefault(io.dumps_row(key), [0, 0])
        counts[0] += 1
        counts[1] += int(correct)

    def _add_compare(self, row: dict[str, Any], reward: float | None) -> None:
        old = _old_reward(get_field(row, self.compare_field))
        if old is None:
            self.compare["no_old_value"] += 1
            return
        if reward is None:
            self.compare["no_new_verdict"] += 1
            return
        self.compare["compared"] += 1
        if abs(reward - old) <= 1e-9:
            return
        self.compare["changed"] += 1
        if old == 0.0 and reward == 1.0:
            self.compare["0->1"] += 1
        elif old == 1.0 and reward == 0.0:
            self.compare["1->0"] += 1
        elif reward > old:
            self.compare["other_up"] += 1
        else:
            self.compare["other_down"] += 1

    @property
    def mean_reward(self) -> float | None:
        """Mean reward over rows whose status is ok."""
        return self.reward_sum / self.ok_rows if self.ok_rows else None

    def pass_at_k(self) -> dict[int, tuple[float | None, int]]:
        """Mean unbiased pass@k over groups with at least k samples, and how many groups that was, per k."""
        pairs = [(n, c) for n, c in self.groups.values()]
        return {k: mean_pass_at_k(pairs, k) for k in self.ks}

    def as_dict(self) -> dict[str, Any]:
        """The summary as JSON-ready data."""
        data: dict[str, Any] = {
            "rows": self.rows,
            "resumed_rows": self.resumed_rows,
            "scored": self.rows - self.rejected,
            "rejected": self.rejected,
            "ok_rows": self.ok_rows,
            "mean_reward": self.mean_reward,
            "status": dict(self.statuses.most_common()),
            "reason": dict(self.reasons.most_common()),
            "errors": dict(self.errors.most_common()),
        }
        if self.group_field is not None:
            data["pass_at_k"] = {
                "group_field": self.group_field,
                "groups": len(self.groups),
                "samples": sum(n for n, _ in self.groups.values()),
                "without_verdict": self.no_verdict_in_groups,
                "without_group": self.ungrouped,
                "k": {
                    str(k): {"mean": mean, "groups": count} for k, (mean, count) in self.pass_at_k().items()
                },
            }
        if self.compare_field is not None:
            data["compare"] = {"field": self.compare_field, **{k: self.compare[k] for k in _COMPARE_KEYS}}
        return data

    def render(self) -> str:
        """The summary as readable text."""
        lines = [f"rows          {self.rows}  (scored {self.rows - self.rejected}, rejected {self.rejected})"]
        if self.resumed_rows:
            lines[0] += f"  [{self.resumed_rows} from the earlier run]"
        mean = self.mean_reward
        lines.append(
            f"mean reward   {mean:.4f} over {self.ok_rows} ok rows"
            if mean is not None
            else "mean reward   - (no ok rows)"
        )
        lines.append(f"status        {_counts(self.statuses)}")
        lines.append(f"reason        {_counts(self.reasons)}")
        if self.errors:
            lines.append("rejected rows:")
            for text, count in self.errors.most_common(5):
                lines.append(f"  {count:>8}  {_clip(text, 110)}")
            if len(self.errors) > 5:
                lines.append(f"  ... and {len(self.errors) - 5} more kinds")
        if self.group_field is not None:
            samples = sum(n for n, _ in self.groups.values())
            lines.append(
                f"pass@k        grouped by {self.group_field!r}: {len(self.groups)} groups, {samples} samples"
                f" ({self.no_verdict_in_groups} without a verdict left out, {self.ungrouped} without the field)"
            )
            for k, (value, count) in self.pass_at_k().items():
                shown = f"{value:.4f}" if value is not None else "-     "
                lines.append(f"  pass@{k:<6}  {shown}  ({count} groups with >= {k} samples)")
        if self.compare_field is not None:
            c = self.compare
            lines.append(
                f"compare       against {self.compare_field!r}: {c['compared']} compared, {c['changed']} changed"
                f" (0->1: {c['0->1']}, 1->0: {c['1->0']}, other up: {c['other_up']},"
                f" other down: {c['other_down']}); not compared: {c['no_old_value']} without an old value,"
                f" {c['no_new_verdict']} without a new verdict"
            )
        return "\n".join(lines)


_COMPARE_KEYS = (
    "compared",
    "changed",
    "0->1",
    "1->0",
    "other_up",
    "other_down",
    "no_old_value",
    "no_new_verdict",
)


def _old_reward(value: Any) -> float | None:
    """An old reward from a number, a bool, or an earlier Score object (only when its status was ok)."""
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, (int, float)):
        return float(value) if value == value else None
    if isinstance(value, dict) and "reward" in value and value.get("status", "ok") == "ok":
        return _old_reward(value["reward"])
    return None


def _counts(counter: Counter) -> str:
    return ", ".join(f"{name} {count}" for name, count in counter.most_common()) or "-"


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


# -- the job --------------------------------------------------------------------------------------------


def progress_path(output: Path) -> Path:
    """Where rows are streamed while the job runs: the output itself for JSONL, a sidecar for Parquet."""
    if io.file_format(output) == "jsonl":
        return output
    return output.with_name(output.name + ".partial.jsonl")


def _check_paths(config: RescoreConfig) -> Path:
    try:
        io.file_format(config.input)
        io.file_format(config.output)
    except ValueError as exc:
        raise RescoreError(str(exc), 2) from None
    if not config.input.is_file():
        raise RescoreError(f"cannot read {config.input}: no such file", 1)
    if config.output.exists() and config.output.resolve() == config.input.resolve():
        raise RescoreError("the output must not be the input file", 2)
    if not config.output.parent.is_dir():
        raise RescoreError(f"cannot write {config.output}: {config.output.parent} is not a directory", 1)
    if config.summary_json is not None and not config.summary_json.parent.is_dir():
        raise RescoreError(
            f"cannot write {config.summary_json}: {config.summary_json.parent} is not a directory", 1
        )
    partial = progress_path(config.output)
    existing = _existing_outputs(config.output, partial)
    if existing and not (config.resume or config.force):
        raise RescoreError(
            f"{existing[0]} already exists; pass --resume to continue that run or --force to overwrite it", 2
        )
    return partial


def _existing_outputs(output: Path, partial: Path) -> list[Path]:
    return [path for path in dict.fromkeys((output, partial)) if path.exists()]


def _normalised(row: dict[str, Any]) -> dict[str, Any]:
    # A Parquet column holds every key, with null where a row lacked it: treat null and absent alike.
    return {key: value for key, value in io.to_jsonable(row).items() if key != "score" and value is not None}


def _verify_done(
    written: Iterator[dict[str, Any]], source: Iterator[dict[str, Any]], summary: Summary, where: Path
) -> int:
    """Check the rows already written against the input's first rows, counting them into the summary."""
    done = 0
    for out_row in written:
        in_row = next(source, None)
        if in_row is None:
            raise RescoreError(f"{where} has more rows than the input; it is not a run of this input", 1)
        if _normalised(out_row) != _normalised(in_row):
            raise RescoreError(
                f"row {done + 1} of {where} does not match row {done + 1} of the input; it is not a run of "
                f"this input (use --force to start over)",
                1,
            )
        score = out_row.get("score")
        if not isinstance(score, dict):
            raise RescoreError(f"row {done + 1} of {where} has no score object; cannot resume from it", 1)
        summary.add(in_row, score)
        done += 1
    return done


def _batches(rows: Iterator[dict[str, Any]], size: int) -> Iterator[list[dict[str, Any]]]:
    while True:
        batch = list(islice(rows, size))
        if not batch:
            return
        yield batch


def score_chunk(scorer: Scorer, rows: list[dict[str, Any]], config: RescoreConfig) -> list[dict[str, Any]]:
    """Score input rows in one batch: each row's Score, or the ItemError its request got, as JSON objects."""
    requests = [build_request(row, config) for row in rows]
    to_score = [r for r in requests if isinstance(r, dict)]
    results = iter(scorer.score_batch(to_score)) if to_score else iter(())
    scores: list[dict[str, Any]] = []
    for request in requests:
        result = next(results, None) if isinstance(request, dict) else request
        if result is None:
            raise RescoreError("the scorer returned fewer results than items sent", 1)
        scores.append(result.model_dump(mode="json"))
    if next(results, None) is not None:
        raise RescoreError("the scorer returned more results than items sent", 1)
    return scores


def _progress_bar(config: RescoreConfig, total: int, initial: int) -> Any:
    from tqdm import tqdm

    enabled = config.progress if config.progress is not None else sys.stderr.isatty()
    return tqdm(
        total=total,
        initial=initial,
        unit="row",
        desc="rescore",
        file=sys.stderr,
        disable=not enabled,
        dynamic_ncols=True,
        smoothing=0.1,
        mininterval=0.5,
    )


ENGINES = ("local", "ray")


def make_scorer(config: RescoreConfig) -> Scorer:
    """The local engine's scorer: the in-process engine, or a client of the service at --server.

    `--engine ray`'s scorer comes from `proctor.rescore_ray.ray_scorer` (which imports this module, not the
    other way round), handed to `rescore` by its caller (the CLI).
    """
    if config.engine not in ENGINES:
        raise RescoreError(f"unknown engine {config.engine!r}; engines: {', '.join(ENGINES)}", 2)
    if config.engine == "ray":
        raise RescoreError("--engine ray scores through proctor.rescore_ray.ray_scorer(config)", 2)
    if config.address is not None:
        raise RescoreError("--address is the Ray cluster of --engine ray", 2)
    if config.server:
        return ServerScorer(config.server, config.token)
    return EngineScorer(config.workers)


def rescore(config: RescoreConfig, make: Callable[[RescoreConfig], Scorer] = make_scorer) -> Summary:
    """Run the job; raises RescoreError for failures of the run itself (never for a row's own status).

    `make` builds the scorer once the input and flags are known to be good: `make_scorer` (the local engine),
    or `proctor.rescore_ray.ray_scorer` for `--engine ray`.
    """
    if config.batch_size < 1:
        raise RescoreError("--batch-size must be at least 1", 2)
    if any(k < 1 for k in config.ks):
        raise RescoreError("every --k must be at least 1", 2)
    partial = _check_paths(config)
    try:
        total = io.count_rows(config.input)
    except io.DataError as exc:
        raise RescoreError(str(exc), 1) from None
    summary = Summary(group_field=config.group_field, compare_field=config.compare_field, ks=config.ks)
    scorer = make(config)
    try:
        scorer.check(config.verifier)
        if config.force:  # only now that input, flags and verifier are known to be good
            for path in _existing_outputs(config.output, partial):
                path.unlink()
        _run(config, scorer, partial, total, summary)
    except io.DataError as exc:
        raise RescoreError(str(exc), 1) from None
    finally:
        scorer.close()
    if config.summary_json is not None:
        try:
            config.summary_json.write_text(json.dumps(summary.as_dict(), indent=2) + "\n", encoding="utf-8")
        except OSError as exc:
            raise RescoreError(f"cannot write {config.summary_json}: {exc.strerror or exc}", 1) from None
    return summary


def _run(config: RescoreConfig, scorer: Scorer, partial: Path, total: int, summary: Summary) -> None:
    source = io.iter_rows(config.input)
    parquet_out = partial != config.output
    if parquet_out and config.output.exists() and not partial.exists():
        # A finished Parquet run: check it, and report on it again.
        done = _verify_done(io.iter_parquet(config.output), source, summary, config.output)
        if done != total:
            raise RescoreError(f"{config.output} has {done} rows but the input has {total}", 1)
        summary.resumed_rows = done
        return
    done = 0
    if partial.exists():
        io.truncate_partial_line(partial)
        done = _verify_done(io.iter_jsonl(partial), source, summary, partial)
        summary.resumed_rows = done
        if done:
            print(f"proctor: resuming after {done} of {total} rows", file=sys.stderr)
    pending: deque[tuple[list[dict[str, Any]], Future]] = deque()
    with (
        io.JsonlAppender(partial) as out,
        ThreadPoolExecutor(max_workers=scorer.concurrency, thread_name_prefix="rescore") as pool,
        _progress_bar(config, total, done) as bar,
    ):

        def write_oldest() -> None:
            rows, future = pending.popleft()
            scores = future.result()
            out.append({**row, "score": score} for row, score in zip(rows, scores, strict=True))
            for row, score in zip(rows, scores, strict=True):
                summary.add(row, score)
            bar.update(len(rows))

        try:
            for rows in _batches(source, config.batch_size):
                pending.append((rows, pool.submit(score_chunk, scorer, rows, config)))
                while len(pending) >= scorer.concurrency:
                    write_oldest()
            while pending:
                write_oldest()
        finally:
            for _, future in pending:
                future.cancel()
    if parquet_out:
        io.write_parquet(config.output, io.read_rows(partial), score_columns=("score",))
        partial.unlink()
