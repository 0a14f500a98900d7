"""docker/: the compose file validates, and the service image, built here, serves `/v1/score` from a container.

What the build test proves: docker/Dockerfile, unchanged, builds on a private dockerd (the one
tests/test_sandbox_docker.py starts) with no registry: its base is this machine's own Python imported by
docker/host-python-image.sh (standing in for python:3.11-slim), its context is the working tree as git sees it
(what `make images` sends, never .venv), and pip installs the package and every dependency from a wheelhouse
that pip fills beforehand from the configured package index (`--no-index` inside the build, which has no
network). So the multi-stage build, the venv carried into the runtime stage, the bundled nsjail binary, the
entrypoint, the HEALTHCHECK and the service answering over HTTP are all real; what it does not prove is the
pull of python:3.11-slim itself and the toolchain layer's apt-get (docker/toolchains.Dockerfile needs Debian's
mirrors: `make images`).
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

from proctor.settings import Settings
from tests.conftest import free_port
from tests.test_sandbox_docker import Dockerd, _can_mount

REPO_ROOT = Path(__file__).resolve().parent.parent
DOCKER_DIR = REPO_ROOT / "docker"
COMPOSE = DOCKER_DIR / "compose.yaml"
PYPROJECT = REPO_ROOT / "pyproject.toml"
BASE_IMAGE = "proctor-python-base:test"
SERVICE_IMAGE = "proctor:test"
TOKEN = "docker-test-token"
# The toolchains the executors call by absolute path (sandboxes/languages.py, the verilog verifier), as Debian
# packages: the toolchain image and the set-up's package list must both carry each one.
TOOLCHAIN_PACKAGES = (
    "python3",
    "gcc",
    "g++",
    "libc6-dev",
    "openjdk-17-jdk-headless",
    "nodejs",
    "golang-go",
    "rustc",
    "iverilog",
    "yosys",
)
BUILD_TIMEOUT_S = 900
READY_TIMEOUT_S = 120.0


# -- the compose file -----------------------------------------------------------------------------------


def compose_config(**env: str) -> subprocess.CompletedProcess[str]:
    """`docker-compose -f docker/compose.yaml config` with only the given variables set."""
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.skip("docker-compose is not installed (Debian package docker-compose)")
    clean = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("PROCTOR_", "POSTGRES_", "REDIS_"))
    }
    return subprocess.run(
        [binary, "-f", str(COMPOSE), "config"],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture(scope="module")
def compose() -> dict:
    """The compose file as docker-compose resolves it, with a token, a database and a Redis password set."""
    done = compose_config(
        PROCTOR_TOKEN=TOKEN,
        PROCTOR_CACHE_SECRET="cache-secret",
        POSTGRES_PASSWORD="pg-secret",
        REDIS_PASSWORD="redis-secret",
        PROCTOR_REPLICAS="4",
    )
    assert done.returncode == 0, done.stderr
    return yaml.safe_load(done.stdout)


def test_compose_file_validates_with_the_five_services(compose: dict) -> None:
    services = compose["services"]
    assert set(services) == {"proctor", "redis", "redis-cache", "postgres", "proxy"}
    for name, service in services.items():
        assert service["healthcheck"]["test"][0] == "CMD", name
        assert service["restart"] == "unless-stopped", name
    assert services["proctor"]["deploy"]["replicas"] == 4
    # Only the proxy is published; replicas are reached through it.
    assert [name for name, service in services.items() if service.get("ports")] == ["proxy"]


def test_replicas_share_redis_and_postgres_by_service_name(compose: dict) -> None:
    services = compose["services"]
    env = services["proctor"]["environment"]
    assert env["PROCTOR_REDIS_URL"] == "redis://:redis-secret@redis:6379/0"
    assert env["PROCTOR_REDIS_CACHE_URL"] == "redis://:redis-secret@redis-cache:6379/0"
    assert env["PROCTOR_DATABASE_URL"] == "postgresql+psycopg://proctor:pg-secret@postgres:5432/proctor"
    assert env["PROCTOR_TOKEN"] == TOKEN and env["PROCTOR_HOST"] == "0.0.0.0"
    assert env["PROCTOR_CACHE_SECRET"] == "cache-secret"  # its own secret: rollout workers hold the token
    postgres = services["postgres"]["environment"]
    assert (postgres["POSTGRES_USER"], postgres["POSTGRES_DB"], postgres["POSTGRES_PASSWORD"]) == (
        "proctor",
        "proctor",
        "pg-secret",
    )
    assert services["proctor"]["depends_on"] == {
        "redis": {"condition": "service_healthy"},
        "postgres": {"condition": "service_healthy"},
    }
    assert services["proctor"]["privileged"] is True  # nsjail's namespaces, mounts and cgroups


def test_proxy_config_is_mounted_and_forwards_to_the_replicas(compose: dict) -> None:
    proxy = compose["services"]["proxy"]
    mounts = [volume.split(":") for volume in proxy["volumes"]]
    sources = {Path(source).resolve(): target for source, target, *_ in mounts}
    config = DOCKER_DIR / "nginx.conf"
    assert sources == {config.resolve(): "/etc/nginx/nginx.conf"}
    text = config.read_text()
    assert "server proctor:8000 resolve" in text
    assert text.count("proxy_pass http://proctor;") >= 1
    published = proxy["ports"][0]
    assert published.startswith("127.0.0.1:8000:8000"), published
    # The proxy lets through every body the service accepts (the service answers 413 itself beyond that).
    limit = re.search(r"^    client_max_body_size (\d+)m;", text, re.M)
    assert (
        limit is not None and int(limit.group(1)) * 2**20 >= Settings.model_fields["max_body_bytes"].default
    )


def test_compose_refuses_to_run_without_a_token_or_password() -> None:
    every = {
        "PROCTOR_TOKEN": TOKEN,
        "PROCTOR_CACHE_SECRET": "cache-secret",
        "POSTGRES_PASSWORD": "pg-secret",
        "REDIS_PASSWORD": "redis-secret",
    }
    for missing in every:
        done = compose_config(**{name: value for name, value in every.items() if name != missing})
        assert done.returncode != 0 and missing in done.stderr, missing


def test_toolchain_image_installs_every_toolchain_the_setup_lists() -> None:
    listed = {
        line.strip()
        for line in (REPO_ROOT / "scripts" / "apt-packages.txt").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    dockerfile = (DOCKER_DIR / "toolchains.Dockerfile").read_text()
    installed = dockerfile.split("apt-get install", 1)[1].split("&&", 1)[0].replace("\\", " ").split()
    for package in TOOLCHAIN_PACKAGES:
        assert package in listed, f"{package} is not in scripts/apt-packages.txt"
        assert package in installed, f"{package} is not installed by docker/toolchains.Dockerfile"


# -- the service image, built and run -----------------------------------------------------------------------


def docker_cli(url: str, *args: str, timeout: float = 120, stdin: bytes | None = None) -> str:
    """Run the docker CLI against the private daemon; its stdout (fails the test with stderr otherwise)."""
    cli = shutil.which("docker", path="/usr/bin") or "docker"
    done = subprocess.run(
        [cli, *args],
        input=stdin,
        env={**os.environ, "DOCKER_HOST": url, "DOCKER_BUILDKIT": "0"},
        capture_output=True,
        timeout=timeout,
    )
    assert done.returncode == 0, (
        f"docker {args[0]} failed:\n{done.stdout.decode()[-3000:]}\n{done.stderr.decode()}"
    )
    return done.stdout.decode()


def wheelhouse(directory: Path) -> Path:
    """The package's dependencies and build requirements as wheels, by pip from the configured index."""
    project = tomllib.loads(PYPROJECT.read_text())
    requirements = [*project["project"]["dependencies"], *project["build-system"]["requires"]]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--disable-pip-version-check",
            "-w",
            str(directory),
            *requirements,
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, f"pip wheel failed:\n{done.stderr[-3000:]}"
    return directory


