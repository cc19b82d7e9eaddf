"""Generator, trainer and tiny model on the real built-in model (CPU, no mocks)."""

import copy

import pytest
import torch

from swarm.policy.generator import SamplingParams, TransformersGenerator
from swarm.policy.model import TINY_MODEL_NAME, pick_device, pick_dtype
from swarm.policy.prompts import build_prompt
from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample
from swarm.tasks import EASY_MIX, build_task, sample_specs


@pytest.fixture()
def policy(tiny_policy):
    """A private copy of the tiny policy, so tests that train do not leak into others."""
    clone = copy.copy(tiny_policy)
    clone.model = copy.deepcopy(tiny_policy.model)
    return clone


def _prompts(policy, n=4):
    tasks = [build_task(s) for s in sample_specs(EASY_MIX, 3, 0, n)]
    return tasks, [build_prompt(policy.tokenizer, t.question) for t in tasks]


def test_tiny_model_is_a_standard_hf_folder(tiny_model_path):
    names = {p.name for p in tiny_model_path.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= names


def test_tiny_model_loads_by_name_through_from_pretrained(tiny_model_path):
    from swarm.policy.model import resolve_model_path

    assert resolve_model_path(TINY_MODEL_NAME) == str(tiny_model_path)


def test_generator_batches_stop_at_eos_and_return_raw_logprobs(policy):
    torch.manual_seed(0)
    gen = TransformersGenerator(policy.model, policy.tokenizer, policy.stop_token_ids, batch_size=3)
    tasks, prompts = _prompts(policy)
    groups = gen.generate(prompts, 2, SamplingParams(temperature=1.0, max_new_tokens=8))
    assert [len(g) for g in groups] == [2, 2, 2, 2]
    for prompt, group in zip(prompts, groups):
        for c in group:
            assert policy.tokenizer.decode(list(c.prompt_ids)) == prompt  # left padding stripped
            assert len(c.logprobs) == len(c.token_ids) <= 8
            assert all(lp <= 0 for lp in c.logprobs)
            assert not (policy.stop_token_ids & set(c.token_ids))
            if c.finished:
                assert c.text.endswith("</answer>")


def test_trainer_logprobs_match_the_generators(policy):
    torch.manual_seed(1)
    gen = TransformersGenerator(policy.model, policy.tokenizer, policy.stop_token_ids)
    _, prompts = _prompts(policy, 6)
    completions = [c for g in gen.generate(prompts, 2, SamplingParams(max_new_tokens=8)) for c in g]
    trainer = GRPOTrainer(policy.model, policy.tokenizer.pad_token_id, TrainerSettings())
    samples = [TrainSample(c.prompt_ids, c.token_ids, 1.0) for c in completions]
    logprobs, mask = trainer.logprobs(samples)
    for row, c in enumerate(completions):
        n = len(c.token_ids)
        assert torch.allclose(logprobs[row, :n], torch.tensor(c.logprobs), atol=1e-4)
        assert mask[row].sum().item() == n


def test_update_raises_rewarded_and_lowers_punished_completions(policy):
    tok = policy.tokenizer
    prompt = tuple(
        tok(
            build_prompt(
                tok, "State the final answer to the following arithmetic problem: 2 + 3 ="
            ),
            add_special_tokens=False,
        )["input_ids"]
    )
    good = tuple(tok("<answer>5</answer>", add_special_tokens=False)["input_ids"]) + (
        tok.eos_token_id,
    )
    bad = tuple(tok("<answer>6</answer>", add_special_tokens=False)["input_ids"]) + (
        tok.eos_token_id,
    )
    # A small step: one Adam step at 1e-3 overshoots and moves mass to other digits.
    trainer = GRPOTrainer(policy.model, tok.pad_token_id, TrainerSettings(lr=1e-4))
    samples = [TrainSample(prompt, good, 1.0), TrainSample(prompt, bad, -1.0)]
    before = trainer.logprobs(samples)[0].sum(-1)
    result = trainer.update(samples)
    after = trainer.logprobs(samples)[0].sum(-1)
    assert not result.skipped and result.tokens == len(good) + len(bad)
    assert after[0] > before[0] and after[1] < before[1]


def test_zero_advantage_update_is_skipped_and_changes_nothing(policy):
    trainer = GRPOTrainer(policy.model, policy.tokenizer.pad_token_id, TrainerSettings(lr=1e-2))
    weights = {k: v.clone() for k, v in policy.model.state_dict().items()}
    result = trainer.update([TrainSample((5, 6), (7, 8), 0.0)] * 4)
    assert result.skipped and result.skip_reason == "zero_advantage"
    assert trainer.update([]).skip_reason == "empty_batch"
    assert all(torch.equal(v, weights[k]) for k, v in policy.model.state_dict().items())


def test_kl_reference_and_gradient_accumulation(policy):
    tok = policy.tokenizer
    samples = [
        TrainSample((10, 11, 12), (13 + i, 14), a) for i, a in enumerate((1.0, -1.0, 0.5, -0.5))
    ]
    settings = TrainerSettings(lr=1e-3, kl_coef=0.1, micro_batch_size=1, epochs=2)
    trainer = GRPOTrainer(policy.model, tok.pad_token_id, settings)
    result = trainer.update(samples)
    assert not result.skipped and result.grad_norm > 0
    assert result.kl > 0.0  # the second epoch has moved away from the reference
    assert trainer.reference is not None
    assert not any(p.requires_grad for p in trainer.reference.parameters())


def test_minibatches_make_one_step_each_and_later_steps_are_off_policy(policy):
    samples = [
        TrainSample((10, 11, 12), (13 + i, 14), a)
        for i, a in enumerate((1.0, -1.0, 0.5, -0.5, 1.0))
    ]
    start = copy.deepcopy(policy.model.state_dict())
    whole = GRPOTrainer(policy.model, policy.tokenizer.pad_token_id, TrainerSettings(lr=1e-3))
    assert whole.update(samples).steps == 1
    one_step = copy.deepcopy(policy.model.state_dict())

    # A mini-batch as large as the batch is the same single step.
    policy.model.load_state_dict(start)
    same = GRPOTrainer(
        policy.model, policy.tokenizer.pad_token_id, TrainerSettings(lr=1e-3, minibatch_size=5)
    )
    assert same.update(samples).steps == 1
    assert all(torch.allclose(v, one_step[k]) for k, v in policy.model.state_dict().items())

    # Mini-batches of 2: three steps per pass; the ratio after the first step is against the
    # log-probs from before the update, so a large step shows up as clipped tokens.
    policy.model.load_state_dict(start)
    settings = TrainerSettings(lr=0.3, minibatch_size=2, epochs=2, max_grad_norm=100.0)
    result = GRPOTrainer(policy.model, policy.tokenizer.pad_token_id, settings).update(samples)
    assert result.steps == 6
    assert result.clip_fraction > 0.0


def test_bf16_autocast_update_keeps_fp32_master_weights(policy):
    samples = [TrainSample((10, 11, 12), (13 + i, 14), a) for i, a in enumerate((1.0, -1.0))]
    trainer = GRPOTrainer(
        policy.model, policy.tokenizer.pad_token_id, TrainerSettings(lr=1e-4, autocast_bf16=True)
    )
    result = trainer.update(samples)
    assert not result.skipped and result.grad_norm > 0
    assert all(p.dtype == torch.float32 for p in policy.model.parameters())


def test_device_and_dtype_choice():
    assert pick_device("cpu").type == "cpu"
    assert pick_dtype("auto", torch.device("cpu")) == torch.float32
    assert pick_dtype("bfloat16", torch.device("cpu")) == torch.bfloat16
    from swarm.core.errors import ModelError

    with pytest.raises(ModelError):
        pick_dtype("float8", torch.device("cpu"))
    if not torch.cuda.is_available():
        with pytest.raises(ModelError, match="CUDA is not available"):
            pick_device("cuda")


def test_unknown_model_is_a_model_error(tmp_path):
    from swarm.core.errors import ModelError
    from swarm.policy.model import load_policy

    with pytest.raises(ModelError):
        load_policy(str(tmp_path / "no-such-model"))
