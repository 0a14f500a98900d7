"""Shared fixtures: start the real service (`python -m proctor.api`) with uvicorn on a free port."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent
STARTUP_TIMEOUT_S = 30.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def server_env(port: int, **overrides: str | int | float) -> dict[str, str]:
    """The environment for a test server: test plugins, two pool workers, no PROCTOR_* leaking from outside."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH", "")]))
    env.update(
        PROCTOR_PORT=str(port),
        PROCTOR_PLUGINS="tests.plugins.slow",
        PROCTOR_POOL_WORKERS="2",
        PROCTOR_LOG_LEVEL="warning",
    )
    env.update({key: str(value) for key, value in overrides.items()})
    return env


class ServerProcess:
    """One `python -m proctor.api` subprocess; its output goes to a log file read back on failure."""

    def __init__(self, env: dict[str, str], log_path: Path):
        self.base_url = f"http://127.0.0.1:{env['PROCTOR_PORT']}"
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "proctor.api"],
            cwd=REPO_ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )

    def output(self) -> str:
        """What the server has printed so far."""
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout_s: float = STARTUP_TIMEOUT_S) -> None:
        """Poll /healthz until it answers 200; fail the test with the server's output otherwise."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(
                    f"server exited with {self.process.returncode} before it was ready:\n{self.output()}"
                )
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        pytest.fail(f"server did not answer /healthz within {timeout_s:.0f} s:\n{self.output()}")

    def stop(self) -> None:
        """SIGTERM, then SIGKILL if it does not exit in 15 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if not self._log.closed:
            self._log.close()


def _launch(tmp_dir: Path, overrides: dict[str, str | int | float]) -> ServerProcess:
    port = free_port()
    server = ServerProcess(server_env(port, **overrides), tmp_dir / f"server-{port}.log")
    try:
        server.wait_ready()
    except BaseException:  # pytest.fail raises a BaseException; never leave the process behind
        server.stop()
        raise
    return server


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository's root directory."""
    return REPO_ROOT


@pytest.fixture
def start_server(tmp_path: Path) -> Iterator[Callable[..., str]]:
    """Factory: start_server(PROCTOR_X="...", ...) starts a server with those settings and returns its URL."""
    servers: list[ServerProcess] = []

    def start(**env: str | int | float) -> str:
        server = _launch(tmp_path, env)
        servers.append(server)
        return server.base_url

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """One server with default settings, shared by the session; its base URL."""
    server = _launch(tmp_path_factory.mktemp("live-server"), {})
    yield server.base_url
    server.stop()


@pytest.fixture(scope="module")
def backend():
    """The configured sandbox backend (PROCTOR_SANDBOX_BACKEND, default nsjail); skips if it cannot run here.

    Modules that need a specific backend (the pool's strict nsjail, docker's private daemon) define their own.
    """
    from proctor.sandboxes.backends import get_backend

    name = os.environ.get("PROCTOR_SANDBOX_BACKEND", "nsjail")
    chosen = get_backend(name)
    ok, why = chosen.available()
    if not ok:
        pytest.skip(f"sandbox backend {name} unavailable: {why}")
    return chosen


@pytest.fixture(scope="session", autouse=True)
def host_devices_untouched() -> Iterator[None]:
    """Fail the run if anything (a sandbox, a tool run on the host) changed /dev/null's mode or type.

    `iverilog -o /dev/null` run as root chmods it to 0755 and breaks every non-root program on the machine.
    """
    before = os.stat("/dev/null")
    yield
    after = os.stat("/dev/null")
    assert (after.st_mode, after.st_rdev) == (before.st_mode, before.st_rdev), "/dev/null was changed"
