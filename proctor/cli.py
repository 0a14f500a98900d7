"""The `proctor` command: serve, score, verifiers, rescore, doctor, tasks and train.

Every failure a user can cause is one line on stderr that starts with "proctor: ", and a non-zero exit
(2 for a bad command line or request, 1 for a failure while running); no tracebacks for those.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proctor.rescore import DEFAULT_KS, RescoreConfig, RescoreError, rescore


class CliError(Exception):
    """A failure to report as one line on stderr with exit status `code`."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


# -- serve ---------------------------------------------------------------------------------------------


def cmd_serve(args: argparse.Namespace) -> int:
    """Start the HTTP service; flags override PROCTOR_* settings."""
    from pydantic import ValidationError

    from proctor.settings import Settings

    names = ("host", "port", "workers", "log_level")
    overrides = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        raise CliError(f"invalid settings: {_first_error(exc)}") from None
    from proctor.api.server import serve

    try:
        serve(settings)
    except SystemExit as exc:  # the server refuses a bad configuration (an open bind without a token ...)
        if isinstance(exc.code, str):
            raise CliError(exc.code.removeprefix("proctor: "), 2) from None
        return exc.code or 0
    except OSError as exc:  # the port is taken, the address does not exist ...
        raise CliError(f"cannot serve on {settings.host}:{settings.port}: {exc.strerror or exc}", 1) from None
    return 0


# -- score ---------------------------------------------------------------------------------------------


def _json_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return text
    except RecursionError:  # deeper than the JSON parser goes; the engine allows far less (MAX_NESTING)
        raise CliError("--reference: JSON nested too deeply") from None


def cmd_score(args: argparse.Namespace) -> int:
    """Score one response in this process and print the Score as JSON."""
    from proctor.contract import RequestError
    from proctor.engine import Engine
    from proctor.settings import Settings

    response = sys.stdin.read() if args.response == "-" else args.response
    options: Any = {}
    if args.options is not None:
        try:
            options = json.loads(args.options)
        except json.JSONDecodeError as exc:
            raise CliError(f"--options is not valid JSON: {exc.msg} at column {exc.colno}") from None
        except RecursionError:
            raise CliError("--options: JSON nested too deeply") from None
    reference = _json_or_text(args.reference)
    request = {"verifier": args.verifier, "response": response, "reference": reference, "options": options}
    if args.id is not None:
        request["id"] = args.id
    engine = Engine(Settings(pool_workers=1))
    try:
        try:
            score = engine.score(request)
        except RequestError as exc:
            # "42" parses as a number, but a verifier that wants text should get the text the user typed.
            plain = not isinstance(reference, (dict, list, str))  # 42, 1.5, true, null: maybe meant as text
            if not plain or not (exc.field or "").startswith("reference"):
                raise
            score = engine.score({**request, "reference": args.reference})
    except RequestError as exc:
        raise CliError(exc.message) from None
    finally:
        engine.close()
    print(score.model_dump_json(indent=2 if args.pretty else None))
    return 0


# -- verifiers -----------------------------------------------------------------------------------------


def cmd_verifiers(args: argparse.Namespace) -> int:
    """List the registered verifiers as a table, or as JSON."""
    from proctor.registry import all_verifiers

    specs = all_verifiers()
    if args.json:
        print(json.dumps([spec.describe() for spec in specs], indent=2))
        return 0
    rows = [("NAME", "VERSION", "EXECUTION", "DESCRIPTION")]
    rows += [(s.name, s.version, s.execution, (s.description.strip().splitlines() or [""])[0]) for s in specs]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    # Clip descriptions to a terminal's width; a pipe gets them whole.
    room = max(30, shutil.get_terminal_size().columns - sum(widths) - 6) if sys.stdout.isatty() else 10**6
    for row in rows:
        description = row[3] if len(row[3]) <= room else row[3][: room - 1] + "…"
        print(
            "  ".join(
                [*(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True)), description]
            )
        )
    return 0


# -- rescore -------------------------------------------------------------------------------------------


