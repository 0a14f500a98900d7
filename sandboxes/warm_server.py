"""The warm-start server, run inside the sandbox by /usr/bin/python3: load the candidate once, fork per test.

Standalone on purpose (the sandbox has no Proctor package): it is copied into the job's working directory and
started as `python3 -I warm_server.py MODE SOURCE`. It speaks length-prefixed JSON on its original stdin and
stdout (4-byte big-endian length, then UTF-8 JSON); those fds are moved out of the way before any candidate
code runs, and fds 0 and 1 then point at /dev/null and stderr, so stray prints cannot break a frame.

Modes:
- `stdio`: the source is compiled (parsed, not run) once and the standard modules it imports are imported
  once; each test forks a child that runs the code as `__main__` with the test's stdin. The parent never
  runs candidate code.
- `call`: the source is imported once as module `solution` (in the parent); each test forks a child that
  calls a named function (or a method of a fresh instance of a class) with arguments sent as plain data, and
  sends the return value back as plain data. A value that is not plain data (say an object with a forged
  `__eq__`, or an `int` subclass) is reported as such, never compared here.

An `exec` request (stdio mode, a server loaded with an empty program) starts a compiled program (`argv`,
`env`) with posix_spawn on the test's stdin, and a `batch` request runs many such tests in one exchange:
compiled languages get the same one-jail-per-submission warm mode, a spawn per test instead of a fresh jail
per test. The server still runs no candidate code.

A `script` request (either mode; meant for a server loaded with an empty program) runs a test script as
`__main__` in a child whose globals hold a proxy for each name the host sends (the entry point and the names
the reference lists, never the rest of the candidate's), then the request's trusted `setup` code, then the
script: a call writes a `{"call": name, "args", "kwargs"}` frame straight to the protocol and reads the host's
`{"value"}` or `{"failed"}` answer, so the script (untrusted too) and the candidate live in separate
sandboxes and meet only through plain data. A script that dies on an undefined name ends with status
MISSING_NAME and a last stderr line naming it.

Per test the parent measures the child's CPU time (whole tree where it can), enforces the CPU limit, the
wall-clock backstop and the stdout cap, and after the test kills everything the child left behind: as the
pid namespace's init (pid 1) it SIGKILLs every other process; otherwise it kills the child's session.

The server is not dumpable (prctl), so a test, which runs as the same uid, cannot take its fds (pidfd_getfd,
/proc/1/fd) or its memory; each test child is dumpable again, like a fresh process.
"""

import ast
import atexit
import base64
import contextlib
import fcntl
import io
import json
import math
import os
import resource
import select
import signal
import struct
import sys
import threading
import time
import traceback
import types

HEADER = struct.Struct(">I")
MAX_REQUEST = 1 << 30
TICK_S = 0.005
IS_INIT = os.getpid() == 1
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
MAX_DEPTH = 200
MISSING_NAME = 113  # a test script's exit status when it died on a name that nothing defined
# Whether candidate code has run in this jail (a forked test, or the import in call mode). From then on, anything
# that goes wrong with the server itself (an OSError, a failed fork, its death) may be the program's doing: a
# test can lower the server's rlimits (prlimit), which the seccomp policy refuses but the kernel would allow.
CANDIDATE_RAN = [False]


# -- plain data ----------------------------------------------------------------------------------------
# JSON plus one-key tag objects for what JSON lacks; only exact built-in types are plain data.


class NotPlain(Exception):
    """A value that is not plain data (an instance of a user class, a subclass of a built-in type ...)."""


def encode(value, depth=0):
    """Plain data -> JSON-able; raises NotPlain naming the first offending type."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nesting deeper than {MAX_DEPTH}")
    kind = type(value)
    if value is None or kind is bool or kind is str:
        return value
    if kind is int:
        return value if -(2**53) < value < 2**53 else {"int": hex(value)}
    if kind is float:
        return value if math.isfinite(value) else {"float": repr(value)}
    if kind is list:
        return [encode(item, depth + 1) for item in value]
    if kind is tuple:
        return {"tuple": [encode(item, depth + 1) for item in value]}
    if kind is dict:
        return {"dict": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if kind is set or kind is frozenset:
        return {kind.__name__: [encode(item, depth + 1) for item in value]}
    if kind is bytes:
        return {"bytes": base64.b64encode(value).decode()}
    if kind is complex:
        return {"complex": [encode(value.real), encode(value.imag)]}
    raise NotPlain(f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', '?')}")


def decode(data):
    """The inverse of encode (the host has its own copy; this one decodes test arguments)."""
    if isinstance(data, list):
        return [decode(item) for item in data]
    if not isinstance(data, dict):
        return data
    ((tag, inner),) = data.items()
    if tag == "int":
        return int(inner, 16)
    if tag == "float":
        return float(inner)
    if tag == "tuple":
        return tuple(decode(item) for item in inner)
    if tag == "dict":
        return {decode(k): decode(v) for k, v in inner}
    if tag == "set":
        return {decode(item) for item in inner}
    if tag == "frozenset":
        return frozenset(decode(item) for item in inner)
    if tag == "bytes":
        return base64.b64decode(inner)
    if tag == "complex":
        return complex(decode(inner[0]), decode(inner[1]))
    raise ValueError(f"unknown tag {tag!r}")


# -- framing -------------------------------------------------------------------------------------------


def read_exact(fd, n):
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame(fd):
    header = read_exact(fd, HEADER.size)
    if header is None:
        return None
    (size,) = HEADER.unpack(header)
    if size > MAX_REQUEST:
        raise ValueError("request too large")
    body = read_exact(fd, size)
    return None if body is None else json.loads(body)


def write_frame(fd, message):
    body = json.dumps(message, separators=(",", ":")).encode()
    data = memoryview(HEADER.pack(len(body)) + body)
    while data:
        data = data[os.write(fd, data) :]


# -- one test in a child -------------------------------------------------------------------------------


def fresh_stdio():
    """New sys.stdin/stdout/stderr objects on fds 0, 1, 2 (the parent's may hold buffered bytes)."""
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(
        io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8"
    )
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(1, "w", closefd=False)), encoding="utf-8"
    )
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(
        io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
        encoding="utf-8",
        errors="backslashreplace",
        line_buffering=True,
    )


