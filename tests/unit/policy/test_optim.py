"""Adam/AdamW with bf16 moments: torch's update, half its state."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from swarm.policy.optim import Bf16StateAdam
from swarm.policy.trainer import OptimizerKind, OptimizerState, TrainerSettings, build_optimizer


def _pair(seed: int, shape=(64, 32)):
    torch.manual_seed(seed)
    a = torch.nn.Parameter(torch.randn(shape))
    return a, torch.nn.Parameter(a.detach().clone())


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    lr=st.floats(1e-6, 1e-2),
    weight_decay=st.sampled_from([0.0, 0.01, 0.1]),
    scale=st.floats(1e-4, 1e2),
)
def test_the_first_step_is_torchs_adamw(seed, lr, weight_decay, scale):
    """The first step uses the moments before they are rounded: torch's step to float error."""
    ours, theirs = _pair(seed)
    grad = torch.randn(ours.shape, generator=torch.Generator().manual_seed(seed + 1)) * scale
    ours.grad, theirs.grad = grad.clone(), grad.clone()
    Bf16StateAdam([ours], lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay).step()
    torch.optim.AdamW([theirs], lr=lr, betas=(0.9, 0.99), weight_decay=weight_decay).step()
    assert torch.allclose(ours, theirs, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", list(OptimizerKind))
def test_training_follows_fp32_moments(kind):
    """300 steps of a noisy regression: the weights stay within 1 % of the fp32 optimizer's
    path (measured from the start), and the loss ends where fp32's does."""
    torch.manual_seed(0)
    target = torch.randn(32, 8)
    models = []
    for state in OptimizerState:
        torch.manual_seed(1)
        model = torch.nn.Linear(32, 8)
        settings_ = TrainerSettings(lr=1e-3, optimizer=kind, optimizer_state=state)
        models.append((model, build_optimizer(model, settings_), model.weight.detach().clone()))
    data = torch.Generator().manual_seed(2)
    for _ in range(300):
        x = torch.randn(16, 32, generator=data)
        y = x @ target + 0.1 * torch.randn(16, 8, generator=data)
        for model, optimizer, _ in models:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
    (fp32, _, start), (bf16, optimizer, _) = models
    moved = (fp32.weight - start).norm()
    assert (bf16.weight - fp32.weight).norm() < 0.01 * moved
    state = optimizer.state[bf16.weight]
    assert state["exp_avg"].dtype == state["exp_avg_sq"].dtype == torch.bfloat16
    x = torch.randn(256, 32, generator=data)
    losses = [torch.nn.functional.mse_loss(m(x), x @ target).item() for m in (fp32, bf16)]
    assert losses[1] == pytest.approx(losses[0], rel=0.05)


def test_a_loaded_state_goes_back_to_bf16():
    """torch casts a loaded state to the parameter's dtype; the next step rounds it back."""
    p, q = _pair(0, (4, 4))
    first = Bf16StateAdam([p], lr=1e-3)
    p.grad = torch.ones_like(p)
    first.step()
    second = Bf16StateAdam([q], lr=1e-3)
    second.load_state_dict(first.state_dict())
    assert second.state[q]["exp_avg"].dtype == torch.float32
    q.grad = torch.ones_like(q)
    second.step()
    assert second.state[q]["exp_avg"].dtype == torch.bfloat16


def test_bf16_moments_take_half_the_memory():
    held = []
    for state in OptimizerState:
        param, _ = _pair(0)
        optimizer = build_optimizer(
            torch.nn.ParameterList([param]), TrainerSettings(optimizer_state=state)
        )
        param.grad = torch.ones_like(param)
        optimizer.step()
        moments = optimizer.state[param]
        held.append(moments["exp_avg"].nbytes + moments["exp_avg_sq"].nbytes)
    assert held == [2 * 4 * param.numel(), 2 * 2 * param.numel()]


@pytest.mark.parametrize("bad", [{"lr": -1.0}, {"betas": (0.9, 1.0)}, {"eps": -1e-8}])
def test_bad_settings_are_refused(bad):
    p, _ = _pair(0, (2, 2))
    with pytest.raises(ValueError):
        Bf16StateAdam([p], **{"lr": 1e-3, **bad})


def test_stepping_in_chunks_changes_nothing(monkeypatch):
    """The step goes `CHUNK` weights at a time (small temporaries): element-wise, so a
    chunk size that splits every tensor unevenly gives the same weights to the bit."""
    import swarm.policy.optim as optim

    results = []
    for chunk in (optim.CHUNK, 7):
        monkeypatch.setattr(optim, "CHUNK", chunk)
        p, _ = _pair(0)
        optimizer = Bf16StateAdam([p], lr=1e-3, weight_decay=0.1)
        for i in range(3):
            p.grad = torch.randn(p.shape, generator=torch.Generator().manual_seed(i))
            optimizer.step()
        results.append(p.detach().clone())
    assert torch.equal(*results)
