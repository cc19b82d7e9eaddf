"""The vLLM generator: fast sampling on a GPU, behind the same `Generator` interface.

vLLM is imported only when this class is built, so the rest of swarm-node never needs it;
a missing vllm package or a missing GPU is a clear `GeneratorError`. vLLM keeps its own copy
of the weights: after each training step `sync_weights` loads the trainer's weights into the
running engine in place (no restart, no disk).
"""

from __future__ import annotations

import os

import torch

from swarm.errors import GeneratorError
from swarm.policy.generator import Completion, Generator, SamplingParams
from swarm.policy.model import Policy, resolve_model_path


def _load_weights_on_worker(worker, weights):
    """Runs inside each vLLM worker (via collective_rpc): load named tensors in place."""
    worker.model_runner.model.load_weights(weights=weights)
    return True


class VLLMGenerator(Generator):
    """Samples with a vLLM engine built from the same model as the policy."""

    def __init__(
        self, policy: Policy, gpu_memory_utilization: float = 0.5, max_model_len: int = 4096
    ):
        if not torch.cuda.is_available():
            raise GeneratorError(
                "generation.backend = 'vllm' needs a CUDA GPU; use 'transformers' on this machine"
            )
        # In-process engine: lets sync_weights reach the model directly where vLLM allows it.
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        try:
            import vllm
        except ImportError:
            raise GeneratorError("vllm is not installed: pip install 'swarm-node[gpu]'") from None
        self._vllm = vllm
        self.tokenizer = policy.tokenizer
        self.stop_ids = sorted(policy.stop_token_ids)
        dtype = {torch.bfloat16: "bfloat16", torch.float16: "float16"}.get(policy.dtype, "bfloat16")
        try:
            self.llm = vllm.LLM(
                model=resolve_model_path(policy.name),
                dtype=dtype,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                enable_prefix_caching=True,
                seed=0,
            )
        except Exception as e:  # noqa: BLE001 - vLLM raises many kinds; all mean "cannot start"
            raise GeneratorError(
                f"vLLM could not start {policy.name!r}: {e.__class__.__name__}: {e}"
            ) from None

    def generate(
        self, prompts: list[str], n: int, params: SamplingParams
    ) -> list[list[Completion]]:
        greedy = params.temperature <= 0
        sampling = self._vllm.SamplingParams(
            n=n,
            temperature=0.0 if greedy else params.temperature,
            top_p=1.0 if greedy else params.top_p,
            top_k=-1 if greedy or params.top_k <= 0 else params.top_k,
            max_tokens=params.max_new_tokens,
            stop_token_ids=self.stop_ids,
            logprobs=0,  # the sampled token's log-prob
        )
        prompt_ids = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        requests = [{"prompt_token_ids": ids} for ids in prompt_ids]
        outputs = self.llm.generate(requests, sampling, use_tqdm=False)
        return [
            [self._completion(tuple(ids), sample) for sample in output.outputs]
            for ids, output in zip(prompt_ids, outputs, strict=True)
        ]

    def _completion(self, prompt_ids: tuple[int, ...], sample) -> Completion:
        tokens = [t for t in sample.token_ids if t not in self.stop_ids]
        logprobs = []
        for token, entry in zip(sample.token_ids, sample.logprobs or [], strict=False):
            if token in self.stop_ids:
                break
            logprobs.append(float(entry[token].logprob) if token in entry else float("nan"))
        return Completion(
            prompt_ids=prompt_ids,
            token_ids=tuple(tokens),
            text=self.tokenizer.decode(tokens, skip_special_tokens=False),
            logprobs=tuple(logprobs),
            finished=sample.finish_reason == "stop",
        )

    def sync_weights(self, model: torch.nn.Module) -> None:
        """Load the trainer's current weights into the engine, in place."""
        self._load([(name, tensor.detach()) for name, tensor in model.state_dict().items()])

    def update_weights(self, model: torch.nn.Module, names: set[str] | None = None) -> None:
        """After a followed delta: load only the changed tensors into the engine, in place."""
        if names is None:
            return self.sync_weights(model)
        state = model.state_dict()
        self._load([(name, state[name].detach()) for name in sorted(names)])

    def _load(self, weights: list) -> None:
        engine_model = self._in_process_model()
        try:
            if engine_model is not None:
                engine_model.load_weights(weights=weights)
            else:
                cpu = [(name, t.to("cpu")) for name, t in weights]
                self.llm.collective_rpc(_load_weights_on_worker, args=(cpu,))
        except Exception as e:  # noqa: BLE001 - translate any engine failure at this boundary
            raise GeneratorError(
                f"vLLM weight update failed: {e.__class__.__name__}: {e}"
            ) from None
        if hasattr(self.llm, "reset_prefix_cache"):
            self.llm.reset_prefix_cache()  # cached KV of old weights must not be reused

    def _in_process_model(self):
        executor = getattr(self.llm.llm_engine, "model_executor", None)
        worker = getattr(getattr(executor, "driver_worker", None), "worker", None)
        runner = getattr(worker, "model_runner", None)
        return getattr(runner, "model", None)

    def close(self) -> None:
        del self.llm
        torch.cuda.empty_cache()
