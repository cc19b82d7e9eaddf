"""Truncated importance sampling between the generator's log-probs and the trainer's.

The pure weights (ratio, truncation, tokens without a sampler log-prob, padding), the loss
they scale, the trainer applying them only when asked, and the node turning them on
exactly where the two log-probs can differ.
"""

import math

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from swarm.node.makers import trainer_settings
from swarm.node.shared_samples import own_samples
from swarm.policy.backends import (
    Backend,
    choose_backend,
    continuous_available,
    logprobs_can_differ,
)
from swarm.policy.generator import Completion
from swarm.policy.grpo import clipped_policy_loss, truncated_importance_weights
from swarm.policy.model import Policy
from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample
from tests.conftest import small_config


def test_weights_are_the_probability_ratio_truncated_at_the_cap():
    trainer = torch.log(torch.tensor([[0.5, 0.5, 0.9, 0.2]]))
    sampler = torch.log(torch.tensor([[0.25, 0.5, 0.1, 0.4]]))
    mask = torch.ones(1, 4)
    weights = truncated_importance_weights(trainer, sampler, mask, cap=3.0)
    assert weights.tolist()[0] == pytest.approx([2.0, 1.0, 3.0, 0.5])  # 9.0 cut to 3.0
    assert truncated_importance_weights(trainer, sampler, mask, cap=1.5)[0, 0] == 1.5


def test_a_token_without_a_sampler_logprob_and_padding_weigh_one():
    trainer = torch.tensor([[-1.0, -2.0, -3.0]], requires_grad=True)
    sampler = torch.tensor([[-2.0, float("nan"), -1.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    weights = truncated_importance_weights(trainer, sampler, mask, cap=10.0)
    assert weights.tolist()[0] == pytest.approx([math.e, 1.0, 1.0])
    assert not weights.requires_grad


def test_token_weights_scale_each_tokens_policy_loss():
    logprobs = torch.tensor([[-1.0, -1.0]])
    mask = torch.ones(1, 2)
    advantages = torch.tensor([1.0])
    plain = clipped_policy_loss(logprobs, logprobs, advantages, mask).loss
    weighted = clipped_policy_loss(
        logprobs, logprobs, advantages, mask, token_weights=torch.tensor([[2.0, 0.5]])
    ).loss
    assert float(plain) == pytest.approx(-1.0)
    assert float(weighted) == pytest.approx(-(2.0 + 0.5) / 2)


def _model():
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config)


def _loss(cap: float, sampler_logprobs) -> float:
    model = _model()
    trainer = GRPOTrainer(model, 0, TrainerSettings(lr=0.0, importance_cap=cap))
    sample = TrainSample((3, 4, 5), (6, 7, 8), 1.0, sampler_logprobs=sampler_logprobs)
    return trainer.update([sample]).loss


def test_the_trainer_weights_own_tokens_only_when_asked():
    model = _model()
    probe = GRPOTrainer(model, 0, TrainerSettings(lr=0.0))
    exact = tuple(probe.logprobs([TrainSample((3, 4, 5), (6, 7, 8), 1.0)])[0][0].tolist())
    lower = tuple(lp - 0.5 for lp in exact)  # the sampler found every token less likely
    plain = _loss(0.0, lower)
    assert _loss(3.0, exact) == pytest.approx(plain, rel=1e-5)  # same log-probs: weight 1
    assert _loss(3.0, lower) == pytest.approx(plain * math.exp(0.5), rel=1e-4)
    assert _loss(1.2, lower) == pytest.approx(plain * 1.2, rel=1e-4)  # truncated
    assert _loss(3.0, lower[:2]) == pytest.approx(plain * (2 * math.exp(0.5) + 1) / 3, rel=1e-4)


def test_own_samples_carry_the_generators_logprobs():
    done = Completion((1,), (5, 6), "", (-0.5, -1.5), True, stop_id=2)
    (sample,) = own_samples([done], [1.0], eos=2)
    assert sample.completion_ids == (5, 6, 2) and sample.sampler_logprobs == (-0.5, -1.5)


@pytest.mark.parametrize(
    ("backend", "dtype_differs", "on"),
    [
        (Backend.TRANSFORMERS, False, False),
        (Backend.TRANSFORMERS, True, True),
        (Backend.CONTINUOUS, False, True),
        (Backend.VLLM, False, True),
    ],
)
def test_the_correction_is_on_wherever_the_logprobs_can_differ(backend, dtype_differs, on):
    assert logprobs_can_differ(backend, dtype_differs) is on


def test_auto_picks_vllm_or_continuous_on_cuda_and_transformers_on_a_cpu():
    assert choose_backend("auto", "cpu", True) is Backend.TRANSFORMERS
    assert choose_backend("auto", "cuda", True) is Backend.VLLM
    assert choose_backend("auto", "cuda", False) is Backend.CONTINUOUS
    assert choose_backend("transformers", "cuda", True) is Backend.TRANSFORMERS
    # transformers 4.x has no continuous batching: plain generate
    assert choose_backend("auto", "cuda", False, continuous_available=False) is Backend.TRANSFORMERS
    assert continuous_available()  # the pinned transformers 5.x has it


def test_the_node_sets_the_cap_from_its_backend_and_precision(tmp_path):
    policy = Policy(
        name="x",
        model=_model(),
        tokenizer=None,
        device=torch.device("cpu"),
        dtype=torch.float32,
        base_hash="0" * 64,
        model_id="x@0",
    )
    cpu = small_config(tmp_path / "a")
    assert trainer_settings(cpu, policy).importance_cap == 0.0  # one module, one precision
    bf16 = small_config(tmp_path / "b", training={"precision": "bf16"})
    assert trainer_settings(bf16, policy).importance_cap == 3.0
    continuous = small_config(tmp_path / "c", generation={"backend": "continuous"})
    assert trainer_settings(continuous, policy).importance_cap == 3.0
    off = small_config(tmp_path / "d", generation={"backend": "continuous", "importance_cap": 0.0})
    assert trainer_settings(off, policy).importance_cap == 0.0
