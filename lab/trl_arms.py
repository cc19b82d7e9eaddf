"""The arms of the TRL comparison: a GRPO round three ways (shared prefix, plain, TRL).

What it measures, on what and how, is said once: in `scripts/bench_trl.py`'s help.

Each arm is a function of the repeat index that makes one round and returns its timings;
`lab.trl_bench` runs them in turn for `scripts/bench_trl.py`.
"""

from __future__ import annotations

import copy
import hashlib
import random
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ARMS = ("shared", "plain", "trl")
CLOCK = {"now": time.perf_counter}  # --cpu-time: time.process_time, with one torch thread


def now() -> float:
    """The rounds' clock: wall seconds, or this process's CPU seconds with --cpu-time."""
    return CLOCK["now"]()


LR = 1e-5
ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Shape:
    questions: int
    group: int
    max_new_tokens: int
    micro_batch_size: int
    prompt_tokens: int = 0  # random models: prompt length in tokens
    vocab: int = 0  # random models: vocabulary size
    hidden: int = 0
    layers: int = 0
    heads: int = 0
    kv_heads: int = 0
    intermediate: int = 0


SHAPES = {
    "tiny": Shape(questions=32, group=8, max_new_tokens=8, micro_batch_size=256),
    # The real model of node_config/smollm2-cpu.toml, its prompts (worked examples) and round.
    # Micro-batches of 16: without activation checkpointing 64 sequences of this model need
    # about 6 GB of activations (swarm-node config --plan), too much beside three copies.
    "smollm2": Shape(questions=8, group=8, max_new_tokens=32, micro_batch_size=16),
    "qwen2-reduced": Shape(
        questions=2,
        group=8,
        max_new_tokens=200,
        micro_batch_size=16,
        prompt_tokens=300,
        vocab=4096,
        hidden=128,
        layers=2,
        heads=4,
        kv_heads=2,
        intermediate=384,
    ),
    # Wider (hidden 512, 4 layers, vocab 16384): for --train-only, where generation's 200
    # sequential steps do not have to fit a CPU's time.
    "qwen2-wide": Shape(
        questions=2,
        group=8,
        max_new_tokens=200,
        micro_batch_size=16,
        prompt_tokens=300,
        vocab=16384,
        hidden=512,
        layers=4,
        heads=8,
        kv_heads=2,
        intermediate=1536,
    ),
}


@dataclass
class Setup:
    """A model, its tokenizer, and per repeat the prompts and a reward over completion texts."""

    model: Any
    tokenizer: Any
    stop_ids: set[int]
    prompts: list[list[str]]  # per repeat
    rewards: list  # per repeat: fn(prompt index, completion text) -> float


def tiny_setup(repeats: int, shape: Shape) -> Setup:
    return task_setup("swarm-tiny", repeats, shape)


def smollm2_setup(repeats: int, shape: Shape) -> Setup:
    """SmolLM2-135M-Instruct with the preset's worked examples (node_config/smollm2-cpu.toml)."""
    from swarm.config.load import load_config

    config = load_config(ROOT / "node_config" / "smollm2-cpu.toml")
    return task_setup(config.policy.model, repeats, shape, config.policy.prompt_format())


def task_setup(name: str, repeats: int, shape: Shape, form=None) -> Setup:
    """A model by name on the easy mix's questions and the node's own reward."""
    from transformers import AutoModelForCausalLM

    from swarm.policy.model import load_tokenizer, resolve_model_path, stop_token_ids
    from swarm.policy.prompts import PromptFormat, build_prompt
    from swarm.tasks import EASY_MIX, build_task, sample_specs, score_completion

    path = resolve_model_path(name)
    tokenizer = load_tokenizer(path)
    model = AutoModelForCausalLM.from_pretrained(path)
    prompts, rewards = [], []
    for r in range(repeats):
        tasks = [build_task(s) for s in sample_specs(EASY_MIX, 0, r, shape.questions)]
        prompts.append([build_prompt(tokenizer, t.question, form or PromptFormat()) for t in tasks])
        rewards.append(
            lambda i, text, tasks=tasks: score_completion(tasks[i], text, format_weight=0.1)
        )
    return Setup(model, tokenizer, stop_token_ids(model, tokenizer), prompts, rewards)


def setup_for(shape_name: str, repeats: int) -> Setup:
    """The model, prompts and rewards a shape runs on."""
    shape = SHAPES[shape_name]
    if shape_name == "tiny":
        return tiny_setup(repeats, shape)
    if shape_name == "smollm2":
        return smollm2_setup(repeats, shape)
    return random_setup(repeats, shape)


