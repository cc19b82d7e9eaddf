"""The memory plan's estimate from numbers: parameter counts against real models, a layer's
kept activations against what autograd saves, and how the parts add up to the peak."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from swarm.core.errors import ModelError
from swarm.policy.memory import (
    FP32,
    MB,
    Generator,
    ModelShape,
    Phase,
    Place,
    Setup,
    Workload,
    activation_bytes,
    checkpointing_on,
    estimate,
    fits,
    largest_micro_batch,
    layer_bytes_per_token,
    model_shape,
)

LLAMA = {  # tied embeddings, one key/value head per query head
    "model_type": "llama",
    "vocab_size": 300,
    "hidden_size": 64,
    "intermediate_size": 160,
    "num_hidden_layers": 3,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "tie_word_embeddings": True,
}
QWEN2 = {  # untied, grouped keys/values, biases on q/k/v
    "model_type": "qwen2",
    "vocab_size": 500,
    "hidden_size": 96,
    "intermediate_size": 256,
    "num_hidden_layers": 2,
    "num_attention_heads": 6,
    "num_key_value_heads": 2,
    "tie_word_embeddings": False,
}
WORK = Workload(
    questions=16,
    completions=8,
    prompt_tokens=300,
    new_tokens=1000,
    generate_rows=32,
    update_rows=128,
    micro_batch=16,
)
SHAPE = ModelShape(
    parameters=494_000_000,
    layers=24,
    hidden=896,
    intermediate=4864,
    heads=14,
    kv_heads=2,
    head_dim=64,
    vocab=151_936,
)


def _real_model(config: dict) -> torch.nn.Module:
    from transformers import AutoConfig, AutoModelForCausalLM

    kind = config["model_type"]
    return AutoModelForCausalLM.from_config(
        AutoConfig.for_model(kind, **{k: v for k, v in config.items() if k != "model_type"})
    )


@pytest.mark.parametrize("config", [LLAMA, QWEN2], ids=["llama-tied", "qwen2-gqa-bias"])
def test_parameters_counted_from_config_json_equal_the_models(config):
    model = _real_model(config)
    real = sum(p.numel() for p in model.parameters())  # tied weights once
    assert model_shape(model.config.to_dict()).parameters == real


def test_a_multimodal_config_is_read_from_its_text_config():
    shape = model_shape({"model_type": "llava", "text_config": LLAMA})
    assert (shape.layers, shape.hidden, shape.vocab) == (3, 64, 300)
    assert shape.kv_width == 64


def test_a_config_without_a_size_is_refused_naming_it():
    broken = {k: v for k, v in LLAMA.items() if k != "num_hidden_layers"}
    with pytest.raises(ModelError, match="num_hidden_layers"):
        model_shape(broken)


def _saved_bytes_per_token_layer(config: dict, autocast: bool) -> float:
    """Bytes autograd keeps per token for one more decoder layer (weights left out)."""

    def saved(layers: int) -> int:
        torch.manual_seed(0)
        model = _real_model({**config, "num_hidden_layers": layers}).train()
        weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
        kept: dict[int, int] = {}

        def pack(t):
            storage = t.untyped_storage()
            if storage.data_ptr() not in weights:
                kept[storage.data_ptr()] = storage.nbytes()
            return t

        ids = torch.randint(0, config["vocab_size"], (4, 32))
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
                model.model(input_ids=ids, attention_mask=torch.ones_like(ids))
        return sum(kept.values())

    return (saved(2) - saved(1)) / (4 * 32)


@pytest.mark.parametrize("autocast", [False, True], ids=["fp32", "bf16-autocast"])
@pytest.mark.parametrize("config", [LLAMA, QWEN2], ids=["llama", "qwen2"])
def test_a_layers_kept_activations_are_what_autograd_saves(config, autocast):
    shape = model_shape(config)
    estimated = layer_bytes_per_token(shape, Setup(autocast=autocast))
    measured = _saved_bytes_per_token_layer(config, autocast)
    # per token: bf16 autocast also keeps each layer's bf16 weight copies, counted apart
    if autocast:
        layer_weights = (shape.parameters - shape.vocab * shape.hidden * 2) / shape.layers
        measured -= 2 * layer_weights / (4 * 32)
    assert estimated == pytest.approx(measured, rel=0.1)


def _part(plan, name: str):
    return next(p for p in plan.parts if p.name.startswith(name))


def test_the_peak_is_what_always_stays_plus_the_busiest_phase():
    plan = estimate(SHAPE, WORK, Setup())
    always = sum(p.bytes for p in plan.parts if p.phase is Phase.ALWAYS)
    phases = [
        sum(p.bytes for p in plan.parts if p.phase is phase)
        for phase in (Phase.GENERATION, Phase.TRAINING, Phase.STEP, Phase.SAVING)
    ]
    assert not any(p.phase is Phase.STEP for p in plan.parts)  # a CPU's Adam steps in place
    assert plan.peak() == always + max(phases)
    assert _part(plan, "optimizer state").bytes == SHAPE.parameters * FP32 * 2
    assert _part(plan, "gradients").bytes == SHAPE.parameters * FP32


def test_bf16_weights_get_fp32_master_weights_and_a_generator_keeps_no_optimizer():
    trainer = estimate(SHAPE, WORK, Setup(weight_bytes=2, autocast=True))
    assert _part(trainer, "weights").bytes == SHAPE.parameters * 2
    assert _part(trainer, "fp32 master weights").bytes == SHAPE.parameters * 2
    assert _part(trainer, "bf16 weight copies").phase is Phase.TRAINING
    checkpointed = estimate(SHAPE, WORK, Setup(weight_bytes=2, autocast=True, checkpointing=True))
    assert not any(p.name == "bf16 weight copies" for p in checkpointed.parts)  # recomputed
    follower = estimate(SHAPE, WORK, Setup(weight_bytes=2, trainer=False))
    names = {p.name for p in follower.parts}
    assert not names & {"optimizer state", "gradients (fp32)", "fp32 master weights"}
    assert follower.peak() < trainer.peak()


def test_a_kl_penalty_keeps_a_reference_model():
    plain = estimate(SHAPE, WORK, Setup())
    kl = estimate(SHAPE, WORK, Setup(reference=True))
    assert kl.peak() - plain.peak() == SHAPE.parameters * FP32


def test_checkpointing_keeps_less_and_both_settings_are_shown():
    off = estimate(SHAPE, WORK, Setup(checkpointing=False))
    on = estimate(SHAPE, WORK, Setup(checkpointing=True))
    used_off = _part(off, "activations, checkpointing off")
    shown_on = _part(off, "activations, checkpointing on")
    assert used_off.phase is Phase.TRAINING and shown_on.phase is Phase.UNUSED
    assert _part(on, "activations, checkpointing on").bytes == shown_on.bytes
    assert shown_on.bytes < used_off.bytes / 5
    assert on.peak() < off.peak()


def test_activations_grow_with_the_micro_batch_and_the_cache_with_the_generate_rows():
    setup = Setup()
    small = activation_bytes(SHAPE, WORK, setup, checkpointing=False)
    double = activation_bytes(SHAPE, replace(WORK, micro_batch=32), setup, checkpointing=False)
    assert 1.8 < double / small < 2.1
    cache = _part(estimate(SHAPE, WORK, setup), "generation").bytes
    more = _part(estimate(SHAPE, replace(WORK, generate_rows=64), setup), "generation").bytes
    assert 1.8 < more / cache < 2.1


def test_the_shared_prefix_runs_each_prompt_once():
    work = replace(WORK, prompt_tokens=1000, new_tokens=100)
    shared = activation_bytes(SHAPE, work, Setup(shared_prefix=True), checkpointing=False)
    plain = activation_bytes(SHAPE, work, Setup(shared_prefix=False), checkpointing=False)
    assert plain > 3 * shared


def test_on_cuda_the_card_and_the_host_are_planned_apart():
    plan = estimate(SHAPE, WORK, Setup(cuda=True, weight_bytes=2, autocast=True))
    card = sum(p.bytes for p in plan.parts if p.place is Place.DEVICE and p.phase is Phase.ALWAYS)
    assert plan.peak(Place.DEVICE) > card
    assert _part(plan, "verification worker").place is Place.HOST
    assert _part(plan, "CUDA context").place is Place.DEVICE
    host = plan.peak(Place.HOST)
    assert host < plan.peak(Place.DEVICE)
    assert fits(plan, plan.peak(Place.DEVICE) * 2, host * 2)
    assert not fits(plan, plan.peak(Place.DEVICE) * 2, host // 2)


def test_vllm_reserves_its_share_of_the_card_and_gives_it_back_asleep():
    awake = Setup(cuda=True, generator=Generator.VLLM, vllm_reserved=40 << 30)
    asleep = replace(awake, vllm_sleep=True)
    assert _part(estimate(SHAPE, WORK, awake), "vLLM engine").phase is Phase.ALWAYS
    plan = estimate(SHAPE, WORK, asleep)
    assert _part(plan, "vLLM engine").phase is Phase.GENERATION
    assert _part(plan, "vLLM weights asleep").place is Place.HOST
    assert plan.peak() < estimate(SHAPE, WORK, awake).peak()


def test_the_largest_micro_batch_that_fits_is_found():
    setup = Setup(cuda=True, weight_bytes=2, autocast=True)
    at_24 = estimate(SHAPE, replace(WORK, micro_batch=24), setup)
    card = int(at_24.peak(Place.DEVICE) / 0.9) + 1
    assert largest_micro_batch(SHAPE, WORK, setup, card, 1 << 50) == 24
    assert largest_micro_batch(SHAPE, WORK, setup, 1 << 50, 1 << 50) == WORK.update_rows
    assert largest_micro_batch(SHAPE, WORK, setup, 1 * MB, 1 << 50) is None


def test_the_largest_part_names_a_key_to_change():
    plan = estimate(SHAPE, replace(WORK, generate_rows=4096), Setup())
    assert plan.largest().key == "generation.batch_size"
    assert all(p.key for p in plan.parts if p.name.startswith(("weights", "activations")))


def test_checkpointing_auto_is_on_for_real_models_only():
    assert checkpointing_on("auto", SHAPE.parameters)
    assert not checkpointing_on("auto", 866_176)
    assert checkpointing_on("on", 1) and not checkpointing_on("off", SHAPE.parameters)


QWEN_05B = {  # Qwen2.5-0.5B's config.json sizes
    "model_type": "qwen2",
    "vocab_size": 151_936,
    "hidden_size": 896,
    "intermediate_size": 4864,
    "num_hidden_layers": 24,
    "num_attention_heads": 14,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
}
# Peak MiB above weights and gradients of one pass of a random Qwen2.5-0.5B-shaped model
# (fp32 weights, bf16 autocast), measured on one H200 by scripts/bench_prefix_memory.py
# (docs/BENCHMARKS.md, the GPU path): prompts, completions each, prompt and completion
# tokens, checkpointing, shared prefix, MiB.
H200_PASSES = [
    (4, 8, 300, 200, True, True, 2456),
    (4, 8, 300, 200, True, False, 3181),
    (4, 8, 100, 500, True, True, 3309),
    (4, 8, 100, 500, True, False, 3698),
    (1, 8, 300, 1200, True, True, 2848),
    (1, 8, 300, 1200, False, True, 20960),
]


@pytest.mark.parametrize(
    "prompts, group, prompt, completion, checkpointing, shared, mib", H200_PASSES
)
def test_a_pass_on_cuda_is_planned_near_what_an_h200_measured(
    prompts, group, prompt, completion, checkpointing, shared, mib
):
    shape = model_shape(QWEN_05B)
    rows = prompts * group
    work = Workload(prompts, group, prompt, completion, rows, rows, rows)
    setup = Setup(cuda=True, autocast=True, checkpointing=checkpointing, shared_prefix=shared)
    plan = estimate(shape, work, setup)
    passes = [p for p in plan.parts if p.phase is Phase.TRAINING and p.name != "gradients (fp32)"]
    planned = sum(p.bytes for p in passes) / MB
    assert -0.2 <= planned / mib - 1 <= 0.35
