"""The vLLM generator: fast sampling on a GPU, behind the same `Generator` interface.

vLLM is imported only when this class is built, so the rest of swarm-node never needs it;
a missing vllm package or a missing GPU is a clear `GeneratorError`. vLLM keeps its own copy
of the weights: after each training step `sync_weights` loads the trainer's weights into the
running engine in place (no restart, no disk).

One engine per process runs in-process (its core in this process; weights pushed without a
copy). vLLM keeps process-wide state for such an engine (its distributed group, its cached
environment, the process's seeds), so a second one beside it would share that state: it is
refused with a one-line error. Where one process runs several nodes (the SAPO experiment),
call `isolate_engines()` before the first engine: every engine's core then runs in its own
process and weights travel to it as CPU tensors.
"""

from __future__ import annotations

import os
import weakref

import torch

from swarm.core.errors import GeneratorError
from swarm.policy.generator import Completion, Generator, SamplingParams
from swarm.policy.model import Policy, resolve_model_path

MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"
_in_process_engines: weakref.WeakSet = weakref.WeakSet()  # live engines run in this process


def isolate_engines() -> None:
    """Run every vLLM engine of this process in its own core process (call before the first)."""
    if _in_process_engines:
        raise GeneratorError(
            "isolate_engines() must come before the first vLLM engine of the process"
        )
    os.environ[MULTIPROCESSING] = "1"


