"""Generation with each prompt prefilled once draws the same samples as prefilling every row."""

import pytest
import torch

from swarm.policy.generator import SamplingParams, TransformersGenerator
from swarm.policy.tiny import build_tokenizer

PROMPTS = ["1 + 2 =\n", "What is 17 + 25? Answer briefly.\n", "x\n"]


@pytest.fixture(scope="module")
def setup():
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer()  # the char-level tokenizer: no model build needed
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(3)
    model = LlamaForCausalLM(config).eval()
    with (
        torch.no_grad()
    ):  # a peaked distribution, so that which token is drawn depends on the prompt
        model.lm_head.weight.mul_(40.0)
    return model, tokenizer


def _sample(setup, shared: bool, params: SamplingParams, seed: int = 0):
    model, tokenizer = setup
    generator = TransformersGenerator(
        model, tokenizer, {tokenizer.eos_token_id}, batch_size=8, shared_prefill=shared
    )
    torch.manual_seed(seed)
    return generator.generate(PROMPTS, 4, params)


@pytest.mark.parametrize("temperature", [1.0, 0.0])
def test_same_seed_same_samples_and_logprobs(setup, temperature):
    params = SamplingParams(temperature=temperature, max_new_tokens=6)
    plain = _sample(setup, False, params)
    shared = _sample(setup, True, params)
    assert [len(group) for group in shared] == [4, 4, 4]
    for plain_group, shared_group in zip(plain, shared, strict=True):
        for a, b in zip(plain_group, shared_group, strict=True):
            assert b.prompt_ids == a.prompt_ids
            assert (b.token_ids, b.text, b.finished) == (a.token_ids, a.text, a.finished)
            assert b.logprobs == pytest.approx(a.logprobs, abs=1e-4)
    if temperature > 0:  # the samples differ within a group: the comparison is not of constants
        assert len({c.token_ids for group in shared for c in group}) > 3


def test_completions_follow_their_own_prompt(setup):
    """Greedy completions of each prompt equal those of that prompt generated alone."""
    params = SamplingParams(temperature=0.0, max_new_tokens=6)
    together = _sample(setup, True, params)
    model, tokenizer = setup
    generator = TransformersGenerator(model, tokenizer, {tokenizer.eos_token_id}, batch_size=8)
    for prompt, group in zip(PROMPTS, together, strict=True):
        alone = generator.generate([prompt], 2, params)[0]
        assert {c.token_ids for c in alone} == {c.token_ids for c in group}
    assert len({group[0].token_ids for group in together}) > 1