def exit_status(exc):
    """The status `python3 prog.py` would end with for a SystemExit."""
    code = exc.code
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    with contextlib.suppress(Exception):
        print(code, file=sys.stderr)
    return 1


def format_error(exc):
    """The traceback `python3 prog.py` would print, without the server's own frames."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename == __file__:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def print_error(exc):
    """Print the traceback on stderr, as the interpreter would."""
    with contextlib.suppress(BaseException):
        sys.stderr.write(format_error(exc))


def finish(status):
    """End the child the way an interpreter ends: non-daemon threads, atexit hooks, flushed streams."""
    with contextlib.suppress(BaseException):
        threading._shutdown()
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(BaseException):
            stream.flush()
    os._exit(status)


def run_then_finish(body):
    """Run a test's body in the forked child and end the child with the status a plain process would have."""
    try:
        body()
        status = 0
    except SystemExit as exc:
        status = exit_status(exc)
    except BaseException as exc:
        print_error(exc)
        status = 1
    finish(status)


def child_stdio(state, request):
    module = types.ModuleType("__main__")
    module.__file__ = state["path"]
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    sys.argv = [state["path"]]
    sys.path.insert(0, state["dir"])
    run_then_finish(lambda: exec(state["code"], module.__dict__))


def child_call(state, request, result_fd):
    def call():
        target = state["module"]
        if request.get("method_of"):
            target = getattr(target, request["method_of"])()
        function = getattr(target, request["name"])
        args = decode(request.get("args") or [])
        kwargs = decode(request.get("kwargs") or {"dict": []})
        value = function(*args, **kwargs)
        try:
            message = {"value": encode(value)}
        except NotPlain as exc:
            message = {"not_plain": str(exc)}
        except RecursionError:
            message = {"not_plain": "nesting too deep"}
        # The arguments as the call left them, for tasks judged on in-place changes (LeetCode's "modify nums").
        with contextlib.suppress(NotPlain, RecursionError):
            message["args"] = encode(list(args))
        body = json.dumps(message, separators=(",", ":")).encode()
        view = memoryview(body)
        while view:
            view = view[os.write(result_fd, view) :]

    run_then_finish(call)


class CandidateFailed(Exception):
    """Raised in a test script when a call into the candidate did not return plain data."""


def child_script(request, proto_in, proto_out):
    """Run a test script as `__main__`, with each candidate name a proxy that calls out through the host."""

    def proxy(name):
        def call(*args, **kwargs):
            try:
                message = {"call": name, "args": encode(list(args)), "kwargs": encode(dict(kwargs))}
            except NotPlain as exc:
                raise TypeError(f"{name}() can only be given plain data, not {exc}") from None
            write_frame(proto_out, message)
            reply = read_frame(proto_in)
            if reply is None:
                os._exit(112)
            if "value" in reply:
                return decode(reply["value"])
            raise CandidateFailed(f"{name}(): {reply.get('failed', 'no value')}")

        call.__name__ = call.__qualname__ = name
        return call

    module = types.ModuleType("__main__")
    module.__file__ = "test.py"
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    # Only the names the host sends (the entry point and the reference's own list), never every name the
    # candidate defines: a candidate's `abs` must not replace the builtin the script's asserts use.
    for name in request.get("names", []):
        setattr(module, name, proxy(name))
    module.CandidateFailed = CandidateFailed

    def body():
        try:
            setup = request.get("setup")
            if setup:  # trusted code of the reference's (helpers, imports), in the script's globals
                exec(compile(setup, "setup.py", "exec", dont_inherit=True), module.__dict__)
            exec(compile(request.get("script", ""), "test.py", "exec", dont_inherit=True), module.__dict__)
        except NameError as exc:
            # A name nobody defined (not UnboundLocalError, which a script's own flow can cause): the host
            # decides whether that is the reference's fault.
            if type(exc) is not NameError or not getattr(exc, "name", None):
                raise
            print_error(exc)
            with contextlib.suppress(BaseException):
                sys.stderr.write(f"proctor: the test script's name {exc.name!r} is not defined\n")
            finish(MISSING_NAME)

    run_then_finish(body)


# -- the parent: run one test --------------------------------------------------------------------------


def proc_cpu(pid):
    """CPU seconds of one live process (all its threads) and of its reaped children, from /proc."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return 0.0
    return sum(int(x) for x in fields[11:15]) / CLOCK_TICKS


def waited_for_cpu(pid):
    """Seconds the process spent runnable but not running (a loaded machine), from /proc schedstat; 0 for a
    process that lowered its own priority below this server's (a nice value above it, or SCHED_IDLE), which
    waits by its own choice (as runner.lowered_priority on the host)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            fields = handle.read().rsplit(b")", 1)[1].split()
        if int(fields[16]) > os.getpriority(os.PRIO_PROCESS, 0) or int(fields[38]) == os.SCHED_IDLE:
            return 0.0
        with open(f"/proc/{pid}/schedstat", "rb") as handle:
            return int(handle.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def tree_cpu(child):
    """CPU seconds of every process in the jail but this one (init), or of the child alone elsewhere."""
    if not IS_INIT:
        return proc_cpu(child)
    total = 0.0
    for name in os.listdir("/proc"):
        if name.isdigit() and name != "1":
            total += proc_cpu(int(name))
    return total


def reaped_cpu():
    times = os.times()
    return times.children_user + times.children_system


def kill_leftovers(child):
    """Kill whatever the test left running and reap it, so the next test starts alone."""
    if IS_INIT:
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        while True:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break
    else:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child, signal.SIGKILL)


