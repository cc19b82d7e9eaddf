"""The shared-prefix forward gives the plain forward's loss and gradients (within float tolerance)."""

import random

import pytest
import torch

from swarm.core.errors import ModelError
from swarm.policy.grpo import clipped_policy_loss
from swarm.policy.prefix import (
    group_prompts,
    hidden_logprobs,
    pack_prefix_batch,
    prefix_hidden,
    supports_shared_prefix,
)
from swarm.policy.trainer import TrainSample, pack_batch

PAD = 0


def _random_model(kind: str):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    shape = dict(
        vocab_size=61,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,  # grouped-query attention, as the real models
        max_position_embeddings=128,
        pad_token_id=PAD,
    )
    torch.manual_seed(1)
    if kind == "llama":
        return LlamaForCausalLM(LlamaConfig(**shape, tie_word_embeddings=True))
    return Qwen2ForCausalLM(Qwen2Config(**shape, tie_word_embeddings=False))  # biased q/k/v


def _samples(vocab: int, seed: int = 0) -> list[TrainSample]:
    """Three prompts of different lengths, four completions each of 1-7 tokens, interleaved."""
    rng = random.Random(seed)
    samples = []
    for prompt_len in (4, 9, 13):
        prompt = tuple(rng.randrange(1, vocab) for _ in range(prompt_len))
        for _ in range(4):
            completion = tuple(rng.randrange(1, vocab) for _ in range(rng.randint(1, 7)))
            samples.append(TrainSample(prompt, completion, rng.uniform(-1.5, 1.5)))
    rng.shuffle(samples)
    return samples


def _plain_logprobs(model, batch):
    input_ids, attention, mask = pack_batch(batch, PAD, "cpu")
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = model(input_ids=input_ids, attention_mask=attention, position_ids=positions).logits
    logits = logits[:, -mask.shape[1] - 1 : -1, :].float()
    targets = input_ids[:, -mask.shape[1] :]
    return torch.log_softmax(logits, -1).gather(-1, targets.unsqueeze(-1)).squeeze(-1), mask


def _shared_logprobs(model, batch):
    packed = pack_prefix_batch(
        [s.prompt_ids for s in batch], [s.completion_ids for s in batch], PAD, "cpu"
    )
    hidden = prefix_hidden(model, packed)
    return hidden_logprobs(model, hidden, packed.completion_ids), packed.mask


def _loss_and_grads(model, samples, logprob_fn, micro: int):
    """The trainer's accumulation: one token normalizer for the step, backward per micro-batch."""
    model.zero_grad(set_to_none=True)
    model.train()
    tokens = sum(len(s.completion_ids) for s in samples)
    total, all_logprobs = 0.0, []
    for i in range(0, len(samples), micro):
        batch = samples[i : i + micro]
        logprobs, mask = logprob_fn(model, batch)
        # Off-policy old log-probs make the ratio (and its clipping) matter, not just its gradient.
        wobble = 0.2 * torch.sin(torch.arange(logprobs.numel(), dtype=logprobs.dtype))
        old = logprobs.detach() + wobble.view_as(logprobs)
        advantages = torch.tensor([s.advantage for s in batch])
        loss = clipped_policy_loss(logprobs, old, advantages, mask, normalizer=tokens).loss
        loss.backward()
        total += float(loss.detach())
        all_logprobs.extend((logprobs * mask).sum(-1).tolist())
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return total, all_logprobs, grads


@pytest.fixture(scope="module", params=["tiny", "llama", "qwen2"])
def model(request):
    if request.param == "tiny":
        from transformers import AutoModelForCausalLM

        path = request.getfixturevalue("tiny_model_path")
        return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return _random_model(request.param)


@pytest.mark.parametrize("micro", [12, 5])
def test_loss_and_every_gradient_equal_the_plain_forward(model, micro):
    samples = _samples(min(model.config.vocab_size, 61))
    plain_loss, plain_lp, plain_grads = _loss_and_grads(model, samples, _plain_logprobs, micro)
    shared_loss, shared_lp, shared_grads = _loss_and_grads(model, samples, _shared_logprobs, micro)
    assert shared_loss == pytest.approx(plain_loss, rel=1e-5, abs=1e-6)
    assert shared_lp == pytest.approx(plain_lp, rel=1e-5, abs=1e-5)
    assert set(shared_grads) == set(plain_grads) == {n for n, _ in model.named_parameters()}
    for name, grad in plain_grads.items():
        scale = grad.abs().max().item()
        assert scale > 0, name  # every parameter gets a gradient: the comparison means something
        assert torch.allclose(shared_grads[name], grad, rtol=1e-4, atol=1e-5 * scale), name


def test_a_completion_sees_its_own_prompt_not_a_neighbours(model):
    """Swapping which prompt a completion follows changes its log-prob: the cache rows are right."""
    samples = _samples(min(model.config.vocab_size, 61))[:6]
    swapped = [
        TrainSample(samples[(i + 1) % len(samples)].prompt_ids, s.completion_ids, s.advantage)
        for i, s in enumerate(samples)
    ]
    with torch.no_grad():
        mine, mask = _shared_logprobs(model, swapped)
        plain, _ = _plain_logprobs(model, swapped)
        original, _ = _shared_logprobs(model, samples)
    assert torch.allclose(mine * mask, plain * mask, atol=1e-5)
    assert not torch.allclose(mine * mask, original * mask, atol=1e-3)


def test_group_prompts_keeps_first_seen_order_and_maps_every_row():
    groups = group_prompts([(3, 4), (5,), (3, 4), (5,), (6, 7, 8)])
    assert groups.prompts == ((3, 4), (5,), (6, 7, 8))
    assert groups.rows == (0, 1, 0, 1, 2)


