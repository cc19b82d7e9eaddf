"""`training.micro_batch_size = "auto"`: on a machine too small for the update in one pass,
the node takes the largest micro-batch that fits, and the update's gradients are the one
pass's within 1e-6 relative (the built-in tiny model)."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import pytest
import torch

from swarm.config import memory
from swarm.node.makers import trainer_settings
from swarm.policy.memory import FIT_SHARE, MB, model_shape
from swarm.policy.model import Policy
from swarm.policy.trainer import GRPOTrainer, TrainSample
from tests.conftest import small_config

QUESTIONS, GROUP = 8, 8


def _samples(policy) -> list[TrainSample]:
    """Eight groups of eight completions of uneven length, with advantages, as a round has."""
    rng = random.Random(0)
    vocab = policy.model.config.vocab_size
    samples = []
    for _ in range(QUESTIONS):
        prompt = tuple(rng.randrange(6, vocab) for _ in range(rng.randint(20, 40)))
        for _ in range(GROUP):
            completion = tuple(rng.randrange(6, vocab) for _ in range(rng.randint(1, 16)))
            samples.append(TrainSample(prompt, completion, rng.choice([-1.5, -0.5, 0.5, 1.5])))
    return samples


def _gradients(policy, settings, samples) -> list[torch.Tensor]:
    """The gradients of one update's step, as the optimizer is handed them (no clipping)."""
    model = copy.deepcopy(policy.model)
    settings = replace(settings, max_grad_norm=0.0)
    trainer = GRPOTrainer(model, policy.tokenizer.pad_token_id, settings)
    seen: list[torch.Tensor] = []
    trainer.optimizer.register_step_pre_hook(
        lambda *_: seen.extend(p.grad.detach().clone() for p in model.parameters())
    )
    trainer.update(samples)
    return seen


@pytest.fixture
def small_machine(tmp_path, tiny_policy, monkeypatch):
    """A config with micro_batch_size "auto" on a machine where 12 sequences a pass fit."""
    config = small_config(
        tmp_path,
        generation={"questions_per_round": QUESTIONS, "completions_per_question": GROUP},
        training={"own_groups": QUESTIONS, "micro_batch_size": "auto"},
    )
    policy = Policy(
        "swarm-tiny",
        tiny_policy.model,
        tiny_policy.tokenizer,
        torch.device("cpu"),
        torch.float32,
        "0",
        "m",
    )
    shape = model_shape(policy.model.config.to_dict())
    prompt = memory.prompt_tokens(config, policy.tokenizer)
    at_12 = memory.plan_for(config, shape, prompt, cuda=False, micro_batch=12).plan.peak()
    room = int(at_12 / FIT_SHARE) + MB // 2
    monkeypatch.setattr(memory, "memory_there", lambda cuda, device: (room, room))
    return config, policy


def test_auto_splits_an_update_that_does_not_fit_into_passes_that_do(small_machine):
    config, policy = small_machine
    settings = trainer_settings(config, policy)
    assert settings.micro_batch_size == 12  # 64 sequences in 6 passes


def test_the_passes_give_the_one_pass_gradients(small_machine):
    config, policy = small_machine
    samples = _samples(policy)
    auto = trainer_settings(config, policy)
    assert auto.micro_batch_size < len(samples)
    split = _gradients(policy, auto, samples)
    whole = _gradients(policy, replace(auto, micro_batch_size=len(samples)), samples)
    for a, b in zip(split, whole, strict=True):
        assert torch.linalg.vector_norm(a - b) <= 1e-6 * torch.linalg.vector_norm(b)
    assert any(torch.linalg.vector_norm(g) > 0 for g in whole)