def test_limits(request):
    """(CPU seconds, wall-clock backstop seconds, stdout cap, stderr cap) of a test request."""
    cpu_limit = float(request.get("cpu_s", 2.0))
    wall_limit = float(request.get("wall_s") or 2 * cpu_limit + 1)
    return (
        cpu_limit,
        wall_limit,
        int(request.get("output_bytes", 16 << 20)),
        int(request.get("stderr_bytes", 64 << 10)),
    )


def stdin_memfd(text):
    """A memfd holding the test's stdin, at offset 0."""
    fd = os.memfd_create("stdin")
    data = memoryview(text.encode())
    while data:
        data = data[os.write(fd, data) :]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def run_child(state, request, cpu_limit, stdin_fd, out_w, err_w, res_w):
    """The forked child: set up its stdio, limits and signals, then become the test. Never returns."""
    try:
        os.setsid()
        os.dup2(stdin_fd, 0)
        os.dup2(out_w, 1)
        os.dup2(err_w, 2)
        # The fds the child keeps (the result pipe; the protocol for a script's proxies) go to 3, 4.
        op = request.get("op")
        keep = [res_w] if op == "call" else list(state["proto"]) if op == "script" else []
        high = [fcntl.fcntl(fd, fcntl.F_DUPFD, 100) for fd in keep]
        for number, fd in enumerate(high, start=3):
            os.dup2(fd, number)
        os.closerange(3 + len(high), 65536)
        seconds = max(1, math.ceil(cpu_limit)) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, seconds))
        # Dumpable again like a fresh process (the server stays out of reach); first, since a process
        # that is not dumpable cannot open its own /proc/self/oom_score_adj for writing.
        set_dumpable(True)
        try:
            with open("/proc/self/oom_score_adj", "w") as handle:
                handle.write("1000")
        except OSError:
            pass
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        signal.signal(signal.SIGXCPU, signal.SIG_DFL)  # the server ignores it (spawn_program)
        signal.signal(signal.SIGINT, signal.default_int_handler)  # a test keeps the usual Ctrl-C
        if op == "exec":
            exec_program(request)
        fresh_stdio()
        if op == "call":
            child_call(state, request, 3)
        elif op == "script":
            child_script(request, 3, 4)
        else:
            child_stdio(state, request)
    finally:
        os._exit(111)


# What a spawned program starts with, as a forked test sets it up before exec: its own session, stdio on the
# test's pipes, the default action for the signals the server ignores (Python ignores SIGPIPE and SIGXFSZ; the
# server also SIGINT and SIGXCPU), an empty signal mask, RLIMIT_CPU and oom_score_adj 1000 (below).
SPAWN_DEFAULT_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGXCPU)
OOM_ADJ = {
    "fd": None,
    "own": b"0",
}  # the server's /proc/self/oom_score_adj, opened before it stopped being dumpable


def spawn_program(request, cpu_limit, stdin_fd, out_w, err_w):
    """Start a compiled program with posix_spawn (vfork+exec: about 0.5 ms where fork+exec of this Python
    process costs 1.5-2 ms), set up as a forked test would be; None when it cannot (the caller forks instead,
    which also reports a program that cannot be exec'd as exit status 127).

    A spawned child runs no code of ours between fork and exec, so what a forked child sets on itself is set on
    the server around the spawn and inherited: RLIMIT_CPU's soft limit (the hard one cannot be raised again;
    the server's watch and the host's cgroup cap stop the program first anyway) and oom_score_adj (raised to
    1000 and put back: an unprivileged process may lower it again to the value it started with). The server
    ignores SIGXCPU, so its own CPU time passing the lowered soft limit during the spawn does not end it. exec
    makes the child dumpable again; every fd the server holds is close-on-exec (`seal_fds`)."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TMPDIR", "LANG")}
    env.update(request.get("env") or {})
    argv = request["argv"]
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    seconds = max(1, math.ceil(cpu_limit)) + 1
    if hard != resource.RLIM_INFINITY:
        seconds = min(seconds, hard)
    adjusted = oom_adjust(b"1000")
    home = os.getcwd()
    try:
        resource.setrlimit(resource.RLIMIT_CPU, (seconds, hard))
        # posix_spawn has no working-directory action here: the server (single-threaded) enters the job's
        # folder for the spawn and goes back after it, so its own paths (the snapshot's roots) stay its own.
        if request.get("folder"):
            os.chdir(request["folder"])
        return os.posix_spawn(
            argv[0],
            argv,
            env,
            file_actions=[
                (os.POSIX_SPAWN_DUP2, stdin_fd, 0),
                (os.POSIX_SPAWN_DUP2, out_w, 1),
                (os.POSIX_SPAWN_DUP2, err_w, 2),
            ],
            setsid=True,
            setsigmask=(),
            setsigdef=SPAWN_DEFAULT_SIGNALS,
        )
    except (OSError, ValueError, TypeError, IndexError):
        return None
    finally:
        if request.get("folder"):
            os.chdir(home)
        resource.setrlimit(resource.RLIMIT_CPU, (soft, hard))
        if adjusted:
            oom_adjust(OOM_ADJ["own"])


def oom_adjust(value):
    """Write the server's own oom_score_adj (the spawned child inherits it); False when it cannot."""
    fd = OOM_ADJ["fd"]
    if fd is None:
        return False
    try:
        os.pwrite(fd, value, 0)
    except OSError:
        return False
    return True