def test_packing_pads_prompts_left_and_completions_right():
    packed = pack_prefix_batch([(3, 4), (5,), (3, 4)], [(9,), (8, 7, 6), ()], PAD, "cpu")
    assert packed.prompt_ids.tolist() == [[3, 4], [PAD, 5]]
    assert packed.prompt_attention.tolist() == [[1, 1], [0, 1]]
    assert packed.rows.tolist() == [0, 1, 0]
    assert packed.completion_ids.tolist() == [[9, PAD, PAD], [8, 7, 6], [PAD, PAD, PAD]]
    assert packed.mask.tolist() == [[1, 0, 0], [1, 1, 1], [0, 0, 0]]


def _checkpointed(kind: str, reentrant: bool = False):
    model = _random_model(kind)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": reentrant})
    return model


def _count_attention_calls(model) -> list[int]:
    """A counter of every attention call, the backward pass's replays included."""
    calls = [0]

    def count(*_):
        calls[0] += 1

    for name, module in model.named_modules():
        if name.endswith("self_attn"):
            module.register_forward_hook(count)
    return calls


@pytest.mark.parametrize("kind", ["llama", "qwen2"])
@pytest.mark.parametrize("micro", [12, 5])
def test_under_gradient_checkpointing_the_shared_prefix_gives_the_plain_gradients(kind, micro):
    """Checkpointed layers replay in the backward pass and still read the same prompt cache."""
    reference = _random_model(kind)  # no checkpointing, the plain forward
    samples = _samples(reference.config.vocab_size)
    plain_loss, plain_lp, plain_grads = _loss_and_grads(reference, samples, _plain_logprobs, micro)
    model = _checkpointed(kind)
    assert supports_shared_prefix(model)
    calls = _count_attention_calls(model)
    model.train()
    logprobs, mask = _shared_logprobs(model, samples[:micro])
    forward_calls = calls[0]
    (logprobs * mask).sum().backward()
    assert forward_calls == 2 * model.config.num_hidden_layers  # prompt pass, completion pass
    assert calls[0] == 2 * forward_calls  # every layer of both passes ran again: checkpointed
    loss, shared_lp, grads = _loss_and_grads(model, samples, _shared_logprobs, micro)
    assert loss == pytest.approx(plain_loss, rel=1e-5, abs=1e-6)
    assert shared_lp == pytest.approx(plain_lp, rel=1e-5, abs=1e-5)
    assert set(grads) == set(plain_grads) == {n for n, _ in model.named_parameters()}
    for name, grad in plain_grads.items():
        scale = grad.abs().max().item()
        assert scale > 0, name
        assert torch.allclose(grads[name], grad, rtol=1e-4, atol=1e-5 * scale), name


def test_reentrant_checkpointing_takes_the_plain_path():
    """Reentrant checkpointing would cut the gradient through the prompt cache: refused."""
    assert supports_shared_prefix(_random_model("llama"))
    model = _checkpointed("llama", reentrant=True)
    assert not supports_shared_prefix(model)
    samples = _samples(model.config.vocab_size)[:4]
    model.train()
    with pytest.raises(ModelError):
        _shared_logprobs(model, samples)


def test_trainer_keeps_the_shared_prefix_under_gradient_checkpointing():
    """One checkpointed GRPO update either way: the shared path runs (two decoder passes per
    micro-batch) and gives the plain path's loss, norm and weights."""
    import copy

    from swarm.policy.trainer import GRPOTrainer, TrainerSettings

    base = _random_model("llama")
    samples = _samples(base.config.vocab_size, seed=2)
    results, models, decoder_calls = [], [], []
    for shared in (True, False):
        model = copy.deepcopy(base)
        calls = [0]
        model.base_model.register_forward_hook(
            lambda *_, calls=calls: calls.__setitem__(0, calls[0] + 1)
        )
        settings = TrainerSettings(
            lr=1e-3, micro_batch_size=5, shared_prefix=shared, gradient_checkpointing=True
        )
        results.append(GRPOTrainer(model, PAD, settings).update(samples))
        models.append(model)
        decoder_calls.append(calls[0])
    micro_batches = -(-len(samples) // 5)
    assert decoder_calls == [2 * micro_batches, micro_batches]
    assert results[0].loss == pytest.approx(results[1].loss, rel=1e-5, abs=1e-7)
    assert results[0].grad_norm == pytest.approx(results[1].grad_norm, rel=1e-4)
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_trainer_default_is_shared_prefix_and_matches_the_plain_path():
    """One GRPO update (KL on, micro-batches of 5) either way: same loss, norm, KL and weights."""
    import copy

    from swarm.policy.trainer import GRPOTrainer, TrainerSettings

    assert TrainerSettings().shared_prefix
    base = _random_model("qwen2")
    samples = _samples(base.config.vocab_size, seed=4)
    results, models = [], []
    for shared in (True, False):
        model = copy.deepcopy(base)
        settings = TrainerSettings(lr=1e-3, kl_coef=0.05, micro_batch_size=5, shared_prefix=shared)
        trainer = GRPOTrainer(model, PAD, settings)
        results.append(trainer.update(samples))
        results.append(trainer.update(samples))  # second step: KL to the reference is not 0
        models.append(model)
    assert results[0].loss == pytest.approx(results[2].loss, rel=1e-5, abs=1e-7)
    assert results[0].grad_norm == pytest.approx(results[2].grad_norm, rel=1e-4)
    assert results[1].kl == pytest.approx(results[3].kl, rel=1e-3) and results[1].kl > 0
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)
