"""Packaging: the wheel installs the one `proctor` package (data included) and the repo never shadows HF datasets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# The fresh install must stand on its own: no PROCTOR_* settings or PYTHONPATH from the test run.
CLEAN_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PROCTOR_") and k != "PYTHONPATH"}
TOP_LEVEL_FOLDERS = ("verifiers", "sandboxes", "environments", "api", "trainer", "datasets")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    build_dir = tmp_path_factory.mktemp("build")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(ROOT),
        ],
        check=True,
        cwd=build_dir,
        env={**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1"},
        timeout=300,
    )
    (found,) = out.glob("proctor-*.whl")
    return found


def test_wheel_holds_only_the_proctor_package_with_its_data(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    top = {name.split("/")[0] for name in names}
    assert top <= {"proctor", f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.dist-info"}
    for folder in TOP_LEVEL_FOLDERS:
        assert any(name.startswith(f"proctor/{folder}/") for name in names), folder
    assert "proctor/datasets/text/demo.jsonl" in names


def test_wheel_installs_and_works_in_a_fresh_venv(wheel, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--disable-pip-version-check", str(wheel)],
        check=True,
        timeout=300,
    )
    # Dependencies come from this test's environment, appended after the fresh venv's own site-packages; a
    # .pth-added folder does not run its own .pth files, so the editable install there cannot leak in.
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(purelib, "deps-from-test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    probe = (
        "import json, proctor, proctor.verifiers, proctor.api.app, proctor.sandboxes, proctor.environments, "
        "proctor.trainer\n"
        "from proctor.io import bundled_dataset\n"
        "s = proctor.score('text.match', 'Answer: 42', '42')\n"
        "print(json.dumps({'file': proctor.__file__, 'reward': s.reward, "
        "'data': str(bundled_dataset('text/demo.jsonl')), 'exists': bundled_dataset('text/demo.jsonl').is_file()}))\n"
    )
    result = subprocess.run(
        [str(python), "-c", probe], capture_output=True, text=True, cwd=tmp_path, timeout=120, env=CLEAN_ENV
    )
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    assert info["file"].startswith(str(venv)), info
    assert info["data"].startswith(str(venv)) and info["exists"], info
    assert info["reward"] == 1.0
    cli = subprocess.run(
        [str(venv / "bin" / "proctor"), "verifiers", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        env=CLEAN_ENV,
        cwd=tmp_path,
    )
    assert cli.returncode == 0, cli.stderr
    assert {"text.match", "text.choice"} <= {v["name"] for v in json.loads(cli.stdout)}


def test_bundled_data_is_reachable_from_the_editable_install():
    from proctor.io import bundled_dataset

    path = bundled_dataset("text/demo.jsonl")
    assert path.is_file() and path.resolve().is_relative_to(ROOT)


def test_repo_datasets_folder_never_shadows_hugging_face_datasets():
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import datasets; print(datasets.__file__, datasets.load_dataset.__module__)"
    result = subprocess.run(
        [sys.executable, "-c", probe, str(ROOT)], capture_output=True, text=True, cwd=ROOT, timeout=120
    )
    assert result.returncode == 0, result.stderr
    location, loader_module = result.stdout.split()
    assert "site-packages" in location and not Path(location).resolve().is_relative_to(ROOT / "datasets")
    assert loader_module.startswith("datasets.")


def test_every_import_path_is_a_file_path():
    """proctor.<folder> is a link to the top-level folder, so a plain checkout imports what the wheel holds."""
    import proctor

    package = Path(proctor.__file__).parent
    for folder in ("verifiers", "sandboxes", "environments", "api", "trainer", "datasets"):
        link = package / folder
        assert link.is_symlink() and link.resolve() == ROOT / folder, (
            f"proctor/{folder} must link to ../{folder}"
        )
    program = "import proctor.sandboxes.job, proctor.verifiers.text.match as m; print(m.__file__)"
    # -I: no site-packages and so no editable install; the checkout alone must resolve every import.
    checkout = subprocess.run([sys.executable, "-I", "-c", program], cwd=ROOT, capture_output=True, text=True)
    assert checkout.returncode == 0, checkout.stderr
    assert checkout.stdout.strip() == str(ROOT / "proctor" / "verifiers" / "text" / "match.py")
