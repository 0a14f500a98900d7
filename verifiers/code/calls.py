"""Function calls into a C, C++, Java, Go, Rust or JavaScript program, one sandbox per submission.

`HarnessProgram` builds the call harness (harness.py) around the candidate once, compiles it once, and runs
one call per run in the warm exec mode (one jail; the compiled harness fork+exec'd per call, each call with its
own CPU limit, and a crash ends that call only). It answers like `WarmPython.call`: a `CallResult` whose value
is plain data decoded here from the harness's one record line, so the `code` verifier's call and assert-script
formats drive both alike.

Whose fault is what: a signature outside the harness's types, no such function, or arguments of the task that
the signature cannot take is the program's (a compile_error, the message says which); the reference's values
outside the typed languages' domain is the request's (a 422 when the reference is parsed).
"""

from __future__ import annotations

import dataclasses
import json
import secrets
from collections.abc import Sequence
from typing import Any

from proctor.sandboxes.job import Backend, CommandResult, CompileOutcome, RunLimits, RunVerdict
from proctor.sandboxes.languages import Language, get_language
from proctor.sandboxes.program import Submission
from proctor.sandboxes.warm import CallResult
from proctor.verifiers.code import harness, signature
from proctor.verifiers.code.signature import Mismatch, Signature, Unsupported

TYPED = ("c", "cpp", "java", "go", "rust")
HARNESS_LANGUAGES = (*TYPED, "javascript")


def _java_harness_language() -> Language:
    java = get_language("java")

    def run_argv(src: str, source: str, memory_mb: int) -> list[str]:
        argv = java.run_argv(src, source, memory_mb)
        return [*argv[:-1], harness.JAVA_CLASS]

    return dataclasses.replace(java, run_argv=run_argv)


