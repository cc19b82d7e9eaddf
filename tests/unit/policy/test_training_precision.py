"""An update moves the weights whatever dtype the policy was loaded in (fp32 master weights).

On a GPU the policy loads in bf16; an AdamW step at lr 1e-6 is far below a bf16 weight's
resolution (a weight near 0.02 moves in steps of ~1.2e-4), so updating bf16 weights in place
rounds nearly every step to nothing. The trainer keeps fp32 weights and computes in bf16.
"""

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample, fp32_master_weights

SAMPLES = [
    TrainSample((10, 11, 12, 13), (20 + i, 30 + i, 40 + i), adv)
    for i, adv in enumerate((1.0, -1.0, 0.5, -0.5))
]


def small_llama(dtype: torch.dtype) -> LlamaForCausalLM:
    """A small Llama with Hugging Face's initialisation (weights ~0.02), in `dtype`."""
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
    )
    return LlamaForCausalLM(config).to(dtype)


def _changed_share(dtype: torch.dtype) -> tuple[float, float]:
    """One AdamW step at lr 1e-6 on a model loaded in `dtype`: the share of weight elements
    that changed, and the mean |change| of those that did."""
    model = small_llama(dtype)
    before = {n: p.detach().float().clone() for n, p in model.named_parameters()}
    trainer = GRPOTrainer(model, 0, TrainerSettings(lr=1e-6, max_grad_norm=0.0))
    result = trainer.update(SAMPLES)
    assert not result.skipped and result.grad_norm > 0
    changed = total = 0
    moved = 0.0
    for name, param in model.named_parameters():
        diff = (param.detach().float() - before[name]).abs()
        changed += int((diff > 0).sum())
        moved += float(diff.sum())
        total += diff.numel()
    return changed / total, moved / max(changed, 1)


def test_one_update_at_lr_1e6_moves_bf16_weights_as_fp32_ones():
    fp32_share, fp32_step = _changed_share(torch.float32)
    bf16_share, bf16_step = _changed_share(torch.bfloat16)
    assert fp32_share > 0.5  # Adam moves every weight that has a gradient by about lr
    assert bf16_share == pytest.approx(fp32_share, rel=0.05)
    assert bf16_step == pytest.approx(1e-6, rel=0.5)
    assert fp32_step == pytest.approx(1e-6, rel=0.5)


def test_bf16_model_trains_in_fp32_and_computes_in_bf16():
    model = torch.nn.Linear(4, 4).to(torch.bfloat16)
    assert fp32_master_weights(model) == torch.bfloat16
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert fp32_master_weights(model) is None  # already fp32: nothing to do