def seal_fds():
    """Make every fd above 2 that the server inherited close-on-exec (Python's own are already), so no spawned
    program inherits one, and open oom_score_adj for `oom_adjust` while the server can still open it."""
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd > 2:
                with contextlib.suppress(OSError):
                    os.set_inheritable(fd, False)
    with contextlib.suppress(OSError):
        fd = os.open("/proc/self/oom_score_adj", os.O_RDWR | os.O_CLOEXEC)
        own = os.pread(fd, 16, 0).strip() or b"0"
        OOM_ADJ["fd"], OOM_ADJ["own"] = fd, own


def exec_program(request):
    """A compiled program: the server (trusted, it never ran candidate code) forks, the child becomes the
    program. Its environment is the request's; exec failing is exit status 127."""
    env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "TMPDIR", "LANG")}
    env.update(request.get("env") or {})
    signal.signal(signal.SIGXFSZ, signal.SIG_DFL)  # as a spawned program (spawn_program) and a fresh shell's
    try:
        if request.get("folder"):
            os.chdir(request["folder"])
        os.execve(request["argv"][0], request["argv"], env)
    except OSError as exc:
        os.write(2, f"exec {request['argv'][0]}: {exc.strerror}\n".encode())
        os._exit(127)


class Watch:
    """The parent's side of one running test: the child's pipes (capped), and its limits enforced while it
    runs. The first limit passed sets `verdict` and kills the child's process group."""

    def __init__(self, pid, limits, pipes, started, reaped_before):
        self.pid = pid
        self.cpu_limit, self.wall_limit, self.out_cap, self.err_cap = limits
        self.out_r, self.err_r, self.res_r = pipes
        self.started = started
        self.reaped_before = reaped_before
        # fd -> [bytes kept, bytes seen, cap]
        self.streams = {
            self.out_r: [bytearray(), 0, self.out_cap],
            self.err_r: [bytearray(), 0, self.err_cap],
        }
        if self.res_r is not None:
            self.streams[self.res_r] = [bytearray(), 0, self.out_cap]
        self.open_fds = set(self.streams)
        self.verdict, self.detail, self.killed = None, "", False
        self.peak_cpu = 0.0
        self.waited = (
            0.0  # the child's wait for a CPU (runnable, not running): a loaded machine, not the program
        )

    def drain(self, fd):
        """Read what one pipe holds, keeping up to its cap; False at EOF."""
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        entry = self.streams[fd]
        room = entry[2] - len(entry[0])
        if room > 0:
            entry[0] += chunk[:room]
        entry[1] += len(chunk)
        return True

    def until_exit(self, pidfd):
        """Pump the pipes and check the limits until the child exits (killing it at the first limit passed)."""
        poller = select.poll()
        for fd in self.open_fds:
            poller.register(fd, select.POLLIN)
        poller.register(pidfd, select.POLLIN)
        exited = False
        while not exited:
            exited = self.pump(poller, pidfd)
            if self.verdict is None:
                self.verdict, self.detail = self.over_limit()
            if self.verdict is not None and not self.killed:
                self.killed = True
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.pid, signal.SIGKILL)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.pid, signal.SIGKILL)

    def pump(self, poller, pidfd):
        """One poll: read what is ready; True when the child has exited."""
        exited = False
        for fd, _ in poller.poll(TICK_S * 1000):
            if fd == pidfd:
                exited = True
            elif fd in self.open_fds and not self.drain(fd):
                poller.unregister(fd)
                self.open_fds.discard(fd)
        return exited

    def over_limit(self):
        """(verdict, detail) of the first limit the test passed so far, else (None, "")."""
        if self.streams[self.out_r][1] > self.out_cap:
            return "output_limit", f"stdout passed {self.out_cap} bytes"
        if self.res_r is not None and self.streams[self.res_r][1] > self.out_cap:
            return "output_limit", f"return value passed {self.out_cap} bytes"
        elapsed = time.monotonic() - self.started
        if elapsed <= TICK_S:
            return None, ""
        self.peak_cpu = max(self.peak_cpu, tree_cpu(self.pid) + reaped_cpu() - self.reaped_before)
        self.waited = max(self.waited, waited_for_cpu(self.pid))
        wall_limit = self.wall_limit
        if self.peak_cpu > self.cpu_limit:
            return "time_limit", f"cpu {self.peak_cpu:.3f} s > {self.cpu_limit:.3f} s"
        if elapsed > wall_limit and elapsed - self.waited > wall_limit:
            return "time_limit", f"wall-clock backstop {wall_limit:.1f} s (sleeping or blocked)"
        if elapsed > 5 * wall_limit + 5:
            return "time_limit", f"wall-clock hard cap {5 * wall_limit + 5:.1f} s"
        return None, ""

    def close(self, pidfd):
        """Take what is left in the pipes and close them. A survivor (only outside a pid namespace) may hold
        them open and keep writing: read a bounded amount, never until EOF."""
        for fd in list(self.open_fds):
            os.set_blocking(fd, False)
            for _ in range(64):
                if not self.drain(fd) or not select.select([fd], [], [], 0)[0]:
                    break
        os.close(pidfd)
        for fd in self.streams:
            os.close(fd)

    def reply(self, status, usage, cpu, wall):
        """The reply frame for the reaped child: the verdict (the limit it passed, else from how it ended), its
        measurements and its output."""
        exit_code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        verdict, detail = self.verdict, self.detail
        if verdict is None:
            verdict, detail = exit_verdict(cpu, self.cpu_limit, exit_code, sig)
        out, err = self.streams[self.out_r], self.streams[self.err_r]
        reply = {
            "verdict": verdict,
            "detail": detail,
            "exit_code": exit_code,
            "signal": sig,
            "cpu_s": round(cpu, 6),
            "wall_s": round(wall, 6),
            "cpu_wait_s": round(min(self.waited, wall), 6),
            "peak_memory_mb": round(usage.ru_maxrss / 1024, 3),
            "stdout": out[0].decode("utf-8", "replace"),
            "stdout_truncated": out[1] > self.out_cap,
            "stderr": err[0].decode("utf-8", "replace"),
            "stderr_truncated": err[1] > self.err_cap,
        }
        if self.res_r is not None:
            raw = bytes(self.streams[self.res_r][0])
            reply["returned"] = bool(raw) and self.streams[self.res_r][1] <= self.out_cap
            reply["result"] = raw.decode("utf-8", "replace") if reply["returned"] else ""
        return reply


