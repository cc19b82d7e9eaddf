"""Trainer options: the optimizer choice and gradient clipping (0: off)."""

import copy

import pytest
import torch

from swarm.policy.prompts import build_prompt
from swarm.policy.trainer import (
    GRPOTrainer,
    OptimizerKind,
    TrainerSettings,
    TrainSample,
    build_optimizer,
    clip_gradients,
)


def _linear():
    torch.manual_seed(0)
    return torch.nn.Linear(4, 3)


def test_adam_is_torch_adam_with_its_defaults():
    opt = build_optimizer(
        _linear(), TrainerSettings(lr=1e-3, weight_decay=0.1, optimizer=OptimizerKind.ADAM)
    )
    assert type(opt) is torch.optim.Adam
    group = opt.param_groups[0]
    assert group["lr"] == 1e-3 and group["betas"] == (0.9, 0.999) and group["eps"] == 1e-8
    assert group["weight_decay"] == 0  # the paper's "default hyperparameters": no decay


def test_adamw_stays_the_default():
    opt = build_optimizer(_linear(), TrainerSettings(lr=2e-4, weight_decay=0.1))
    assert type(opt) is torch.optim.AdamW
    group = opt.param_groups[0]
    assert group["betas"] == (0.9, 0.99) and group["weight_decay"] == 0.1
    assert (
        build_optimizer(_linear(), TrainerSettings(optimizer="adam")).__class__ is torch.optim.Adam
    )


def _with_gradients(scale: float):
    model = _linear()
    (model(torch.ones(2, 4)).sum() * scale).backward()
    return model


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_max_norm_zero_leaves_gradients_alone_and_reports_their_norm(scale):
    model = _with_gradients(scale)
    before = [p.grad.clone() for p in model.parameters()]
    expected = torch.linalg.vector_norm(torch.cat([g.flatten() for g in before]))
    norm = clip_gradients(model, 0.0)
    assert torch.allclose(norm, expected)
    assert all(torch.equal(p.grad, g) for p, g in zip(model.parameters(), before))


def test_positive_max_norm_clips_to_it():
    model = _with_gradients(1e3)
    norm = clip_gradients(model, 0.5)
    after = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert norm > 0.5 and after == pytest.approx(0.5, rel=1e-4)


@pytest.fixture()
def policy(tiny_policy):
    clone = copy.copy(tiny_policy)
    clone.model = copy.deepcopy(tiny_policy.model)
    return clone


def test_paper_settings_update_learns_without_clipping(policy):
    """Adam, no clipping: one update raises a rewarded completion and lowers a punished one."""
    tok = policy.tokenizer
    question = "State the final answer to the following arithmetic problem: 2 + 3 ="
    prompt = tuple(tok(build_prompt(tok, question), add_special_tokens=False)["input_ids"])
    good = tuple(tok("<answer>5</answer>", add_special_tokens=False)["input_ids"]) + (
        tok.eos_token_id,
    )
    bad = tuple(tok("<answer>6</answer>", add_special_tokens=False)["input_ids"]) + (
        tok.eos_token_id,
    )
    settings = TrainerSettings(lr=1e-4, max_grad_norm=0.0, optimizer=OptimizerKind.ADAM)
    trainer = GRPOTrainer(policy.model, tok.pad_token_id, settings)
    samples = [TrainSample(prompt, good, 1.0), TrainSample(prompt, bad, -1.0)]
    before = trainer.sequence_logprobs(samples)
    result = trainer.update(samples)
    after = trainer.sequence_logprobs(samples)
    assert not result.skipped and result.grad_norm > 0
    assert after[0] > before[0] and after[1] < before[1]


def test_gradients_are_freed_after_each_step(policy):
    """Between updates no gradient is held (generation and checkpoints run without them),
    while the step itself was handed every trainable parameter's gradient."""
    tok = policy.tokenizer
    prompt = tuple(tok("2 + 3 =", add_special_tokens=False)["input_ids"])
    samples = [TrainSample(prompt, (5, 6, 7), 1.0), TrainSample(prompt, (8, 9), -1.0)]
    trainer = GRPOTrainer(policy.model, tok.pad_token_id, TrainerSettings(lr=1e-4))
    handed: list[bool] = []
    trainer.optimizer.register_step_pre_hook(
        lambda *_: handed.extend(p.grad is not None for p in policy.model.parameters())
    )
    assert not trainer.update(samples).skipped
    assert handed and all(handed)
    assert all(p.grad is None for p in policy.model.parameters())
