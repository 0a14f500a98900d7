"""Replica load test: 256+ concurrent clients against 1, 2 and 4 service replicas, and cheap-verifier latency while
code items saturate the CPUs.

Run with `.venv/bin/python bench/replicas_load.py [--out FILE]` (about 5 minutes on 2 cores). Each replica is a
separate `python -m proctor.api` process on its own loopback port (cache off, so every item is really scored);
the client spreads requests over them round-robin, as a load balancer would. Phases:

1. **mix**: `--clients` keep-alive clients for `--duration` seconds, each sending one request after another from
   a 50/30/20 mix of `text.match`, `math` and small Python `code` items (every item different), against 1, 2 and
   4 replicas; then 1 replica with a small pool-lane queue (`PROCTOR_MAX_QUEUE`), so it is overloaded and must
   answer 429 with `Retry-After`. A client that gets 429 waits `Retry-After` seconds and sends the item again
   (to the next replica); a request is lost when it never gets an answer (connection dropped, time-out).
   Latency is the client's: from the first send to the 200, retries included.
2. **isolation**: `--iso-clients` clients sending only code items (more CPU-bound requests in flight than the
   pool has workers) plus `--probes` clients sending `text.match`, one request at a time, against 1 replica.
3. **before**: phases 2 and the 1-replica mix again on the tree of `--baseline-rev` (default: the commit before
   admission lanes), exported with `git archive` into a temporary folder, for the before/after comparison.

The client is a minimal HTTP/1.1 client on asyncio streams (as in bench/service.py): httpx's async pool costs
more CPU per request than the service's inline verifiers do, and client and service share the machine.
Prints a markdown section, and writes it to --out when given.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from common import free_port, git_commit  # bench/common.py: the script's folder is on sys.path
from service import make_items

ROOT = Path(__file__).resolve().parents[1]
BASELINE_REV = "38518fc^"  # the tree before admission lanes (one admission queue shared by every request)
REQUEST_TIMEOUT_S = 120.0
# uvicorn closes a keep-alive connection idle for 5 s (timeout_keep_alive); a client that spreads its requests over
# several replicas leaves each connection idle that long, so it opens a fresh one rather than write into a closing one.
IDLE_REOPEN_S = 4.0
KINDS = ("text.match", "math", "code")
Group = tuple[int, list[str] | None, float]
"""Clients of one kind: how many, the verifiers each cycles through (None: the mix), the pause after each answer."""


# -- items ---------------------------------------------------------------------------------------------------


class Items:
    """Unique items of each kind, so no cache (local or shared) could answer one."""

    def __init__(self, seed: int):
        self.rng = random.Random(seed)
        self.texts = make_items(2000, seed)
        self.count = 0

    def make(self, kind: str) -> bytes:
        """One request body of `kind`, different from every other body this object made."""
        self.count += 1
        n = self.count
        if kind == "text.match":
            item = dict(self.texts[n % len(self.texts)])
            item["id"] = n
            item["response"] = f"{item['response']} (#{n})"
        elif kind == "math":
            a, b = self.rng.randint(1, 10**6), self.rng.randint(2, 999)
            gold = f"\\frac{{{a}}}{{{b}}}"
            answer = gold if self.rng.random() < 0.5 else f"\\frac{{{a + 1}}}{{{b}}}"
            item = {
                "id": n,
                "verifier": "math",
                "response": f"So the answer is \\boxed{{{answer}}}.",
                "reference": gold,
            }
        else:
            a, b = self.rng.randint(-(10**6), 10**6), n
            program = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
            item = {
                "id": n,
                "verifier": "code",
                "response": program,
                "reference": {
                    "language": "python",
                    "tests": {
                        "format": "stdio",
                        "cases": [
                            {"stdin": f"{a} {b}\n", "stdout": f"{a + b}\n"},
                            {"stdin": "3 4\n", "stdout": "7\n"},
                        ],
                    },
                },
            }
        return json.dumps(item).encode()


def pick_mix(rng: random.Random) -> str:
    """text.match 50%, math 30%, code 20%."""
    roll = rng.random()
    return "text.match" if roll < 0.5 else "math" if roll < 0.8 else "code"


# -- servers -------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def replicas(count: int, tree: Path, logs: Path, **overrides: str) -> Iterator[list[int]]:
    """Start `count` service processes from `tree` on free ports; yields the ports, stops them after."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("PROCTOR_")}
    env.pop("PYTHONPATH", None)  # the tree's own `proctor` package, first on the path as the working folder
    env.update(PROCTOR_CACHE_SIZE="0", PROCTOR_LOG_LEVEL="warning", **overrides)
    processes: list[subprocess.Popen] = []
    ports: list[int] = []
    try:
        for index in range(count):
            port = free_port()
            log = (logs / f"replica-{tree.name}-{count}-{index}.log").open("wb")
            processes.append(
                subprocess.Popen(
                    [sys.executable, "-m", "proctor.api"],
                    cwd=tree,
                    env={**env, "PROCTOR_PORT": str(port)},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
            ports.append(port)
        for port in ports:
            wait_healthy(port)
        warm(ports)
        yield ports
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def wait_healthy(port: int) -> None:
    """Wait until the replica answers /healthz."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=5).status_code == 200:
                return
        time.sleep(0.2)
    raise SystemExit(f"bench: the replica on port {port} did not come up")


def warm(ports: list[int]) -> None:
    """Score a few items of each kind on every replica, so pool workers and sandboxes have imported and started."""
    items = Items(seed=999)
    for port in ports:
        for kind in KINDS * 3:
            answer = httpx.post(
                f"http://127.0.0.1:{port}/v1/score",
                content=items.make(kind),
                headers={"content-type": "application/json"},
                timeout=REQUEST_TIMEOUT_S,
            )
            if answer.status_code != 200 or answer.json()["status"] != "ok":
                raise SystemExit(f"bench: warming {kind} on port {port} failed: {answer.text[:300]}")


# -- the client ----------------------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the clients saw, per verifier."""

    latencies_ms: dict[str, list[float]] = field(default_factory=lambda: {kind: [] for kind in KINDS})
    not_ok: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    rejected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    retry_after_missing: int = 0
    other_status: dict[int, int] = field(default_factory=dict)
    sent: int = 0
    lost: int = 0
    client_lag_ms: list[float] = field(default_factory=list)
    measure_from: float = 0.0
    """Requests sent before this (time.monotonic) are answered and counted but not in the latencies: all clients
    start at once, and that first burst (every client's first request parsed together) is not steady state."""
    stop_at: float = 0.0
    answered: int = 0
    all_text_ms: list[float] = field(default_factory=list)
    """text.match latencies including the warm-up's first burst."""
    in_window: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    """200s received between measure_from and stop_at, per verifier: the throughput's numerator."""
    errors: list[str] = field(default_factory=list)


class Connection:
    """One keep-alive HTTP/1.1 connection to one replica."""

    def __init__(self, port: int):
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.used = 0.0

    async def post(self, body: bytes) -> tuple[int, dict[str, str], bytes]:
        """POST /v1/score; the status, the headers (lower-case names) and the body."""
        if self.writer is not None and time.monotonic() - self.used > IDLE_REOPEN_S:
            self.close()
        if self.writer is None or self.reader is None:
            self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)
        self.writer.write(
            b"POST /v1/score HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        await self.writer.drain()
        head = await self.reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        payload = await self.reader.readexactly(int(headers.get("content-length", "0")))
        self.used = time.monotonic()
        if headers.get("connection", "").lower() == "close":
            self.close()
        return status, headers, payload

    def close(self) -> None:
        """Drop the connection; the next post opens a new one."""
        if self.writer is not None:
            self.writer.close()
        self.reader = self.writer = None


class RoundRobin:
    """The client side of a load balancer: each send goes to the next replica."""

    def __init__(self, ports: list[int]):
        self.ports = ports
        self.turn = 0

    def next(self) -> int:
        """The index of the replica for the next send."""
        self.turn += 1
        return self.turn % len(self.ports)


async def client(
    group: Group, seed: int, balancer: RoundRobin, stop_at: float, tally: Tally, items: Items
) -> None:
    """Send requests one after another until stop_at: the group's kinds cycled, or the 50/30/20 mix when None,
    pausing the group's pause_s after each answer."""
    _, kinds, pause_s = group
    rng = random.Random(seed)
    connections = [Connection(port) for port in balancer.ports]
    turn = 0
    try:
        while time.monotonic() < stop_at:
            kind = kinds[turn % len(kinds)] if kinds else pick_mix(rng)
            turn += 1
            body = items.make(kind)
            tally.sent += 1
            started = time.perf_counter()
            measured = time.monotonic() >= tally.measure_from
            give_up = time.monotonic() + REQUEST_TIMEOUT_S
            answered = False
            while not answered and time.monotonic() < give_up:
                connection = connections[balancer.next()]
                try:
                    status, headers, payload = await asyncio.wait_for(
                        connection.post(body), give_up - time.monotonic()
                    )
                except (OSError, asyncio.IncompleteReadError, TimeoutError, ValueError) as exc:
                    connection.close()
                    tally.errors.append(f"{type(exc).__name__}: {exc}")
                    await asyncio.sleep(0.5)
                    continue
                if status == 429:
                    tally.rejected[kind] += 1
                    retry = headers.get("retry-after")
                    if retry is None:
                        tally.retry_after_missing += 1
                    await asyncio.sleep(float(retry or 1))
                    continue
                answered = True
                if status != 200:
                    tally.other_status[status] = tally.other_status.get(status, 0) + 1
                    continue
                tally.answered += 1
                if kind == "text.match":
                    tally.all_text_ms.append((time.perf_counter() - started) * 1000)
                if measured:
                    tally.latencies_ms[kind].append((time.perf_counter() - started) * 1000)
                if tally.measure_from <= time.monotonic() <= tally.stop_at:
                    tally.in_window[kind] += 1
                if json.loads(payload)["status"] != "ok":
                    tally.not_ok[kind] += 1
            if not answered:
                tally.lost += 1
            if pause_s:
                await asyncio.sleep(pause_s)
    finally:
        for connection in connections:
            connection.close()


async def drive(ports: list[int], groups: list[Group], duration_s: float, warmup_s: float = 0.0) -> Tally:
    """Run each group's clients (count, kinds, pause_s) against the replicas for warmup_s, then duration_s measured.

    Requests sent in the warm-up are answered and counted (sent, answered, lost, 429) but not in the latencies
    or the throughput; after duration_s no client sends a new request, and every one in flight is waited for."""
    tally = Tally()
    balancer = RoundRobin(ports)
    items = Items(seed=1)
    tally.measure_from = time.monotonic() + warmup_s
    tally.stop_at = stop_at = tally.measure_from + duration_s
    tasks = []
    seed = 0
    for group in groups:
        for _ in range(group[0]):
            seed += 1
            tasks.append(client(group, seed, balancer, stop_at, tally, items))

    async def heartbeat() -> None:
        # How late the client's own event loop wakes: latency it adds to every request it measures.
        while time.monotonic() < stop_at:
            before = time.perf_counter()
            await asyncio.sleep(0.01)
            tally.client_lag_ms.append((time.perf_counter() - before - 0.01) * 1000)

    await asyncio.gather(heartbeat(), *tasks)
    return tally


def percentile(values: list[float], share: float) -> float:
    """The share-quantile of values (nearest rank); NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def ms(value: float) -> str:
    """Milliseconds for a table: below 10 ms with one decimal, else whole; seconds from 10 s."""
    if value != value:  # NaN
        return "—"
    if value >= 10_000:
        return f"{value / 1000:.1f} s"
    return f"{value:.1f}" if value < 10 else f"{value:,.0f}"


# -- the phases ----------------------------------------------------------------------------------------------


def mix_row(
    label: str, count: int, tree: Path, logs: Path, args: argparse.Namespace, **overrides: str
) -> str:
    """One table row: the mix against `count` replicas of `tree`."""
    with replicas(count, tree, logs, **overrides) as ports:
        tally = asyncio.run(drive(ports, [(args.clients, None, 0.0)], args.duration, args.warmup))
    answered = tally.answered
    cells = [label, str(count), f"{sum(tally.in_window.values()) / args.duration:,.0f}"]
    for kind in KINDS:
        values = tally.latencies_ms[kind]
        cells += [ms(percentile(values, 0.5)), ms(percentile(values, 0.99))]
        if kind == "text.match":
            cells.append(ms(percentile(tally.all_text_ms, 0.99)))
    rejected = sum(tally.rejected.values())
    cells += [
        f"{tally.sent:,}",
        f"{answered:,}",
        f"{rejected:,}"
        + (f" ({tally.retry_after_missing} without Retry-After)" if tally.retry_after_missing else ""),
        str(sum(tally.not_ok.values())),
        ", ".join(f"{status}: {n}" for status, n in sorted(tally.other_status.items())) or "0",
        str(tally.lost),
        f"{ms(percentile(tally.client_lag_ms, 0.99))} / {ms(max(tally.client_lag_ms, default=float('nan')))}",
    ]
    print("  ".join(cells), flush=True)
    if tally.errors:
        print(f"  connection errors (retried): {len(tally.errors)}, e.g. {tally.errors[:3]}", flush=True)
    return "| " + " | ".join(cells) + " |"


def isolation_row(label: str, tree: Path, logs: Path, args: argparse.Namespace) -> str:
    """One table row: code clients saturating one replica while probe clients send text.match."""
    with replicas(1, tree, logs) as ports:
        groups: list[Group] = [
            (args.iso_clients, ["code"], 0.0),
            (args.probes, ["text.match"], args.probe_pause),
        ]
        tally = asyncio.run(drive(ports, groups, args.iso_duration, args.warmup))
    text, code = tally.latencies_ms["text.match"], tally.latencies_ms["code"]
    cells = [
        label,
        f"{len(text):,}",
        ms(percentile(text, 0.5)),
        ms(percentile(text, 0.99)),
        ms(max(text, default=float("nan"))),
        f"{tally.in_window['code'] / args.iso_duration:,.1f}",
        ms(percentile(code, 0.5)),
        ms(percentile(code, 0.99)),
        str(sum(tally.rejected.values())),
        str(tally.lost),
        f"{ms(percentile(tally.client_lag_ms, 0.99))} / {ms(max(tally.client_lag_ms, default=float('nan')))}",
    ]
    print("  ".join(cells), flush=True)
    return "| " + " | ".join(cells) + " |"


def export_tree(rev: str, into: Path) -> Path:
    """The repository at `rev`, exported with git archive (the working tree and .git are left alone)."""
    tree = into / "baseline"
    tree.mkdir()
    archive = subprocess.run(["git", "archive", rev], cwd=ROOT, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def main() -> None:
    """Run the phases and print the markdown section."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, default=256)
    parser.add_argument("--duration", type=float, default=20.0, help="seconds of load per mix row")
    parser.add_argument("--replicas", default="1,2,4")
    parser.add_argument(
        "--overload-queue", type=int, default=16, help="PROCTOR_MAX_QUEUE of the overloaded row"
    )
    parser.add_argument("--iso-clients", type=int, default=120)
    parser.add_argument("--probes", type=int, default=4)
    parser.add_argument("--iso-duration", type=float, default=20.0)
    parser.add_argument(
        "--probe-pause", type=float, default=0.05, help="seconds each text.match probe waits between requests"
    )
    parser.add_argument("--skip-mix", action="store_true", help="only the isolation rows")
    parser.add_argument(
        "--warmup", type=float, default=3.0, help="seconds of load before each row's measured window"
    )
    parser.add_argument("--baseline-rev", default=BASELINE_REV, help="tree for the before rows; empty: none")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="proctor-replicas-"))
    logs = work / "logs"
    logs.mkdir()
    load_before = os.getloadavg()[0]
    started = time.monotonic()
    try:
        baseline = export_tree(args.baseline_rev, work) if args.baseline_rev else None
        counts = [] if args.skip_mix else args.replicas.split(",")
        mix_rows = [mix_row("lanes", int(count), ROOT, logs, args) for count in counts]
        mix_rows += (
            []
            if args.skip_mix
            else [
                mix_row(
                    f"lanes, PROCTOR_MAX_QUEUE={args.overload_queue}",
                    1,
                    ROOT,
                    logs,
                    args,
                    PROCTOR_MAX_QUEUE=str(args.overload_queue),
                )
            ]
        )
        iso_rows = [isolation_row("lanes", ROOT, logs, args)]
        if baseline is not None:
            iso_rows.append(
                isolation_row(f"before (`{args.baseline_rev}`, one admission queue)", baseline, logs, args)
            )
            if not args.skip_mix:
                mix_rows.append(mix_row(f"before (`{args.baseline_rev}`)", 1, baseline, logs, args))
    except BaseException:
        print(f"bench: replica logs kept in {logs}", file=sys.stderr)
        raise
    total_s = time.monotonic() - started
    load_after = os.getloadavg()[0]
    shutil.rmtree(work, ignore_errors=True)

    lines = [
        f"## replicas: load at {args.clients} clients, latency isolation ({dt.date.today().isoformat()}, "
        f"commit {git_commit()})",
        "",
        f"Machine: {os.cpu_count()} cores (shared), Python {platform.python_version()}, 1-min load average "
        f"{load_before:.1f} before and {load_after:.1f} after; clients and replicas share the machine; "
        f"{total_s:.0f} s in all. Each replica is a `python -m proctor.api` process with default settings "
        "(2 pool workers, 2 sandbox workers, admission: pool lane 64 running + 256 waiting, inline lane 256 + "
        "1024), cache off, behind a client-side round-robin. Latency is the client's, from first send to the "
        "200, retries after 429 included. Reproduce: `.venv/bin/python bench/replicas_load.py`.",
        "",
        f"**Mix**: {args.clients} keep-alive clients for {args.warmup:g} s of warm-up (answered and counted, "
        f"not in the latencies) then {args.duration:g} s measured, each row; 50% `text.match`, 30% "
        "`math`, 20% small Python `code` (every item different). A 429 is retried after its `Retry-After`; "
        "lost: requests never answered.",
        "",
        "| tree | replicas | answered/s | text p50 ms | text p99 ms | text p99 ms with the first burst | math p50 ms | math p99 ms | code p50 ms | "
        "code p99 ms | sent | answered | 429 (retried) | not ok | other status | lost | client lag p99 / max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *mix_rows,
        "",
        f"**Isolation**: 1 replica, {args.iso_clients} clients sending only code items (more CPU-bound requests "
        f"in flight than pool workers or sandbox slots) and {args.probes} clients sending `text.match`, one at a "
        f"time with {args.probe_pause:g} s between them, for {args.warmup:g} + {args.iso_duration:g} s (warm-up, measured).",
        "",
        "| tree | text requests | text p50 ms | text p99 ms | text max ms | code answered/s | code p50 ms | "
        "code p99 ms | 429 | lost | client lag p99 / max ms |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        *iso_rows,
        "",
        "Today's figures quoted in issue 20 (one admission queue, 256 clients, 60 s): mix 164 requests/s, "
        "`text.match` p50 1.75 s / p99 2.2 s; 120 code clients: `text.match` p50 1 ms, p99 7.7 s.",
        "",
    ]
    report = "\n".join(lines)
    print(report)
    if args.out is not None:
        args.out.write_text(report)


if __name__ == "__main__":
    main()
