"""The continuous-batching generator: transformers' `generate_batch` over the trainer's module.

transformers 5.x ships continuous batching (`ContinuousBatchingManager`, reached through
`model.generate_batch`): a paged key/value cache, sequences joining the batch as others
finish instead of a padded batch waiting for its longest row, one prompt's completions
sharing its cache blocks, CUDA graphs on a GPU. It runs the very module the trainer
updates, so there is nothing to sync after a step and no second copy of the weights.

For the duration of a call the manager switches the model to its paged attention and then
back, and frees its cache when it stops, so the trainer gets the model and the memory back.
The cache is sized to hold every request of the call at once and takes the module's dtype:
fp32 under a trainer's master weights (a second copy in bf16 is what sharing avoids).
Sampling is the one `SamplingParams` definition (temperature 0: greedy; top-k 0: off), with
the model folder's generation defaults overridden (no repetition penalty). The manager
returns the log-prob of each sampled token under the distribution it sampled from; with
temperature 1 and no top-p/top-k that is the raw model's, as `Completion.logprobs` is
defined; with any other sampler the raw log-probs are recomputed by one forward pass.
"""

from __future__ import annotations

import math

import torch

from swarm.core.errors import GeneratorError
from swarm.policy.generator import Completion, Generator, SamplingParams
from swarm.policy.prefix import hidden_logprobs

PAGE_TOKENS = 256  # transformers' default page (block) size, in tokens
RECOMPUTE_ROWS = 16  # rows a raw log-prob recomputation runs at once


def plain_sampler(params: SamplingParams) -> bool:
    """Whether `params` samples from the raw distribution (or argmax), so the manager's
    log-probs are the raw model's."""
    return params.temperature == 1.0 and params.top_p >= 1.0 and params.top_k <= 0


def generation_config(params: SamplingParams, stop_ids: list[int], pad_id: int | None):
    """transformers' GenerationConfig for exactly `params`, nothing from the model folder."""
    from transformers import GenerationConfig

    greedy = params.temperature <= 0
    return GenerationConfig(
        max_new_tokens=params.max_new_tokens,
        do_sample=not greedy,
        temperature=None if greedy else params.temperature,
        top_p=None if greedy or params.top_p >= 1.0 else params.top_p,
        top_k=None if greedy or params.top_k <= 0 else params.top_k,
        repetition_penalty=1.0,
        eos_token_id=stop_ids,
        pad_token_id=pad_id,
    )