def build_context(wheels: Path) -> bytes:
    """The working tree as git sees it (tracked and untracked-but-not-ignored files) plus wheels/, as a tar."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=REPO_ROOT,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    buffer = io.BytesIO()
    # GNU format with whole-second times, as `git archive` and GNU tar write: dockerd misreads Python's
    # default PAX headers (sub-second mtimes) and then finds another file where the Dockerfile should be.
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for name in sorted({entry.decode() for entry in listed if entry}):
            path = REPO_ROOT / name
            if os.path.lexists(path):  # a tracked file deleted in the working tree is not sent
                tar.add(path, arcname=name, recursive=False, filter=_whole_seconds)
        tar.add(wheels, arcname="wheels", filter=_whole_seconds)
    return buffer.getvalue()


def _whole_seconds(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.mtime = int(member.mtime)
    return member


@pytest.fixture(scope="module")
def daemon_url() -> Iterator[str]:
    """A private dockerd (see tests/test_sandbox_docker.py); its socket URL."""
    binary = shutil.which("dockerd") or shutil.which("dockerd", path="/usr/sbin:/usr/bin")
    if binary is None:
        pytest.skip("dockerd is not installed (Debian package docker.io)")
    if os.geteuid() != 0:
        pytest.skip("dockerd needs root here (no rootless docker set up)")
    if not _can_mount():
        pytest.skip("no CAP_SYS_ADMIN: dockerd cannot mount its layers in this environment")
    failures = []
    for storage in ([], ["--storage-driver=vfs"]):
        daemon = Dockerd(binary, storage)
        if daemon.wait_ready():
            break
        failures.append(f"dockerd {' '.join(storage) or '(default storage)'}:\n{daemon.log_tail()}")
        daemon.stop()
    else:
        pytest.fail("dockerd did not start:\n" + "\n".join(failures))
    try:
        yield daemon.url
    finally:
        daemon.stop()


@pytest.fixture(scope="module")
def service_image(daemon_url: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    """docker/Dockerfile built on the private daemon from an imported base and a local wheelhouse; its tag."""
    # The wheelhouse (pip, network-bound) fills while the base image is made and imported (disk-bound).
    with ThreadPoolExecutor(max_workers=1) as background:
        wheels = background.submit(wheelhouse, tmp_path_factory.mktemp("wheels"))
        made = subprocess.run(
            [str(DOCKER_DIR / "host-python-image.sh"), BASE_IMAGE],
            env={
                **os.environ,
                "DOCKER_HOST": daemon_url,
                "DOCKER": shutil.which("docker", path="/usr/bin") or "docker",
            },
            capture_output=True,
            text=True,
            timeout=300,
        )
        context = build_context(wheels.result())
    assert made.returncode == 0, f"host-python-image.sh failed:\n{made.stdout}\n{made.stderr}"
    docker_cli(
        daemon_url,
        "build",
        "--network=none",  # the build reaches no index: everything comes from the context
        "--file=docker/Dockerfile",
        f"--build-arg=BASE_IMAGE={BASE_IMAGE}",
        # --no-compile: no bytecode compiled at install (the real build compiles it; here it only costs time)
        "--build-arg=PIP_INSTALL_ARGS=--no-index --find-links=/src/wheels --no-compile",
        f"--tag={SERVICE_IMAGE}",
        "-",
        stdin=context,
        timeout=BUILD_TIMEOUT_S,
    )
    return SERVICE_IMAGE


def run_in_image(url: str, image: str, code: str) -> str:
    """Run Python code with the image's venv interpreter in a throwaway container; its stdout."""
    return docker_cli(
        url, "run", "--rm", "--network=none", "--entrypoint=/opt/proctor/bin/python", image, "-c", code
    )