def _ks(text: str) -> tuple[int, ...]:
    try:
        ks = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not ks or ks[0] < 1:
        raise argparse.ArgumentTypeError(f"every k must be a positive integer, got {text!r}")
    return ks


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def cmd_rescore(args: argparse.Namespace) -> int:
    """Score every row of a dataset and print a summary."""
    config = RescoreConfig(
        input=Path(args.input),
        output=Path(args.output),
        verifier=args.verifier,
        response_field=args.response_field,
        reference_field=args.reference_field,
        workers=args.workers,
        server=args.server,
        token=args.token,
        resume=args.resume,
        force=args.force,
        group_field=args.group_field,
        ks=args.k,
        compare_field=args.compare_field,
        batch_size=args.batch_size,
        progress=args.progress,
        summary_json=Path(args.summary_json) if args.summary_json else None,
        engine=args.engine,
        address=args.address,
    )
    try:
        if config.engine == "ray":  # Ray is an optional extra, imported only when asked for
            from proctor.rescore_ray import ray_scorer

            forward = tuple(args.forward_env or ())
            summary = rescore(config, lambda c: ray_scorer(c, forward))
        else:
            if args.forward_env:
                raise RescoreError("--forward-env sends variables to the tasks of --engine ray", 2)
            summary = rescore(config)
    except RescoreError as exc:
        raise CliError(str(exc), exc.code) from None
    except KeyboardInterrupt:
        raise CliError(
            "interrupted; the rows written so far are kept, run again with --resume", 130
        ) from None
    print(summary.render())
    print(f"output        {config.output}")
    return 0


# -- doctor --------------------------------------------------------------------------------------------


def cmd_doctor(args: argparse.Namespace) -> int:
    """Report which sandbox backends and toolchains work here; exit 1 unless the default backend and Python do."""
    from proctor.sandboxes.doctor import doctor_report, render

    report = doctor_report(backend=args.backend, run_programs=not args.no_run, budget_s=args.budget)
    print(json.dumps(report, indent=2) if args.json else render(report))
    for problem in report["problems"]:
        print(f"proctor: {problem}", file=sys.stderr)
    return 0 if report["ok"] else 1


# -- tasks ---------------------------------------------------------------------------------------------


