"""The quality gate: every registered verifier's examples score as declared, and every verifier has some.

Gold examples must score 1 and cheats 0, through the same Engine that serves requests. A new family that
registers without at least one of each fails here.
"""

from __future__ import annotations

import pytest

from proctor.contract import Status
from proctor.engine import Engine
from proctor.registry import Example, VerifierSpec, all_verifiers
from proctor.settings import Settings

TEST_ONLY_PREFIX = "test."  # tests/plugins register deliberately misbehaving verifiers under this prefix


def _verifiers() -> list[VerifierSpec]:
    return [spec for spec in all_verifiers() if not spec.name.startswith(TEST_ONLY_PREFIX)]


def _cases() -> list:
    cases = []
    for spec in _verifiers():
        counts = {"gold": 0, "cheat": 0, "partial": 0}
        for example in spec.examples:
            kind = "gold" if example.expect == 1.0 else "cheat" if example.expect == 0.0 else "partial"
            counts[kind] += 1
            cases.append(pytest.param(spec, example, id=f"{spec.name}-{kind}-{counts[kind]}"))
    return cases


@pytest.fixture(scope="module")
def engine():
    engine = Engine(Settings(cache_size=0))
    yield engine
    engine.close()


@pytest.mark.parametrize(("spec", "example"), _cases())
def test_registered_example_scores_as_declared(engine: Engine, spec: VerifierSpec, example: Example):
    result = engine.score(
        {
            "verifier": spec.name,
            "response": example.response,
            "reference": example.reference,
            "options": example.options,
        }
    )
    assert result.status is Status.ok, (example.note, result)
    assert result.reward == example.expect, (example.note, result.reason, result.details)


def test_every_verifier_has_gold_and_cheat_examples():
    verifiers = _verifiers()
    assert verifiers, "no verifiers are registered"
    for spec in verifiers:
        expects = [example.expect for example in spec.examples]
        assert 1.0 in expects, f"{spec.qualified_name} registers no gold example (expect 1.0)"
        assert 0.0 in expects, f"{spec.qualified_name} registers no cheat example (expect 0.0)"