def word_tokenizer(vocab: int):
    """Words w2.. as tokens; pad 0, unk 1, and the stop token last (outside the model)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<unk>"] + [f"w{i}" for i in range(2, vocab)] + ["</s>"]
    core = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    core.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, pad_token="<pad>", unk_token="<unk>", eos_token="</s>"
    )
    tokenizer.padding_side = "left"
    return tokenizer


def random_setup(repeats: int, shape: Shape) -> Setup:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = word_tokenizer(shape.vocab)
    config = Qwen2Config(
        vocab_size=shape.vocab,  # the stop token (id vocab) is never sampled: fixed lengths
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=False,
        pad_token_id=0,
        eos_token_id=shape.vocab,
    )
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    rng = random.Random(0)
    prompts = [
        [
            " ".join(f"w{rng.randrange(2, shape.vocab)}" for _ in range(shape.prompt_tokens))
            for _ in range(shape.questions)
        ]
        for _ in range(repeats)
    ]
    reward = [lambda i, text: hashlib.sha256(text.encode()).digest()[0] / 255] * repeats
    return Setup(model, tokenizer, {shape.vocab}, prompts, reward)


def ours(setup: Setup, shape: Shape, shared: bool):
    """A round function for this project's generator and trainer (shared prefix on or off)."""
    from swarm.policy.generator import SamplingParams, TransformersGenerator
    from swarm.policy.grpo import group_advantages
    from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample

    model = copy.deepcopy(setup.model)
    generator = TransformersGenerator(
        model, setup.tokenizer, setup.stop_ids, shape.questions * shape.group, shared
    )
    settings = TrainerSettings(lr=LR, micro_batch_size=shape.micro_batch_size, shared_prefix=shared)
    trainer = GRPOTrainer(model, setup.tokenizer.pad_token_id, settings)
    params = SamplingParams(temperature=1.0, max_new_tokens=shape.max_new_tokens)
    eos = setup.tokenizer.eos_token_id

    def round_(r: int) -> dict:
        t0 = now()
        groups = generator.generate(setup.prompts[r], shape.group, params)
        t1 = now()
        samples = []
        for i, group in enumerate(groups):
            rewards = [setup.rewards[r](i, c.text) for c in group]
            for c, a in zip(group, group_advantages(rewards), strict=True):
                stop = (eos,) if c.finished else ()
                samples.append(TrainSample(c.prompt_ids, c.token_ids + stop, a))
        t2 = now()
        result = trainer.update(samples)
        t3 = now()
        trained = sum(1 for s in samples if s.advantage != 0.0) if not result.skipped else 0
        return {"generate": t1 - t0, "score": t2 - t1, "train": t3 - t2, "round": t3 - t0,
                "trained": trained}  # fmt: skip

    return round_


def trl(setup: Setup, shape: Shape):
    """A round function for TRL's GRPOTrainer: one `train()` of one step per call.

    One trainer serves every repeat, as one generator and trainer serve ours: its optimizer
    and whatever TRL prepares on its first call carry over, so the warm-up repeat warms TRL
    as it warms ours and no timed round pays for a new trainer. Each call swaps in that
    repeat's prompts and reward.
    """
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    model = copy.deepcopy(setup.model)
    spent = {"generate": 0.0}
    generate = model.generate

    def timed_generate(*args, **kwargs):
        start = now()
        try:
            return generate(*args, **kwargs)
        finally:
            spent["generate"] += now() - start

    model.generate = timed_generate
    steps: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            spent["generate"], spent["start"] = 0.0, now()

        def on_step_end(self, args, state, control, **kwargs):
            steps.append(now() - spent["start"])

    batch = shape.questions * shape.group
    out = tempfile.mkdtemp(prefix="bench-trl-")
    config = GRPOConfig(
        output_dir=out,
        # micro-batches of the shape's size, accumulated into one optimizer step, as ours
        per_device_train_batch_size=min(batch, shape.micro_batch_size),
        gradient_accumulation_steps=max(1, batch // shape.micro_batch_size),
        generation_batch_size=batch,  # one generate for the whole batch
        num_generations=shape.group,
        max_completion_length=shape.max_new_tokens,
        temperature=1.0,
        learning_rate=LR,
        lr_scheduler_type="constant",
        warmup_steps=0,
        adam_beta2=0.99,
        weight_decay=0.0,
        max_grad_norm=1.0,
        beta=0.0,
        epsilon=0.2,
        epsilon_high=0.28,
        loss_type="dapo",
        gradient_checkpointing=False,
        bf16=False,
        fp16=False,
        use_cpu=True,
        max_steps=1,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        shuffle_dataset=False,
        disable_dropout=True,
        seed=0,
    )
    torch.set_num_threads(torch.get_num_threads())  # TRL/accelerate leave it as it was
    current = {"repeat": 0}

    def reward(prompts, completions, index, **kwargs):
        score = setup.rewards[current["repeat"]]
        return [score(i, text) for i, text in zip(index, completions, strict=True)]

    def data(r: int):
        prompts = setup.prompts[r]
        return Dataset.from_dict({"prompt": prompts, "index": list(range(len(prompts)))})

    trainer = GRPOTrainer(
        model=model,
        reward_funcs=reward,
        args=config,
        train_dataset=data(0),
        processing_class=setup.tokenizer,
        callbacks=[StepTimer()],
    )

    def round_(r: int) -> dict:
        current["repeat"] = r
        trainer.train_dataset = data(r)
        trainer.train()
        step = steps[-1]
        return {"generate": spent["generate"], "score": 0.0, "train": step - spent["generate"],
                "round": step, "trained": batch}  # fmt: skip

    round_.trainer = trainer  # type: ignore[attr-defined]
    return round_
