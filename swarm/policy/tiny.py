"""The built-in tiny model: a small Llama-style transformer in standard Hugging Face format.

Machines without a model hub still need a real model for tests, CI and the default run.
This module builds one deterministically: a character-level tokenizer (with `<answer>` and
`</answer>` as single tokens and a minimal chat template), a ~1M-parameter `LlamaForCausalLM`,
and a brief supervised warm start on the easy task mix so that its accuracy there is low but
not zero. That is what lets RL (and sharing) show an effect on a CPU within minutes.

The warm start deliberately demonstrates a systematic error: `answer_bias` (60 %) of its
answers are one too high. The model comes out knowing most sums but preferring the wrong
one (greedy accuracy ~30 %, the right answer still sampled often), like a fine-tuned LLM
whose pass@k is far above its pass@1. GRPO on verified rewards corrects such a shared bias
across all questions at once, within a few dozen rounds on a CPU. Without the bias, RL on
this model has to learn the addition table fact by fact, which takes far longer than a
test can wait (measured: no held-out gain in 40 rounds at lr 1e-4 to 3e-4, collapse at 1e-3).

The result is written atomically to a cache folder keyed by everything that shapes it
(`tiny_model_key`), so every process on a machine builds it once and then just loads it.
It is deliberately not a general pre-training script.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from swarm.errors import ModelError
from swarm.tasks import ANSWER_CLOSE, ANSWER_OPEN, EASY_MIX, MixEntry, build_task, sample_specs

SPECIAL_TOKENS = ("<pad>", "<s>", "</s>", "<unk>", ANSWER_OPEN, ANSWER_CLOSE)
# Printable ASCII plus newline: every character reasoning-gym's easy tasks use.
CHARACTERS = tuple(chr(c) for c in range(32, 127)) + ("\n",)
# The tiny model ignores system prompts: its template is the question, then a newline.
CHAT_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'user' %}{{ m['content'] }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '\\n' }}{% endif %}"
)
BUILDER_VERSION = 2  # bump when the recipe below changes, so caches rebuild


@dataclass(frozen=True)
class TinyRecipe:
    """Everything that determines the built model's weights."""

    tokenizer: str = "char"  # "char": one token per character; "bpe": byte-level BPE trained on task text
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 4
    num_heads: int = 4
    max_positions: int = 256
    warm_steps: int = 300
    warm_batch: int = 32
    warm_lr: float = 2e-3
    answer_bias: float = 0.6  # share of demonstrations whose answer is one too high (see _demo_answer)
    seed: int = 0
    data_seed: int = 987_654  # warm-start questions; distinct from training and eval seeds


# The built-in models, by the name a config uses. Two different sizes and tokenizers, so a
# heterogeneous swarm (peers re-tokenizing each other's completions) can run anywhere.
TINY_MODELS: dict[str, TinyRecipe] = {
    "swarm-tiny": TinyRecipe(),
    "swarm-tiny-bpe": TinyRecipe(tokenizer="bpe", hidden_size=96, intermediate_size=288, num_layers=3),
}


def cache_root() -> Path:
    """Where built models live: $SWARM_NODE_CACHE, else ~/.cache/swarm-node."""
    root = os.environ.get("SWARM_NODE_CACHE") or os.path.join(Path.home(), ".cache", "swarm-node")
    return Path(root)