def batching_config(
    inputs: list[list[int]], max_new_tokens: int, max_sequences: int, max_batch_tokens: int
):
    """A cache that holds every request at once (pages rounded up per request) and a step of
    at most `max_sequences` sequences and `max_batch_tokens` tokens; log-probs returned."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    pages = sum(math.ceil((len(ids) + max_new_tokens) / PAGE_TOKENS) for ids in inputs)
    return ContinuousBatchingConfig(
        num_blocks=pages + 1,
        max_batch_tokens=max(max_batch_tokens, max_sequences),
        max_requests_per_batch=max_sequences,
        return_logprobs=True,
    )


class ContinuousGenerator(Generator):
    """Continuous batching over the trainer's module (CPU or GPU; CUDA graphs on a GPU)."""

    def __init__(
        self,
        model,
        tokenizer,
        stop_ids: set[int],
        max_sequences: int = 256,
        max_batch_tokens: int = 0,
    ):
        if max_sequences < 1:
            raise GeneratorError("the continuous backend needs at least 1 sequence a step")
        try:
            from transformers.generation.configuration_utils import (  # noqa: F401 - 5.x only
                ContinuousBatchingConfig,
            )
        except ImportError:
            model = None
        if not hasattr(model, "generate_batch"):
            raise GeneratorError(
                "generation.backend = 'continuous' needs transformers' continuous batching "
                "(transformers 5.x): use 'transformers'"
            )
        self.model = model
        self.tokenizer = tokenizer
        self.stop_ids = sorted(stop_ids)
        self.max_sequences = max_sequences
        cpu = next(model.parameters()).device.type == "cpu"
        self.max_batch_tokens = max_batch_tokens or (512 if cpu else 8192)

    def generate(
        self, prompts: list[str], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        inputs = [list(ids) for ids in prompt_ids for _ in range(n)]
        if not inputs:
            return [[] for _ in prompts]
        outputs = self._run(inputs, params)
        tokens = [list(o.generated_tokens) for o in outputs]
        if plain_sampler(params):
            logprobs = [list(o.logprobs) for o in outputs]
        else:
            logprobs = self.raw_logprobs(inputs, tokens)
        flat = [
            self._completion(ids, toks, lps, params.max_new_tokens)
            for ids, toks, lps in zip(inputs, tokens, logprobs, strict=True)
        ]
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    def _run(self, inputs: list[list[int]], params: SamplingParams) -> list:
        """The manager's outputs, one per input, in input order."""
        config = generation_config(params, self.stop_ids, self.tokenizer.pad_token_id)
        batching = batching_config(
            inputs, params.max_new_tokens, self.max_sequences, self.max_batch_tokens
        )
        was_training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                results = self.model.generate_batch(
                    inputs,
                    generation_config=config,
                    continuous_batching_config=batching,
                    progress_bar=False,
                )
        except (RuntimeError, ValueError, MemoryError) as e:  # the manager's own failures
            raise GeneratorError(
                f"continuous batching failed: {e.__class__.__name__}: {e}"
            ) from None
        finally:
            self.model.train(was_training)
        ordered = sorted(results.values(), key=lambda o: int(str(o.request_id).rsplit("_", 1)[1]))
        failed = [o for o in ordered if o.error]
        if len(ordered) != len(inputs) or failed:
            reason = failed[0].error if failed else f"{len(ordered)} of {len(inputs)} answered"
            raise GeneratorError(f"continuous batching failed: {reason}")
        return ordered

    @torch.no_grad()
    def raw_logprobs(self, inputs: list[list[int]], tokens: list[list[int]]) -> list[list[float]]:
        """Each sampled token's log-prob under the raw model (temperature 1, no top-p/top-k),
        by one forward pass of the decoder over prompt + completion, `RECOMPUTE_ROWS` rows at
        a time, the output head over completion positions only (`prefix.hidden_logprobs`)."""
        device = next(self.model.parameters()).device
        decoder = self.model.get_decoder()
        out: list[list[float]] = []
        was_training = self.model.training
        self.model.eval()
        try:
            pairs = list(zip(inputs, tokens, strict=True))
            for start in range(0, len(pairs), RECOMPUTE_ROWS):
                rows = pairs[start : start + RECOMPUTE_ROWS]
                width = max(len(p) + len(t) for p, t in rows)
                ids = torch.zeros((len(rows), width), dtype=torch.long)
                mask = torch.zeros((len(rows), width), dtype=torch.long)
                for r, (p, t) in enumerate(rows):
                    ids[r, : len(p) + len(t)] = torch.tensor(p + t)
                    mask[r, : len(p) + len(t)] = 1
                hidden = decoder(
                    input_ids=ids.to(device), attention_mask=mask.to(device)
                ).last_hidden_state
                for r, (p, t) in enumerate(rows):
                    if not t:
                        out.append([])
                        continue
                    at = hidden[r, len(p) - 1 : len(p) + len(t) - 1]
                    chosen = torch.tensor(t, device=device, dtype=torch.long)
                    out.append(hidden_logprobs(self.model, at, chosen).tolist())
        finally:
            self.model.train(was_training)
        return out

    def _completion(
        self, prompt_ids: list[int], tokens: list[int], logprobs: list[float], limit: int
    ) -> Completion:
        """Tokens before the first stop token (kept apart), cut at `limit` tokens."""
        tokens, logprobs = tokens[:limit], logprobs[:limit]
        cut = next((i for i, t in enumerate(tokens) if t in self.stop_ids), len(tokens))
        stop_id = tokens[cut] if cut < len(tokens) else None
        return Completion(
            prompt_ids=tuple(prompt_ids),
            token_ids=tuple(tokens[:cut]),
            text=self.tokenizer.decode(tokens[:cut], skip_special_tokens=False),
            logprobs=tuple(float(x) for x in logprobs[:cut]),
            finished=stop_id is not None,
            stop_id=stop_id,
        )
