"""The paged engine of the continuous backend on a CPU (`swarm.policy.paged`), its bf16
generation copy, and transformers' path pinned away from flash.

Greedy completions are plain `generate`'s when more requests than `max_sequences` join as
others finish; the sampler keeps to top-k/top-p and returns raw log-probs; shared prompt
pages go back to the cache once every sequence holding them is done; a bf16 copy of the
weights samples what the fp32 module would, refreshed at each call, without touching it.
"""

import copy
import warnings

import pytest
import torch

from swarm.core.errors import GeneratorError
from swarm.policy.continuous import ContinuousGenerator, generation_copy, refresh
from swarm.policy.decode_plan import DecodePlan
from swarm.policy.generator import SamplingParams, TransformersGenerator
from swarm.policy.paged import (
    PagedCache,
    PagedDecoder,
    Sequence,
    chunks,
    paged_attention,
    sample,
)
from swarm.policy.prompts import build_prompt
from swarm.tasks import EASY_MIX, build_task, sample_specs


@pytest.fixture(scope="module")
def model(tiny_policy):
    return copy.deepcopy(tiny_policy.model).eval()


def _prompts(policy, n=5):
    tasks = [build_task(s) for s in sample_specs(EASY_MIX, 5, 0, n)]
    return [build_prompt(policy.tokenizer, t.question) for t in tasks]


def _greedy_tokens(generator, prompts, n=2, new=8):
    groups = generator.generate(prompts, n, SamplingParams(temperature=0.0, max_new_tokens=new))
    return [c.token_ids for g in groups for c in g]


def test_requests_join_as_others_finish_and_match_plain_generate(tiny_policy, model):
    prompts, stops = _prompts(tiny_policy), tiny_policy.stop_token_ids
    plain = TransformersGenerator(model, tiny_policy.tokenizer, stops)
    for width in (1, 3, 64):  # 10 sequences through 1, 3 or all slots at once
        ours = ContinuousGenerator(model, tiny_policy.tokenizer, stops, max_sequences=width)
        assert _greedy_tokens(ours, prompts) == _greedy_tokens(plain, prompts)


def test_the_sampler_keeps_to_top_k_and_top_p_and_returns_raw_logprobs():
    torch.manual_seed(0)
    logits = torch.randn(64, 50)
    raw = torch.log_softmax(logits, -1)
    best = logits.argmax(-1)
    greedy, lp = sample(logits, 0.0, 1.0, 0)
    assert torch.equal(greedy, best) and torch.allclose(lp, raw.gather(1, best[:, None])[:, 0])
    assert torch.equal(sample(logits, 1.0, 1.0, 1)[0], best)
    assert torch.equal(sample(logits, 1.0, 1e-6, 0)[0], best)
    top3 = logits.topk(3).indices
    tokens, lp = sample(logits, 0.7, 1.0, 3)
    assert (top3 == tokens[:, None]).any(-1).all()
    assert torch.allclose(lp, raw.gather(1, tokens[:, None])[:, 0])  # raw, not tempered


def test_shared_pages_return_once_every_holder_is_done():
    cache = PagedCache(pages=6, page_tokens=4)
    leader = cache.take(2)
    cache.share(leader[:1])  # a second sequence of the prompt holds the full page
    other = leader[:1] + cache.take(1)
    assert len(cache.free) == 2 and cache.slots(other, 3, 6) == [
        other[0] * 4 + 3,
        *(other[1] * 4 + i for i in range(2)),
    ]
    cache.release(leader)
    assert len(cache.free) == 3  # the shared page is still held
    cache.release(other)
    assert len(cache.free) == 5 and 0 not in cache.free  # page 0 is never handed out


def test_prefills_are_cut_to_the_token_budget():
    seqs = [Sequence(i, [1] * length) for i, length in enumerate([3, 3, 5, 20, 2])]
    runs = chunks(seqs, budget=10)
    assert [[s.index for s in run] for run in runs] == [[0, 1], [2], [3], [4]]


