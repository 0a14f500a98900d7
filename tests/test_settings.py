"""Settings come from PROCTOR_* variables, and the Operations page documents every one of them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from proctor.settings import Settings

OPERATIONS = Path(__file__).resolve().parents[1] / "docs" / "operations.md"


def test_every_setting_is_documented_on_the_operations_page():
    text = OPERATIONS.read_text()
    missing = [name for name in Settings.model_fields if f"`PROCTOR_{name.upper()}`" not in text]
    assert not missing, f"docs/operations.md does not document: {missing}"


def test_settings_read_the_environment(monkeypatch):
    monkeypatch.setenv("PROCTOR_PORT", "9123")
    monkeypatch.setenv("PROCTOR_POOL_WORKERS", "3")
    monkeypatch.setenv("PROCTOR_ON_FAILURE", "none")
    settings = Settings()
    assert (settings.port, settings.pool_workers, settings.on_failure) == (9123, 3, "none")
    assert settings.host == "127.0.0.1"


@pytest.mark.parametrize("value", ["nan", "inf", "-inf"])
def test_the_failure_value_is_a_finite_number(monkeypatch, value):
    """NaN or inf would reach slime and OpenRLHF as a reward that JSON cannot carry (red team, issue 16)."""
    monkeypatch.setenv("PROCTOR_FAILURE_VALUE", value)
    with pytest.raises(ValidationError, match="finite"):
        Settings()
