"""The vLLM generator against a stand-in with vLLM 0.32.0's real signatures (no GPU, no vLLM).

Every engine argument comes from the model and the config (the model's positions, the
memory share, the node's seed, no generation_config defaults), the sampler is exactly the
declared one, weights are pushed through the worker's `reload_weights` by name, and a
finished completion keeps the stop token it sampled. (Weight routes, seeds and sleep:
`test_vllm_weights.py`.)
"""

import weakref

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from swarm.core.errors import GeneratorError
from swarm.node.makers import make_generator
from swarm.node.shared_samples import own_samples
from swarm.policy.generator import SamplingParams
from swarm.policy.model import Policy
from swarm.policy.vllm_generator import VLLMGenerator, isolate_engines
from tests import vllm_standin
from tests.conftest import small_config

EOS, STOP = 2, 7  # the tokenizer's EOS and a second stop token from the generation config


class ByteTokenizer:
    """Enough of a tokenizer for the generator: ids are character codes."""

    eos_token_id = EOS
    pad_token_id = 0

    def __call__(self, text, add_special_tokens=False):
        return {"input_ids": [ord(c) % 64 for c in text]}

    def decode(self, ids, skip_special_tokens=False):
        return "".join(chr(65 + i % 26) for i in ids)


@pytest.fixture()
def policy(tmp_path) -> Policy:
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        max_position_embeddings=256,  # as swarm-tiny: vLLM refuses any longer max_model_len
        eos_token_id=[EOS, STOP],
    )
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = [EOS, STOP]
    config.save_pretrained(tmp_path)
    return Policy(
        name=str(tmp_path),
        model=model,
        tokenizer=ByteTokenizer(),
        device=torch.device("cpu"),
        dtype=torch.bfloat16,
        base_hash="0" * 64,
        model_id="test@0",
    )


@pytest.fixture()
def vllm(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    # isolate_engines() sets the variable for the process: restore its absence afterwards
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "unset")
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    return vllm_standin.install(monkeypatch)


def test_engine_arguments_come_from_model_and_config(policy, vllm, tmp_path):
    config = small_config(
        tmp_path / "run",
        node={"seed": 1234},
        generation={"backend": "vllm", "gpu_memory_utilization": 0.3, "vllm_sleep": True},
    )
    make_generator(config, policy)
    (llm,) = vllm.LLM.built
    assert llm.kwargs["max_model_len"] == 256
    assert llm.seed == 1234
    assert llm.gpu_memory_utilization == 0.3
    assert llm.dtype == "bfloat16"
    assert llm.kwargs["generation_config"] == "vllm"  # no repetition_penalty from the model folder
    assert llm.kwargs["logprobs_mode"] == "raw_logprobs"
    assert llm.kwargs["enable_sleep_mode"] is True  # generation.vllm_sleep


def test_two_nodes_seed_two_streams_and_the_process_keeps_its_threads(policy, vllm):
    torch.set_num_threads(2)
    torch.manual_seed(99)
    expected = torch.rand(3)
    torch.manual_seed(99)
    VLLMGenerator(policy, seed=1)
    VLLMGenerator(policy, seed=2)
    assert [llm.seed for llm in vllm.LLM.built] == [1, 2]
    assert torch.get_num_threads() == 2
    assert torch.equal(torch.rand(3), expected)  # the engine did not reseed the process


def _script(outputs):
    def answer(prompts, sampling):
        answer.sampling = sampling
        return outputs

    return answer


def test_sampling_is_exactly_the_declared_one_and_keeps_the_stop_token(policy, vllm):
    lp = vllm_standin.Logprob
    sample = vllm_standin.CompletionOutput(
        index=0,
        text="",
        token_ids=[5, 6, STOP],
        cumulative_logprob=None,
        logprobs=[{5: lp(-0.5)}, {6: lp(-1.5)}, {STOP: lp(-0.1)}],
        finish_reason="stop",
        stop_reason=STOP,
    )
    cut = vllm_standin.CompletionOutput(1, "", [9, 9], None, [{9: lp(-2.0)}] * 2, "length")
    vllm.LLM.script = _script([vllm_standin.RequestOutput("0", [1], [sample, cut])])
    generator = VLLMGenerator(policy, seed=0)
    params = SamplingParams(temperature=0.7, top_p=0.9, top_k=0, max_new_tokens=3)
    (group,) = generator.generate(["ab"], 2, params)
    sampling = vllm.LLM.script.sampling
    assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_tokens) == (
        0.7,
        0.9,
        0,
        3,
    )
    assert sampling.repetition_penalty == 1.0 and sampling.min_p == 0.0
    assert sampling.n == 2 and sampling.logprobs == 0
    assert sorted(sampling.stop_token_ids) == [EOS, STOP]
    done, unfinished = group
    assert done.token_ids == (5, 6) and done.logprobs == (-0.5, -1.5)
    assert done.finished and done.stop_id == STOP
    assert not unfinished.finished and unfinished.stop_id is None
    samples = own_samples(group, [1.0, -1.0], eos=EOS)
    assert samples[0].completion_ids == (5, 6, STOP)  # the stop token sampled, not EOS
    assert samples[1].completion_ids == (9, 9)


