"""Red team 16: end-of-turn cutting, OpenRLHF/slime labels, OpenAI graders, /run_code back-pressure.

Each test here reproduces a way a policy (or a broken judge) could be paid for a wrong answer, or a machinery
failure could be scored as reward 0, found while attacking those features.
"""

from __future__ import annotations

import pytest

from tests.judge_server import Raw
from tests.test_graders import http, judge, listed, run, score_it, service  # noqa: F401 - pytest fixtures

# -- OpenAI graders: a judge cut off inside its reasoning is a machinery failure, not a refusal ---------------


@pytest.mark.parametrize(
    "grader",
    [
        score_it("Score the reasoning cut"),
        {
            "type": "label_model",
            "name": "l",
            "input": [{"role": "user", "content": "Label the reasoning cut"}],
            "labels": ["good", "bad"],
            "passing_labels": ["good"],
        },
    ],
)
def test_a_judge_cut_off_with_no_content_is_503_not_a_refusal_graded_0(http, judge, grader):  # noqa: F811
    # A reasoning judge (vLLM --reasoning-parser) that runs out of max_tokens while thinking answers
    # content null, finish_reason "length": no verdict, and not the sample's fault.
    judge.script(
        Raw(
            {
                "choices": [
                    {
                        "message": {"role": "assistant", "content": None, "reasoning_content": "Hmm, let me"},
                        "finish_reason": "length",
                    }
                ]
            }
        )
    )
    response = run(http, grader, "x")
    assert response.status_code == 503, response.text
    errors = response.json()["metadata"]["errors"]
    assert errors["model_grader_server_error"] and not errors["model_grader_refusal_error"]
    assert "judge_truncated" in errors["model_grader_server_error_details"]


REASONING_CUT = {
    "choices": [
        {
            "message": {"role": "assistant", "content": None, "reasoning_content": "Hmm, let me"},
            "finish_reason": "length",
        }
    ]
}


@pytest.mark.xfail(
    strict=True,
    reason="verifiers/judge/common.py ask_judge checks `reply.text is None` (a refusal, counted as a wrong "
    "verdict) before `reply.truncated`: a judge cut off while thinking scores the response ok/0; swap the checks",
)
@pytest.mark.parametrize("verifier", ["judge.rubric", "judge.equivalence"])
def test_a_judge_verifier_cut_off_with_no_content_is_judge_error(http, judge, verifier):  # noqa: F811
    judge.script(*[Raw(REASONING_CUT)] * 4)
    reference = (
        {"items": [{"criterion": "Names paris"}]} if verifier == "judge.rubric" else {"answer": "Paris"}
    )
    score = http.post(
        "/v1/score", json={"verifier": verifier, "response": f"Paris cut {verifier}", "reference": reference}
    ).json()
    assert score["status"] == "judge_error" and score["reason"] == "judge_truncated", score
