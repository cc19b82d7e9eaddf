"""Generators: turn prompts into sampled completions with per-token log-probs.

One interface, `Generator`, so the node does not care what samples: `TransformersGenerator`
(here; CPU or GPU, shares the trainer's module so it needs no weight sync),
`ContinuousGenerator` (`swarm.policy.continuous`: continuous batching with a paged cache over
the same weights) or `VLLMGenerator` (`swarm.policy.vllm_generator`, GPU only, imported lazily);
`swarm.policy.backends` says which `generation.backend` runs.

`TransformersGenerator` prefills each prompt once and expands its cache over the prompt's
completions (`shared_prefill`), instead of running the same prompt once per completion.

Log-probs returned are those of the *raw* model distribution (temperature 1, no top-p), so
they are comparable across backends and usable for spot checks. The trainer recomputes its
own; where the two can differ it weighs each token's loss by their truncated ratio
(`grpo.truncated_importance_weights`).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from swarm.core.errors import GeneratorError
from swarm.policy.prefix import output_cache


@dataclass(frozen=True)
class SamplingParams:
    """How to sample: temperature 0 means greedy."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 disables top-k
    max_new_tokens: int = 32


@dataclass(frozen=True)
class Completion:
    """One sampled completion of one prompt."""

    prompt_ids: tuple[int, ...]
    token_ids: tuple[int, ...]  # completion tokens, without the stop token and padding
    text: str
    logprobs: tuple[float, ...]  # raw-model log-prob of each completion token
    finished: bool  # ended with a stop token (False: cut at max_new_tokens)
    stop_id: int | None = None  # the stop token sampled (a finished completion's last token)


