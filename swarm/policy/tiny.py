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

A recipe also names the task families its warm start covers and the answer format it
demonstrates (`<answer>x</answer>` or the bare answer), which is how the skill swarm of
`swarm.policy.skills` (models that know different things) is built; the bias then applies
each family's own systematic error (`swarm.policy.skills.systematic_error`).

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
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from swarm.core.errors import ModelError
from swarm.policy.skills import (
    BARE_FORMAT_SLIP,
    GAP_SWARM,
    SKILL_MIX,
    SKILL_SWARM,
    AnswerFormat,
    Arch,
    SkillProfile,
    systematic_error,
)
from swarm.tasks import (
    ANSWER_CLOSE,
    ANSWER_OPEN,
    EASY_MIX,
    MixEntry,
    Task,
    build_task,
    sample_specs,
)

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

    tokenizer: str = (
        "char"  # "char": one token per character; "bpe": byte-level BPE trained on task text
    )
    hidden_size: int = 128
    intermediate_size: int = 384
    num_layers: int = 4
    num_heads: int = 4
    max_positions: int = 256
    warm_steps: int = 300
    warm_batch: int = 32
    warm_lr: float = 2e-3
    answer_bias: float = 0.6  # share of demonstrations showing a systematic error (_demo_answer)
    seed: int = 0
    data_seed: int = 987_654  # warm-start questions; distinct from training and eval seeds
    families: tuple[MixEntry, ...] = EASY_MIX  # the task families the warm start demonstrates
    answer_format: AnswerFormat = AnswerFormat.TAGGED  # how its demonstrations write answers
    format_slip: float = 0.0  # share of demonstrations written in the other format
    vocab_mix: tuple[MixEntry, ...] = ()  # text the BPE tokenizer learns from (empty: families)
    family_bias: tuple[tuple[str, float], ...] = ()  # (dataset, bias) overriding answer_bias


# Fields added after the first recipes: they enter the cache key only when set, so the
# models built before them keep their keys (and their caches).
_LATER_FIELDS = ("answer_format", "format_slip", "vocab_mix", "family_bias")


# The built-in models, by the name a config uses. Two different sizes and tokenizers, so a
# heterogeneous swarm (peers re-tokenizing each other's completions) can run anywhere.
TINY_MODELS: dict[str, TinyRecipe] = {
    "swarm-tiny": TinyRecipe(),
    "swarm-tiny-bpe": TinyRecipe(
        tokenizer="bpe", hidden_size=96, intermediate_size=288, num_layers=3
    ),
}
_ARCHS = {Arch.CHAR: TINY_MODELS["swarm-tiny"], Arch.BPE: TINY_MODELS["swarm-tiny-bpe"]}


def skill_recipe(profile: SkillProfile) -> TinyRecipe:
    """The recipe of one skill-swarm model: its shape, families, format and bias."""
    return replace(
        _ARCHS[profile.arch],
        families=profile.mix(),
        answer_format=profile.answer_format,
        format_slip=BARE_FORMAT_SLIP if profile.answer_format == AnswerFormat.BARE else 0.0,
        warm_steps=profile.warm_steps,
        family_bias=profile.bias(),
        vocab_mix=SKILL_MIX,  # one vocabulary for every family, whichever the model knows
        seed=profile.seed,
    )


TINY_MODELS.update({profile.name: skill_recipe(profile) for profile in SKILL_SWARM + GAP_SWARM})


def cache_root() -> Path:
    """Where built models live: $SWARM_NODE_CACHE, else ~/.cache/swarm-node."""
    root = os.environ.get("SWARM_NODE_CACHE") or os.path.join(Path.home(), ".cache", "swarm-node")
    return Path(root)


def tiny_model_key(recipe: TinyRecipe) -> str:
    """A short hash of everything that shapes the recipe's weights."""
    data = asdict(recipe)
    mix = data.pop("families")
    defaults = TinyRecipe()
    for name in _LATER_FIELDS:
        if getattr(recipe, name) == getattr(defaults, name):
            del data[name]
    payload = json.dumps({"v": BUILDER_VERSION, "recipe": data, "mix": mix}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]


# Testbed models ship with the project (`models/`, listed in its MANIFEST.json with their
# recipe key and content digest), so every machine runs the same bytes: a warm start is
# deterministic on one machine but not across CPUs and thread counts.
DIGEST_FILES = ("model.safetensors", "tokenizer.json")


def shipped_root() -> Path:
    """Where shipped models live: $SWARM_NODE_MODELS, else `models/` beside the package."""
    root = os.environ.get("SWARM_NODE_MODELS")
    return Path(root) if root else Path(__file__).resolve().parents[2] / "models"


def model_digest(folder: Path) -> str:
    """sha256 (hex) of a built model's weights and tokenizer: what makes two copies the same."""
    digest = hashlib.sha256()
    for file in DIGEST_FILES:
        digest.update(file.encode() + b"\0" + (Path(folder) / file).read_bytes() + b"\0")
    return digest.hexdigest()


def shipped_manifest() -> dict[str, dict]:
    """{name: {"key": recipe key, "digest": model_digest}} of the shipped models ({} if none)."""
    path = shipped_root() / "MANIFEST.json"
    return json.loads(path.read_text()) if path.exists() else {}


def shipped_model(name: str, recipe: TinyRecipe) -> Path | None:
    """The shipped copy of built-in model `name`, if one ships for this very recipe.

    A shipped copy whose bytes differ from its manifest entry is an error, not a rebuild:
    experiments compare runs across machines on the strength of those bytes.
    """
    entry = shipped_manifest().get(name)
    folder = shipped_root() / name
    if not entry or entry.get("key") != tiny_model_key(recipe) or not folder.is_dir():
        return None
    if model_digest(folder) != entry.get("digest"):
        raise ModelError(f"shipped model {folder} does not match models/MANIFEST.json")
    return folder