def exit_verdict(cpu, cpu_limit, exit_code, sig):
    """(verdict, detail) of a child that ended within the limits the parent watched."""
    if cpu > cpu_limit or sig == signal.SIGXCPU:
        return "time_limit", f"cpu {cpu:.3f} s > {cpu_limit:.3f} s"
    if sig == signal.SIGXFSZ:  # as a job's command: the file size limit is an output limit
        return "output_limit", "a file passed the file size limit"
    if sig == signal.SIGKILL:
        # Nothing here sent it: inside the jail only the cgroup's OOM killer does.
        return "memory_limit", "killed by SIGKILL (memory limit)"
    if sig is not None:
        return "runtime_error", f"killed by signal {sig}"
    if exit_code != 0:
        return "runtime_error", f"exit status {exit_code}"
    return "ok", ""


def job_folder(cwd):
    """The absolute path of `cwd`, a folder under the server's working directory (relative, no `.` or `..`
    part, no link on the way out of it); ValueError otherwise (the host checks it too: a refusal here is the
    server's failure, never a run somewhere else)."""
    if not isinstance(cwd, str) or not cwd or "\0" in cwd or cwd.startswith("/"):
        raise ValueError(f"cwd must be a relative folder, not {cwd!r}")
    if any(part in ("", ".", "..") for part in cwd.split("/")):
        raise ValueError(f"cwd must not hold empty, . or .. parts: {cwd!r}")
    base = os.path.realpath(os.getcwd())
    target = os.path.realpath(os.path.join(base, cwd))
    if not target.startswith(base + os.sep) or not os.path.isdir(target):
        raise ValueError(f"cwd {cwd!r} is not a folder inside the working directory")
    return target


def run_test(state, request):
    """Run one test in a forked child, watched until it ends, and reap it and everything it left: the reply."""
    if request.get("cwd") is not None:
        # checked before anything runs; runs only compiled programs (`exec`) in a folder of their own
        if request.get("op") != "exec":
            raise ValueError("cwd is for exec requests only")
        request = {**request, "folder": job_folder(request["cwd"])}
    elif "folder" in request:
        request = {key: value for key, value in request.items() if key != "folder"}  # set from cwd only
    if request.get("baseline"):
        # The host changed the jail's files between requests (put_files): what they are now is what every
        # later test must find, so the next untrusted test takes a fresh snapshot.
        state["kept"] = None
    if not request.get("trusted") and state.get("kept") is None:
        state["kept"] = snapshot()
    limits = test_limits(request)
    call = request.get("op") == "call"
    stdin_fd = stdin_memfd(request.get("stdin", ""))
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    res_r, res_w = os.pipe() if call else (None, None)
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    reaped_before = reaped_cpu()
    started = time.monotonic()
    pid = spawn_program(request, limits[0], stdin_fd, out_w, err_w) if request.get("op") == "exec" else None
    if pid is None:
        pid = os.fork()
        if pid == 0:
            run_child(state, request, limits[0], stdin_fd, out_w, err_w, res_w)
    if not request.get("trusted"):  # the host's own step (a compiler on the candidate's source) is not
        CANDIDATE_RAN[0] = True
    state["child"] = pid
    for fd in (stdin_fd, out_w, err_w, res_w):
        if fd is not None:
            os.close(fd)
    pidfd = os.pidfd_open(pid)
    watch = Watch(pid, limits, (out_r, err_r, res_r), started, reaped_before)
    watch.until_exit(pidfd)
    watch.waited = max(watch.waited, waited_for_cpu(pid))  # still readable: the child is not reaped yet
    _, status, usage = os.wait4(pid, 0)
    wall = time.monotonic() - started
    kill_leftovers(pid)
    state["child"] = None
    watch.close(pidfd)
    cpu = max(watch.peak_cpu, usage.ru_utime + usage.ru_stime, reaped_cpu() - reaped_before)
    reply = watch.reply(status, usage, cpu, wall)
    # Full is judged on what the test left, before it is removed: a full disk after a run is output_limit.
    full = filesystem_full(request.get("full"))
    if full:
        reply["full"] = full
    if request.get("trusted"):
        state["kept"] = None  # the host's own step changed the files: the next test takes the snapshot
    else:
        tampered = restore(state["kept"])
        if tampered:
            reply["tampered"] = tampered
    return reply


