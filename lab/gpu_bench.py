"""One GPU check at the size volunteers run: a GRPO round per generator backend, TRL's
GRPOTrainer on the same work, and a private swarm of 4 `swarm-node join` processes.

Each backend arm runs a node's round: Q questions x G completions at temperature 1 (the
random model never stops: every completion is `max_new_tokens` long), a reward (a hash of
the text), group advantages, one optimizer step as a node takes it (fp32 master weights,
bf16 autocast on a GPU, gradient checkpointing, the shared prefix, truncated importance
sampling where the generator's log-probs can differ). Every arm, TRL's too, first makes
the same small warm-up round (`warm_up_shape`: 2 questions x 2 completions of up to 16
tokens, generation and one update: kernels, CUDA graphs, library handles, the optimizer's
state), then one timed round. Figures per arm: generated tokens/s, training tokens/s (the
tokens the trainer runs: each micro-batch's distinct prompts once, every completion token)
and MFU (6 x parameters x those tokens / seconds / the card's bf16 peak), the round's
seconds, and peak GPU memory through torch's allocator, which holds everything this process
allocates: for vLLM's in-process engine that includes its weights and its KV cache, which
vLLM reserves up front (`gpu_memory_utilization` of the card, used or not; the arm records
`engine_in_peak` and the share). The physical limits stand beside them: decoding bound by
memory bandwidth, training by the bf16 peak. `scripts/gpu_bench.py` is the command.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import importlib.util
import time
from dataclasses import asdict, replace

from lab.gpu_shapes import (
    Shape,
    card_of,
    decode_bound,
    parameter_count,
    random_model,
    random_prompts,
    training_bound,
    word_tokenizer,
)

BACKENDS = ("continuous", "transformers", "vllm")
VLLM_MEMORY_SHARE = 0.35  # vLLM's gpu_memory_utilization: its weights and KV cache


class Clock:
    """Wall seconds, after the device has finished what it was given."""

    def __init__(self, device: str):
        self.cuda = device.startswith("cuda")

    def __call__(self) -> float:
        if self.cuda:
            import torch

            torch.cuda.synchronize()
        return time.perf_counter()


def reward(text: str) -> float:
    """A reward with no meaning but a spread: a hash of the completion's text."""
    return hashlib.sha256(text.encode()).digest()[0] / 255


def trained_tokens(samples, micro_batch_size: int) -> int:
    """The tokens the trainer runs: per micro-batch, each distinct prompt once and every
    completion token (its shared-prefix forward)."""
    useful = [s for s in samples if s.advantage != 0.0 and s.completion_ids]
    total = 0
    for start in range(0, len(useful), micro_batch_size):
        batch = useful[start : start + micro_batch_size]
        total += sum(len(p) for p in {s.prompt_ids for s in batch})
        total += sum(len(s.completion_ids) for s in batch)
    return total


def make_generator(backend: str, model, tokenizer, shape: Shape, folder):
    """The backend's generator over the trainer's module (vLLM: its own engine)."""
    from swarm.policy.continuous import ContinuousGenerator
    from swarm.policy.generator import TransformersGenerator

    stops = {shape.vocab}
    batch = shape.questions * shape.group
    if backend == "transformers":
        return TransformersGenerator(model, tokenizer, stops, batch_size=batch)
    if backend == "continuous":
        return ContinuousGenerator(model, tokenizer, stops, max_sequences=batch)
    from swarm.policy.model import load_policy
    from swarm.policy.vllm_generator import VLLMGenerator

    policy = load_policy(str(folder), device="cuda", dtype="bfloat16")
    return VLLMGenerator(policy, gpu_memory_utilization=VLLM_MEMORY_SHARE, seed=0)


def warm_up_shape(shape: Shape) -> Shape:
    """The warm-up round every arm makes before its timed one: 2 questions x 2 completions
    of up to 16 tokens, with the shape's prompts, model and micro-batch."""
    return replace(
        shape,
        questions=2,
        group=2,
        max_new_tokens=min(16, shape.max_new_tokens),
        micro_batch_size=min(4, shape.micro_batch_size),
    )


def warm_up(generator, trainer, model, shape: Shape) -> None:
    """One of our arms' warm-up round: generation, scores, one update, the weights pushed."""
    from swarm.node.shared_samples import own_samples
    from swarm.policy.generator import SamplingParams
    from swarm.policy.grpo import group_advantages

    warm = warm_up_shape(shape)
    params = SamplingParams(temperature=1.0, max_new_tokens=warm.max_new_tokens)
    samples = []
    for group in generator.generate(random_prompts(warm, 99), warm.group, params):
        rewards = [reward(c.text) for c in group]
        samples += own_samples(group, group_advantages(rewards), eos=None)
    trainer.update(samples)
    generator.sync_weights(model)


