"""Group advantages and the clipped GRPO loss, on hand-made numbers and random ones."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from swarm.policy.grpo import clipped_policy_loss, group_advantages, has_signal

rewards_lists = st.lists(
    st.floats(min_value=-10, max_value=10, allow_nan=False), min_size=1, max_size=64
)


@given(rewards_lists, st.booleans())
def test_advantages_sum_to_zero_per_group(rewards, scale):
    adv = group_advantages(rewards, scale_by_std=scale)
    assert len(adv) == len(rewards)
    assert abs(math.fsum(adv)) <= 1e-6 * max(1.0, max(abs(a) for a in adv) * len(adv))


@given(
    st.floats(min_value=-5, max_value=5, allow_nan=False),
    st.integers(min_value=1, max_value=32),
    st.booleans(),
)
def test_equal_rewards_give_zero_advantages(value, n, scale):
    assert group_advantages([value] * n, scale_by_std=scale) == [0.0] * n
    assert not has_signal([value] * n)


@given(rewards_lists)
def test_advantages_preserve_reward_order(rewards):
    adv = group_advantages(rewards)
    for (r1, a1), (r2, a2) in zip(zip(rewards, adv), zip(rewards[1:], adv[1:])):
        if r1 > r2 + 1e-6:
            assert a1 > a2


def test_advantages_are_standardised():
    adv = group_advantages([1.0, 0.0, 0.0, 0.0])
    assert adv[0] == pytest.approx(0.75 / math.sqrt(0.1875), rel=1e-4)
    assert group_advantages([1.0, 0.0], scale_by_std=False) == [0.5, -0.5]
    assert group_advantages([]) == []


def test_loss_on_policy_is_minus_mean_advantage_and_gradient_raises_good_tokens():
    logits = torch.zeros(2, 3, requires_grad=True)
    logprobs = torch.log_softmax(logits, -1)[:, :2]  # two "tokens" per completion
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -1.0])
    parts = clipped_policy_loss(logprobs, logprobs.detach(), adv, mask)
    # ratio 1: loss = -(1 + 1 - 1) / 3 tokens
    assert parts.loss.item() == pytest.approx(-1.0 / 3.0)
    parts.loss.backward()
    assert logits.grad[0, 0] < 0  # descending the loss raises the good completion's tokens
    assert logits.grad[1, 0] > 0  # and lowers the bad one's
    assert parts.clip_fraction == 0.0


def test_asymmetric_clip_stops_gradient_beyond_the_bounds():
    old = torch.zeros(1, 2)
    mask = torch.ones(1, 2)
    # ratio 1.5 with positive advantage: clipped at 1.28, no gradient
    new = torch.tensor([[math.log(1.5), math.log(1.1)]], requires_grad=True)
    parts = clipped_policy_loss(new, old, torch.tensor([1.0]), mask, clip_low=0.2, clip_high=0.28)
    parts.loss.backward()
    assert new.grad[0, 0] == 0.0 and new.grad[0, 1] != 0.0
    assert parts.clip_fraction == pytest.approx(0.5)
    # ratio 0.7 with negative advantage: clipped at 0.8, no gradient
    new2 = torch.tensor([[math.log(0.7), 0.0]], requires_grad=True)
    parts2 = clipped_policy_loss(
        new2, old, torch.tensor([-1.0]), mask, clip_low=0.2, clip_high=0.28
    )
    parts2.loss.backward()
    assert new2.grad[0, 0] == 0.0 and new2.grad[0, 1] != 0.0


def test_kl_penalty_is_zero_at_the_reference_and_positive_away_from_it():
    logprobs = torch.log(torch.tensor([[0.5, 0.25]]))
    mask = torch.ones(1, 2)
    adv = torch.zeros(1)
    same = clipped_policy_loss(logprobs, logprobs, adv, mask, ref_logprobs=logprobs, kl_coef=0.1)
    assert same.kl == pytest.approx(0.0, abs=1e-7)
    away = clipped_policy_loss(
        logprobs, logprobs, adv, mask, ref_logprobs=logprobs - 0.5, kl_coef=0.1
    )
    assert away.kl > 0 and away.loss.item() > 0


def test_shared_normalizer_makes_micro_batches_add_up():
    torch.manual_seed(0)
    lp = torch.randn(4, 5)
    mask = (torch.rand(4, 5) > 0.3).float()
    adv = torch.randn(4)
    whole = clipped_policy_loss(lp, lp, adv, mask).loss
    total = mask.sum().item()
    parts = sum(
        clipped_policy_loss(
            lp[i : i + 2], lp[i : i + 2], adv[i : i + 2], mask[i : i + 2], normalizer=total
        ).loss
        for i in (0, 2)
    )
    assert parts.item() == pytest.approx(whole.item(), rel=1e-6)
