"""The continuous-batching backend on a CPU, with transformers' own `generate_batch`.

Greedy completions are plain `generate`'s; log-probs are the raw model's (checked against
the trainer's own computation, for the plain sampler and for a tempered one); the stop
token is kept apart; the trainer's module is used in place (a weight change shows at once,
no copy is kept) and gets its attention back after each call.
"""

import copy

import pytest
import torch

from swarm.core.errors import GeneratorError
from swarm.node.makers import make_generator
from swarm.policy.continuous import ContinuousGenerator
from swarm.policy.generator import SamplingParams, TransformersGenerator
from swarm.policy.prompts import build_prompt
from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample
from swarm.tasks import EASY_MIX, build_task, sample_specs
from tests.conftest import small_config


@pytest.fixture(scope="module")
def model(tiny_policy):
    return copy.deepcopy(tiny_policy.model).eval()


def _prompts(policy, n=4):
    tasks = [build_task(s) for s in sample_specs(EASY_MIX, 3, 0, n)]
    return [build_prompt(policy.tokenizer, t.question) for t in tasks]


def _trainer_logprobs(model, completions):
    trainer = GRPOTrainer(model, 0, TrainerSettings(lr=0.0))
    samples = [TrainSample(c.prompt_ids, c.token_ids, 1.0) for c in completions]
    logprobs, mask = trainer.logprobs(samples)
    return [row[: int(m.sum())].tolist() for row, m in zip(logprobs, mask)]


def test_greedy_completions_are_plain_generates(tiny_policy, model):
    prompts = _prompts(tiny_policy)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    stops = tiny_policy.stop_token_ids
    ours = ContinuousGenerator(model, tiny_policy.tokenizer, stops, 8).generate(prompts, 1, greedy)
    plain = TransformersGenerator(model, tiny_policy.tokenizer, stops).generate(prompts, 1, greedy)
    assert [g[0].token_ids for g in ours] == [g[0].token_ids for g in plain]
    assert [g[0].finished for g in ours] == [g[0].finished for g in plain]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_are_the_raw_models(tiny_policy, model, temperature):
    generator = ContinuousGenerator(model, tiny_policy.tokenizer, tiny_policy.stop_token_ids, 8)
    params = SamplingParams(temperature=temperature, max_new_tokens=8)
    groups = generator.generate(_prompts(tiny_policy, 3), 4, params)
    assert [len(g) for g in groups] == [4, 4, 4]
    completions = [c for g in groups for c in g if c.token_ids]
    assert completions
    expected = _trainer_logprobs(model, completions)
    for c, want in zip(completions, expected):
        assert len(c.logprobs) == len(c.token_ids)
        assert c.logprobs == pytest.approx(want, abs=2e-4)


def test_the_stop_token_is_kept_apart(tiny_policy, model):
    prompts = _prompts(tiny_policy, 1)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=6)
    free = ContinuousGenerator(model, tiny_policy.tokenizer, set(), 4).generate(prompts, 1, greedy)
    tokens = free[0][0].token_ids
    assert len(tokens) == 6 and not free[0][0].finished
    stop = tokens[2]
    first = tokens.index(stop)
    cut = ContinuousGenerator(model, tiny_policy.tokenizer, {stop}, 4).generate(prompts, 1, greedy)
    (done,) = cut[0]
    assert done.token_ids == tokens[:first] and done.finished and done.stop_id == stop
    assert len(done.logprobs) == first


def test_the_trainers_module_is_used_in_place(tiny_policy, model):
    generator = ContinuousGenerator(model, tiny_policy.tokenizer, set(), 4)
    probe = torch.tensor([[1, 2, 3, 4]])
    with torch.no_grad():
        logits = model(probe).logits
    prompts = _prompts(tiny_policy, 2)
    greedy = SamplingParams(temperature=0.0, max_new_tokens=4)
    before = generator.generate(prompts, 1, greedy)
    with torch.no_grad():  # paged attention only during a call: the trainer's forward unchanged
        assert torch.equal(model(probe).logits, logits)
    held = [v for v in vars(generator).values() if isinstance(v, torch.nn.Module)]
    assert len(held) == 1 and held[0] is model  # the trainer's module, no copy of it
    head = model.get_output_embeddings().weight
    with torch.no_grad():
        head.neg_()  # every argmax becomes an argmin
    try:
        after = generator.generate(prompts, 1, greedy)
    finally:
        with torch.no_grad():
            head.neg_()
    assert [g[0].token_ids for g in after] != [g[0].token_ids for g in before]


def test_the_node_builds_it_for_generation_backend_continuous(tiny_policy, tmp_path):
    generation = {"backend": "continuous", "batch_size": 12}
    config = small_config(tmp_path, generation=generation)
    generator = make_generator(config, tiny_policy)
    round_batch = config.generation.questions_per_round * config.generation.completions_per_question
    assert isinstance(generator, ContinuousGenerator)
    assert generator.max_sequences == max(12, round_batch)  # a round decodes together
    assert generator.model is tiny_policy.model


def test_a_model_without_continuous_batching_is_refused(tiny_policy):
    with pytest.raises(GeneratorError, match="continuous batching"):
        ContinuousGenerator(torch.nn.Linear(2, 2), tiny_policy.tokenizer, set())
