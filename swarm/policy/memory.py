"""A node's peak memory, estimated from numbers before any weights load.

Pure functions over plain data: a decoder's shape (`ModelShape`, read from its config.json
by `model_shape`), one round's work (`Workload`) and how the node runs it (`Setup`) give a
`MemoryPlan`, one `Part` per thing that holds memory, each in the phase of the round that
holds it. The peak is what every phase holds (the runtime, weights, master weights,
optimizer state, a reference model, the verification worker) plus the largest of
the phases that come one at a time: generation (the key/value cache and logits; on CUDA the
continuous backend's cache is bf16, and it keeps a bf16 copy of fp32 weights), a training
pass (the gradients, which the trainer frees after each step, and the activations a
micro-batch keeps for its backward pass), the optimizer's step (the gradients and, on CUDA,
a temporary the size of the weights) and writing a checkpoint (the weights serialised
to bytes). Worst-case sizes are the caller's: every completion as long as allowed.
`largest_micro_batch` is the largest micro-batch whose plan
fits a budget: splitting an update into micro-batches with gradient accumulation gives the
same update (`swarm.policy.trainer`), so a batch that does not fit runs in several passes.

What a decoder layer keeps for its backward pass, per token (measured with saved-tensor
hooks on Llama-shaped models, weights excluded): 6 x hidden in fp32 (the RMS norms and the
residual stream), then 2 x hidden (3 under bf16 autocast, which casts the input of each
projection on its own), 2 x the key/value width and 4 x the MLP's intermediate size in the
compute dtype. With gradient checkpointing a layer keeps only its fp32 input and one layer is
recomputed at a time. Attention keeps no scores (PyTorch's fused attention). Under bf16
autocast the forward also makes a bf16 copy of every weight, kept for the backward pass
unless the layers are checkpointed. On a CPU a node unmaps its large blocks when they are
freed (`swarm.node.heap`), so resident memory follows the live tensors (`CPU_SLACK` 1.0).
Assumed, not modelled: a dense gated-MLP decoder (Llama, Qwen2, Mistral, SmolLM), no
mixture of experts.

Deliberately not here: where the numbers come from (`swarm.config.memory` reads the config,
the model's config.json and the machine) and how a plan is printed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

from swarm.core.errors import ModelError

MB = 1 << 20
FP32 = 4
# The process before any model: Python, torch, transformers, libp2p, SQLAlchemy, the easy
# mix's dataset, after a round has run every code path (measured: scripts/bench_memory_plan.py).
RUNTIME_CPU = 470 * MB
RUNTIME_CUDA_HOST = 1500 * MB  # the same with a CUDA build of torch (not measured)
CUDA_CONTEXT = 500 * MB  # what the CUDA context and its kernels take on the card (not measured)
WORKER = 110 * MB  # the verification worker's process before its dataset cache (measured)
DATASET = 8 * MB  # one more dataset of the task mix, in the node and in the worker each
CPU_SLACK = 1.0  # resident over live memory in a round's transient parts on a CPU: a node
# unmaps its large blocks when freed (swarm.node.heap); it was 1.3 before that
# Layers' worth a checkpointed layer's backward pass holds: its activations and their
# gradients. On a CPU, resident memory: 3 while freed blocks stayed resident, 2 once large
# blocks were unmapped, 1 since a real model's blocks from 64 KB are (swarm.node.heap; with 2
# the tiny model's checkpointing case was planned 22.3 % over its use, with 1 +2.5 %).
RECOMPUTED_CUDA, RECOMPUTED_CPU = 2, 1
LOGPROB_CHUNK_TOKENS = 512  # tokens whose logits exist at once (`swarm.policy.prefix`)
FIT_SHARE = 0.9  # a plan fits when its peak is within this share of the memory there is
QKV_BIAS_MODELS = ("qwen2",)  # model types whose q/k/v projections have biases, undeclared
CHECKPOINTING_PARAMS = 10_000_000  # "auto" checkpoints any real LM; built-in tiny ones: < 1 M


class Phase(StrEnum):
    """When a part holds its memory."""

    ALWAYS = "always"
    GENERATION = "generating"
    TRAINING = "training"
    STEP = "stepping"  # the optimizer's step
    SAVING = "saving"  # writing a checkpoint
    UNUSED = "not used"  # shown beside the setting in use (activations with checkpointing)


class Place(StrEnum):
    """Which memory a part takes: the device's (RAM on a CPU, the card's on CUDA) or the host's."""

    DEVICE = "device"
    HOST = "host"


TRANSIENT = (Phase.GENERATION, Phase.TRAINING, Phase.STEP, Phase.SAVING)  # one at a time