def test_an_empty_prompt_is_refused(model):
    with pytest.raises(GeneratorError, match="prompt token"):
        PagedDecoder(model, 4, 64).run([[5, 6], []], 1, SamplingParams(0.0, 2), set())


def test_attention_variants_it_lacks_are_refused():
    q = torch.zeros(1, 2, 1, 4)
    with pytest.raises(GeneratorError, match="sliding_window"):
        paged_attention(torch.nn.Module(), q, q, q, None, paged_step=object(), sliding_window=8)
    with pytest.raises(GeneratorError, match="PagedDecoder"):
        paged_attention(torch.nn.Module(), q, q, q, None)


def test_a_bf16_generation_copy_samples_like_the_fp32_module(tiny_policy, model):
    twin = generation_copy(model, torch.bfloat16)
    refresh(twin, model)
    assert {p.dtype for p in twin.parameters()} == {torch.bfloat16}
    assert all(b.dtype == torch.float32 for b in twin.buffers())  # rotary frequencies stay fp32
    assert twin.config is not model.config
    probe = torch.tensor([[1, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        before = model(probe).logits
        assert torch.allclose(twin(probe).logits.float(), before, atol=0.1)
    prompts, stops = _prompts(tiny_policy), tiny_policy.stop_token_ids
    fp32 = ContinuousGenerator(model, tiny_policy.tokenizer, stops, 8)
    card = DecodePlan("bfloat16", True, "paged", False, False)  # what a card runs
    bf16 = ContinuousGenerator(model, tiny_policy.tokenizer, stops, 8, plan=card)
    want, got = _greedy_tokens(fp32, prompts), _greedy_tokens(bf16, prompts)
    assert sum(a == b for a, b in zip(want, got)) >= 0.8 * len(want)
    assert next(model.parameters()).dtype == torch.float32
    with torch.no_grad():  # its own attention back: the trainer's forward as before
        assert torch.equal(model(probe).logits, before)
    head = model.get_output_embeddings().weight
    with torch.no_grad():
        head.neg_()  # a training step: the next call samples the changed weights
    try:
        changed = _greedy_tokens(bf16, prompts)
    finally:
        with torch.no_grad():
            head.neg_()
    assert changed != got


def test_transformers_path_pinned_off_flash_still_generates(tiny_policy, model):
    """5.17-5.19 with a flash kernel and fp32: the module runs "paged|sdpa" for the call."""
    prompts, stops = _prompts(tiny_policy, 3), tiny_policy.stop_token_ids
    probe = torch.tensor([[1, 5, 6, 7, 8, 9]])
    with torch.no_grad():
        before = model(probe).logits
    plan = DecodePlan("float32", False, "sdpa", False, True)
    pinned = ContinuousGenerator(model, tiny_policy.tokenizer, stops, 8, plan=plan)
    with warnings.catch_warnings():  # 5.25 reads "paged|sdpa" as "sdpa", with a warning
        warnings.simplefilter("ignore", FutureWarning)
        ours = _greedy_tokens(pinned, prompts)
    plain = TransformersGenerator(model, tiny_policy.tokenizer, stops)
    assert ours == _greedy_tokens(plain, prompts)
    with torch.no_grad():  # its own attention given back
        assert torch.equal(model(probe).logits, before)


def test_each_call_plans_for_the_module_as_it_is_then(tiny_policy):
    """A node makes its generator before the trainer casts the module to fp32."""
    module = copy.deepcopy(tiny_policy.model).to(torch.bfloat16).eval()
    generator = ContinuousGenerator(module, tiny_policy.tokenizer, set(), 4)
    assert generator.plan.dtype == "bfloat16"
    module.float()  # the trainer's fp32 master weights
    generator.generate(_prompts(tiny_policy, 1), 1, SamplingParams(0.0, max_new_tokens=2))
    assert generator.plan.dtype == "float32"  # a CPU samples the module itself
