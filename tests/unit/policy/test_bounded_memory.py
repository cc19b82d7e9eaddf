"""Training log-probs hold one chunk of logits at a time, never the full [B, C, vocab] tensor.

With Qwen2.5's 151,936-entry vocabulary a micro-batch of 8 x 1,500 tokens has 7.3 GB of fp32
logits (twice that with log_softmax's output kept for the backward pass). Peak tensor memory
is measured by tracking every tensor storage the forward and backward passes allocate.
"""

import weakref

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from swarm.policy.prefix import hidden_logprobs

VOCAB = 151_936  # Qwen2.5's


class PeakTensorBytes(TorchDispatchMode):
    """Bytes of tensor storage alive at once, at most, among those created inside the mode."""

    def __init__(self) -> None:
        super().__init__()
        self.live = self.peak = 0
        self.seen: set[int] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor):
                self._track(t)
        return out

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage.data_ptr()
        if key in self.seen or storage.nbytes() == 0:
            return
        self.seen.add(key)
        self.live += storage.nbytes()
        self.peak = max(self.peak, self.live)
        weakref.finalize(storage, self._free, key, storage.nbytes())

    def _free(self, key: int, nbytes: int) -> None:
        self.seen.discard(key)
        self.live -= nbytes


class Head(torch.nn.Module):
    """A causal LM's output head with the fake 151,936-entry vocabulary."""

    def __init__(self, hidden: int):
        super().__init__()
        self.head = torch.nn.Linear(hidden, VOCAB, bias=False)

    def get_output_embeddings(self):
        return self.head


def test_logprobs_and_their_gradient_never_hold_the_full_logits():
    torch.manual_seed(0)
    model = Head(8)
    hidden = torch.randn(2, 128, 8, requires_grad=True)
    targets = torch.randint(0, VOCAB, (2, 128))
    full = 2 * 128 * VOCAB * 4  # one fp32 [B, C, vocab] tensor: 148 MiB
    with PeakTensorBytes() as memory:
        logprobs = hidden_logprobs(model, hidden, targets, chunk=16)
        logprobs.sum().backward()
    assert memory.peak < full / 2, f"peak {memory.peak / 2**20:.0f} MiB"  # measured: 46 MiB of 148
    with PeakTensorBytes() as unchunked:  # what the trainer did before: 450 MiB measured
        logits = model.head(hidden).float()
        torch.log_softmax(logits, -1).gather(-1, targets[..., None]).sum().backward()
    assert unchunked.peak > 2 * full
    # The same values and gradient as the plain full-vocabulary computation.
    plain = torch.log_softmax(model.head(hidden.detach()), -1).gather(-1, targets[..., None])
    assert torch.allclose(logprobs.detach(), plain.squeeze(-1), atol=1e-5)
    assert hidden.grad is not None and model.head.weight.grad is not None


def _llama():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    return LlamaForCausalLM(config)


def test_gradient_checkpointing_is_an_option_with_the_same_gradient():
    from swarm.policy.trainer import GRPOTrainer, TrainerSettings, TrainSample

    samples = [TrainSample((3, 4, 5), (6 + i, 7, 8), a) for i, a in enumerate((1.0, -1.0))]
    norms = []
    for on in (False, True):
        model = _llama()
        settings = TrainerSettings(lr=1e-6, gradient_checkpointing=on, shared_prefix=False)
        norms.append(GRPOTrainer(model, 0, settings).update(samples).grad_norm)
        assert model.is_gradient_checkpointing == on
    assert norms[1] == pytest.approx(norms[0], rel=1e-4)


def test_checkpointing_is_on_by_default_for_real_models_only(tmp_path):
    from swarm.node.makers import parameter_count, trainer_settings
    from swarm.policy.memory import CHECKPOINTING_PARAMS
    from swarm.policy.model import Policy
    from tests.conftest import small_config

    policy = Policy("swarm-tiny", _llama(), None, torch.device("cpu"), torch.float32, "0", "m")
    assert parameter_count(policy) < CHECKPOINTING_PARAMS
    auto = small_config(tmp_path)
    forced = small_config(tmp_path, training={"gradient_checkpointing": "on"})
    assert not trainer_settings(auto, policy).gradient_checkpointing
    assert trainer_settings(forced, policy).gradient_checkpointing
    policy.model = torch.nn.Linear(4096, 4096)  # 16.8 M parameters: a real model's size
    assert trainer_settings(auto, policy).gradient_checkpointing


class ByteTokenizer:
    """Enough of a tokenizer for `TransformersGenerator`: one id per character, left padding."""

    pad_token_id = 0

    def __call__(self, texts, return_tensors="pt", padding=True, add_special_tokens=False):
        rows = [[1 + ord(c) % 60 for c in t] for t in texts]
        width = max(len(r) for r in rows)
        ids = torch.tensor([[0] * (width - len(r)) + r for r in rows])
        return {"input_ids": ids, "attention_mask": (ids != 0).long()}

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(map(str, ids))


def test_generator_keeps_no_per_step_logits_and_returns_the_raw_logprobs():
    from transformers import LlamaConfig, LlamaForCausalLM

    from swarm.policy.generator import SamplingParams, TransformersGenerator

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    model = LlamaForCausalLM(config).eval()
    generator = TransformersGenerator(model, ByteTokenizer(), {VOCAB - 1}, batch_size=8)
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=48)
    with PeakTensorBytes() as memory:
        (group,) = generator.generate(["abcd"], 4, params)
    kept = 4 * 48 * VOCAB * 4  # every step's fp32 logits, as output_logits=True keeps them
    assert memory.peak < kept / 2, f"peak {memory.peak / 2**20:.0f} MiB"  # measured: 36 of 111
    for completion in group:  # the raw model's log-probs of the tokens sampled
        ids = torch.tensor([completion.prompt_ids + completion.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(completion.prompt_ids) - 1 : -1].float()
        raw = torch.log_softmax(logits, -1).gather(-1, ids[0, len(completion.prompt_ids) :, None])
        assert torch.allclose(torch.tensor(completion.logprobs), raw.squeeze(-1), atol=1e-4)


def test_greedy_is_the_raw_argmax_whatever_the_model_folder_asks():
    """A model's generation_config (Qwen2.5-Instruct: repetition_penalty 1.1) is not applied:
    greedy decoding is the raw model's argmax at every step, as vLLM's with
    generation_config='vllm', so both backends evaluate alike."""
    from transformers import LlamaConfig, LlamaForCausalLM

    from swarm.policy.generator import SamplingParams, TransformersGenerator

    torch.manual_seed(1)
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    model = LlamaForCausalLM(config).eval()
    model.generation_config.repetition_penalty = 50.0
    model.generation_config.no_repeat_ngram_size = 1
    generator = TransformersGenerator(model, ByteTokenizer(), {63}, batch_size=4)
    (group,) = generator.generate(["abcd"], 1, SamplingParams(temperature=0, max_new_tokens=16))
    ids = list(group[0].prompt_ids)
    with torch.no_grad():
        for _ in range(len(group[0].token_ids)):
            ids.append(int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax()))
    assert tuple(ids[len(group[0].prompt_ids) :]) == group[0].token_ids
    assert len(set(group[0].token_ids)) < len(group[0].token_ids)  # it repeats: unpenalised