def engine_kwargs(policy: Policy, gpu_memory_utilization: float, seed: int) -> dict:
    """Every argument of `vllm.LLM` (vLLM 0.32.0), derived from the policy and the config.

    - `max_model_len`: the model's own positions (`max_position_embeddings`), so a model
      with 256 positions is accepted and a long-context one is not cut to a fixed length.
    - `seed`: the node's seed, so nodes do not all sample the same stream.
    - `generation_config="vllm"`: the model folder's generation_config.json (e.g. a
      repetition_penalty of 1.1) is not applied; a node samples with what it declares.
    - `logprobs_mode="raw_logprobs"`: log-probs of the model itself, before temperature and
      top-p, as the transformers backend returns them.
    """
    config = policy.model.config
    positions = getattr(config, "max_position_embeddings", None)
    if not positions:
        raise GeneratorError(f"{policy.name!r}: its config names no max_position_embeddings")
    dtype = {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(policy.dtype, "bfloat16")
    return {
        "model": resolve_model_path(policy.name),
        "dtype": dtype,
        "seed": seed,
        "gpu_memory_utilization": gpu_memory_utilization,
        "max_model_len": int(positions),
        "enable_prefix_caching": True,
        "generation_config": "vllm",
        "logprobs_mode": "raw_logprobs",
    }


def sampling_kwargs(params: SamplingParams, n: int, stop_ids: list[int]) -> dict:
    """`vllm.SamplingParams` arguments for exactly the declared sampler, nothing else."""
    greedy = params.temperature <= 0
    return {
        "n": n,
        "temperature": 0.0 if greedy else params.temperature,
        "top_p": 1.0 if greedy else params.top_p,
        "top_k": 0 if greedy or params.top_k <= 0 else params.top_k,  # 0: off
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "max_tokens": params.max_new_tokens,
        "stop_token_ids": list(stop_ids),
        "logprobs": 0,  # the sampled token's log-prob
    }


class VLLMGenerator(Generator):
    """Samples with a vLLM engine built from the same model as the policy."""

    def __init__(self, policy: Policy, gpu_memory_utilization: float = 0.5, seed: int = 0):
        if not torch.cuda.is_available():
            raise GeneratorError(
                "generation.backend = 'vllm' needs a CUDA GPU; use 'transformers' on this machine"
            )
        # In-process engine unless the process chose isolation: weights pushed without copies.
        os.environ.setdefault(MULTIPROCESSING, "0")
        self.in_process = os.environ[MULTIPROCESSING] == "0"
        if self.in_process and _in_process_engines:
            raise GeneratorError(
                "a second in-process vLLM engine would share the first one's process-wide "
                "state: run one node per process, or call "
                "swarm.policy.vllm_generator.isolate_engines() before the first engine"
            )
        try:
            import vllm
        except ImportError:
            raise GeneratorError("vllm is not installed: pip install 'swarm-node[gpu]'") from None
        self._vllm = vllm
        self.tokenizer = policy.tokenizer
        self.stop_ids = sorted(policy.stop_token_ids)
        kwargs = engine_kwargs(policy, gpu_memory_utilization, seed)
        self.dtype = {"float16": torch.float16}.get(kwargs["dtype"], torch.bfloat16)
        # An in-process engine seeds the process's generators and sets torch to one thread.
        threads, rng = torch.get_num_threads(), torch.get_rng_state()
        try:
            self.llm = vllm.LLM(**kwargs)
        except Exception as e:  # noqa: BLE001 - vLLM raises many kinds; all mean "cannot start"
            raise GeneratorError(
                f"vLLM could not start {policy.name!r}: {e.__class__.__name__}: {e}"
            ) from None
        finally:
            torch.set_num_threads(threads)
            torch.set_rng_state(rng)
        if self.in_process:
            _in_process_engines.add(self)

    def generate(
        self, prompts: list[str], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        sampling = self._vllm.SamplingParams(**sampling_kwargs(params, n, self.stop_ids))
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        requests = [{"prompt_token_ids": ids} for ids in prompt_ids]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        return [
            [self._completion(tuple(ids), sample) for sample in output.outputs]
            for ids, output in zip(prompt_ids, outputs, strict=True)
        ]

    def _completion(self, prompt_ids: tuple[int, ...], sample) -> Completion:
        """A vLLM sample as a `Completion`: tokens before the stop token, which is kept apart."""
        ids = list(sample.token_ids)
        cut = next((i for i, t in enumerate(ids) if t in self.stop_ids), len(ids))
        tokens, stop_id = ids[:cut], (ids[cut] if cut < len(ids) else None)
        if (
            stop_id is None
            and sample.finish_reason == "stop"
            and isinstance(sample.stop_reason, int)
        ):
            stop_id = sample.stop_reason  # a stop token vLLM left out of token_ids
        entries = list(sample.logprobs or [])[:cut]
        logprobs = [
            float(e[t].logprob) if t in e else float("nan") for t, e in zip(tokens, entries)
        ]
        return Completion(
            prompt_ids=prompt_ids,
            token_ids=tuple(tokens),
            text=self.tokenizer.decode(tokens, skip_special_tokens=False),
            logprobs=tuple(logprobs),
            finished=sample.finish_reason == "stop",
            stop_id=stop_id,
        )

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load the trainer's current weights into the engine, in place.

        The supported route of vLLM 0.32.0: the worker's `reload_weights` through
        `collective_rpc` by name (no pickled function, so no insecure serialization), then
        the prefix cache is reset, since cached keys and values of the old weights must not
        be reused. The engine's model takes every weight again (its loader fuses q/k/v and
        gate/up per layer), so a follower's partial update pushes them all as well.
        """
        weights = [
            (
                name,
                t.detach().to(self.dtype) if self.in_process else t.detach().to("cpu", self.dtype),
            )
            for name, t in model.state_dict().items()
        ]
        try:
            self.llm.collective_rpc(
                "reload_weights", kwargs={"weights_iterator": weights, "is_checkpoint_format": True}
            )
            self.llm.reset_prefix_cache()
        except Exception as e:  # noqa: BLE001 - translate any engine failure at this boundary
            raise GeneratorError(
                f"vLLM weight update failed: {e.__class__.__name__}: {e}"
            ) from None

    def close(self) -> None:
        _in_process_engines.discard(self)
        self.llm = None
        torch.cuda.empty_cache()
