"""The GRPO step model of bench/grpo_step_model.py: its arithmetic, its fit, its inputs file and its report.

Arithmetic only: nothing here measures or times anything; the figures are chosen so each expected value can be
worked out by hand.
"""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "bench" / "grpo_step_model.py"


def load() -> ModuleType:
    """The bench script as a module (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("grpo_step_model", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["grpo_step_model"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


M = load()


def costs(name: str = "judge", **values: float | bool) -> Any:
    """Costs with every figure 0 unless given."""
    base: dict[str, float | bool] = {
        "cpu_per_problem": 0.0,
        "cpu_per_submission": 0.0,
        "cpu_per_test": 0.0,
        "wall_per_problem": 0.0,
        "wall_per_submission": 0.0,
        "wall_per_test": 0.0,
        "peak_mb": 0.0,
    }
    base.update(values)
    return M.Costs(judge=name, **base)


def test_fit_code_recovers_the_costs_that_made_the_segments() -> None:
    per_sub, per_test, k, t1, t2 = 0.3, 0.002, 3, 2, 50
    cpu_t1 = k * (per_sub + t1 * per_test)
    cpu_t2 = k * (per_sub + t2 * per_test)
    assert M.fit_code(cpu_t1, cpu_t2, k, t1, t2) == pytest.approx((per_sub, per_test))


def test_fit_verilog_separates_problems_from_designs() -> None:
    per_problem, per_design, q, k = 0.16, 0.028, 4, 4
    first = q * (per_problem + per_design)  # each new problem's first design measures its reference too
    more = q * k * per_design
    assert M.fit_verilog(first, more, q, k) == pytest.approx((per_problem, per_design))


def test_fits_refuse_segments_that_cannot_separate_the_costs() -> None:
    with pytest.raises(ValueError):
        M.fit_code(1.0, 2.0, 3, 5, 5)  # T2 must exceed T1
    with pytest.raises(ValueError):
        M.fit_code(1.0, 2.0, 0, 1, 5)
    with pytest.raises(ValueError):
        M.fit_verilog(1.0, 2.0, 4, 0)


def test_medians_take_each_fitted_cost_over_rounds() -> None:
    assert M.medians([(0.3, 0.002), (0.9, 0.001), (0.4, 0.5)]) == (0.4, 0.002)


def test_stat_ticks_sums_own_and_reaped_children_times() -> None:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime cstime
    line = "4242 (a (weird) name) S 1 4242 4242 0 -1 4194560 10 20 0 0 7 3 100 50 20 0 1 0 99 0 0"
    assert M.stat_ticks(line) == 7 + 3 + 100 + 50


def test_step_cpu_counts_problems_submissions_and_tests() -> None:
    scale = M.Scale(prompts=10, samples=4, tests=5, cores=8)
    judge = costs(cpu_per_problem=2.0, cpu_per_submission=0.5, cpu_per_test=0.1)
    # 10 problems x (2 + 4 x (0.5 + 5 x 0.1)) = 10 x 6 = 60
    assert M.step_cpu_s(judge, scale) == pytest.approx(60.0)
    assert M.submission_cpu_s(judge, 5) == pytest.approx(1.0)


def test_a_negative_fitted_cost_counts_as_zero() -> None:
    scale = M.Scale(prompts=2, samples=3, tests=4, cores=1)
    judge = costs(cpu_per_problem=-0.2, cpu_per_submission=-0.01, cpu_per_test=0.5)
    assert M.step_cpu_s(judge, scale) == pytest.approx(2 * 3 * 4 * 0.5)
    assert M.nonneg(-1e-3) == 0.0 and M.nonneg(0.25) == 0.25


def test_chain_runs_tests_in_sequence_unless_the_judge_spreads_them() -> None:
    scale = M.Scale(prompts=1, samples=1, tests=50, cores=64)
    sequential = costs(wall_per_problem=0.1, wall_per_submission=0.8, wall_per_test=0.004)
    spread = costs(wall_per_submission=0.0, wall_per_test=0.6, tests_in_parallel=True)
    assert M.chain_s(sequential, scale) == pytest.approx(0.1 + 0.8 + 50 * 0.004)
    assert M.chain_s(spread, scale) == pytest.approx(0.6)
    assert M.chain_s(spread, M.Scale(tests=0)) == 0.0


def test_step_wall_is_cpu_over_useful_cores_or_the_chain_when_longer() -> None:
    judge = costs(cpu_per_submission=1.0, wall_per_submission=3.0)
    wide = M.Scale(prompts=64, samples=10, tests=0, cores=64, efficiency=0.5)
    # 640 CPU-seconds over 64 x 0.5 useful cores = 20 s, longer than the 3 s chain
    assert M.step_wall_s(judge, wide) == pytest.approx(20.0)
    narrow = M.Scale(prompts=1, samples=1, tests=0, cores=64, efficiency=0.5)
    # 1 CPU-second would take 1/32 s, but one submission's own wall is 3 s
    assert M.step_wall_s(judge, narrow) == pytest.approx(3.0)


def test_cores_for_a_target_rounds_up_and_knows_when_no_count_is_enough() -> None:
    judge = costs(cpu_per_submission=1.0, wall_per_submission=2.0)
    scale = M.Scale(prompts=100, samples=1, tests=0, cores=1, efficiency=0.8)
    # 100 CPU-seconds in 10 s at 0.8 efficiency: 12.5 -> 13 cores
    assert M.cores_for(judge, scale, 10.0) == 13
    with pytest.raises(ValueError, match="longest chain"):
        M.cores_for(judge, scale, 1.0)
    with pytest.raises(ValueError, match="positive"):
        M.cores_for(judge, scale, 0.0)


def test_memory_is_one_slot_per_core_at_the_measured_peak_or_the_set_size() -> None:
    judge = costs(peak_mb=128.0)
    assert M.memory_gb(judge, M.Scale(cores=64)) == pytest.approx(8.0)
    assert M.memory_gb(judge, M.Scale(cores=64, memory_per_slot_mb=512.0)) == pytest.approx(32.0)


def test_model_compares_each_judge_with_the_floor() -> None:
    scale = M.Scale(prompts=8, samples=8, tests=10, cores=4, efficiency=1.0)
    floor = costs("floor", cpu_per_submission=0.25, cpu_per_test=0.001)
    slow = costs("slow", cpu_per_submission=0.25, cpu_per_test=0.301, right=False)
    rows = {row.judge: row for row in M.model([slow, floor], "floor", scale)}
    # floor: 64 x (0.25 + 0.01) = 16.64 s of CPU over 4 cores; slow: 64 x (0.25 + 3.01) = 208.64 s
    assert rows["floor"].wall_s == pytest.approx(16.64 / 4)
    assert rows["slow"].cpu_s == pytest.approx(208.64)
    assert rows["slow"].vs_floor == pytest.approx(208.64 / 16.64)
    assert rows["floor"].vs_floor == pytest.approx(1.0)
    assert rows["slow"].right is False
    assert math.isnan(M.model([slow], None, scale)[0].vs_floor)
    with pytest.raises(ValueError, match="floor"):
        M.model([slow], "floor", scale)


def test_scale_refuses_what_the_model_cannot_mean() -> None:
    for bad in ({"prompts": 0}, {"samples": 0}, {"cores": 0}, {"tests": -1}, {"efficiency": 0.0}):
        with pytest.raises(ValueError):
            M.Scale(**bad)
    with pytest.raises(ValueError):
        M.Scale(efficiency=1.5)
    with pytest.raises(ValueError):
        M.Scale(memory_per_slot_mb=0.0)


def measured() -> dict[str, object]:
    """A saved-measurements document with hand-picked costs."""
    return {
        "code_cpp": [
            costs(M.LABELS["proctor"], cpu_per_submission=0.34, cpu_per_test=0.002, peak_mb=66.0),
            costs(M.LABELS["bare"], cpu_per_submission=0.25, cpu_per_test=0.001, peak_mb=66.0),
        ],
        "code_python": [costs(M.LABELS["proctor"], cpu_per_submission=0.04, cpu_per_test=0.003)],
        "verilog": [
            costs(M.LABELS["verilog:proctor"], cpu_per_problem=0.09, cpu_per_submission=0.07, right=False),
            costs(M.LABELS["verilog:bare"], cpu_per_problem=-0.001, cpu_per_submission=0.0125),
        ],
        "raw": {},
        "failed": ["cpp:sandboxfusion"],
        "machine": {
            "cores": 2,
            "cpu": "test CPU",
            "python": "3.11",
            "backend": "nsjail",
            "load_before": [1.0, 2.0, 3.0],
            "load_after": [1.5, 2.0, 3.0],
            "measured_s": 60.0,
            "date": "2026-01-01 00:00 UTC",
            "commit": "abc1234",
            "rounds": 3,
        },
    }


def test_inputs_survive_a_save_and_load() -> None:
    original = measured()
    again = M.load_inputs(M.dump_inputs(original))
    for key in ("code_cpp", "code_python", "verilog"):
        assert again[key] == original[key]
    assert again["machine"] == original["machine"]


def test_report_shows_the_modelled_step_and_its_assumptions() -> None:
    scale = M.Scale(prompts=512, samples=16, tests=50, cores=64, efficiency=0.75)
    text = M.report(measured(), scale, M.Scale(prompts=512, samples=16, tests=0, cores=64), 60.0)
    # C++ floor: 8192 x (0.25 + 50 x 0.001) = 2457.6 CPU-s = 0.68 core-h; / 48 useful cores = 51.2 s
    # at efficiency 1.0 and 0.5: / 64 = 38.4 s, / 32 = 76.8 s
    assert "| 0.68 core-h | **51.2 s** | 38.4 s to 76.8 s | 1.0x |" in text
    # Proctor: 8192 x (0.34 + 0.1) = 3604.48 CPU-s / 48 = 75.1 s, 1.47x the floor
    assert "**75.1 s** | 56.3 s to 112.6 s | 1.5x |" in text
    assert "parallel efficiency 0.75" in text and "CPU time is what scales" in text
    assert "0 (fit -1.0)" in text  # a negative fit is shown as the 0 the model uses
    assert "Some verdicts were wrong or failed" in text and M.LABELS["verilog:proctor"] in text
    assert "| n/a |" in text  # Python has no floor measured here: no ratio
    assert "Judges that failed to run** (left out): cpp:sandboxfusion" in text


def test_main_models_from_a_saved_file_without_measuring(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = tmp_path / "m.json"
    saved.write_text(M.dump_inputs(measured()))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("--inputs must not measure")

    monkeypatch.setattr(M, "measure", refuse)
    monkeypatch.setattr(
        sys, "argv", ["grpo_step_model.py", "--inputs", str(saved), "--cores", "128", "--tests", "10"]
    )
    M.main()
    out = capsys.readouterr().out
    # C++ floor at 10 tests on 128 cores: 8192 x 0.26 = 2129.92 CPU-s / 96 = 22.2 s
    assert "on a 128-core host" in out and "**22.2 s**" in out