@dataclass(frozen=True)
class ModelShape:
    """What a dense decoder's memory depends on."""

    parameters: int
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int

    @property
    def kv_width(self) -> int:
        """Width of one token's keys (or values) in one layer."""
        return self.kv_heads * self.head_dim


@dataclass(frozen=True)
class Workload:
    """One round's work in sequences and tokens."""

    questions: int
    completions: int  # per question: the group size
    prompt_tokens: int  # the longest prompt
    new_tokens: int  # the longest completion
    generate_rows: int  # sequences one generate call holds
    update_rows: int  # sequences one optimizer step trains on
    micro_batch: int  # sequences per forward and backward pass


class Generator(StrEnum):
    """Which engine samples, as far as memory goes."""

    TRANSFORMERS = "transformers"  # batched generate, a cache per call
    CONTINUOUS = "continuous"  # a paged cache holding every sequence of the round
    VLLM = "vllm"  # its own engine, reserving a share of the card


@dataclass(frozen=True)
class Setup:
    """How the node runs its round: device, precisions, and what it keeps."""

    cuda: bool = False
    weight_bytes: int = FP32  # bytes per weight as loaded
    autocast: bool = False  # the forward under bf16 autocast
    trainer: bool = True  # a generator-role node keeps no optimizer
    optimizer_states: int = 2  # Adam and AdamW keep two moments per weight
    optimizer_state_bytes: int = FP32  # each moment's bytes: fp32, or 2 (training.optimizer_state)
    reference: bool = False  # a frozen copy of the weights (KL to the start)
    checkpointing: bool = False
    shared_prefix: bool = True
    generator: Generator = Generator.TRANSFORMERS
    vllm_reserved: int = 0  # bytes vLLM reserves on the card
    vllm_sleep: bool = False  # the engine hands the card back while the trainer steps
    worker: bool = True  # peers' groups re-scored in a worker process
    datasets: int = 1  # datasets in the task mix

    @property
    def compute_bytes(self) -> int:
        return 2 if self.autocast else FP32

    @property
    def held_bytes(self) -> int:
        """Bytes per weight while the node runs: a trainer keeps fp32 master weights."""
        return FP32 if self.trainer else self.weight_bytes


@dataclass(frozen=True)
class Part:
    """One thing that holds memory, when, where, and the config key that sizes it."""

    name: str
    bytes: int
    phase: Phase
    place: Place
    key: str  # the config key to change to make it smaller ("": none, a fixed cost)


@dataclass(frozen=True)
class MemoryPlan:
    """Every part of a round's memory, and the peak on the device and on the host."""

    parts: tuple[Part, ...]
    cuda: bool

    def peak(self, place: Place = Place.DEVICE) -> int:
        """What is held at once at the busiest phase (on a CPU: device and host are one)."""
        held = [p for p in self.parts if self.cuda is False or p.place is place]
        always = sum(p.bytes for p in held if p.phase is Phase.ALWAYS)
        return always + max(sum(p.bytes for p in held if p.phase is phase) for phase in TRANSIENT)

    def largest(self, place: Place = Place.DEVICE) -> Part:
        """The part in use that takes the most memory there, of those a key sizes."""
        used = [p for p in self.parts if p.phase is not Phase.UNUSED and p.key]
        here = [p for p in used if not self.cuda or p.place is place] or used
        return max(here, key=lambda p: p.bytes)


def checkpointing_on(setting: str, parameters: int) -> bool:
    """Whether `training.gradient_checkpointing` (auto, on or off) is on for a model of
    `parameters` weights."""
    return setting == "on" or (setting == "auto" and parameters >= CHECKPOINTING_PARAMS)