# -- what a test leaves behind -------------------------------------------------------------------------
# Each test starts from the jail as it was before the first test: whatever a test created in the working
# directory or the temporary one is removed after it, and so are the System V IPC objects it made (they
# outlive processes and hold memory), so the next test has the same files, disk, inodes and memory that a
# fresh jail would give it. A test that changed or removed a file that was there before (the program itself,
# its source) is reported (`tampered`): the host replaces the jail before the next test.


def roots():
    """The folders tests may write: the working directory and TMPDIR."""
    found = []
    for path in (os.getcwd(), os.environ.get("TMPDIR") or "/tmp"):
        if path and os.path.isdir(path) and path not in found:
            found.append(path)
    return found


def walk(root):
    """(relative path, lstat) of everything under root, never following links; parents before children."""
    found = []
    stack = [""]
    while stack:
        relative = stack.pop()
        try:
            entries = list(os.scandir(os.path.join(root, relative) if relative else root))
        except OSError:
            continue
        for entry in entries:
            path = os.path.join(relative, entry.name)
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            found.append((path, info))
            if entry.is_dir(follow_symlinks=False):
                stack.append(path)
    return found


def fingerprint(info):
    """What must not change in a file that was there before the tests (a directory's listing may)."""
    if stat_is_dir(info.st_mode):
        return ("dir", info.st_ino, info.st_mode)
    # ctime, not mtime: a program may set a file's mtime back after writing it, never its ctime.
    return ("file", info.st_ino, info.st_mode, info.st_size, info.st_ctime_ns)


def stat_is_dir(mode):
    return (mode & 0o170000) == 0o040000


IPC_KINDS = ("shm", "sem", "msg")


def ipc_ids():
    """{kind: set of ids} of the System V IPC objects in this IPC namespace."""
    found = {}
    for kind in IPC_KINDS:
        ids = set()
        with contextlib.suppress(OSError, ValueError, IndexError), open(f"/proc/sysvipc/{kind}") as handle:
            for line in handle.read().splitlines()[1:]:
                ids.add(int(line.split()[1]))
        found[kind] = ids
    return found


def ipc_count():
    """How many System V IPC objects exist in this IPC namespace (three calls, no /proc read), or None."""
    try:
        libc = libc_functions()
        import ctypes

        buffer = ctypes.create_string_buffer(256)
        counts = []
        for function, command, index in ((libc.shmctl, 14, 0), (libc.semctl, 19, 7), (libc.msgctl, 12, 0)):
            ctypes.memset(buffer, 0, 256)
            # SHM_INFO: shm_info.used_ids; SEM_INFO: seminfo.semusz (sets); MSG_INFO: msginfo.msgpool (queues)
            if function is libc.semctl:
                done = function(0, 0, command, buffer)
            else:
                done = function(0, command, buffer)
            if done < 0:
                return None
            counts.append(ctypes.c_int.from_buffer(buffer, 4 * index).value)
        return sum(counts)
    except (OSError, AttributeError, ImportError, ValueError):
        return None


def snapshot():
    """The jail as a test must find it: every path under the roots with its fingerprint, and the IPC ids."""
    files = {}
    folders = roots()
    for root in folders:
        with contextlib.suppress(OSError):
            files[(root, "")] = fingerprint(os.lstat(root))  # the root itself: its mode, never its listing
        for path, info in walk(root):
            files[(root, path)] = fingerprint(info)
    return {
        "files": files,
        "ipc": ipc_ids(),
        "ipc_count": ipc_count(),
        "roots": folders,
        "dirs": dir_state(files),
    }


def dir_state(files):
    """{full path: (atime_ns, mtime_ns, inode flags or None, xattr names)} of the folders that were there before
    the tests: a test may change these on a folder it owns (utimensat, FS_IOC_SETFLAGS) and the next one would
    read them back, so `restore` puts them back and counts attributes it cannot as tampering."""
    found = {}
    for (root, path), mark in files.items():
        if mark[0] != "dir":
            continue
        full = os.path.join(root, path) if path else root
        with contextlib.suppress(OSError):
            info = os.lstat(full)
            found[full] = (info.st_atime_ns, info.st_mtime_ns, dir_flags(full), xattr_names(full))
    return found


FS_IOC_GETFLAGS = 0x80086601
FS_IOC_SETFLAGS = 0x40086602


def dir_flags(path, value=None):
    """A folder's inode flags (chattr's), or None where the file system has none; with `value`, set them."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        if value is not None:
            fcntl.ioctl(fd, FS_IOC_SETFLAGS, struct.pack("i", value))
        return struct.unpack("i", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 4))[0]
    except OSError:
        return None
    finally:
        os.close(fd)


def xattr_names(path):
    """The names of a folder's extended attributes (the jail forbids setting any; a change is tampering)."""
    try:
        return tuple(sorted(os.listxattr(path, follow_symlinks=False)))
    except OSError:
        return ()


def restore_dirs(dirs):
    """Put the folders' times and inode flags back as they were before the tests; problems as text."""
    problems = []
    for full, (atime, mtime, flags, names) in dirs.items():
        try:
            info = os.lstat(full)
        except OSError:
            continue  # a removed folder is reported by the walk
        if not stat_is_dir(info.st_mode):
            continue
        if flags is not None and dir_flags(full) != flags and dir_flags(full, flags) != flags:
            problems.append(f"cannot reset the flags of {full}")
        if xattr_names(full) != names:
            problems.append(f"changed the attributes of {full}")
        if (info.st_atime_ns, info.st_mtime_ns) != (atime, mtime):
            try:
                os.utime(full, ns=(atime, mtime), follow_symlinks=False)
            except OSError as exc:
                problems.append(f"cannot reset the times of {full}: {exc.strerror}")
    return problems