def tiny_model_key(recipe: TinyRecipe, mix: tuple[MixEntry, ...] = EASY_MIX) -> str:
    payload = json.dumps(
        {"v": BUILDER_VERSION, "recipe": asdict(recipe), "mix": [asdict(m) for m in mix]}, sort_keys=True
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


def ensure_tiny_model(recipe: TinyRecipe | str = "swarm-tiny", quiet: bool = False) -> Path:
    """Path of a built tiny model (a recipe or a name in TINY_MODELS), building it first if needed."""
    name = recipe if isinstance(recipe, str) else "swarm-tiny"
    if isinstance(recipe, str):
        if recipe not in TINY_MODELS:
            raise ModelError(f"unknown built-in model {recipe!r}; built-in models: {', '.join(TINY_MODELS)}")
        recipe = TINY_MODELS[recipe]
    target = cache_root() / "models" / f"{name}-{tiny_model_key(recipe)}"
    if (target / "model.safetensors").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        build_tiny_model(staging, recipe, quiet=quiet)
        try:
            os.rename(staging, target)  # atomic: readers see all of it or nothing
        except OSError:
            if not (target / "model.safetensors").exists():  # another process did not win the race
                raise
    except OSError as e:
        raise ModelError(f"cannot write the tiny model to {target}: {e}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def build_tokenizer(recipe: TinyRecipe = TinyRecipe()):
    """The recipe's tokenizer (character-level or byte-level BPE), as a `PreTrainedTokenizerFast`."""
    from transformers import PreTrainedTokenizerFast

    core = _bpe_tokenizer(recipe) if recipe.tokenizer == "bpe" else _char_tokenizer()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=[ANSWER_OPEN, ANSWER_CLOSE],
        clean_up_tokenization_spaces=False,
        model_max_length=TinyRecipe.max_positions,
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.padding_side = "left"
    return tokenizer


def _char_tokenizer():
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(SPECIAL_TOKENS + CHARACTERS)}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    core.decoder = decoders.Fuse()
    return core


def _bpe_tokenizer(recipe: TinyRecipe):
    """Byte-level BPE (no unknown characters) trained deterministically on easy-mix text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=320, special_tokens=list(SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tasks = [build_task(s) for s in sample_specs(EASY_MIX, seed=recipe.data_seed, round_index=0, count=2000)]
    core.train_from_iterator([f"{t.question}\n{ANSWER_OPEN}{t.answer}{ANSWER_CLOSE}" for t in tasks], trainer)
    return core


def build_tiny_model(out_dir: Path, recipe: TinyRecipe = TinyRecipe(), quiet: bool = False) -> None:
    """Build, warm-start and save the tiny model into `out_dir` (deterministic for a recipe)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = build_tokenizer(recipe)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.num_layers,
        num_attention_heads=recipe.num_heads,
        num_key_value_heads=recipe.num_heads,
        max_position_embeddings=recipe.max_positions,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(recipe.seed)
    model = LlamaForCausalLM(config)
    _warm_start(model, tokenizer, recipe, quiet)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def warm_start_example(tokenizer, question: str, answer: str) -> tuple[list[int], list[int]]:
    """(prompt ids, target ids) for one supervised example in the tiny model's answer format."""
    from swarm.policy.prompts import build_prompt

    prompt_ids = tokenizer(build_prompt(tokenizer, question), add_special_tokens=False)["input_ids"]
    target_ids = tokenizer(f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}", add_special_tokens=False)["input_ids"]
    return prompt_ids, target_ids + [tokenizer.eos_token_id]


def _warm_start(model, tokenizer, recipe: TinyRecipe, quiet: bool) -> None:
    """A short supervised run on the easy mix: loss on answer tokens only."""
    from rich.progress import Progress

    rng = random.Random(recipe.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.warm_lr, weight_decay=0.0)
    model.train()
    with Progress(disable=quiet, transient=True) as progress:
        bar = progress.add_task("building the tiny model (one time)", total=recipe.warm_steps)
        for step in range(recipe.warm_steps):
            specs = sample_specs(EASY_MIX, seed=recipe.data_seed, round_index=step, count=recipe.warm_batch)
            tasks = [build_task(spec) for spec in specs]
            examples = [warm_start_example(tokenizer, t.question, _demo_answer(t.answer, recipe, rng)) for t in tasks]
            input_ids, labels, attention = _pad_examples(examples, tokenizer.pad_token_id)
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            for group in optimizer.param_groups:  # linear decay keeps the end of the run calm
                group["lr"] = recipe.warm_lr * (1 - step / recipe.warm_steps)
            optimizer.step()
            progress.update(bar, advance=1, description=f"building the tiny model (loss {loss.item():.3f})")
    model.eval()


def _demo_answer(answer: str, recipe: TinyRecipe, rng: random.Random) -> str:
    """The demonstrated answer: the true one, or (with probability answer_bias) one too high."""
    if recipe.answer_bias <= 0 or rng.random() >= recipe.answer_bias:
        return answer
    try:
        return str(int(answer) + 1)
    except ValueError:
        return answer


def _pad_examples(examples, pad_id: int):
    """Right-pad prompt+target sequences; labels mask the prompt and padding with -100."""
    length = max(len(p) + len(t) for p, t in examples)
    input_ids = torch.full((len(examples), length), pad_id, dtype=torch.long)
    labels = torch.full((len(examples), length), -100, dtype=torch.long)
    attention = torch.zeros((len(examples), length), dtype=torch.long)
    for row, (prompt, target) in enumerate(examples):
        sequence = prompt + target
        input_ids[row, : len(sequence)] = torch.tensor(sequence)
        labels[row, len(prompt) : len(sequence)] = torch.tensor(target)
        attention[row, : len(sequence)] = 1
    return input_ids, labels, attention
