"""The vLLM generator: fast sampling on a GPU, behind the same `Generator` interface.

vLLM is imported only when this class is built, so the rest of swarm-node never needs it;
a missing vllm package or a missing GPU is a clear `GeneratorError`. vLLM keeps its own copy
of the weights: after each training step `sync_weights` loads the trainer's weights into the
running engine in place (no restart), through the worker's `reload_weights`, which vLLM
0.32.0 processes layer by layer (a fused layer such as qkv_proj only once all its parts
have arrived; one given only some of them is rebuilt from uninitialised memory), so every
update pushes every weight, one tensor at a time, never a second copy of the state dict.

One engine per process runs in-process (its core in this process): weights go to it as a
stream of the trainer's own tensors, each cast as it is loaded. vLLM keeps process-wide
state for such an engine (its distributed group, its cached environment, the process's
seeds), so a second one beside it would share that state: it is refused with a one-line
error. Starting an engine reseeds the process's Python, numpy, torch and CUDA generators
and sets torch to one thread; all of it is put back. Where one process runs several nodes
(the SAPO experiment), call `isolate_engines()` before the first engine: every engine's core
then runs in its own process. vLLM 0.32.0's engine core decodes a utility call's arguments
untyped (a tensor arrives as a `[dtype, shape, buffer]` list), so weights cannot travel as
tensors: they are written, one tensor at a time, to a safetensors file in a folder of the
generator's own (in /dev/shm where there is one), and the worker reloads from that path.

With `sleep` the engine sleeps (level 1: weights to CPU memory, its cache freed) between a
round's generation and the next weight update, leaving the GPU to the trainer. `close` stops
the engine and frees what it holds: an in-process engine's weights, KV cache and the
process's distributed state, an isolated one's core process and weights folder.
"""

from __future__ import annotations

import gc
import os
import random
import shutil
import tempfile
import weakref
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import torch

from swarm.core.errors import GeneratorError
from swarm.core.install import GPU_INSTALL_HINT
from swarm.policy.generator import Completion, Generator, SamplingParams
from swarm.policy.model import Policy, resolve_model_path
from swarm.policy.weights_file import distinct_tensors, write_weights

MULTIPROCESSING = "VLLM_ENABLE_V1_MULTIPROCESSING"
_in_process_engines: weakref.WeakSet = weakref.WeakSet()  # live engines run in this process


def isolate_engines() -> None:
    """Run every vLLM engine of this process in its own core process (call before the first)."""
    if _in_process_engines:
        raise GeneratorError(
            "isolate_engines() must come before the first vLLM engine of the process"
        )
    os.environ[MULTIPROCESSING] = "1"


@contextmanager
def kept_process_state():
    """Put back what starting an engine changes in the process: every generator vLLM seeds
    (Python's `random`, numpy's, torch's CPU one, each CUDA device's) and torch's threads."""
    threads, py, npy, cpu = (
        torch.get_num_threads(),
        random.getstate(),
        np.random.get_state(),
        torch.get_rng_state(),
    )
    cuda = torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        random.setstate(py)
        np.random.set_state(npy)
        torch.set_rng_state(cpu)
        if cuda is not None:
            torch.cuda.set_rng_state_all(cuda)


def weights_folder() -> Path:
    """A fresh folder for an isolated engine's weights file, in memory where the OS offers it."""
    shm = Path("/dev/shm")
    return Path(tempfile.mkdtemp(prefix="swarm-vllm-", dir=shm if shm.is_dir() else None))


