"""The continuous-batching generator: sequences join the batch as others finish, over the
trainer's own weights.

Two engines, chosen per machine by `swarm.policy.decode_plan`:

- **paged** (`swarm.policy.paged`, the default): a paged key/value cache and an attention
  function that reads each sequence's own pages, so a decode step of N sequences costs N x
  the longest context, on a CPU or a GPU. One prompt's completions share its prefill.
- **transformers' continuous batching** (`model.generate_batch`) where it can run flash
  attention (CUDA, 16-bit, the flash-attn package): per-sequence flash kernels, its decode
  fast path over a block table, and CUDA graphs (it captures them only on its flash paths,
  where no mask is needed). Its sdpa path ("library" without flash) attends every query to
  every sequence of the step through a dense mask; it is kept for comparison.

Precision: on CUDA with bf16 an fp32 trainer module is sampled through a bf16 copy of its
weights, refreshed (one cast-copy) at every call, so a training step shows at once; its
cache is bf16 too. On a CPU the module itself runs, in fp32, and no copy is kept.

Either engine switches the module's attention for the call and back, and frees its cache
when it stops. Sampling is the one `SamplingParams` definition (temperature 0: greedy; top-k
0: off), with the model folder's generation defaults overridden (no repetition penalty).
The log-prob returned for each token is the raw model's (temperature 1, no top-p/top-k), as
`Completion.logprobs` is defined: the paged engine computes it at each step; transformers'
manager returns the sampler's, recomputed by one forward pass where the two differ.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import torch

from swarm.core.errors import GeneratorError
from swarm.policy.decode_plan import DecodePlan, decode_plan
from swarm.policy.generator import Completion, Generator, SamplingParams
from swarm.policy.paged import PagedDecoder
from swarm.policy.prefix import hidden_logprobs

PAGE_TOKENS = 256  # transformers' default page (block) size, in tokens
RECOMPUTE_ROWS = 16  # rows a raw log-prob recomputation runs at once
FLASH_MODULES = ("flash_attn", "flash_attn_interface", "kernels")  # FA2, FA3, hub kernels


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
    inputs: list[list[int]],
    max_new_tokens: int,
    max_sequences: int,
    max_batch_tokens: int,
    plan: DecodePlan | None = None,
):
    """transformers' continuous batching config: a cache that holds every request at once
    (pages rounded up per request), a step of at most `max_sequences` sequences and
    `max_batch_tokens` tokens, log-probs returned; CUDA graphs as `plan` says, and no
    switch to flash attention where `plan` runs sdpa (where the version has that switch)."""
    from transformers.generation.configuration_utils import ContinuousBatchingConfig

    pages = sum(math.ceil((len(ids) + max_new_tokens) / PAGE_TOKENS) for ids in inputs)
    extra: dict[str, Any] = {}
    if plan is not None:
        extra["use_cuda_graph"] = plan.cuda_graphs
        if (
            plan.attention != "flash"
            and "auto_switch_to_flash" in ContinuousBatchingConfig.__dataclass_fields__
        ):
            extra["auto_switch_to_flash"] = False
    return ContinuousBatchingConfig(
        num_blocks=pages + 1,
        max_batch_tokens=max(max_batch_tokens, max_sequences),
        max_requests_per_batch=max_sequences,
        return_logprobs=True,
        **extra,
    )


def machine_plan(model, attention: str = "auto") -> DecodePlan:
    """`decode_plan` for `model` on the machine this runs on."""
    import transformers

    param = next(model.parameters())
    cuda = param.device.type == "cuda"
    found = [importlib.util.find_spec(m) is not None for m in FLASH_MODULES]
    package, importable = any(found[:2]), any(found[:2]) or (cuda and found[2])
    return decode_plan(
        param.device.type,
        str(param.dtype).removeprefix("torch."),
        transformers.__version__,
        bf16_supported=cuda and torch.cuda.is_bf16_supported(),
        flash_package=package,
        flash_importable=importable,
        attention=attention,
    )


def generation_copy(model, dtype: torch.dtype):
    """An empty twin of `model` (its own config, the same parameter names) with parameters
    in `dtype` and buffers as the model's; `refresh` fills it."""
    import copy

    with torch.device("meta"):
        twin = type(model)(copy.deepcopy(model.config))
    twin = twin.to_empty(device=next(model.parameters()).device)
    twin.tie_weights()  # tied as the model's are (one copy of a tied head)
    for p in twin.parameters():
        p.data = p.data.to(dtype)
    twin.requires_grad_(False)
    return twin.eval()