def restore(kept):
    """Remove what the last test created under the roots and its IPC objects; a reason when it changed or
    removed what was there before, or something could not be removed (the host then replaces the jail)."""
    if kept is None:
        return ""
    problems = []
    seen = set()
    extra = []
    for root in kept["roots"]:
        with contextlib.suppress(OSError):
            info = os.lstat(root)
            seen.add((root, ""))
            if kept["files"].get((root, "")) != fingerprint(info):
                problems.append(f"changed {root}")
        for path, info in walk(root):
            before = kept["files"].get((root, path))
            seen.add((root, path))
            if before is None:
                extra.append((root, path, info))
            elif before != fingerprint(info):
                problems.append(f"changed {path}")
    for key in kept["files"]:
        if key not in seen:
            problems.append(f"removed {key[1]}")
    # Deepest first, so a folder is empty when its turn comes.
    for root, path, info in sorted(extra, key=lambda item: item[1].count(os.sep), reverse=True):
        full = os.path.join(root, path)
        try:
            if stat_is_dir(info.st_mode):
                os.rmdir(full)
            else:
                os.unlink(full)
        except OSError:
            # A folder the test made unwritable: open it up once and try again (never the roots themselves).
            try:
                parent = os.path.dirname(full)
                if parent and parent != root:
                    os.chmod(parent, 0o700)
                if stat_is_dir(info.st_mode):
                    os.chmod(full, 0o700)
                    for name in os.listdir(full):
                        os.unlink(os.path.join(full, name))
                    os.rmdir(full)
                else:
                    os.unlink(full)
            except OSError as exc:
                problems.append(f"cannot remove {path}: {exc.strerror}")
    # After the removals, which set the folders' mtimes themselves.
    problems += restore_dirs(kept.get("dirs", {}))
    count = ipc_count()
    if count is None or count != kept["ipc_count"]:
        problems += remove_ipc(kept["ipc"])
    return "; ".join(problems)[:500]


def remove_ipc(before):
    """Remove the System V IPC objects made since `before`; problems as text."""
    now = ipc_ids()
    if all(now[kind] <= before.get(kind, set()) for kind in IPC_KINDS):
        return []
    try:
        libc = libc_functions()
    except (OSError, AttributeError, ImportError):
        return ["cannot remove System V IPC objects"]
    problems = []
    for kind in IPC_KINDS:
        for ident in sorted(now[kind] - before.get(kind, set())):
            if kind == "shm":
                done = libc.shmctl(ident, 0, None)
            elif kind == "sem":
                done = libc.semctl(ident, 0, 0)
            else:
                done = libc.msgctl(ident, 0, None)
            if done != 0:
                problems.append(f"cannot remove System V {kind} {ident}")
    return problems


def libc_functions():
    """The C library (ctypes), loaded once: prctl and the System V IPC controls."""
    if not _libc:
        import ctypes

        _libc.append(ctypes.CDLL(None, use_errno=True))
    return _libc[0]


_libc = []


BATCH_OPS = ("run", "exec")
MIN_WALL_S = 0.05  # the least wall backstop a batch's test gets from what is left of the batch's budget
# Output characters (stdout and stderr) a batch's replies may hold before it ends early: the host holds a whole
# batch's reply at once (JSON escapes a control byte as 6), so without a bound each test's output cap would be
# multiplied by the batch's length in the service's memory. The test that passes it is the last; the host
# sends the rest as the next batch.
BATCH_OUTPUT_CHARS = 2 * 1024 * 1024


def run_batch(state, request):
    """Several tests in one request (`tests`: each a `run` or `exec` request of its own), run one after another
    exactly as one request each would be, so the host pays one exchange for all of them. The first test that
    does not end ok ends the batch under `stop_on_failure`; so does a server failure, and a filesystem (`full`,
    the jail's /box) with no byte or inode left after a test (`full` in that test's reply; the host judges it)."""
    results = []
    # The caller's wall budget for the whole batch (the code verifier's, less what it spent already): each
    # test's backstop is cut to what is left of it, time spent waiting for a CPU not counted, and no test
    # starts once it is spent (the first always runs, with MIN_WALL_S at least).
    budget = request.get("wall_budget_s")
    began = time.monotonic()
    waited = 0.0
    output = 0
    own = resource.getrusage(resource.RUSAGE_SELF)
    for test in request.get("tests") or []:
        if output > BATCH_OUTPUT_CHARS:
            break
        if budget is not None:
            left = float(budget) - (time.monotonic() - began - waited)
            if results and left <= MIN_WALL_S:
                break
            test = {**test, "wall_s": min(float(test.get("wall_s") or 1e9), max(MIN_WALL_S, left))}
        if test.get("op") not in BATCH_OPS:
            results.append(server_failure(state, f"a batch holds {test.get('op')!r} requests only as tests"))
            break
        try:
            reply = run_test(state, {**test, "full": request.get("full")})
        except Exception:
            reply = server_failure(state, traceback.format_exc())
        results.append(reply)
        output += len(str(reply.get("stdout") or "")) + len(str(reply.get("stderr") or ""))
        with contextlib.suppress(TypeError, ValueError):
            waited += float(reply.get("cpu_wait_s") or 0.0)
        if reply.get("server_failed") or reply.get("full") or reply.get("tampered"):
            break  # the host replaces the jail: the rest of the tests go to a fresh one
        if request.get("stop_on_failure") and reply.get("verdict") != "ok":
            break
        # A test that sat idle (sleeping, blocked) longer than its CPU limit also ends the batch when failures
        # do: the caller counts such tests as it counts time limits, and stops a program that idles on each.
        idle = (
            float(reply.get("wall_s") or 0)
            - float(reply.get("cpu_wait_s") or 0)
            - float(reply.get("cpu_s") or 0)
        )
        if request.get("stop_on_failure") and idle > float(test.get("cpu_s", 2.0)):
            reply["idle"] = True
            break
    # The server's own CPU over the batch (watching a test samples /proc every tick, more for more threads):
    # the host compares the jail cgroup's CPU with the replies' sum plus this, so that CPU no reply accounts
    # for (auto-reaped workers) is seen. Its children's CPU is not in it: RUSAGE_SELF is this process's.
    now = resource.getrusage(resource.RUSAGE_SELF)
    spent = now.ru_utime + now.ru_stime - own.ru_utime - own.ru_stime
    return {"results": results, "server_cpu_s": round(spent, 6)}


