"""A private redis-server for tests: Debian's binary on a free port in a temporary folder, no persistence."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import redis

from tests.conftest import free_port

REDIS_START_S = 20.0


class RedisServer:
    """One `redis-server` process; `stop` and `start` again keep its port (a restart, as replicas see one)."""

    def __init__(self, folder: Path):
        binary = shutil.which("redis-server")
        if binary is None:
            pytest.skip("redis-server is not installed (apt-get install redis-server)")
        self.binary = binary
        self.folder = folder
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Start it and wait until it answers PING."""
        log = (self.folder / f"redis-{self.port}.log").open("ab")
        self.process = subprocess.Popen(
            [
                self.binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.folder),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        log.close()
        deadline = time.monotonic() + REDIS_START_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"redis-server exited with {self.process.returncode}")
            try:
                if self.client().ping():
                    return
            except redis.RedisError:
                time.sleep(0.05)
        pytest.fail(f"redis-server did not answer within {REDIS_START_S:.0f} s")

    def stop(self) -> None:
        """Kill it (SIGKILL: nothing is saved, as if the host went away)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)
        self.process = None

    def client(self) -> redis.Redis:
        """A plain client for the test's own looks."""
        return redis.Redis.from_url(self.url, socket_timeout=2, socket_connect_timeout=2)


def private_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A private redis-server for one test (each test module's `redis_server` fixture yields from this)."""
    server = RedisServer(tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def metric_value(text: str, name: str, **labels: str) -> float:
    """The sum of a metric's samples whose labels include `labels` (0 when there are none)."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        match = re.match(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)$", line)
        if match is None or match.group(1) != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', match.group(2) or ""))
        if all(found.get(key) == value for key, value in labels.items()):
            total += float(match.group(3))
    return total


def metrics_text(base_url: str) -> str:
    """The service's /metrics."""
    reply = httpx.get(f"{base_url}/metrics", timeout=30)
    reply.raise_for_status()
    return reply.text


def wait_until(predicate: Callable[[], bool], timeout_s: float = 30.0, interval_s: float = 0.1) -> bool:
    """Poll `predicate` until it is true or `timeout_s` passes; returns its last value (no timing asserted)."""
    deadline = time.monotonic() + timeout_s
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval_s)
