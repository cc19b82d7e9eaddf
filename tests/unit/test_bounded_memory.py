"""Training log-probs hold one chunk of logits at a time, never the full [B, C, vocab] tensor.

With Qwen2.5's 151,936-entry vocabulary a micro-batch of 8 x 1,500 tokens has 7.3 GB of fp32
logits (twice that with log_softmax's output kept for the backward pass). Peak tensor memory
is measured by tracking every tensor storage the forward and backward passes allocate.
"""

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from swarm.policy.prefix import hidden_logprobs

VOCAB = 151_936  # Qwen2.5's


class PeakTensorBytes(TorchDispatchMode):
    """Bytes of tensor storage alive at once, at most, among those created inside the mode."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.seen: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.seen or storage.nbytes() == 0:
            return
        self.seen.add(key)
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, storage.nbytes())

    def _free(self, key: int, nbytes: int) -> None:
        self.seen.discard(key)
        self.live -= nbytes


class Head(torch.nn.Module):
    """A causal LM's output head with the fake 151,936-entry vocabulary."""

    def __init__(self, hidden: int):
        super().__init__()
        self.head = torch.nn.Linear(hidden, VOCAB, bias=False)

    def get_output_embeddings(self):
        return self.head


def test_logprobs_and_their_gradient_never_hold_the_full_logits():
    torch.manual_seed(0)
    model = Head(8)
    hidden = torch.randn(2, 128, 8, requires_grad=True)
    targets = torch.randint(0, VOCAB, (2, 128))
    full = 2 * 128 * VOCAB * 4  # one fp32 [B, C, vocab] tensor: 148 MiB
    with PeakTensorBytes() as memory:
        logprobs = hidden_logprobs(model, hidden, targets, chunk=16)
        logprobs.sum().backward()
    assert memory.peak < full / 2, f"peak {memory.peak / 2**20:.0f} MiB"  # measured: 46 MiB of 148
    with PeakTensorBytes() as unchunked:  # what the trainer did before: 450 MiB measured
        logits = model.head(hidden).float()
        torch.log_softmax(logits, -1).gather(-1, targets[..., None]).sum().backward()
    assert unchunked.peak > 2 * full
    # The same values and gradient as the plain full-vocabulary computation.
    plain = torch.log_softmax(model.head(hidden.detach()), -1).gather(-1, targets[..., None])
    assert torch.allclose(logprobs.detach(), plain.squeeze(-1), atol=1e-5)
    assert hidden.grad is not None and model.head.weight.grad is not None


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return LlamaForCausalLM(config)


def test_gradient_checkpointing_is_an_option_with_the_same_gradient():
    from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample

    samples = [TrainSample((3, 4, 5), (6 + i, 7, 8), a) for i, a in enumerate((1.0, -1.0))]
    norms = []
    for on in (False, True):
        model = _llama()
        settings = TrainerSettings(lr=1e-6, gradient_checkpointing=on, shared_prefix=False)
        norms.append(GRPOTrainer(model, 0, settings).update(samples).grad_norm)
        assert model.is_gradient_checkpointing == on
    assert norms[1] == pytest.approx(norms[0], rel=1e-4)


def test_checkpointing_is_on_by_default_for_real_models_only(tmp_path):
    from swarm.node.assembly import CHECKPOINTING_PARAMS, parameter_count, trainer_settings
    from swarm.policy.model import Policy
    from tests.conftest import small_config

    policy = Policy("swarm-tiny", _llama(), None, torch.device("cpu"), torch.float32, "0", "m")
    assert parameter_count(policy) < CHECKPOINTING_PARAMS
    auto = small_config(tmp_path)
    forced = small_config(tmp_path, training={"gradient_checkpointing": "on"})
    assert not trainer_settings(auto, policy).gradient_checkpointing
    assert trainer_settings(forced, policy).gradient_checkpointing
    policy.model = torch.nn.Linear(4096, 4096)  # 16.8 M parameters: a real model's size
    assert trainer_settings(auto, policy).gradient_checkpointing
