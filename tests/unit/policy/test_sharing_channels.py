"""The receiver-relative sharing channels (docs/SAPO.md), checked with hand-made numbers.

Plain GRPO's advantages sum to zero over a group, so a feature every completion of a peer's
group shares gets no net push; each channel below is shown to give it one where the
receiver lacks it, and to leave plain GRPO unchanged when off.
"""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from swarm.batch_choice import Candidate, choose_batch, has_signal_against
from swarm.config import SharingSection
from swarm.experience import SharedGroup
from swarm.node.shared_samples import own_samples, shared_part, shuffled, weighted
from swarm.policy.generator import Completion
from swarm.policy.grpo import (
    clipped_policy_loss,
    group_advantages,
    joint_advantages,
    part_weights,
    receiver_advantages,
    shaped_weight,
)
from swarm.policy.prompts import PromptFormat
from swarm.policy.skills import FAMILIES
from swarm.policy.tiny import build_tokenizer
from swarm.policy.trainer import TrainSample
from swarm.tasks import build_task, sample_specs

rewards01 = st.lists(st.sampled_from([0.0, 1.0]), min_size=2, max_size=8)


def test_plain_grpo_gives_a_feature_all_completions_share_no_net_push():
    # A tagged peer's group: every completion carries the tag, one in four is right.
    shared = [1.0, 0.0, 0.0, 0.0]
    assert abs(sum(group_advantages(shared))) < 1e-9


def test_joint_baseline_pushes_what_the_peers_share_and_the_receiver_lacks():
    # The receiver's own four completions on the same task are all wrong (untagged).
    shared, own = [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]
    peer, mine = joint_advantages(shared, own)
    # mean 0.25; centred peer (0.75, 0.75, -0.25, -0.25), own -0.25 each; std sqrt(0.1875)
    std = math.sqrt(0.1875)
    assert peer == pytest.approx([0.75 / std, 0.75 / std, -0.25 / std, -0.25 / std], rel=1e-5)
    assert mine == pytest.approx([-0.25 / std] * 4, rel=1e-5)
    assert sum(peer) == pytest.approx(1.0 / std, rel=1e-5)  # net push on the shared tag: +2.31
    assert sum(peer) + sum(mine) == pytest.approx(0.0, abs=1e-9)


@given(rewards01, rewards01)
def test_joint_net_push_has_the_sign_of_the_peers_lead(shared, own):
    peer, _ = joint_advantages(shared, own)
    lead = sum(shared) / len(shared) - sum(own) / len(own)
    if abs(lead) < 1e-9:
        assert abs(sum(peer)) < 1e-6
    else:
        assert math.copysign(1.0, sum(peer)) == math.copysign(1.0, lead)


def test_receiver_baseline_keeps_an_all_right_group_that_grpo_would_zero():
    assert group_advantages([1.0] * 4) == [0.0] * 4
    assert receiver_advantages([1.0] * 4, baseline=0.1) == pytest.approx([0.9] * 4)
    assert receiver_advantages([1.0, 0.0], baseline=0.5) == pytest.approx([0.5, -0.5])


def test_part_weights_fix_the_own_parts_share():
    # 30 own tokens, 70 shared, trainer normaliser 100: loss = own_sum/30 + w * shared_sum/70.
    w_own, w_shared = part_weights(30, 70, shared_weight=0.5)
    assert w_own == pytest.approx(100 / 30)
    assert w_shared == pytest.approx(0.5 * 100 / 70)
    assert part_weights(30, 0, 0.5) == (1.0, 0.0)
    assert part_weights(0, 70, 0.5) == (0.0, 0.5)


def test_shaping_factor_matches_autograd_and_lifts_unlikely_tokens():
    gamma, advantage = 0.1, 1.0
    for p in (1e-4, 0.01, 0.1, 0.5, 0.99):
        logprob = torch.tensor([[math.log(p)]], requires_grad=True)
        parts = clipped_policy_loss(
            logprob,
            logprob.detach(),
            torch.tensor([advantage]),
            torch.ones(1, 1),
            shaping=torch.tensor([gamma]),
        )
        parts.loss.backward()
        # d loss / d logprob = -A * gamma p / (p + gamma)^2
        assert logprob.grad.item() == pytest.approx(-advantage * shaped_weight(p, gamma), rel=1e-4)
    # against plain importance weighting (factor p), an unlikely token gets ~1/gamma more
    assert shaped_weight(1e-4, 0.1) / 1e-4 == pytest.approx(1 / 0.1 / (1 + 1e-3) ** 2, rel=1e-6)
    assert shaped_weight(0.1, 0.1) == pytest.approx(0.25)


def test_unshaped_rows_keep_the_clipped_loss_and_weights_scale_each_row():
    logprobs = torch.log(torch.tensor([[0.3, 0.6], [0.2, 0.5]]))
    adv, mask = torch.tensor([1.0, -1.0]), torch.ones(2, 2)
    plain = clipped_policy_loss(logprobs, logprobs, adv, mask).loss
    off = clipped_policy_loss(logprobs, logprobs, adv, mask, shaping=torch.zeros(2)).loss
    assert off.item() == pytest.approx(plain.item())
    weighted_loss = clipped_policy_loss(
        logprobs, logprobs, adv, mask, weights=torch.tensor([2.0, 0.0])
    ).loss
    first_row = clipped_policy_loss(logprobs[:1], logprobs[:1], adv[:1], mask[:1], normalizer=4)
    assert weighted_loss.item() == pytest.approx(2 * first_row.loss.item())


