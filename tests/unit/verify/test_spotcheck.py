"""The spot check: honest samples pass; written, tampered or out-of-support tokens are caught."""

from __future__ import annotations

import math

import msgspec
import pytest
import torch

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.policy.generator import SamplingParams, TransformersGenerator
from swarm.policy.prompts import build_prompt
from swarm.tasks import EASY_MIX, build_task, sample_specs
from swarm.verify.spotcheck import SpotChecker, SpotCheckSettings, implausible_tokens
from swarm.wire import Sampling
from tests.unit.wire.test_wire import KEY, make_group

SETTINGS = SpotCheckSettings(completions=8)


def sampler(temperature: float, top_p: float, top_k: int, max_new_tokens: int) -> Sampling:
    return Sampling(
        temperature=temperature, top_p=top_p, top_k=top_k, max_new_tokens=max_new_tokens
    )


def hf_sample(logits: torch.Tensor, s: Sampling, generator: torch.Generator) -> list[int]:
    """Draw one token per row the way the declared sampler does: temperature, top-k, top-p."""
    out = []
    for row in logits:
        scaled = row / s.temperature
        if s.top_k:
            kth = torch.topk(scaled, s.top_k).values[-1]
            scaled = scaled.masked_fill(scaled < kth, -math.inf)
        probs = torch.softmax(scaled, -1)
        if s.top_p < 1:
            sorted_p, order = torch.sort(probs, descending=True)
            keep = (sorted_p.cumsum(0) - sorted_p) < s.top_p
            probs = torch.zeros_like(probs).scatter(0, order[keep], sorted_p[keep])
        out.append(int(torch.multinomial(probs, 1, generator=generator)))
    return out


@pytest.mark.parametrize(
    "sampling",
    [
        sampler(1.0, 1.0, 0, 16),
        sampler(0.7, 0.9, 0, 16),
        sampler(1.0, 1.0, 5, 16),
        sampler(1.3, 0.8, 20, 16),
    ],
)
def test_tokens_drawn_by_the_declared_sampler_are_never_flagged(sampling):
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(400, 50, generator=gen) * 3
    tokens = hf_sample(logits, sampling, gen)
    assert implausible_tokens(logits, tokens, sampling, SETTINGS) == []


def test_tokens_outside_the_declared_support_are_flagged():
    row = [5.0, 4.0, 3.0, -30.0]  # probabilities at T=1: 0.665, 0.245, 0.090, ~1e-15
    logits = torch.tensor([row] * 4)
    assert (
        implausible_tokens(logits, [2, 0, 1, 0], sampler(1.0, 1.0, 2, 8), SETTINGS)[0][0] == 0
    )  # rank 2, top_k=2
    nucleus = implausible_tokens(logits[:2], [0, 2], sampler(1.0, 0.5, 0, 8), SETTINGS)
    assert [p for p, _ in nucleus] == [1] and "nucleus" in nucleus[0][1]
    floor = implausible_tokens(logits[:2], [0, 3], sampler(1.0, 1.0, 0, 8), SETTINGS)
    assert [p for p, _ in floor] == [1] and "probability" in floor[0][1]
    greedy = implausible_tokens(logits[:2], [0, 1], sampler(0.0, 1.0, 0, 8), SETTINGS)
    assert [p for p, _ in greedy] == [1]
    assert implausible_tokens(logits[:1], [99], sampler(1.0, 1.0, 0, 8), SETTINGS)[0][1].endswith(
        "outside the vocabulary"
    )


def test_row_count_must_match_tokens():
    with pytest.raises(ValueError):
        implausible_tokens(torch.zeros(2, 4), [1], sampler(1.0, 1.0, 0, 8), SETTINGS)


@pytest.fixture(scope="module")
def sampled(tiny_policy):
    """Real completions of the tiny model, as a group declaring its sampler and token ids."""
    torch.manual_seed(3)
    tok = tiny_policy.tokenizer
    task = build_task(sample_specs(EASY_MIX, 11, 0, 1)[0])
    prompt = build_prompt(tok, task.question, "")
    generator = TransformersGenerator(tiny_policy.model, tok, tiny_policy.stop_token_ids, 64)
    params = SamplingParams(temperature=1.0, top_p=0.95, top_k=20, max_new_tokens=12)
    completions = generator.generate([prompt], 8, params)[0]
    group = make_group(
        KEY,
        task=task.spec,
        question=task.question,
        completions=tuple(c.text for c in completions),
        finished=tuple(c.finished for c in completions),
        token_ids=tuple(c.token_ids for c in completions),
        sampling=sampler(1.0, 0.95, 20, 12),
    )
    return group, prompt, SpotChecker(tiny_policy.model, tok, SETTINGS)


def test_honest_completions_of_the_same_model_pass(sampled):
    group, prompt, checker = sampled
    checker.check(group, "hash", prompt)
    assert checker.checked >= 1


def test_a_hand_written_token_is_caught(sampled, tiny_policy):
    group, prompt, checker = sampled
    i = max(range(len(group.token_ids)), key=lambda k: len(group.token_ids[k]))
    tokens = list(group.token_ids[i])
    prompt_ids = tiny_policy.tokenizer(prompt, add_special_tokens=False)["input_ids"]
    logits = checker.logits(prompt_ids, tokens)
    tokens[0] = int(torch.argmin(logits[0]))  # the least likely first token: never inside top-k 20
    text = tiny_policy.tokenizer.decode(tokens, skip_special_tokens=False)
    tampered = msgspec.structs.replace(
        group,
        completions=group.completions[:i] + (text,) + group.completions[i + 1 :],
        token_ids=group.token_ids[:i] + (tuple(tokens),) + group.token_ids[i + 1 :],
    )
    with pytest.raises(RejectedMessage) as e:
        checker.check(tampered, "hash", prompt)
    assert e.value.reason == Reason.IMPLAUSIBLE_TOKENS and "top_k" in e.value.detail


def test_text_that_its_tokens_do_not_spell_is_caught(sampled):
    group, prompt, checker = sampled
    forged = msgspec.structs.replace(
        group, completions=("<answer>42</answer>",) + group.completions[1:]
    )
    with pytest.raises(RejectedMessage, match="do not spell"):
        checker.check(forged, "hash", prompt)


def test_a_group_without_token_ids_cannot_be_checked_and_is_refused(sampled):
    group, prompt, checker = sampled
    with pytest.raises(RejectedMessage, match="no token ids"):
        checker.check(msgspec.structs.replace(group, token_ids=()), "hash", prompt)
