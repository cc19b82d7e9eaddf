"""What a decode step of the continuous backend attends over, measured on a CPU.

Every attention call goes through `torch.nn.functional.scaled_dot_product_attention` (the
paged engine's and transformers' sdpa path alike); a spy records the keys each query is
scored against and the size of the mask. With N sequences of the same length running
together, a query must see its own context only: at most the longest prompt plus the new
tokens (rounded up to a page), whatever N, and the mask only [rows, 1, new, longest]. A
dense block-diagonal mask over the packed batch would show keys = the sum of all contexts,
N times more. transformers' own sdpa path ("library") is measured the same way as the
positive control: it does attend over the sum.
"""

import copy

import pytest
import torch

from swarm.policy.continuous import ContinuousGenerator
from swarm.policy.generator import SamplingParams

NEW_TOKENS = 6
PAGE = 16  # swarm.policy.paged.PAGE_TOKENS: keys are gathered in whole pages at most


@pytest.fixture(scope="module")
def model(tiny_policy):
    return copy.deepcopy(tiny_policy.model).eval()


def _prompts(n: int) -> list[str]:
    return [f"{i:03d}+{i:03d}=?" for i in range(n)]  # distinct, all the same length


def _attention_sizes(monkeypatch, generator, prompts):
    """The most keys one query was scored against, and the largest mask, over a call."""
    real = torch.nn.functional.scaled_dot_product_attention
    seen = {"keys": 0, "mask": 0}

    def spy(query, key, value, attn_mask=None, *args, **kwargs):
        seen["keys"] = max(seen["keys"], key.shape[-2])
        if attn_mask is not None:
            seen["mask"] = max(seen["mask"], attn_mask.numel())
        return real(query, key, value, attn_mask, *args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=NEW_TOKENS)
    generator.generate(prompts, 1, greedy)
    monkeypatch.undo()
    return seen["keys"], seen["mask"]


def test_a_decode_step_attends_over_its_own_context_not_the_sum(tiny_policy, model, monkeypatch):
    prompt = len(tiny_policy.tokenizer(_prompts(1)[0], add_special_tokens=False)["input_ids"])
    context = prompt + NEW_TOKENS
    bound = -(-context // PAGE) * PAGE
    sizes = {}
    for n in (4, 16):
        generator = ContinuousGenerator(model, tiny_policy.tokenizer, set(), max_sequences=n)
        sizes[n] = _attention_sizes(monkeypatch, generator, _prompts(n))
    keys4, mask4 = sizes[4]
    keys16, mask16 = sizes[16]
    assert keys16 <= bound, f"16 sequences: a query saw {keys16} keys, its context is {context}"
    assert keys16 == keys4  # 4x the sequences: not one key more per query
    # the mask: one row of [new tokens x own context] per sequence, so 4x the sequences
    # is 4x the mask at most (a mask over the packed batch would grow 16x)
    assert mask16 <= 4 * mask4 and mask16 <= 16 * prompt * bound


def test_transformers_sdpa_path_attends_over_the_sum(tiny_policy, model, monkeypatch):
    """The positive control: the same measurement sees the library's packed dense mask."""
    prompt = len(tiny_policy.tokenizer(_prompts(1)[0], add_special_tokens=False)["input_ids"])
    generator = ContinuousGenerator(
        model, tiny_policy.tokenizer, set(), max_sequences=16, attention="library"
    )
    keys, _ = _attention_sizes(monkeypatch, generator, _prompts(16))
    assert keys >= 16 * prompt  # every query scored against every sequence's context
