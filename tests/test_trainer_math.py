"""The GRPO mathematics against values computed by hand on small tensors."""

from __future__ import annotations

import math
import re

import pytest

torch = pytest.importorskip("torch")

from proctor.trainer.grpo import (  # noqa: E402
    clipped_surrogate,
    group_advantages,
    grpo_loss,
    k3_kl,
    log_probs_and_entropy,
    overlong_penalty,
    token_entropy,
    token_log_probs,
    token_weights,
    warmup_factor,
)


def close(actual, expected, tol: float = 1e-5) -> None:
    assert torch.allclose(torch.as_tensor(actual, dtype=torch.float32), torch.tensor(expected), atol=tol), (
        actual
    )


# -- advantages ----------------------------------------------------------------------------------------

REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
ALL = torch.ones(8, dtype=torch.bool)


def test_group_scaling_divides_by_the_group_std() -> None:
    # Group 1: mean 0.5, population std 0.5 -> +-1. Group 2: all equal -> 0 (no signal).
    close(group_advantages(REWARDS, ALL, 4, "group", eps=0.0)[:4], [1.0, -1.0, -1.0, 1.0])
    close(group_advantages(REWARDS, ALL, 4, "group", eps=1e-4)[4:], [0.0] * 4)
    close(
        group_advantages(REWARDS, ALL, 4, "group", eps=0.5)[:4], [0.5, -0.5, -0.5, 0.5]
    )  # 0.5 / (0.5 + 0.5)


def test_batch_scaling_divides_by_the_batch_std() -> None:
    # Centred on the group mean (+-0.5), divided by the batch's population std: sqrt(0.75 * 0.25) = 0.4330.
    scale = 0.5 / math.sqrt(0.1875)
    close(group_advantages(REWARDS, ALL, 4, "batch", eps=0.0), [scale, -scale, -scale, scale, 0, 0, 0, 0])


def test_no_scaling_is_dr_grpo() -> None:
    close(group_advantages(REWARDS, ALL, 4, "none"), [0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0])


def test_failed_samples_take_no_part_in_the_group_statistics() -> None:
    # Sample 2 failed (its reward is NaN, or anything): the group is {1, 0, 1}: mean 2/3, std sqrt(2)/3.
    rewards = torch.tensor([1.0, 0.0, float("nan"), 1.0])
    valid = torch.tensor([True, True, False, True])
    advantages = group_advantages(rewards, valid, 4, "group", eps=0.0)
    close(advantages, [1 / math.sqrt(2), -math.sqrt(2), 0.0, 1 / math.sqrt(2)])
    close(group_advantages(rewards, valid, 4, "none"), [1 / 3, -2 / 3, 0.0, 1 / 3])
    # The failed sample is not trained on as a 0: had it been, the mean would be 1/2.
    assert advantages[1] != pytest.approx(-1.0)


def test_unknown_scaling_is_refused() -> None:
    with pytest.raises(ValueError, match="scale_rewards"):
        group_advantages(REWARDS, ALL, 4, "rank")


# -- overlong penalty ----------------------------------------------------------------------------------


def test_overlong_penalty_is_dapos_soft_punishment() -> None:
    # L = 10, L_cache = 4: free up to 6 tokens, then (6 - len) / 4, and -1 beyond 10.
    lengths = torch.tensor([3, 6, 7, 8, 10, 12])
    close(overlong_penalty(lengths, 10, 4), [0.0, 0.0, -0.25, -0.5, -1.0, -1.0])


# -- log-probabilities, entropy, KL --------------------------------------------------------------------


def test_token_log_probs_and_entropy() -> None:
    logits = torch.log(torch.tensor([[[1.0, 2.0, 1.0], [1.0, 1.0, 1.0]]]))  # probs (.25 .5 .25), uniform
    close(token_log_probs(logits, torch.tensor([[1, 2]])), [[math.log(0.5), math.log(1 / 3)]])
    entropy = -(0.25 * math.log(0.25) * 2 + 0.5 * math.log(0.5))
    close(token_entropy(logits), [[entropy, math.log(3)]])