def test_runtime_stage_holds_the_venv_and_nsjail_but_not_the_source(
    daemon_url: str, service_image: str
) -> None:
    code = (
        "import json, os, subprocess, shutil\n"
        "from proctor.sandboxes.backends.nsjail import bundled_nsjail\n"
        "nsjail = bundled_nsjail()\n"
        "usage = subprocess.run([str(nsjail), '--help'], capture_output=True, text=True)\n"
        "print(json.dumps({'src': os.path.exists('/src'), 'wheels': os.path.exists('/src/wheels'),\n"
        "    'nsjail': str(nsjail), 'usage': 'Usage' in usage.stdout + usage.stderr,\n"
        "    'proctor': shutil.which('proctor'), 'cwd': os.getcwd()}))\n"
    )
    found = json.loads(run_in_image(daemon_url, service_image, code))
    assert found["src"] is False and found["wheels"] is False  # the builder stage stays behind
    assert (
        found["nsjail"].startswith("/opt/proctor/") and found["usage"] is True
    )  # its bundled libraries load
    assert found["proctor"] == "/opt/proctor/bin/proctor"
    assert found["cwd"] == "/var/lib/proctor"
    config = json.loads(docker_cli(daemon_url, "image", "inspect", service_image))[0]["Config"]
    assert config["Entrypoint"] == ["/opt/proctor/bin/proctor"] and config["Cmd"] == ["serve"]
    assert config["ExposedPorts"] == {"8000/tcp": {}}
    assert "PROCTOR_HOST=0.0.0.0" in config["Env"]


def test_compose_entrypoint_advertises_the_replica_address(
    daemon_url: str, service_image: str, compose: dict
) -> None:
    """The compose file's shell entrypoint, run in the image with `env` in place of the server."""
    entrypoint = compose["services"]["proctor"]["entrypoint"]
    script = entrypoint[2].replace("$$", "$")  # compose's escape for a literal $
    assert script.endswith("exec /opt/proctor/bin/proctor serve"), script
    probe = script.removesuffix("/opt/proctor/bin/proctor serve") + "/usr/bin/env"
    found = docker_cli(
        daemon_url,
        "run",
        "--rm",
        "--network=host",
        f"--entrypoint={entrypoint[0]}",
        service_image,
        "-c",
        probe,
    )
    assert re.search(r"^PROCTOR_ADVERTISE_URL=http://\d+\.\d+\.\d+\.\d+:8000$", found, re.M), found
    given = docker_cli(
        daemon_url,
        "run",
        "--rm",
        "--network=host",
        "--env=PROCTOR_ADVERTISE_URL=http://replica-7:8000",
        f"--entrypoint={entrypoint[0]}",
        service_image,
        "-c",
        probe,
    )
    assert "PROCTOR_ADVERTISE_URL=http://replica-7:8000" in given.splitlines()