def memory_figures(generator=None) -> dict:
    """Peak GPU memory through torch's allocator since the arm began, which holds all this
    process allocates: with vLLM's in-process engine, its weights and the KV cache it
    reserved up front (`engine_in_peak`, with the share of the card it was given)."""
    import torch

    figures = {
        "peak_allocated_gb": torch.cuda.max_memory_allocated() / 1e9,
        "peak_reserved_gb": torch.cuda.max_memory_reserved() / 1e9,
    }
    in_process = getattr(generator, "in_process", None)
    if in_process is not None:  # a vLLM engine: in this process, or in a core process of its own
        figures["engine_in_peak"] = bool(in_process)
        figures["engine_memory_share"] = VLLM_MEMORY_SHARE
    return figures


def backend_round(backend: str, base, tokenizer, shape: Shape, device: str, folder) -> dict:
    """One warm-up round and one timed round of `backend`; its figures."""
    import torch

    from swarm.node.shared_samples import own_samples
    from swarm.policy.backends import Backend, logprobs_can_differ
    from swarm.policy.generator import SamplingParams
    from swarm.policy.grpo import group_advantages
    from swarm.policy.trainer import GRPOTrainer, TrainerSettings

    clock, cuda = Clock(device), device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = copy.deepcopy(base).to(device, torch.bfloat16 if cuda else torch.float32)
    settings = TrainerSettings(
        lr=1e-6,
        micro_batch_size=shape.micro_batch_size,
        gradient_checkpointing=True,
        autocast_bf16=cuda,
        importance_cap=3.0 if logprobs_can_differ(Backend(backend), cuda) else 0.0,
    )
    trainer = GRPOTrainer(model, 0, settings)  # fp32 master weights, as a node's
    generator = make_generator(backend, model, tokenizer, shape, folder)
    try:
        start = clock()
        warm_up(generator, trainer, model, shape)
        warm_up_s = clock() - start
        prompts = random_prompts(shape, 1)
        params = SamplingParams(temperature=1.0, max_new_tokens=shape.max_new_tokens)
        t0 = clock()
        groups = generator.generate(prompts, shape.group, params)
        t1 = clock()
        samples = []
        for group in groups:
            rewards = [reward(c.text) for c in group]
            samples += own_samples(group, group_advantages(rewards), eos=None)
        result = trainer.update(samples)
        generator.sync_weights(model)
        t2 = clock()
        memory = memory_figures(generator) if cuda else {}  # before close() frees the engine
    finally:
        generator.close()
    generated = sum(len(c.token_ids) for g in groups for c in g)
    trained = trained_tokens(samples, shape.micro_batch_size)
    figures = {
        "backend": backend,
        "generated_tokens": generated,
        "generate_s": t1 - t0,
        "train_s": t2 - t1,
        "round_s": t2 - t0,
        "generation_tokens_per_s": generated / (t1 - t0),
        "trained_tokens": trained,
        "training_tokens_per_s": trained / (t2 - t1),
        "skipped_update": result.skipped,
        "importance_cap": settings.importance_cap,
        "warm_up_s": warm_up_s,
        **memory,
    }
    plan = getattr(generator, "plan", None)  # the continuous backend's engine and precision
    if plan is not None:
        figures["decode_plan"] = asdict(plan)
    del model, trainer, generator
    gc.collect()
    return figures


def trl_trainer(model, tokenizer, shape: Shape, device: str, prompts: list[str], callbacks=()):
    """TRL's GRPOTrainer for one step of `shape` on `prompts`: one generate of the whole batch
    (transformers), one optimizer step over it in micro-batches, bf16 autocast and
    checkpointing on a GPU."""
    import tempfile

    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    cuda = device.startswith("cuda")
    batch = shape.questions * shape.group
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="gpu-bench-trl-"),
        per_device_train_batch_size=shape.micro_batch_size,
        gradient_accumulation_steps=batch // shape.micro_batch_size,
        num_generations=shape.group,
        max_completion_length=shape.max_new_tokens,
        temperature=1.0,
        learning_rate=1e-6,
        lr_scheduler_type="constant",
        beta=0.0,
        loss_type="dapo",
        gradient_checkpointing=True,
        bf16=cuda,
        use_cpu=not cuda,
        max_steps=1,
        report_to="none",
        save_strategy="no",
        shuffle_dataset=False,
        seed=0,
    )

    def rewards(prompts, completions, **kwargs):
        return [reward(text) for text in completions]

    return GRPOTrainer(
        model=model,
        reward_funcs=rewards,
        args=config,
        train_dataset=Dataset.from_dict({"prompt": prompts}),
        processing_class=tokenizer,
        callbacks=list(callbacks),
    )