def filesystem_full(path):
    """Why the filesystem at `path` is full ("" when it is not, or when no path is given)."""
    if not path:
        return ""
    try:
        stats = os.statvfs(path)
    except OSError:
        return ""
    if stats.f_bavail == 0:
        return "bytes"
    if stats.f_favail == 0:
        return "files"
    return ""


def server_failure(state, trace):
    """The reply when the server itself failed during a test. Once candidate code ran in this jail that is the
    program's verdict (runtime_error: a test may have lowered our rlimits or starved us), never a machinery
    failure; before, it is one (sandbox_error). Either way the host replaces the server (`server_failed`)."""
    if IS_INIT or state.get("child"):  # outside a pid namespace, only a child that is not reaped yet
        with contextlib.suppress(Exception):
            kill_leftovers(state.get("child"))
    ran = CANDIDATE_RAN[0]
    return {
        "verdict": "runtime_error" if ran else "sandbox_error",
        "detail": ("the warm server failed after the program ran: " if ran else "the warm server failed: ")
        + trace[-2000:],
        "exit_code": None,
        "signal": None,
        "server_failed": True,
    }


# -- startup -------------------------------------------------------------------------------------------


def preimport(tree):
    """Import, in the parent, the standard modules the program imports (trusted code), so children skip it."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    stdlib = getattr(sys, "stdlib_module_names", ())
    for name in sorted(names):
        if name.split(".")[0] in stdlib:
            with contextlib.suppress(BaseException):
                __import__(name)


def load(mode, path):
    """Prepare the candidate: compile it (stdio) or import it (call). Returns (state, error or None)."""
    directory = os.path.dirname(os.path.abspath(path))
    state = {"path": path, "dir": directory}
    with open(path, "rb") as handle:
        source = handle.read()
    try:
        tree = ast.parse(source, path)
        state["code"] = compile(tree, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return state, {"kind": "compile_error", "message": "".join(traceback.format_exception_only(exc))}
    if mode == "stdio":
        preimport(tree)
        return state, None
    module = types.ModuleType("solution")
    module.__file__ = path
    sys.modules["solution"] = module
    CANDIDATE_RAN[0] = True
    sys.path.insert(0, directory)
    try:
        exec(state["code"], module.__dict__)
    except SystemExit as exc:
        return state, {"kind": "runtime_error", "message": f"exited while loading (status {exc.code})"}
    except BaseException as exc:
        return state, {"kind": "runtime_error", "message": format_error(exc)}
    state["module"] = module
    return state, None


PR_SET_DUMPABLE = 4


_prctl = []


def set_dumpable(on):
    """prctl(PR_SET_DUMPABLE): whether processes of our uid may open /proc/<pid>/fd, /proc/<pid>/mem or use
    pidfd_getfd on this one; True when it took effect."""
    try:
        if not _prctl:
            import ctypes

            _prctl.append(ctypes.CDLL(None, use_errno=True).prctl)
        return _prctl[0](PR_SET_DUMPABLE, int(on), 0, 0, 0) == 0
    except (OSError, AttributeError, ImportError):
        return False


def main():
    mode, path = sys.argv[1], sys.argv[2]
    # A test runs as our uid: without this it could take our protocol fds (pidfd_getfd, /proc/1/fd) or
    # write our memory (/proc/1/mem) and forge or garble a reply, which the host would have to report as a
    # machinery failure. A child regains it (execve resets it; a forked test sets it back).
    seal_fds()
    guarded = set_dumpable(False)
    # Keep the protocol on private fds; fd 0 reads nothing and fd 1 goes to stderr from here on.
    proto_in = os.dup(0)
    proto_out = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    # As pid 1 only signals with a handler reach the server: a test child must not be able to kill it
    # (which the host would have to report as a machinery failure, not as the program's fault).
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # The soft RLIMIT_CPU is lowered around each spawn (spawn_program): the server's own CPU time may pass it.
    signal.signal(signal.SIGXCPU, signal.SIG_IGN)
    started = time.monotonic()
    cpu_before = time.process_time()
    state, error = load(mode, path)
    state["proto"] = (proto_in, proto_out)
    sys.stdout.flush()
    write_frame(
        proto_out,
        {
            "ready": error is None,
            "error": error,
            "pid": os.getpid(),
            "init": IS_INIT,
            "guarded": guarded,
            "oom_adjust": OOM_ADJ["fd"] is not None,
            "load_s": round(time.monotonic() - started, 6),
            "load_cpu_s": round(time.process_time() - cpu_before, 6),
        },
    )
    if error is not None:
        return
    while True:
        request = read_frame(proto_in)
        if request is None or request.get("op") == "exit":
            return
        if request.get("op") == "batch":
            reply = run_batch(state, request)
        else:
            try:
                reply = run_test(state, request)
            except Exception:
                reply = server_failure(state, traceback.format_exc())
        reply["id"] = request.get("id")
        write_frame(proto_out, reply)


if __name__ == "__main__":
    main()
