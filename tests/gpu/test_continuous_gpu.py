"""The continuous-batching backend on a real GPU, as a node runs it. Skipped without CUDA.

The trainer owns the module first (fp32 master weights, bf16 autocast), then the generator
samples from those weights through a bf16 copy with a bf16 cache: greedy answers agree with
plain `generate`, log-probs stay close to the trainer's (the gap the importance correction
covers), and a training step shows in the next sample with no sync.
"""

import math

import pytest
import torch

from swarm.policy.continuous import ContinuousGenerator
from swarm.policy.generator import SamplingParams, TransformersGenerator
from swarm.policy.model import load_policy
from swarm.policy.paged import PAGE_TOKENS
from swarm.policy.prompts import build_prompt
from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample
from swarm.tasks import EASY_MIX, build_task, sample_specs

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def setup(tiny_model_path):
    policy = load_policy("swarm-tiny", device="cuda", dtype="bfloat16")
    settings = TrainerSettings(lr=1e-3, autocast_bf16=True, importance_cap=3.0)
    trainer = GRPOTrainer(policy.model, policy.tokenizer.pad_token_id, settings)
    generator = ContinuousGenerator(policy.model, policy.tokenizer, policy.stop_token_ids, 64)
    return policy, trainer, generator


def _prompts(policy, n=8):
    tasks = [build_task(s) for s in sample_specs(EASY_MIX, 3, 0, n)]
    return [build_prompt(policy.tokenizer, t.question) for t in tasks]


def test_greedy_agrees_with_plain_generate(setup):
    policy, _, generator = setup
    prompts = _prompts(policy)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=8)
    plain = TransformersGenerator(policy.model, policy.tokenizer, policy.stop_token_ids)
    ours = [g[0].token_ids for g in generator.generate(prompts, 1, greedy)]
    theirs = [g[0].token_ids for g in plain.generate(prompts, 1, greedy)]
    assert sum(a == b for a, b in zip(ours, theirs)) / len(prompts) >= 0.75


def test_logprobs_are_close_to_the_trainers_and_a_step_shows_at_once(setup):
    policy, trainer, generator = setup
    params = SamplingParams(temperature=1.0, max_new_tokens=8)
    groups = generator.generate(_prompts(policy, 4), 4, params)
    completions = [c for g in groups for c in g if c.token_ids]
    samples = [
        TrainSample(c.prompt_ids, c.token_ids, 1.0 if i % 2 else -1.0, sampler_logprobs=c.logprobs)
        for i, c in enumerate(completions)
    ]
    logprobs, mask = trainer.logprobs(samples)
    ours = torch.tensor([lp for c in completions for lp in c.logprobs])
    theirs = logprobs[mask.bool()].float().cpu()
    assert (ours - theirs).abs().mean() < 0.05
    before = [g[0].token_ids for g in generator.generate(_prompts(policy), 1, SamplingParams(0.0))]
    assert not trainer.update(samples).skipped
    after = [g[0].token_ids for g in generator.generate(_prompts(policy), 1, SamplingParams(0.0))]
    assert after != before  # lr 1e-3 on the tiny model moves its greedy answers


def test_it_samples_through_a_bf16_copy_with_a_bf16_cache(setup):
    policy, _, generator = setup
    plan = generator.plan
    assert plan.dtype == "bfloat16" and plan.copy  # the trainer's weights are fp32
    assert plan.cuda_graphs == (plan.attention == "flash")  # graphs where transformers has them
    if plan.attention != "paged":
        pytest.skip(f"transformers' {plan.attention} path runs here: no paged cache to size")
    prompts = _prompts(policy, 4)
    generator.generate(prompts, 2, SamplingParams(temperature=1.0, max_new_tokens=8))
    longest = max(len(policy.tokenizer(p, add_special_tokens=False)["input_ids"]) for p in prompts)
    slots = (1 + 8 * math.ceil((longest + 8) / PAGE_TOKENS)) * PAGE_TOKENS
    config = policy.model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_value = slots * 2 * config.num_key_value_heads * head_dim * config.num_hidden_layers
    assert generator.last_cache_bytes == 2 * per_value  # 2 bytes a value: bf16