def trl_round(base, tokenizer, shape: Shape, device: str) -> dict:
    """TRL's GRPOTrainer doing the same step (`trl_trainer`), after the same warm-up round as
    ours: a step of `warm_up_shape` on the same module (its first generate, backward and
    optimizer step, and accelerate's preparing of the module, stay out of the timed step)."""
    import torch
    from transformers import TrainerCallback

    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    model = copy.deepcopy(base).to(device, torch.float32)
    spent: dict[str, float] = {"generate": 0.0}
    steps: list[float] = []
    clock, generate = Clock(device), model.generate

    def timed_generate(*args, **kwargs):
        start = clock()
        try:
            return generate(*args, **kwargs)
        finally:
            spent["generate"] += clock() - start

    model.generate = timed_generate

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            spent["generate"], spent["start"] = 0.0, clock()

        def on_step_end(self, args, state, control, **kwargs):
            steps.append(clock() - spent["start"])

    warm = warm_up_shape(shape)
    start = clock()
    warming = trl_trainer(model, tokenizer, warm, device, random_prompts(warm, 99))
    warming.train()
    warm_up_s = clock() - start
    del warming  # and its optimizer's state: the timed trainer makes its own
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    batch = shape.questions * shape.group
    trainer = trl_trainer(model, tokenizer, shape, device, random_prompts(shape, 1), [StepTimer()])
    trainer.train()
    round_s, generate_s = steps[-1], spent["generate"]
    tokens = batch * (shape.prompt_tokens + shape.max_new_tokens)
    figures = {
        "backend": "trl",
        "round_s": round_s,
        "generate_s": generate_s,
        "train_s": round_s - generate_s,
        "generated_tokens": batch * shape.max_new_tokens,
        "generation_tokens_per_s": batch * shape.max_new_tokens / generate_s,
        "trained_tokens": tokens,
        "training_tokens_per_s": tokens / (round_s - generate_s),
        "warm_up_s": warm_up_s,
        **(memory_figures() if cuda else {}),
    }
    del model, trainer
    gc.collect()
    return figures


def missing(backend: str, device: str) -> str | None:
    """Why `backend` cannot run here, or None."""
    if backend == "vllm" and not device.startswith("cuda"):
        return "vLLM needs CUDA"
    needs = {"vllm": "vllm", "trl": "trl"}.get(backend)
    if needs and importlib.util.find_spec(needs) is None:
        return f"{needs} is not installed"
    return None


def limits(shape: Shape, parameters: int, device: str) -> dict:
    """The card and what its peaks allow at this shape (empty on a CPU or an unknown card)."""
    if not device.startswith("cuda"):
        return {"card": "cpu"}
    import torch

    name = torch.cuda.get_device_name()
    card = card_of(name)
    out: dict = {"card": name, "memory_gb": torch.cuda.get_device_properties(0).total_memory / 1e9}
    if card is None:
        return out
    sequences = shape.questions * shape.group
    return {
        **out,
        "bf16_peak_tflops": card.bf16_tflops,
        "bandwidth_tb_s": card.bandwidth_tbs,
        # the trainer's module is fp32 (master weights); vLLM holds bf16
        "decode_bound_tokens_per_s_fp32_weights": decode_bound(
            shape, card, 4 * parameters, sequences, 4
        ),
        "decode_bound_tokens_per_s_bf16_weights": decode_bound(
            shape, card, 2 * parameters, sequences, 2
        ),
        "training_bound_tokens_per_s": training_bound(parameters, card),
    }


def run_bench(
    shape_name: str,
    shape: Shape,
    device: str,
    backends,
    trl: bool,
    folder,
    deadline: float,
    save=None,
) -> dict:
    """Every arm asked for, in order, while `deadline` (a `time.perf_counter()`) is ahead;
    those that cannot run here, or not in time, are listed with the reason. `save` (if
    given) gets the result so far after each arm, so a run cut short keeps what it measured."""
    import torch

    torch.manual_seed(0)
    base, tokenizer = random_model(shape), word_tokenizer(shape.vocab)
    parameters = parameter_count(base)
    if "vllm" in backends and missing("vllm", device) is None:
        base.to(torch.bfloat16).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        base.float()
    arms: list[dict] = []
    skipped: dict[str, str] = {}
    bound = limits(shape, parameters, device)
    result: dict = {
        "shape": shape_name,
        "shape_detail": asdict(shape),
        "parameters": parameters,
        "device": device,
        "torch": torch.__version__,
        "transformers": _version("transformers"),
        "trl": _version("trl"),
        "limits": bound,
        "arms": arms,
        "skipped": skipped,
    }
    for arm in [*backends, *(["trl"] if trl else [])]:
        why = missing(arm, device)
        if why is None and time.perf_counter() > deadline:
            why = "the time budget was spent before it"
        if why:
            skipped[arm] = why
            continue
        print(f"{arm}: running", flush=True)  # noqa: T201 - progress
        try:
            if arm == "trl":
                figures = trl_round(base, tokenizer, shape, device)
            else:
                figures = backend_round(arm, base, tokenizer, shape, device, folder)
        except Exception as e:  # noqa: BLE001 - one arm's failure is recorded, the rest still run
            why = f"failed: {e.__class__.__name__}: {(str(e).splitlines() or [''])[0][:300]}"
            skipped[arm] = why
            gc.collect()
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            continue
        if "bf16_peak_tflops" in bound:
            flops = 6 * parameters * figures["training_tokens_per_s"]
            figures["mfu"] = flops / (bound["bf16_peak_tflops"] * 1e12)
        arms.append(figures)
        if save is not None:
            save(result)
    return result


def _version(package: str) -> str | None:
    import importlib.metadata

    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None