class Generator(ABC):
    """What the node needs from a sampler."""

    @abstractmethod
    def generate(
        self, prompts: list[str], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        """`n` completions for each prompt, in prompt order."""

    def sync_weights(self, model: torch.nn.Module) -> None:  # noqa: B027 - optional hook
        """Bring the sampler's weights up to date with `model` after a training step."""

    def update_weights(self, model: torch.nn.Module, names: set[str] | None = None) -> None:
        """A follower copied a delta into `model`: only `names` changed (None: possibly all).

        Defaults to a full `sync_weights`; a backend with its own copy of the weights can
        load just the changed tensors.
        """
        self.sync_weights(model)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release what the generator holds (GPU memory, engines)."""


class TransformersGenerator(Generator):
    """Batched `model.generate` with left padding; shares the policy module with the trainer.

    With `shared_prefill` (the default) a call's distinct prompts are prefilled once (all but
    their last token) and the cache is repeated for each prompt's `n` completions; `generate`
    then continues from it. The batches are the same as without it (`batch_size` rows, whole
    prompts: `batch_size // n` prompts a call), so for a fixed seed the sampler draws the
    same random numbers in the same order.
    """

    def __init__(
        self,
        model,
        tokenizer,
        stop_ids: set[int],
        batch_size: int = 64,
        shared_prefill: bool = True,
    ):
        if batch_size < 1:
            raise GeneratorError("generation batch size must be at least 1")
        self.model = model
        self.tokenizer = tokenizer
        self.stop_ids = set(stop_ids)
        self.batch_size = batch_size
        self.shared_prefill = shared_prefill

    def generate(
        self, prompts: list[str], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        out: list[Completion] = []
        if self.shared_prefill and n > 1:
            per_call = max(1, self.batch_size // n)
            for start in range(0, len(prompts), per_call):
                out.extend(self._generate_batch(prompts[start : start + per_call], params, n))
        else:
            flat = [p for p in prompts for _ in range(n)]
            for start in range(0, len(flat), self.batch_size):
                out.extend(self._generate_batch(flat[start : start + self.batch_size], params, 1))
        return [out[i * n : (i + 1) * n] for i in range(len(prompts))]

    @torch.no_grad()
    def _generate_batch(
        self, prompts: list[str], params: SamplingParams, repeats: int
    ) -> list[Completion]:
        """`repeats` completions of each prompt (prefilled once when `repeats` > 1), in order."""
        device = next(self.model.parameters()).device
        enc = self.tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        input_ids = enc["input_ids"].to(device)
        attention = enc["attention_mask"].to(device)
        greedy = params.temperature <= 0
        was_training = self.model.training
        self.model.eval()
        recorder = RawLogprobs(self.model)  # a prefill's forward is overwritten by step 1's
        try:
            cache = self._prefill(input_ids, attention, repeats) if repeats > 1 else {}
            input_ids = input_ids.repeat_interleave(repeats, dim=0)
            attention = attention.repeat_interleave(repeats, dim=0)
            result = self.model.generate(
                **cache,
                logits_processor=[recorder],
                input_ids=input_ids,
                attention_mask=attention,
                do_sample=not greedy,
                temperature=None if greedy else params.temperature,
                top_p=None if greedy else params.top_p,
                top_k=None if greedy else params.top_k,
                max_new_tokens=params.max_new_tokens,
                # Exactly the declared sampler: a model folder's generation_config (e.g.
                # Qwen2.5-Instruct's repetition_penalty 1.1) must not add to it.
                repetition_penalty=1.0,
                no_repeat_ngram_size=0,
                eos_token_id=sorted(self.stop_ids),
                pad_token_id=self.tokenizer.pad_token_id,
                return_dict_in_generate=True,
            )
        finally:
            recorder.close()
            self.model.train(was_training)
        new_tokens = result.sequences[:, input_ids.shape[1] :]
        logprobs = recorder.finish(new_tokens)
        return [
            self._completion(input_ids[row], attention[row], new_tokens[row], logprobs[row])
            for row in range(input_ids.shape[0])
        ]

    def _prefill(self, input_ids, attention, repeats: int) -> dict:
        """The cache of every prompt token but the last, repeated `repeats` times per prompt, as
        the keyword `generate` takes it; `generate` then runs only the last prompt token."""
        if input_ids.shape[1] < 2:
            return {}
        positions = (attention[:, :-1].cumsum(-1) - 1).clamp(min=0)
        out = self.model(
            input_ids=input_ids[:, :-1],
            attention_mask=attention[:, :-1],
            position_ids=positions,
            use_cache=True,
        )
        cache = output_cache(out)
        cache.batch_repeat_interleave(repeats)
        parameters = inspect.signature(self.model.forward).parameters
        return {"cache" if "cache" in parameters else "past_key_values": cache}

    def _completion(self, prompt_row, attention_row, token_row, logprob_row) -> Completion:
        prompt_ids = tuple(prompt_row[attention_row.bool()].tolist())
        tokens = token_row.tolist()
        stop_id = None
        for i, token in enumerate(tokens):
            if token in self.stop_ids:
                tokens, stop_id = tokens[:i], token
                break
        return Completion(
            prompt_ids=prompt_ids,
            token_ids=tuple(tokens),
            text=self.tokenizer.decode(tokens, skip_special_tokens=False),
            logprobs=tuple(logprob_row[: len(tokens)].tolist()),
            finished=stop_id is not None,
            stop_id=stop_id,
        )


class RawLogprobs:
    """Log-probs of the sampled tokens under the raw model (before temperature and top-p),
    recorded while `generate` runs, one step at a time: no per-step logits are kept.

    A forward hook on the output head keeps the last position's log-softmax of the step in
    progress; as a logits processor it is called once per step with the tokens so far, whose
    last one was sampled from the previous step's distribution.
    """

    def __init__(self, model) -> None:
        self.previous: torch.Tensor | None = None
        self.current: torch.Tensor | None = None
        self.taken: list[torch.Tensor] = []
        self.handle = model.get_output_embeddings().register_forward_hook(self._hook)

    def _hook(self, module, inputs, output) -> None:
        self.current = torch.log_softmax(output[:, -1, :].float(), dim=-1)

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.previous is not None:
            self.taken.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.previous = self.current
        return scores

    def close(self) -> None:
        """Remove the hook from the model."""
        self.handle.remove()

    def finish(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """[B, new tokens] log-probs: the last token's comes from the last step's distribution."""
        if self.previous is not None and new_tokens.shape[1] > len(self.taken):
            self.taken.append(self.previous.gather(-1, new_tokens[:, -1:]).squeeze(-1))
        if not self.taken:
            return new_tokens.new_zeros(new_tokens.shape, dtype=torch.float32)
        return torch.stack(self.taken, dim=1)