def model_shape(config: Mapping) -> ModelShape:
    """The shape a Hugging Face config.json declares (a multimodal model's `text_config`);
    `ModelError` when it lacks a size. Parameters are counted as a dense gated-MLP decoder's."""
    text = config.get("text_config") or config
    try:
        hidden, layers = int(text["hidden_size"]), int(text["num_hidden_layers"])
        heads, vocab = int(text["num_attention_heads"]), int(text["vocab_size"])
        intermediate = int(text["intermediate_size"])
    except (KeyError, TypeError, ValueError) as e:
        raise ModelError(f"config.json declares no {e} of the model") from None
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    tied = bool(text.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    shape = ModelShape(0, layers, hidden, intermediate, heads, kv_heads, head_dim, vocab)
    bias = text.get("attention_bias", text.get("model_type") in QKV_BIAS_MODELS)
    return replace(shape, parameters=parameter_count(shape, tied, bool(bias)))


def parameter_count(shape: ModelShape, tied: bool, attention_bias: bool = False) -> int:
    """Parameters of a dense decoder: embeddings, per layer attention, gated MLP and two
    norms, the final norm and (untied) the output head."""
    h, q = shape.hidden, shape.heads * shape.head_dim
    attention = h * q * 2 + h * shape.kv_width * 2
    if attention_bias:
        attention += q + 2 * shape.kv_width
    layer = attention + 3 * h * shape.intermediate + 2 * h
    embeddings = shape.vocab * h * (1 if tied else 2)
    return embeddings + shape.layers * layer + h


def layer_bytes_per_token(shape: ModelShape, setup: Setup) -> int:
    """What one decoder layer keeps for its backward pass, per token (module docstring)."""
    h = shape.hidden
    cast_inputs = 3 if setup.autocast else 2
    low = cast_inputs * h + 2 * shape.kv_width + 4 * shape.intermediate
    return FP32 * 6 * h + setup.compute_bytes * low


def pass_tokens(work: Workload, setup: Setup, rows: int) -> int:
    """Tokens one training pass over `rows` sequences runs through the decoder: with the
    shared prefix each distinct prompt once and every completion, else every row in full."""
    if setup.shared_prefix:  # a pass may start in one group and end in another
        groups = math.ceil(work.update_rows / work.completions)
        prompts = min(groups, math.ceil(rows / work.completions) + 1)
        return prompts * work.prompt_tokens + rows * work.new_tokens
    return rows * (work.prompt_tokens + work.new_tokens)


def activation_bytes(shape: ModelShape, work: Workload, setup: Setup, checkpointing: bool) -> int:
    """Peak bytes of one micro-batch's forward and backward pass above the weights (with
    bf16 autocast and no checkpointing, the bf16 weight copies are a part of their own)."""
    rows = min(work.micro_batch, work.update_rows)
    tokens = pass_tokens(work, setup, rows)
    layer = layer_bytes_per_token(shape, setup) * tokens
    if checkpointing:
        # the forward held the bf16 weight copies; the backward does not keep them
        copies = shape.parameters * 2 if setup.autocast else 0
        recomputed = (RECOMPUTED_CUDA if setup.cuda else RECOMPUTED_CPU) * layer
        total = FP32 * shape.hidden * tokens * shape.layers + max(recomputed, copies)
    else:  # the backward pass of one layer holds about as much again as the layer kept
        total = layer * (shape.layers + 1)
    if setup.shared_prefix:  # each row's copy of its prompt's keys and values
        total += rows * work.prompt_tokens * 2 * shape.kv_width * setup.compute_bytes * shape.layers
    total += min(tokens, LOGPROB_CHUNK_TOKENS) * shape.vocab * FP32 * 3  # logits, their grad
    return total


def generation_bytes(shape: ModelShape, work: Workload, setup: Setup) -> int:
    """Peak bytes of sampling a round above the weights: the key/value cache of the sequences
    sampled at once, the prompts' logits of a prefill and each step's logits."""
    if setup.generator is Generator.VLLM:
        return 0  # inside the engine's reservation
    rows, value_bytes = work.generate_rows, setup.held_bytes
    if setup.generator is Generator.CONTINUOUS:
        rows = work.questions * work.completions
        value_bytes = 2 if setup.cuda else value_bytes  # the bf16 generation copy's cache
    length = work.prompt_tokens + work.new_tokens
    cache = rows * length * 2 * shape.kv_width * shape.layers * value_bytes
    prompts = max(1, rows // work.completions)
    logits = (prompts * work.prompt_tokens + 4 * rows) * shape.vocab * FP32
    return cache + logits


def estimate(shape: ModelShape, work: Workload, setup: Setup) -> MemoryPlan:
    """Every part of the round's memory (module docstring)."""
    return MemoryPlan(
        (
            *_fixed_parts(shape, setup),
            *_round_parts(shape, work, setup),
            *_host_parts(setup),
        ),
        setup.cuda,
    )


def _fixed_parts(shape: ModelShape, setup: Setup) -> list[Part]:
    n, device = shape.parameters, Place.DEVICE
    dtype = {2: "16-bit", FP32: "fp32"}.get(setup.weight_bytes, f"{setup.weight_bytes} B")
    parts = [
        Part(f"weights ({dtype})", n * setup.weight_bytes, Phase.ALWAYS, device, "policy.model")
    ]
    if setup.cuda:
        parts.append(Part("CUDA context", CUDA_CONTEXT, Phase.ALWAYS, device, ""))
    if not setup.trainer:
        return parts
    master = n * (FP32 - setup.weight_bytes)
    parts += [
        Part("fp32 master weights", master, Phase.ALWAYS, device, "policy.model"),
        # Freed after each step (`swarm.policy.trainer`): held while a step's passes run.
        Part("gradients (fp32)", n * FP32, Phase.TRAINING, device, "policy.model"),
        Part(
            "optimizer state",
            n * setup.optimizer_state_bytes * setup.optimizer_states,
            Phase.ALWAYS,
            device,
            "policy.model",
        ),
    ]
    if setup.reference:
        parts.append(Part("reference model", n * FP32, Phase.ALWAYS, device, "training.kl_coef"))
    if setup.cuda:  # Adam's multi-tensor step on CUDA: the gradients and a temporary as large
        name = "optimizer step (gradients, a temporary)"
        parts.append(Part(name, 2 * n * FP32, Phase.STEP, device, "policy.model"))
    # safetensors serialises each weight to bytes before writing: a copy of the weights
    parts.append(Part("checkpoint being written", n * FP32, Phase.SAVING, Place.HOST, ""))
    return parts


def _round_parts(shape: ModelShape, work: Workload, setup: Setup) -> list[Part]:
    slack = 1.0 if setup.cuda else CPU_SLACK
    parts = [_generator_part(shape, work, setup, slack)]
    if setup.cuda and setup.generator is Generator.CONTINUOUS and setup.held_bytes == FP32:
        copy = shape.parameters * 2  # fp32 weights sampled through a bf16 copy, kept
        parts.append(
            Part("bf16 generation copy", copy, Phase.ALWAYS, Place.DEVICE, "generation.backend")
        )
    if setup.vllm_sleep and setup.generator is Generator.VLLM:
        weights = shape.parameters * 2  # the sleeping engine's weights, in host memory
        parts.append(
            Part(
                "vLLM weights asleep", weights, Phase.TRAINING, Place.HOST, "generation.vllm_sleep"
            )
        )
    if not setup.trainer:
        return parts
    for checkpointing in (setup.checkpointing, not setup.checkpointing):
        size = int(activation_bytes(shape, work, setup, checkpointing) * slack)
        phase = Phase.TRAINING if checkpointing == setup.checkpointing else Phase.UNUSED
        name = f"activations, checkpointing {'on' if checkpointing else 'off'}"
        parts.append(Part(name, size, phase, Place.DEVICE, "training.micro_batch_size"))
    if setup.autocast and not setup.checkpointing:  # kept for the backward pass
        copies = shape.parameters * 2
        parts.append(
            Part("bf16 weight copies", copies, Phase.TRAINING, Place.DEVICE, "training.precision")
        )
    return parts


def _generator_part(shape: ModelShape, work: Workload, setup: Setup, slack: float) -> Part:
    if setup.generator is Generator.VLLM:
        phase = Phase.GENERATION if setup.vllm_sleep else Phase.ALWAYS
        key = "generation.gpu_memory_utilization"
        return Part("vLLM engine (weights, cache)", setup.vllm_reserved, phase, Place.DEVICE, key)
    key = (
        "generation.questions_per_round"
        if setup.generator is Generator.CONTINUOUS
        else "generation.batch_size"
    )
    size = int(generation_bytes(shape, work, setup) * slack)
    return Part("generation (key/value cache, logits)", size, Phase.GENERATION, Place.DEVICE, key)


def _host_parts(setup: Setup) -> list[Part]:
    runtime = RUNTIME_CUDA_HOST if setup.cuda else RUNTIME_CPU
    extra = max(0, setup.datasets - 1) * DATASET
    parts = [
        Part("runtime (Python, torch, libraries)", runtime + extra, Phase.ALWAYS, Place.HOST, "")
    ]
    if setup.worker:
        parts.append(Part("verification worker", WORKER + extra, Phase.ALWAYS, Place.HOST, ""))
    return parts


def fits(plan: MemoryPlan, device_bytes: int, host_bytes: int) -> bool:
    """Whether the plan's peaks stay within `FIT_SHARE` of the memory there is (on a CPU the
    device's memory is the host's: `device_bytes` alone counts)."""
    if plan.peak(Place.DEVICE) > FIT_SHARE * device_bytes:
        return False
    return not plan.cuda or plan.peak(Place.HOST) <= FIT_SHARE * host_bytes


def largest_micro_batch(
    shape: ModelShape, work: Workload, setup: Setup, device_bytes: int, host_bytes: int
) -> int | None:
    """The largest micro-batch (at most the update's rows) whose plan fits; None if not even
    one sequence a pass does."""
    low, high = 1, max(1, work.update_rows)
    if not fits(estimate(shape, replace(work, micro_batch=low), setup), device_bytes, host_bytes):
        return None
    while low < high:  # the peak grows with the micro-batch: bisect
        middle = (low + high + 1) // 2
        plan = estimate(shape, replace(work, micro_batch=middle), setup)
        if fits(plan, device_bytes, host_bytes):
            low = middle
        else:
            high = middle - 1
    return low
