"""What the GPU bench runs on: model shapes, a random model and its word tokenizer, the card.

A random-weight model built from a config (no download), with a word-level tokenizer of the
model's real vocabulary size whose stop token lies outside the model (so every completion
runs to its limit: the worst case), and the card's published peaks, which the bench's
figures are measured against: dense bf16 tensor FLOP/s (training is bound by it) and memory
bandwidth (decoding is bound by it).
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Shape:
    """A model shape and the work of one round on it."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    questions: int  # a round's questions
    group: int  # completions per question
    prompt_tokens: int
    max_new_tokens: int
    micro_batch_size: int
    swarm_questions: int  # the 4-node swarm's round (groups of the real size)
    swarm_new_tokens: int
    tied: bool = True


SHAPES = {
    # Qwen2.5-0.5B's config: 494 M parameters, the real 151,936-token vocabulary, tied head.
    "qwen2.5-0.5b": Shape(151_936, 896, 24, 14, 2, 4864, 32, 8, 300, 1024, 16, 8, 128),
    # Qwen2.5-1.5B's config: 1.54 B parameters.
    "qwen2.5-1.5b": Shape(151_936, 1536, 28, 12, 2, 8960, 32, 8, 300, 1024, 8, 8, 128),
    # The CPU dry run: the same code at a shape a CPU runs in seconds.
    "tiny": Shape(512, 64, 2, 4, 2, 128, 2, 4, 16, 8, 8, 4, 48),
}


@dataclass(frozen=True)
class Card:
    """A GPU's published dense bf16 peak and memory bandwidth."""

    name: str
    bf16_tflops: float
    bandwidth_tbs: float


# Dense (no sparsity) bf16 tensor-core peaks and HBM bandwidth from NVIDIA's data sheets.
CARDS = (
    ("H200", Card("H200", 989.4, 4.8)),
    ("H100 NVL", Card("H100 NVL", 835.0, 3.9)),
    ("H100 PCIe", Card("H100 PCIe", 756.0, 2.0)),
    ("H100", Card("H100 SXM", 989.4, 3.35)),
    ("A100-SXM4-80GB", Card("A100 SXM 80GB", 312.0, 2.039)),
    ("A100", Card("A100", 312.0, 1.555)),
    ("L40S", Card("L40S", 362.0, 0.864)),
    ("RTX 4090", Card("RTX 4090", 165.2, 1.008)),
)


def card_of(device_name: str) -> Card | None:
    """The peaks of the card `torch.cuda.get_device_name()` names, or None if unknown."""
    for key, card in CARDS:
        if key.lower() in device_name.lower():
            return card
    return None


def word_tokenizer(vocab: int):
    """Words w2.. as tokens; pad 0, unk 1, and the stop token `vocab` (outside the model)."""
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


def random_model(shape: Shape, seed: int = 0):
    """A model of `shape` with random weights, on the CPU in fp32.

    Qwen2.5's shape as a Llama module (Qwen2's q/k/v biases left out: 0.1 % of the
    parameters), so that a folder of it loads its word-level tokenizer as written (for a
    qwen2 folder transformers builds Qwen2's own byte-level tokenizer instead)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=shape.vocab,
        hidden_size=shape.hidden,
        intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        num_key_value_heads=shape.kv_heads,
        max_position_embeddings=32768,
        rms_norm_eps=1e-6,
        tie_word_embeddings=shape.tied,
        pad_token_id=0,
        eos_token_id=shape.vocab,  # never sampled: completions run to their limit
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config).eval()


def random_prompts(shape: Shape, seed: int) -> list[str]:
    """`shape.questions` prompts of exactly `shape.prompt_tokens` random words."""
    rng = random.Random(seed)
    return [
        " ".join(f"w{rng.randrange(2, shape.vocab)}" for _ in range(shape.prompt_tokens))
        for _ in range(shape.questions)
    ]


def parameter_count(model) -> int:
    """Distinct parameters (a tied head counted once)."""
    return sum(p.numel() for p in model.parameters())


def kv_bytes_per_token(shape: Shape, element_bytes: int) -> int:
    """Key and value bytes one token's cache takes over every layer."""
    head_dim = shape.hidden // shape.heads
    return 2 * shape.layers * shape.kv_heads * head_dim * element_bytes


def decode_bound(
    shape: Shape, card: Card, weight_bytes: int, sequences: int, element_bytes: int
) -> float:
    """Generated tokens/s that memory bandwidth allows at `sequences` decoding at once: each
    step reads every weight once and each sequence's cache at its mean length."""
    mean_context = shape.prompt_tokens + shape.max_new_tokens / 2
    cache = sequences * mean_context * kv_bytes_per_token(shape, element_bytes)
    return sequences * card.bandwidth_tbs * 1e12 / (weight_bytes + cache)


def training_bound(parameters: int, card: Card) -> float:
    """Training tokens/s the bf16 peak allows at 6 FLOPs per parameter per token."""
    return card.bf16_tflops * 1e12 / (6 * parameters)