def engine_kwargs(
    policy: Policy, gpu_memory_utilization: float, seed: int, sleep: bool = False
) -> dict:
    """Every argument of `vllm.LLM` (vLLM 0.32.0), derived from the policy and the config.

    - `max_model_len`: the model's own positions (`max_position_embeddings`), so a model
      with 256 positions is accepted and a long-context one is not cut to a fixed length.
    - `seed`: the node's seed, so nodes do not all sample the same stream.
    - `generation_config="vllm"`: the model folder's generation_config.json (e.g. a
      repetition_penalty of 1.1) is not applied; a node samples with what it declares.
    - `logprobs_mode="raw_logprobs"`: log-probs of the model itself, before temperature and
      top-p, as the transformers backend returns them.
    - `enable_sleep_mode`: only when the engine is to sleep while the trainer steps.
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
        "enable_sleep_mode": sleep,
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

    def __init__(
        self,
        policy: Policy,
        gpu_memory_utilization: float = 0.5,
        seed: int = 0,
        sleep: bool = False,
    ):
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
            raise GeneratorError(f"vllm is not installed: {GPU_INSTALL_HINT}") from None
        self._vllm = vllm
        self.tokenizer = policy.tokenizer
        self.stop_ids = sorted(policy.stop_token_ids)
        kwargs = engine_kwargs(policy, gpu_memory_utilization, seed, sleep)
        self.dtype = {"float16": torch.float16}.get(kwargs["dtype"], torch.bfloat16)
        self.sleep, self.asleep = sleep, False
        self.folder = None if self.in_process else weights_folder()
        try:
            with kept_process_state():
                self.llm = vllm.LLM(**kwargs)
        except Exception as e:  # noqa: BLE001 - vLLM raises many kinds; all mean "cannot start"
            self._remove_folder()
            raise GeneratorError(
                f"vLLM could not start {policy.name!r}: {e.__class__.__name__}: {e}"
            ) from None
        if self.in_process:
            _in_process_engines.add(self)

    def generate(
        self, prompts: list[str], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        sampling = self._vllm.SamplingParams(**sampling_kwargs(params, n, self.stop_ids))
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        requests = [{"prompt_token_ids": ids} for ids in prompt_ids]
        self._wake()
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        if self.sleep:  # the trainer steps next: give it the engine's memory
            self.llm.sleep(level=1)
            self.asleep = True
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

    def _wake(self) -> None:
        if self.asleep:
            self.llm.wake_up()
            self.asleep = False

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load the trainer's current weights into the engine, in place.

        vLLM 0.32.0's worker `reload_weights` by name through `collective_rpc` (no pickled
        function, so no insecure serialization): in-process from a stream of the trainer's
        tensors, isolated from the safetensors file written for it. Then the prefix cache is
        reset: cached keys and values of the old weights must not be reused. Every weight
        goes, so a follower's partial update pushes them all as well (see the module doc).
        """
        self._wake()
        try:
            if self.in_process:
                stream = ((n, t.to(self.dtype)) for n, t in distinct_tensors(model))
                kwargs = {"weights_iterator": stream, "is_checkpoint_format": True}
            else:
                assert self.folder is not None
                write_weights(model, self.folder / "model.safetensors", self.dtype)
                kwargs = {"weights_path": str(self.folder), "is_checkpoint_format": True}
            self.llm.collective_rpc("reload_weights", kwargs=kwargs)
            self.llm.reset_prefix_cache()
        except GeneratorError:
            raise
        except Exception as e:  # noqa: BLE001 - translate any engine failure at this boundary
            raise GeneratorError(
                f"vLLM weight update failed: {e.__class__.__name__}: {e}"
            ) from None

    def close(self) -> None:
        """Stop the engine and give back what it holds; a second call does nothing.

        vLLM 0.32.0's `LLM` has no shutdown of its own: its engine-core client's `shutdown`
        stops it. In-process that is `EngineCore.shutdown` (the executor and its worker, the
        scheduler, then `cleanup_dist_env_and_memory`: the process's distributed groups
        destroyed, garbage collected, the CUDA cache emptied), run while the `LLM` still
        holds the model; so once nothing holds the engine, the cleanup runs again, freeing
        its weights and KV cache for the trainer or a next engine. Isolated, the engine's
        core process ends (its GPU memory with it) and its weights folder is removed.
        """
        _in_process_engines.discard(self)
        llm, self.llm = self.llm, None
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()
            del llm
            if self.in_process:
                from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

                cleanup_dist_env_and_memory()
        self._remove_folder()
        gc.collect()
        torch.cuda.empty_cache()

    def _remove_folder(self) -> None:
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)
            self.folder = None
