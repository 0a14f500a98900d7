"""The neutral response reader: end-of-turn tokens, one think-block rule for every family, and imports that
register nothing."""

from __future__ import annotations

import subprocess
import sys

import pytest

from proctor.verifiers.code.extract import extract_code
from proctor.verifiers.math.extract import final_part
from proctor.verifiers.reading import after_think, strip_end_of_turn
from proctor.verifiers.sql.extract import extract_sql
from proctor.verifiers.verilog.source import extract_verilog


@pytest.mark.parametrize(
    ("text", "stripped"),
    [
        ("answer<|im_end|>", "answer"),
        ("answer <|im_end|>\n", "answer "),
        ("a<|eot_id|><|endoftext|>", "a"),
        ("x</s> <|im_end|>  ", "x"),
        ("<end_of_turn>", ""),
        ("plain  ", "plain  "),
        ("<|im_end|> in the middle", "<|im_end|> in the middle"),
        ("", ""),
    ],
)
def test_strip_end_of_turn(text: str, stripped: str) -> None:
    assert strip_end_of_turn(text) == stripped


def test_strip_end_of_turn_is_linear() -> None:
    assert strip_end_of_turn("ok" + "<|im_end|>" * 200_000) == "ok"


def test_a_think_reopened_after_a_closed_one_is_no_answer_in_every_family() -> None:
    """One rule: a <think> left open at the end (even after an earlier closed block) means no answer."""
    reopened = "<think>a</think>\n```sql\nSELECT 1\n```\n<think> reopened"
    assert after_think(reopened) is None
    assert final_part(reopened) == ""
    assert extract_sql(reopened) == ""
    assert extract_verilog(reopened.replace("SELECT 1", "module A; endmodule")) == ("", "none")
    from proctor.sandboxes.languages import get_language

    assert extract_code(reopened.replace("sql", "python"), get_language("python")).code == ""


def test_importing_the_reader_or_a_helper_registers_no_family() -> None:
    code = (
        "import sys, proctor.verifiers.reading, proctor.verifiers.text.normalize, proctor.environments.registry\n"
        "from proctor import registry\n"
        "families = sorted(m for m in sys.modules if m.startswith('proctor.verifiers.') and m.count('.') == 2)\n"
        "print(families, len(registry._verifiers))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "['proctor.verifiers.reading', 'proctor.verifiers.text'] 0"