def test_service_refuses_an_open_bind_without_a_token(daemon_url: str, service_image: str) -> None:
    cli = shutil.which("docker", path="/usr/bin") or "docker"
    done = subprocess.run(
        [cli, "run", "--rm", "--network=none", service_image],
        env={**os.environ, "DOCKER_HOST": daemon_url},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "PROCTOR_TOKEN" in done.stdout + done.stderr


@pytest.fixture(scope="module")
def container(daemon_url: str, service_image: str) -> Iterator[tuple[str, str]]:
    """The image's own entrypoint and command, serving on a free loopback port of the host; (id, base URL).

    One container for the module (starting one costs tens of seconds here): the SIGTERM test, last in the file,
    stops it.
    """
    port = free_port()
    # Host networking: the test's daemon sets up no bridge, and the service binds only the host's loopback.
    container_id = docker_cli(
        daemon_url,
        "run",
        "--detach",
        "--network=host",
        "--env=PROCTOR_HOST=127.0.0.1",
        f"--env=PROCTOR_PORT={port}",
        f"--env=PROCTOR_TOKEN={TOKEN}",
        "--env=PROCTOR_POOL_WORKERS=1",
        "--health-interval=1s",
        "--health-start-period=60s",
        service_image,
    ).strip()
    try:
        yield container_id, f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(AssertionError, subprocess.TimeoutExpired):
            docker_cli(daemon_url, "rm", "--force", container_id, timeout=60)


def wait_healthy(url: str, container_id: str) -> str:
    """Poll docker's own health state (the image's HEALTHCHECK) until it is healthy; the last state seen."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    state = {}
    while time.monotonic() < deadline:
        state = json.loads(docker_cli(url, "inspect", container_id))[0]["State"]
        if not state["Running"] or state["Health"]["Status"] == "healthy":
            break
        time.sleep(0.5)
    logs = subprocess.run(
        [shutil.which("docker", path="/usr/bin") or "docker", "logs", container_id],
        env={**os.environ, "DOCKER_HOST": url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert state.get("Running") and state["Health"]["Status"] == "healthy", (state, logs.stdout, logs.stderr)
    return state["Health"]["Status"]


def test_service_in_the_container_answers_score(daemon_url: str, container: tuple[str, str]) -> None:
    container_id, base_url = container
    wait_healthy(daemon_url, container_id)
    auth = {"Authorization": f"Bearer {TOKEN}"}
    with httpx.Client(base_url=base_url, timeout=60) as client:
        health = client.get("/healthz").json()
        assert health["status"] == "ok" and health["version"], health
        right = client.post(
            "/v1/score",
            json={"verifier": "text.match", "response": "Answer: 42", "reference": "42"},
            headers=auth,
        )
        wrong = client.post(
            "/v1/score",
            json={"verifier": "text.match", "response": "Answer: 41", "reference": "42"},
            headers=auth,
        )
        math = client.post(
            "/v1/score",
            json={"verifier": "math", "response": r"So \boxed{\frac{1}{2}}", "reference": "0.5"},
            headers=auth,
        )
        anonymous = client.post(
            "/v1/score", json={"verifier": "text.match", "response": "42", "reference": "42"}
        )
    assert right.status_code == 200 and right.json()["status"] == "ok" and right.json()["reward"] == 1.0
    assert wrong.status_code == 200 and wrong.json()["status"] == "ok" and wrong.json()["reward"] == 0.0
    # math runs in the pool's worker process, so the venv's compiled dependencies load in the container too
    assert math.status_code == 200 and math.json()["status"] == "ok" and math.json()["reward"] == 1.0, (
        math.text
    )
    assert anonymous.status_code == 401


def test_container_stops_cleanly_on_sigterm(daemon_url: str, container: tuple[str, str]) -> None:
    container_id, _ = container
    wait_healthy(daemon_url, container_id)
    docker_cli(daemon_url, "stop", "--time=60", container_id, timeout=120)
    state = json.loads(docker_cli(daemon_url, "inspect", container_id))[0]["State"]
    # proctor is PID 1 (the entrypoint's exec form): SIGTERM reaches uvicorn, which shuts down and exits 0.
    assert state["Running"] is False and state["ExitCode"] == 0 and state["OOMKilled"] is False, state