def test_log_probs_and_entropy_from_one_log_softmax_agree_with_the_separate_functions() -> None:
    logits = torch.randn(2, 3, 7, requires_grad=True)
    tokens = torch.randint(0, 7, (2, 3))
    log_probs, entropy = log_probs_and_entropy(logits, tokens, entropy_grad=False)
    assert torch.allclose(log_probs, token_log_probs(logits, tokens))
    assert torch.allclose(entropy, token_entropy(logits)) and not entropy.requires_grad
    assert log_probs_and_entropy(logits, tokens, entropy_grad=True)[1].requires_grad


def test_k3_kl() -> None:
    # d = ref - pi = log(.25) - log(.5) = -ln 2: e^d - d - 1 = 0.5 + ln 2 - 1.
    log_probs = torch.tensor([[math.log(0.5), math.log(0.3)]])
    ref = torch.tensor([[math.log(0.25), math.log(0.3)]])
    close(k3_kl(log_probs, ref), [[0.5 + math.log(2) - 1, 0.0]])
    assert (k3_kl(torch.randn(4, 5), torch.randn(4, 5)) >= 0).all()  # k3 is never negative


# -- clipping ------------------------------------------------------------------------------------------


def _surrogate(ratios: list[float], advantages: list[float], low: float, high: float):
    old = torch.zeros(len(ratios), 1)
    log_probs = torch.log(torch.tensor(ratios)).unsqueeze(1).requires_grad_(True)
    loss, ratio, clipped_low, clipped_high = clipped_surrogate(
        log_probs, old, torch.tensor(advantages), low, high
    )
    loss.sum().backward()
    return loss.squeeze(1), clipped_low.squeeze(1), clipped_high.squeeze(1), log_probs.grad.squeeze(1)


def test_clipping_with_clip_higher() -> None:
    ratios = [1.5, 0.5, 0.5, 1.5, 1.25, 1.0]
    advantages = [1.0, 1.0, -1.0, -1.0, 1.0, 2.0]
    loss, low, high, grad = _surrogate(ratios, advantages, 0.2, 0.28)
    # A>0, r=1.5: clipped at 1.28. A>0, r=.5: -0.5. A<0, r=.5: clipped at .8 -> 0.8. A<0, r=1.5: 1.5.
    # A>0, r=1.25: inside [0.8, 1.28] with clip-higher, so not clipped. r=1: -A.
    close(loss, [-1.28, -0.5, 0.8, 1.5, -1.25, -2.0])
    assert low.tolist() == [False, False, True, False, False, False]
    assert high.tolist() == [True, False, False, False, False, False]
    # Clipped tokens get no gradient; the others get -A * ratio (d ratio / d log pi = ratio).
    close(grad, [0.0, -0.5, 0.0, 1.5, -1.25, -2.0])


def test_symmetric_clipping_clips_what_clip_higher_lets_through() -> None:
    loss, _, high, grad = _surrogate([1.25], [1.0], 0.2, 0.2)
    close(loss, [-1.2])
    assert high.tolist() == [True]
    close(grad, [0.0])


def test_the_ratio_is_exactly_one_when_the_old_log_probs_are_the_current_ones() -> None:
    log_probs = torch.randn(3, 4)
    _, ratio, low, high = clipped_surrogate(log_probs, log_probs.detach(), torch.randn(3), 0.0, 0.0)
    assert torch.equal(ratio, torch.ones(3, 4))
    assert not low.any() and not high.any()


# -- aggregation ---------------------------------------------------------------------------------------

MASK = torch.tensor([[1, 1, 0], [1, 0, 0], [0, 0, 0]])
PER_TOKEN = torch.tensor([[1.0, 2.0, 50.0], [3.0, 60.0, 70.0], [80.0, 90.0, 99.0]])


def test_token_mean() -> None:
    weights = token_weights(MASK, "token_mean", 4)
    close(weights, [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0], [0, 0, 0]])
    close((PER_TOKEN * weights).sum(), 2.0)  # (1 + 2 + 3) / 3


def test_seq_mean_token_mean() -> None:
    weights = token_weights(MASK, "seq_mean_token_mean", 4)
    close(weights, [[0.25, 0.25, 0], [0.5, 0, 0], [0, 0, 0]])
    close((PER_TOKEN * weights).sum(), 2.25)  # ((1 + 2) / 2 + 3) / 2; the empty third sequence is not counted