class HarnessProgram:
    """A non-Python candidate wrapped in a call harness: `start()` compiles it, `call()` runs one call (a
    `sandboxes.program.Caller`, like `WarmPython` in call mode)."""

    def __init__(
        self,
        language: str,
        code: str,
        *,
        entry_point: str,
        method_of: str | None = None,
        limits: RunLimits | None = None,
        backend: Backend | str | None = None,
        extra_names: Sequence[str] = (),
    ):
        self.language = get_language(language).name
        if self.language not in HARNESS_LANGUAGES:
            raise ValueError(f"no call harness for {self.language}")
        self.code = code
        self.entry_point = entry_point
        self.method_of = method_of
        # Functions besides the entry point the caller will call (an assert script's candidate_names); in
        # JavaScript, where no signature is parsed, they join the harness's table even if no pattern found them.
        self.extra_names = list(extra_names)
        self.limits = limits or RunLimits()
        self.backend = backend
        self.signatures: dict[str, Signature] = {}
        self.names: list[str] = []
        self._submission: Submission | None = None
        self._outcome: CompileOutcome | None = None

    def __enter__(self) -> HarnessProgram:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Kill the sandbox."""
        if self._submission is not None:
            self._submission.close()

    def _source(self) -> str:
        """The harness program; Unsupported when the entry point cannot be called."""
        if self.language == "javascript":
            found = harness.js_names(self.code)
            self.names = list(
                dict.fromkeys(
                    [
                        self.entry_point,
                        *([self.method_of] if self.method_of else []),
                        *self.extra_names,
                        *found,
                    ]
                )
            )
            return harness.js_program(self.code, self.names)
        main = signature.entry(self.language, self.code, self.entry_point, self.method_of)
        table = signature.functions(self.language, self.code)
        callable_ = [s for s in table.values() if s.result.kind != "unsupported" and s.name != main.name]
        if self.method_of:
            callable_ = [s for s in callable_ if s.owner == self.method_of]
        self.signatures = {main.name: main, **{s.name: s for s in callable_}}
        self.names = list(self.signatures)
        build = {
            "c": harness.c_program,
            "cpp": harness.cpp_program,
            "java": harness.java_program,
            "go": harness.go_program,
            "rust": harness.rust_program,
        }[self.language]
        return build(self.code, list(self.signatures.values()))

    def start(self) -> CompileOutcome:
        """Build and compile the harness once (later calls return the first outcome)."""
        if self._outcome is not None:
            return self._outcome
        try:
            source = self._source()
        except Unsupported as exc:
            self._outcome = CompileOutcome(status="compile_error", message=f"cannot call the program: {exc}")
            return self._outcome
        language: Language | str = _java_harness_language() if self.language == "java" else self.language
        self._submission = Submission(language, source, limits=self.limits, backend=self.backend, warm=True)
        self._outcome = self._submission.compile()
        return self._outcome

    def check(self, name: str, args: Sequence[Any]) -> str | None:
        """Why `name(*args)` cannot be called (None when it can): arity or a type mismatch."""
        if self.language == "javascript":
            try:
                json.dumps(list(args), allow_nan=False)
            except (TypeError, ValueError) as exc:
                return f"arguments that are not JSON: {exc}"
            return None
        found = self.signatures.get(name)
        if found is None:
            return f"no callable function {name}"
        if len(args) != len(found.params):
            return f"{found.describe()} takes {len(found.params)} arguments, the test gives {len(args)}"
        try:
            for param, value in zip(found.params, args, strict=True):
                signature.encode(value, param.type, param.name)
        except Mismatch as exc:
            return f"{found.describe()}: {exc}"
        return None

    def _request(self, marker: str, name: str, args: Sequence[Any], method_of: str | None) -> str:
        if self.language == "javascript":
            body = json.dumps({"name": name, "method_of": method_of, "args": list(args)}, allow_nan=False)
            return f"{marker}\n{body}\n"
        found = self.signatures[name]
        tokens = [marker, name]
        for param, value in zip(found.params, args, strict=True):
            tokens.extend(signature.encode(value, param.type, param.name))
        return " ".join(tokens) + "\n"

    def call(
        self,
        name: str,
        args: Sequence[Any] = (),
        kwargs: dict[str, Any] | None = None,
        *,
        method_of: str | None = None,
        limits: RunLimits | None = None,
    ) -> CallResult:
        """Call `name(*args)` in a fresh process of the compiled harness; the value comes back as plain data."""
        limits = limits or self.limits
        outcome = self.start()
        if not outcome.ok or self._submission is None:
            verdict = (
                RunVerdict.sandbox_error if outcome.status == "sandbox_error" else RunVerdict.runtime_error
            )
            return CallResult(result=_failure(name, verdict, f"the program is not loaded: {outcome.status}"))
        problem = "keyword arguments are Python-only" if kwargs else self.check(name, args)
        if problem is not None:
            return CallResult(
                result=_failure(name, RunVerdict.runtime_error, f"cannot call {name}: {problem}")
            )
        marker = secrets.token_hex(12)
        stdin = self._request(marker, name, args, method_of or self.method_of)
        result = self._submission.run(stdin, limits)
        return self._judge(result, marker, name)

    def _judge(self, result: CommandResult, marker: str, name: str) -> CallResult:
        called = CallResult(result=result)
        if result.verdict is not RunVerdict.ok or result.stdout_truncated:
            return called
        # split("\n"), not splitlines(): JSON.stringify leaves U+2028, U+2029 and U+0085 raw inside strings,
        # and splitlines() would cut a correct record there.
        records = [line for line in result.stdout.split("\n") if line.startswith(marker + " ")]
        if not records:
            result.verdict = RunVerdict.runtime_error
            result.detail = f"the call ended without returning (exit status {result.exit_code})"
            return called
        called.returned = True
        if len(records) > 1:
            called.not_plain = "more than one result record (the program printed one of its own)"
            return called
        _, status, payload = (records[0] + " ").split(" ", 2)
        try:
            if status == "notplain":
                called.not_plain = str(json.loads(payload))[:200]
            elif status != "ok":
                called.not_plain = f"a record of status {status[:20]!r}"
            elif self.language == "javascript":
                called.value, called.plain = json.loads(payload), True
            else:
                tokens = iter(payload.split())
                value = signature.decode(tokens, self.signatures[name].result)
                if next(tokens, None) is not None:
                    raise ValueError("trailing tokens")
                called.value, called.plain = value, True
        except (ValueError, StopIteration, RecursionError, OverflowError) as exc:
            called.value, called.plain = None, False
            called.not_plain = f"an undecodable record ({type(exc).__name__})"
        return called


def _failure(name: str, verdict: RunVerdict, detail: str) -> CommandResult:
    return CommandResult(name=name, verdict=verdict, detail=detail)