def test_weights_are_pushed_through_reload_weights_by_name(policy, vllm):
    generator = VLLMGenerator(policy, seed=0)
    with torch.no_grad():
        for p in policy.model.parameters():
            p.add_(0.01)
    generator.sync_weights(policy.model)
    generator.update_weights(policy.model, {"lm_head.weight"})
    (llm,) = vllm.LLM.built
    assert llm.worker.reloads == 2 and llm.prefix_cache_resets == 2
    state = policy.model.state_dict()
    assert set(llm.worker.weights) == set(state)
    for name, tensor in state.items():
        pushed = llm.worker.weights[name]
        assert pushed.dtype == torch.bfloat16
        assert torch.equal(pushed, tensor.to(torch.bfloat16))


def test_a_second_in_process_engine_is_refused_in_one_line(policy, vllm, monkeypatch):
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    first = VLLMGenerator(policy, seed=1)
    with pytest.raises(GeneratorError, match="second in-process vLLM engine"):
        VLLMGenerator(policy, seed=2)
    assert len(vllm.LLM.built) == 1  # refused before vLLM was asked for a second engine
    first.close()
    VLLMGenerator(policy, seed=3)  # the first is gone: one in-process engine again


def test_close_stops_an_in_process_engine_and_frees_it(policy, vllm, monkeypatch):
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    state = vllm.distributed.parallel_state
    generator = VLLMGenerator(policy, seed=1)
    (llm,) = vllm.LLM.built
    assert state.world is not None  # the engine set up the process's distributed state
    core = weakref.ref(llm.llm_engine.engine_core)
    weights = weakref.ref(llm.worker.weights["lm_head.weight"])
    vllm.LLM.built.clear()
    del llm
    emptied = []  # at each emptying of the CUDA cache: were the engine's weights gone?
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(weights() is None))
    generator.close()
    assert state.world is None and core() is None
    assert state.cleanups == 2  # EngineCore.shutdown's, and again once the engine was garbage
    assert emptied[0] is False  # the first, in EngineCore.shutdown, while the LLM held it all
    assert weights() is None and emptied[-1] is True  # emptied once nothing held them
    generator.close()  # a second close does nothing
    assert state.cleanups == 2
    VLLMGenerator(policy, seed=2).close()  # the process takes a new in-process engine


def test_close_ends_an_isolated_engines_core_and_its_folder(policy, vllm, monkeypatch):
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    isolate_engines()
    generator = VLLMGenerator(policy, seed=1)
    (llm,) = vllm.LLM.built
    folder = generator.folder
    assert folder.is_dir()
    generator.close()
    assert llm.llm_engine.engine_core.stopped and not folder.exists()
    assert vllm.distributed.parallel_state.cleanups == 0  # nothing of it in this process
    with pytest.raises(RuntimeError, match="shut down"):
        llm.generate([{"prompt_token_ids": [1]}])


def test_isolated_engines_each_run_apart_and_reload_from_their_own_file(policy, vllm, monkeypatch):
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    isolate_engines()
    generators = [VLLMGenerator(policy, seed=s) for s in range(3)]
    assert not any(g.in_process for g in generators)
    assert len({g.folder for g in generators}) == 3  # no engine reads another's weights
    generators[1].sync_weights(policy.model)
    worker = vllm.LLM.built[1].worker
    assert worker.model_path == str(generators[1].folder) and worker.reloads == 1
    assert vllm.LLM.built[0].worker.reloads == 0
    pushed = worker.weights["lm_head.weight"]
    assert torch.equal(pushed, policy.model.lm_head.weight.detach().to(torch.bfloat16))
    for g in generators:
        g.close()


def test_isolation_comes_before_the_first_engine(policy, vllm, monkeypatch):
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    engine = VLLMGenerator(policy, seed=1)
    with pytest.raises(GeneratorError, match="before the first vLLM engine"):
        isolate_engines()
    engine.close()