def test_constant_normalizer() -> None:
    weights = token_weights(MASK, "constant_normalizer", 4)
    close(weights, [[1 / 12, 1 / 12, 0], [1 / 12, 0, 0], [0, 0, 0]])
    close((PER_TOKEN * weights).sum(), 0.5)  # 6 / (3 sequences x 4 tokens)


def test_micro_batches_add_up_to_the_full_batch_loss() -> None:
    mask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 0, 0]])
    per_token = torch.arange(12, dtype=torch.float32).view(4, 3)
    for aggregation in ("token_mean", "seq_mean_token_mean", "constant_normalizer"):
        weights = token_weights(mask, aggregation, 3)
        whole = (per_token * weights).sum()
        parts = (per_token[:2] * weights[:2]).sum() + (per_token[2:] * weights[2:]).sum()
        close(parts, float(whole))


def test_unknown_aggregation_is_refused() -> None:
    with pytest.raises(ValueError, match="loss_aggregation"):
        token_weights(MASK, "sum", 4)


# -- the loss ------------------------------------------------------------------------------------------


def test_grpo_loss_adds_kl_and_subtracts_the_entropy_bonus() -> None:
    log_probs = torch.log(torch.tensor([[0.5, 0.5]]))
    ref = torch.log(torch.tensor([[0.25, 0.5]]))
    entropy = torch.tensor([[1.0, 3.0]])
    weights = torch.tensor([[0.5, 0.5]])
    terms = grpo_loss(
        log_probs, log_probs, torch.tensor([2.0]), weights, epsilon_low=0.2, epsilon_high=0.2,
        ref_log_probs=ref, beta=0.1, entropy=entropy, entropy_coef=0.01,
    )  # fmt: skip
    kl = [0.5 + math.log(2) - 1, 0.0]
    expected = sum(0.5 * (-2.0 + 0.1 * k - 0.01 * e) for k, e in zip(kl, [1.0, 3.0], strict=True))
    close(terms.loss, expected)
    assert terms.tokens == 2 and terms.kl == pytest.approx(sum(kl)) and terms.entropy == pytest.approx(4.0)


def test_masked_samples_contribute_nothing_to_the_gradient() -> None:
    torch.manual_seed(0)
    tokens = torch.randint(0, 5, (3, 4))
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 0, 0]])
    mask[1] = 0  # sample 1 is masked (its scoring failed, or it was truncated under overlong: mask)
    base = torch.randn(3, 4, 5)

    def gradient(advantage_of_masked: float, poison: float, aggregation: str) -> torch.Tensor:
        logits = base.clone().requires_grad_(True)
        log_probs = token_log_probs(logits, tokens)
        old = log_probs.detach().clone() + 0.1
        old[1] = poison  # whatever the masked sample holds, even inf or NaN
        advantages = torch.tensor([1.0, advantage_of_masked, -0.5])
        terms = grpo_loss(
            log_probs, old, advantages, token_weights(mask, aggregation, 4), epsilon_low=0.2, epsilon_high=0.3,
            ref_log_probs=log_probs.detach() - 0.2, beta=0.05, entropy=token_entropy(logits), entropy_coef=0.01,
        )  # fmt: skip
        terms.loss.backward()
        return logits.grad

    for aggregation in ("token_mean", "seq_mean_token_mean", "constant_normalizer"):
        first = gradient(3.0, 0.0, aggregation)
        second = gradient(-100.0, float("nan"), aggregation)
        assert torch.equal(first[1], torch.zeros(4, 5))
        assert torch.equal(first, second)
        assert first[0].abs().sum() > 0 and first[2].abs().sum() > 0


def test_warmup_is_linear() -> None:
    assert [warmup_factor(step, 4) for step in range(6)] == [0.25, 0.5, 0.75, 1.0, 1.0, 1.0]
    assert warmup_factor(0, 0) == 1.0


def test_the_defaults_listed_at_the_top_of_grpo_py_are_the_configs() -> None:
    from proctor.trainer import grpo
    from proctor.trainer.config import TrainConfig

    listed = re.findall(r"(\w+)=(\S+)", grpo.__doc__ or "")
    assert len(listed) >= 20
    for key, value in listed:
        assert str(TrainConfig.model_fields[key].default) == value, key