def test_has_signal_against_a_baseline():
    assert not has_signal_against([1.0, 1.0], None)
    assert has_signal_against([1.0, 1.0], 0.2)
    assert not has_signal_against([0.0, 0.0], 0.0)
    assert has_signal_against([0.0, 1.0], None)


def test_choose_batch_keeps_all_right_groups_for_a_receiver_baseline():
    all_right = Candidate("g", (1.0,) * 4, sender="p", family="chain_sum")
    plain = choose_batch([], [all_right], 0, 1, seed=0)
    assert plain.shared == []
    receiver = choose_batch([], [all_right], 0, 1, seed=0, baselines={"chain_sum": 0.1})
    assert receiver.shared == ["g"]


def test_shuffled_is_a_seeded_permutation():
    rewards = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0)
    assert sorted(shuffled(rewards, "a")) == sorted(rewards)
    assert shuffled(rewards, "a") == shuffled(rewards, "a")
    assert any(shuffled(rewards, str(i)) != rewards for i in range(5))


# -- shared_part: the channels over real tasks and a real tokenizer ------------------------


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def _group(rewards, texts) -> SharedGroup:
    task = build_task(sample_specs((FAMILIES["sum"],), seed=5, round_index=0, count=1)[0])
    return SharedGroup(
        row_id=1,
        content_hash="h1",
        sender="peer",
        task=task,
        completions=tuple(texts),
        finished=(True,) * len(texts),
        rewards=tuple(rewards),
        claimed_rewards=tuple(rewards),
        policy_version=0,
        same_model=False,
        received_at=0.0,
        family="chain_sum",
    )


def _settings(**kw) -> SharingSection:
    return SharingSection(**kw)


def _part(tokenizer, group, **kw):
    return shared_part(
        [group],
        settings=_settings(**kw.pop("settings", {})),
        tokenizer=tokenizer,
        prompt_format=PromptFormat(system=""),
        max_tokens=64,
        baselines=kw.pop("baselines", {}),
        **kw,
    )


def test_group_channel_is_plain_grpo(tokenizer):
    group = _group([1.0, 0.0, 0.0, 0.0], ["<answer>7</answer>"] + ["<answer>8</answer>"] * 3)
    part = _part(tokenizer, group)
    assert [s.advantage for s in part.samples] == pytest.approx(group_advantages(group.rewards))
    assert all(s.shaping == 0.0 and s.weight == 1.0 for s in part.samples)
    assert part.own_samples == [] and part.generated == 0


def test_receiver_channel_uses_the_family_baseline(tokenizer):
    group = _group([1.0, 1.0], ["<answer>7</answer>"] * 2)
    part = _part(
        tokenizer, group, settings={"shared_advantage": "receiver"}, baselines={"chain_sum": 0.25}
    )
    assert [s.advantage for s in part.samples] == pytest.approx([0.75, 0.75])
    fallback = _part(tokenizer, group, settings={"shared_advantage": "receiver"})
    assert [s.advantage for s in fallback.samples] == [0.0, 0.0]  # no baseline: the group's


def test_joint_channel_generates_scores_and_trains_both(tokenizer):
    group = _group([1.0, 0.0], ["<answer>5</answer>", "<answer>y</answer>"])
    from swarm.tasks import AnswerRule, Scoring

    asked = []

    def generate(prompts):
        asked.extend(prompts)
        ids = tuple(tokenizer("7", add_special_tokens=False)["input_ids"])
        return [[Completion((1, 2), ids, "7", (0.0,), True) for _ in range(2)] for _ in prompts]

    part = _part(
        tokenizer,
        group,
        settings={"shared_advantage": "joint", "shared_shaping": 0.1},
        generate=generate,
        scoring=Scoring(0.0, AnswerRule.TAGGED, False),
    )
    assert len(asked) == 1 and part.generated == 2
    peer, mine = joint_advantages([1.0, 0.0], [0.0, 0.0])
    assert [s.advantage for s in part.samples] == pytest.approx(peer)
    assert [s.advantage for s in part.own_samples] == pytest.approx(mine)
    assert sum(peer) > 0.5  # the tagged peer completions get a net push
    assert all(s.shaping == 0.1 for s in part.samples)
    assert all(s.shaping == 0.0 for s in part.own_samples)  # ours are on-policy


def test_shuffle_control_permutes_rewards_before_advantages(tokenizer):
    texts = [f"<answer>{i}</answer>" for i in range(8)]
    group = _group([1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], texts)
    part = _part(tokenizer, group, shuffle_rewards=True, seed="s")
    expected = group_advantages(shuffled(group.rewards, "s:h1"))
    assert [s.advantage for s in part.samples] == pytest.approx(expected)


def test_weighted_parts_normalise_own_and_shared_apart():
    own = [TrainSample((1,), (2, 3), 1.0), TrainSample((1,), (2,), 0.0)]  # 2 tokens count
    shared = [TrainSample((1,), (4, 5, 6, 7), -1.0)] * 2  # 8 tokens
    settings = _settings(shared_normalizer="parts", shared_weight=0.5)
    out = weighted(own, shared, settings)
    assert [s.weight for s in out] == pytest.approx([10 / 2, 10 / 2, 0.5 * 10 / 8, 0.5 * 10 / 8])
    assert weighted(own, shared, _settings()) == own + shared


def test_own_samples_append_the_stop_token_to_finished_completions():
    done = Completion((1,), (5, 6), "ab", (0.0, 0.0), True)
    cut = Completion((1,), (5, 6), "ab", (0.0, 0.0), False)
    samples = own_samples([done, cut], [1.0, -1.0], eos=2)
    assert samples[0].completion_ids == (5, 6, 2) and samples[1].completion_ids == (5, 6)