@torch.no_grad()
def refresh(twin, model) -> None:
    """Copy `model`'s weights (cast) and buffers into `twin`."""
    source = dict(model.named_parameters(remove_duplicate=False))
    source |= dict(model.named_buffers(remove_duplicate=False))
    for name, tensor in [*twin.named_parameters(), *twin.named_buffers()]:
        tensor.copy_(source[name])


class ContinuousGenerator(Generator):
    """Continuous batching over the trainer's module (module docstring): the paged engine,
    or transformers' manager where it runs flash attention (with CUDA graphs)."""

    def __init__(
        self,
        model,
        tokenizer,
        stop_ids: set[int],
        max_sequences: int = 256,
        max_batch_tokens: int = 0,
        attention: str = "auto",
        plan: DecodePlan | None = None,
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
        self.attention = attention
        self.fixed_plan = plan  # None: planned at each call, for the module as it is then
        self.plan = plan or machine_plan(model, attention)  # a trainer may recast the module
        self._twin = None  # the generation copy of the weights (plan.copy)
        self.last_cache_bytes = 0  # the paged engine's cache in the last call

    def generate(
        self, prompts: list[str], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        inputs = [list(ids) for ids in prompt_ids for _ in range(n)]
        if not inputs:
            return [[] for _ in prompts]
        self.plan = self.fixed_plan or machine_plan(self.model, self.attention)
        if self.plan.attention == "paged":
            tokens, logprobs = self._run_paged(prompt_ids, n, params)
        else:
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

    def close(self) -> None:
        self._twin = None

    def _module(self):
        """The module generation runs: the trainer's, or its refreshed generation copy."""
        if not self.plan.copy:
            return self.model
        dtype = getattr(torch, self.plan.dtype)
        if self._twin is None or next(self._twin.parameters()).dtype != dtype:
            self._twin = generation_copy(self.model, dtype)
        refresh(self._twin, self.model)
        return self._twin

    def _run_paged(self, prompt_ids, n, params):
        module = self._module()
        decoder = PagedDecoder(module, self.max_sequences, self.max_batch_tokens)
        was_training = module.training
        module.eval()
        try:
            with torch.no_grad():
                done = decoder.run(prompt_ids, n, params, set(self.stop_ids))
        except (RuntimeError, ValueError, MemoryError) as e:
            raise GeneratorError(f"paged decoding failed: {e.__class__.__name__}: {e}") from None
        finally:
            module.train(was_training)
        self.last_cache_bytes = decoder.peak_cache_bytes
        return [s.tokens for s in done], [s.logprobs for s in done]

    def _run(self, inputs: list[list[int]], params: SamplingParams) -> list:
        """transformers' manager's outputs, one per input, in input order."""
        module = self._module()
        config = generation_config(params, self.stop_ids, self.tokenizer.pad_token_id)
        batching = batching_config(
            inputs, params.max_new_tokens, self.max_sequences, self.max_batch_tokens, self.plan
        )
        was_training = module.training
        original = getattr(module.config, "_attn_implementation", None)
        module.eval()
        try:
            if self.plan.pin_sdpa:  # 5.17-5.24 never switch a "paged|" implementation to flash
                module.set_attn_implementation("paged|sdpa")
            with torch.no_grad():
                results = module.generate_batch(
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
            if self.plan.pin_sdpa:
                module.set_attn_implementation(original)
            module.train(was_training)
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