def _int_arg(name: str, text: str, low: int, high: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise CliError(f"{name} must be an integer, not {text!r}") from None
    if not low <= value <= high:
        raise CliError(f"{name} must be in [{low}, {high}], not {value}")
    return value


def cmd_tasks(args: argparse.Namespace) -> int:
    """Make tasks from an environment (puzzle.*, demo.*) and write them as JSONL (one task per line)."""
    from proctor.contract import RequestError
    from proctor.environments.registry import MAX_SEED, MAX_TASKS_PER_CALL, get_environment

    count = _int_arg("--count", args.count, 1, MAX_TASKS_PER_CALL)
    seed = _int_arg("--seed", args.seed, 0, MAX_SEED)
    if args.split not in ("train", "test"):
        raise CliError(f"--split must be train or test, not {args.split!r}")
    config = None
    if args.config is not None:
        try:
            config = json.loads(args.config)
        except json.JSONDecodeError as exc:
            raise CliError(f"--config is not valid JSON: {exc.msg} at column {exc.colno}") from None
        if not isinstance(config, dict):
            raise CliError("--config must be a JSON object")
    try:
        tasks = get_environment(args.name).tasks(args.split, seed, count, args.difficulty, config)
    except RequestError as exc:
        raise CliError(exc.message) from None
    lines = "".join(task.model_dump_json() + "\n" for task in tasks)
    if args.output in (None, "-"):
        sys.stdout.write(lines)
        return 0
    try:
        Path(args.output).write_text(lines)
    except OSError as exc:
        raise CliError(f"cannot write {args.output}: {exc.strerror or exc}", 1) from None
    print(f"proctor: wrote {len(tasks)} tasks to {args.output}", file=sys.stderr)
    return 0


# -- train ---------------------------------------------------------------------------------------------


def cmd_train(args: argparse.Namespace) -> int:
    """Train a policy with the GRPO reference trainer; one JSON line of metrics per step in OUTPUT_DIR."""
    from proctor.client import ProctorError
    from proctor.trainer.config import ConfigError, load_config, overrides_from_args

    try:
        config = load_config(args.config, overrides_from_args(args))
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    try:
        from proctor.trainer.grpo import train
    except ImportError as exc:
        raise CliError(f"the trainer needs the train extra (pip install 'proctor[train]'): {exc}") from None
    try:
        last = train(config)
    except ConfigError as exc:
        raise CliError(str(exc)) from None
    except ProctorError as exc:
        raise CliError(f"scoring failed: {exc}", 1) from None
    summary = {key: last.get(key) for key in ("step", "reward_mean", "accuracy")}
    print(json.dumps({**summary, "output_dir": config.output_dir}))
    return 0


# -- parser --------------------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser for every subcommand."""
    parser = argparse.ArgumentParser(
        prog="proctor", description="Proctor: rewards you can trust for RL on LLMs."
    )
    parser.add_argument(
        "--log-level", help="logging level on stderr (default: warning; for serve: PROCTOR_LOG_LEVEL or info)"
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    serve = commands.add_parser("serve", help="run the HTTP service", description="Run the HTTP service.")
    serve.add_argument("--host", help="address to bind (default: PROCTOR_HOST or 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port to bind (default: PROCTOR_PORT or 8000)")
    serve.add_argument(
        "--workers", type=_positive, help="uvicorn worker processes (default: PROCTOR_WORKERS or 1)"
    )
    serve.set_defaults(func=cmd_serve)

    score = commands.add_parser(
        "score", help="score one response", description="Score one response, print JSON."
    )
    score.add_argument("--verifier", required=True, help="verifier name, e.g. text.match")
    score.add_argument("--response", required=True, help="the model's response ('-' reads stdin)")
    score.add_argument("--reference", required=True, help="reference as JSON, or plain text when not JSON")
    score.add_argument("--options", help="verifier options as a JSON object")
    score.add_argument("--id", help="id echoed in the Score")
    score.add_argument("--pretty", action="store_true", help="indent the JSON")
    score.set_defaults(func=cmd_score)

    verifiers = commands.add_parser(
        "verifiers", help="list verifiers", description="List the registered verifiers."
    )
    verifiers.add_argument(
        "--json", action="store_true", help="print names, versions and JSON schemas as JSON"
    )
    verifiers.set_defaults(func=cmd_verifiers)

    re = commands.add_parser(
        "rescore",
        help="score every row of a JSONL or Parquet file",
        description="Score every row of a JSONL or Parquet file, in order, and print a summary. "
        "Each output row is the input row plus 'score'.",
    )
    re.add_argument("input", help="input rows (.jsonl or .parquet)")
    re.add_argument("-o", "--output", required=True, help="output rows (.jsonl or .parquet)")
    re.add_argument("--verifier", help="verifier for rows without a 'verifier' field")
    re.add_argument(
        "--response-field", default="response", help="field holding the response (default: response)"
    )
    re.add_argument(
        "--reference-field", default="reference", help="field holding the reference (default: reference)"
    )
    re.add_argument(
        "--workers",
        type=_positive,
        help="worker processes for pool verifiers, or the CPUs of --engine ray's local instance "
        "(default: one per CPU)",
    )
    re.add_argument("--server", metavar="URL", help="score through a running Proctor service instead")
    re.add_argument(
        "--engine",
        choices=("local", "ray"),
        default="local",
        help="local: this process (or --server); ray: chunks as Ray tasks on a cluster (default: local)",
    )
    re.add_argument(
        "--address",
        help="Ray cluster for --engine ray (HOST:PORT, ray://HOST:PORT or auto; default: a local instance)",
    )
    re.add_argument(
        "--forward-env",
        action="append",
        metavar="NAME",
        help="also send this environment variable (e.g. PROCTOR_JUDGE_API_KEY) to --engine ray's tasks; "
        "repeatable. Only scoring settings are sent otherwise: Ray shows a job's environment in its dashboard "
        "and state API",
    )
    re.add_argument("--token", help="bearer token for --server (default: PROCTOR_TOKEN)")
    again = re.add_mutually_exclusive_group()
    again.add_argument(
        "--resume", action="store_true", help="continue an interrupted run into the same output"
    )
    again.add_argument("--force", action="store_true", help="overwrite an existing output")
    re.add_argument("--group-field", help="field naming the prompt a sample belongs to; enables pass@k")
    re.add_argument(
        "--k", type=_ks, default=DEFAULT_KS, help="pass@k values of k, comma-separated (default: 1,8,64,256)"
    )
    re.add_argument(
        "--compare-field", help="field holding an old reward (number, bool or Score) to compare with"
    )
    re.add_argument("--batch-size", type=_positive, default=512, help="rows per chunk written (default: 512)")
    re.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    re.add_argument("--summary-json", metavar="PATH", help="also write the summary as JSON to PATH")
    re.set_defaults(func=cmd_rescore)

    doctor = commands.add_parser(
        "doctor",
        help="check sandbox backends and language toolchains",
        description="Check which sandbox backends work here and, for each language, whether its toolchain is "
        "installed and a hello world compiles and runs in the default backend. Exit 1 unless the default "
        "backend and Python work.",
    )
    doctor.add_argument("--json", action="store_true", help="print the report as JSON")
    doctor.add_argument(
        "--backend", help="backend to check programs in (default: PROCTOR_SANDBOX_BACKEND or nsjail)"
    )
    doctor.add_argument("--no-run", action="store_true", help="only look for toolchains; run no program")
    doctor.add_argument(
        "--budget", type=float, default=120.0, help="seconds for all hello-world runs together (default: 120)"
    )
    doctor.set_defaults(func=cmd_doctor)

    tasks = commands.add_parser(
        "tasks",
        help="make tasks from an environment",
        description="Make tasks from an environment (puzzle.sudoku, puzzle.mix, demo.*) as JSONL: one "
        "{prompt, reference, verifier, metadata} per line. The same arguments always give the same tasks.",
    )
    tasks.add_argument("name", help="environment name, e.g. puzzle.sudoku (see GET /v1/environments)")
    tasks.add_argument("--count", default="1", help="how many tasks (default: 1)")
    tasks.add_argument("--seed", default="0", help="seed (default: 0)")
    tasks.add_argument("--split", default="train", help="train or test (default: train)")
    tasks.add_argument(
        "--difficulty", help="difficulty level, e.g. easy, medium, hard (default: the environment's)"
    )
    tasks.add_argument("--config", help="config values as a JSON object (override the level's)")
    tasks.add_argument("-o", "--output", help="output JSONL file (default: stdout)")
    tasks.set_defaults(func=cmd_tasks)

    from proctor.trainer.config import add_config_arguments

    train = commands.add_parser(
        "train",
        help="train a policy with the GRPO reference trainer",
        description="Train a causal LM with GRPO on a Proctor environment or dataset, rewards scored by Proctor "
        "(in-process, or through --server). Every config key is also a flag; flags override the --config file.",
    )
    add_config_arguments(train)
    train.set_defaults(func=cmd_train)
    return parser


class _BriefFormatter(logging.Formatter):
    """Log lines without tracebacks: a verifier's exception is already in its row's Score."""

    def formatException(self, ei: Any) -> str:  # noqa: N802 - logging's name
        return ""


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    brief = logging.getLevelName(level.upper()) != logging.DEBUG
    formatter = _BriefFormatter if brief else logging.Formatter
    handler.setFormatter(formatter("proctor: %(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=level.upper(), handlers=[handler], force=True)


def _first_error(exc: Any) -> str:
    first = exc.errors(include_url=False)[0]
    return f"{'.'.join(str(p) for p in first['loc'])}: {first['msg']}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run the `proctor` command line; returns the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse's own usage errors (and --help) end here
        return exc.code if isinstance(exc.code, int) else 2
    if args.func is not cmd_serve:  # the service sets up its own logging, tracebacks included
        try:
            _setup_logging(args.log_level or "warning")
        except ValueError:
            print(f"proctor: unknown --log-level {args.log_level!r}", file=sys.stderr)
            return 2
    from pydantic import ValidationError

    try:
        return args.func(args)
    except CliError as exc:
        print(f"proctor: {exc}", file=sys.stderr)
        return exc.code
    except ValidationError as exc:  # a bad PROCTOR_* variable, read when the settings are first needed
        print(f"proctor: invalid settings: {_first_error(exc)}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # a module named in PROCTOR_PLUGINS that does not exist
        print(f"proctor: cannot import {exc.name!r} (check PROCTOR_PLUGINS): {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("proctor: interrupted", file=sys.stderr)
        return 130
    except RecursionError:  # input JSON deeper than the parser goes (a JSONL line, a --config value)
        print("proctor: input data is nested too deeply to read", file=sys.stderr)
        return 2
    except BrokenPipeError:  # `proctor verifiers | head`: stop quietly, and keep exit-time flushes quiet too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
