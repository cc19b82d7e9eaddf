# ruff: noqa: F811 - the fixtures imported from test_vllm_args are parameters here
"""vLLM's weights, seeds and sleep against the stand-in as vLLM 0.32.0 behaves (no GPU, no vLLM).

The stand-in first: a multiprocess engine's utility call turns tensors into lists, and its
reload processes a fused layer only when all its parts have arrived. Then the generator
over it: an isolated engine reloads from a weights file written a tensor at a time, an
in-process one from a stream, a follower's partial update leaves no layer half loaded,
every generator the engine reseeds is put back, and the engine sleeps while training.
"""

import random
import weakref

import numpy as np
import pytest
import torch
from safetensors.torch import load_file

from swarm.policy import weights_file
from swarm.policy.generator import SamplingParams
from swarm.policy.vllm_generator import VLLMGenerator, isolate_engines
from tests import vllm_standin
from tests.unit.policy.test_vllm_args import policy, vllm  # noqa: F401 - fixtures
from tests.vllm_standin_worker import Worker, utility_call

MP = "VLLM_ENABLE_V1_MULTIPROCESSING"


def _engine_matches(llm, model, dtype=torch.bfloat16) -> None:
    for name, tensor in model.state_dict().items():
        held = llm.worker.weights[name]
        assert not torch.isnan(held).any(), name
        assert torch.equal(held, tensor.detach().to(dtype)), name


def _nudge(model, by=0.01) -> None:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(by * torch.randn_like(p))


def test_a_utility_call_turns_tensors_into_lists_as_the_engine_core_decodes_them():
    big, small = torch.ones(8, 16), torch.ones(2)
    method, _, args, kwargs = utility_call(
        "reload_weights", None, (), {"w": [("a", big), ("b", small)]}
    )
    assert method == "reload_weights" and args == ()
    (name, first), (_, second) = kwargs["w"]
    assert name == "a" and first[:2] == ["float32", [8, 16]] and isinstance(first[2], int)
    assert second[:2] == ["float32", [2]] and isinstance(second[2], memoryview)  # inline
    with pytest.raises(TypeError, match="not serializable"):
        utility_call("reload_weights", None, (), {"w": (x for x in [1])})


def test_the_stand_in_reload_processes_a_fused_layer_only_when_complete(policy):
    worker = Worker(policy.name, torch.bfloat16)
    state = policy.model.state_dict()
    worker.reload_weights(weights_iterator=list(state.items()))
    assert "model.layers.0.self_attn.qkv_proj" in worker.processed_early
    assert "model.layers.0.mlp.gate_up_proj" in worker.processed_early
    q = "model.layers.0.self_attn.q_proj.weight"
    worker.reload_weights(weights_iterator=[(q, state[q])])  # one part of qkv_proj only
    assert worker.processed_early == []
    assert torch.isnan(worker.weights["model.layers.0.self_attn.k_proj.weight"]).all()
    assert torch.equal(worker.weights["lm_head.weight"], state["lm_head.weight"].bfloat16())
    with pytest.raises(TypeError, match="must be Tensor, not list"):
        worker.reload_weights(weights_iterator=[(q, ["bfloat16", [64, 16], 1])])


def test_an_isolated_engine_reloads_every_weight_from_a_file(policy, vllm, monkeypatch):
    monkeypatch.delenv(MP, raising=False)
    isolate_engines()
    generator = VLLMGenerator(policy, seed=0)
    (llm,) = vllm.LLM.built
    assert llm.multiprocess
    _nudge(policy.model)
    generator.sync_weights(policy.model)
    _engine_matches(llm, policy.model)
    folder = generator.folder
    assert llm.worker.model_path == str(folder) and llm.prefix_cache_resets == 1
    _nudge(policy.model)
    generator.update_weights(policy.model, {"model.layers.0.self_attn.q_proj.weight"})
    _engine_matches(llm, policy.model)
    generator.close()
    assert not folder.exists()


def test_an_in_process_engine_takes_a_stream_and_a_partial_update_loads_whole_layers(
    policy,
    vllm,
    monkeypatch,
):
    monkeypatch.setenv(MP, "0")
    generator = VLLMGenerator(policy, seed=0)
    (llm,) = vllm.LLM.built
    given = []
    reload = llm.worker.reload_weights

    def watch(weights_iterator=None, **kwargs):
        given.append(weights_iterator)
        return reload(weights_iterator=weights_iterator, **kwargs)

    llm.worker.reload_weights = watch
    _nudge(policy.model)
    generator.update_weights(policy.model, {"model.layers.0.self_attn.q_proj.weight"})
    assert iter(given[0]) is given[0]  # a stream, not a materialised copy of the state dict
    _engine_matches(llm, policy.model)
    generator.close()


def test_the_weights_file_is_written_one_tensor_at_a_time(policy, tmp_path, monkeypatch):
    live: list[weakref.ref] = []
    cast = torch.Tensor.to

    class Probe(torch.Tensor):
        pass

    def to(tensor, *args, **kwargs):
        out = cast(tensor, *args, **kwargs).as_subclass(Probe)
        assert sum(r() is not None for r in live) == 0  # the previous copy is gone
        live.append(weakref.ref(out))
        return out

    monkeypatch.setattr(weights_file, "to_host", lambda t, dtype: to(t, "cpu", dtype))
    path = tmp_path / "model.safetensors"
    weights_file.write_weights(policy.model, path, torch.bfloat16)
    read = load_file(path)
    state = policy.model.state_dict()
    assert set(read) == set(state) and len(live) == len(state)
    for name, tensor in state.items():
        assert torch.equal(read[name], tensor.bfloat16())


def test_starting_an_engine_puts_back_every_generator_it_reseeds(policy, vllm, monkeypatch):
    cuda = {"state": [torch.tensor([7])]}
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: list(cuda["state"]))
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", lambda s: cuda.update(state=list(s)))
    monkeypatch.setattr(
        torch.cuda, "manual_seed_all", lambda seed: cuda.update(state=[torch.tensor([seed])])
    )
    monkeypatch.setenv(MP, "0")
    torch.set_num_threads(2)
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    expected = (random.random(), np.random.rand(), torch.rand(1))
    random.seed(5)
    np.random.seed(5)
    torch.manual_seed(5)
    cuda["state"] = [torch.tensor([7])]  # torch.manual_seed seeds CUDA too
    VLLMGenerator(policy, seed=1).close()
    assert (random.random(), np.random.rand()) == expected[:2]
    assert torch.equal(torch.rand(1), expected[2])
    assert torch.equal(cuda["state"][0], torch.tensor([7])) and torch.get_num_threads() == 2


def test_with_sleep_the_engine_sleeps_between_generation_and_the_update(policy, vllm):
    out = vllm_standin.CompletionOutput(
        0, "", [5], None, [{5: vllm_standin.Logprob(-1.0)}], "length"
    )
    vllm.LLM.script = lambda prompts, sampling: [vllm_standin.RequestOutput("0", [1], [out])]
    generator = VLLMGenerator(policy, seed=0, sleep=True)
    (llm,) = vllm.LLM.built
    assert llm.kwargs["enable_sleep_mode"] is True
    params = SamplingParams(max_new_tokens=1)
    generator.generate(["a"], 1, params)
    assert llm.asleep == 1  # the trainer has the GPU
    _nudge(policy.model)
    generator.sync_weights(policy.model)
    assert llm.asleep == 0
    _engine_matches(llm, policy.model)
    generator.generate(["a"], 1, params)
    assert llm.sleeps == 2
    generator.close()
