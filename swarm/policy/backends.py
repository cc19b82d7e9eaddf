"""Which generator backend a node runs: `generation.backend`, "auto" resolved by the machine.

- `transformers`: batched `generate` over the trainer's own module (CPU or GPU).
- `continuous`: transformers' continuous batching (a paged cache, requests joining and
  leaving the batch as they finish) over the trainer's own module (`swarm.policy.continuous`).
- `vllm`: a vLLM engine with its own copy of the weights (`swarm.policy.vllm_generator`).

"auto" is `transformers` on a CPU; on CUDA, `vllm` where it is installed, else `continuous`.
Pure: the caller says what the machine has.
"""

from __future__ import annotations

from enum import StrEnum


class Backend(StrEnum):
    """A generator backend."""

    TRANSFORMERS = "transformers"
    CONTINUOUS = "continuous"
    VLLM = "vllm"


AUTO = "auto"
CHOICES = (AUTO, *(b.value for b in Backend))


def choose_backend(requested: str, device_type: str, vllm_installed: bool) -> Backend:
    """The backend to run for `requested` ("auto" or a `Backend` value) on `device_type`."""
    if requested != AUTO:
        return Backend(requested)
    if device_type != "cuda":
        return Backend.TRANSFORMERS
    return Backend.VLLM if vllm_installed else Backend.CONTINUOUS


def logprobs_can_differ(backend: Backend, trainer_dtype_differs: bool) -> bool:
    """Whether the generator's log-probs of a completion can differ from the trainer's.

    vLLM runs its own kernels on its own copy of the weights; continuous batching runs
    paged-attention kernels; and any backend differs where the trainer computes in another
    precision than the generator (bf16 autocast over fp32 master weights). Only plain
    `generate` over the trainer's module in the trainer's own precision computes the same.
    """
    return backend is not Backend.TRANSFORMERS or trainer_dtype_differs