def ensure_tiny_model(
    recipe: TinyRecipe | str = "swarm-tiny", quiet: bool = False, name: str = ""
) -> Path:
    """Path of a built tiny model (a recipe or a name in TINY_MODELS), building it first if needed.

    A name whose model ships with the project (`shipped_model`) is that copy, never rebuilt.
    `name` prefixes the cache folder of a recipe given as an object (default "swarm-tiny").
    """
    name = recipe if isinstance(recipe, str) else (name or "swarm-tiny")
    if isinstance(recipe, str):
        if recipe not in TINY_MODELS:
            raise ModelError(
                f"unknown built-in model {recipe!r}; built-in models: {', '.join(TINY_MODELS)}"
            )
        recipe = TINY_MODELS[recipe]
        shipped = shipped_model(name, recipe)
        if shipped is not None:
            return shipped
    target = cache_root() / "models" / f"{name}-{tiny_model_key(recipe)}"
    if (target / "model.safetensors").exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".building-", dir=target.parent))
    try:
        build_tiny_model(staging, recipe, quiet=quiet, label=name)
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

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=_base_tokenizer(recipe),
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


def core_tokenizer(recipe: TinyRecipe = TinyRecipe()):
    """The recipe's bare `tokenizers.Tokenizer` with its special tokens: no transformers."""
    core = _base_tokenizer(recipe)
    core.add_special_tokens(list(SPECIAL_TOKENS))
    return core


def _base_tokenizer(recipe: TinyRecipe):
    return _bpe_tokenizer(recipe) if recipe.tokenizer == "bpe" else _char_tokenizer()


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
        vocab_size=320,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    mix = recipe.vocab_mix or recipe.families
    specs = sample_specs(mix, seed=recipe.data_seed, round_index=0, count=2000)
    tasks = [build_task(s) for s in specs]
    core.train_from_iterator(
        [f"{t.question}\n{ANSWER_OPEN}{t.answer}{ANSWER_CLOSE}" for t in tasks], trainer
    )
    return core


def build_tiny_model(
    out_dir: Path,
    recipe: TinyRecipe = TinyRecipe(),
    quiet: bool = False,
    label: str = "the tiny model",
) -> None:
    """Build, warm-start and save the tiny model into `out_dir` (deterministic for a recipe)."""
    import torch
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
    _warm_start(model, tokenizer, recipe, quiet, label)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def warm_start_example(
    tokenizer, question: str, answer: str, answer_format: AnswerFormat = AnswerFormat.TAGGED
) -> tuple[list[int], list[int]]:
    """(prompt ids, target ids) for one supervised example, the answer tagged or bare."""
    from swarm.policy.prompts import build_prompt

    prompt_ids = tokenizer(build_prompt(tokenizer, question), add_special_tokens=False)["input_ids"]
    tagged = answer_format == AnswerFormat.TAGGED
    text = f"{ANSWER_OPEN}{answer}{ANSWER_CLOSE}" if tagged else answer
    target_ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    return prompt_ids, target_ids + [tokenizer.eos_token_id]


def _warm_start(model, tokenizer, recipe: TinyRecipe, quiet: bool, label: str) -> None:
    """A short supervised run on the recipe's families: loss on answer tokens only."""
    import torch
    from rich.progress import Progress

    rng = random.Random(recipe.seed)
    format_rng = random.Random(f"{recipe.seed}:format")  # its own stream: the bias draws stay put
    optimizer = torch.optim.AdamW(model.parameters(), lr=recipe.warm_lr, weight_decay=0.0)
    model.train()
    with Progress(disable=quiet, transient=True) as progress:
        title = f"building {label} (one time)"
        bar = progress.add_task(title, total=recipe.warm_steps)
        for step in range(recipe.warm_steps):
            specs = sample_specs(
                recipe.families, seed=recipe.data_seed, round_index=step, count=recipe.warm_batch
            )
            tasks = [build_task(spec) for spec in specs]
            examples = [
                warm_start_example(
                    tokenizer,
                    t.question,
                    _demo_answer(t, recipe, rng),
                    _demo_format(recipe, format_rng),
                )
                for t in tasks
            ]
            input_ids, labels, attention = _pad_examples(examples, tokenizer.pad_token_id)
            loss = model(input_ids=input_ids, attention_mask=attention, labels=labels).loss
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            for group in optimizer.param_groups:  # linear decay keeps the end of the run calm
                group["lr"] = recipe.warm_lr * (1 - step / recipe.warm_steps)
            optimizer.step()
            progress.update(bar, advance=1, description=f"{title}: loss {loss.item():.3f}")
    model.eval()


def _demo_answer(task: Task, recipe: TinyRecipe, rng: random.Random) -> str:
    """The demonstrated answer: the true one, or (probability answer_bias) its family's error."""
    answer = task.answer or ""
    bias = dict(recipe.family_bias).get(task.spec.dataset, recipe.answer_bias)
    if bias <= 0 or rng.random() >= bias:
        return answer
    return systematic_error(task.spec.dataset, answer)


def _demo_format(recipe: TinyRecipe, rng: random.Random) -> AnswerFormat:
    """The recipe's answer format, or (with probability format_slip) the other one."""
    if recipe.format_slip <= 0 or rng.random() >= recipe.format_slip:
        return recipe.answer_format
    if recipe.answer_format == AnswerFormat.TAGGED:
        return AnswerFormat.BARE
    return AnswerFormat.TAGGED


def _pad_examples(examples, pad_id: int):
    """Right-pad prompt+target sequences; labels mask the prompt and padding with -100."""
    import torch

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
