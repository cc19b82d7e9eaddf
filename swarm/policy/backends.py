"""Which generator backend a node runs: `generation.backend`, "auto" resolved by the machine.

- `transformers`: batched `generate` over the trainer's own module (CPU or GPU).
- `continuous`: continuous batching (a paged cache, requests joining and leaving the batch
  as they finish) over the trainer's own weights (`swarm.policy.continuous`).
- `vllm`: a vLLM engine with its own copy of the weights (`swarm.policy.vllm_generator`).

"auto" is `transformers` on a CPU; on CUDA, `vllm` where it is installed, else `continuous`
where the installed transformers has continuous batching (5.x), else `transformers`. Pure:
the caller says what the machine has.
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


def choose_backend(
    requested: str, device_type: str, vllm_installed: bool, continuous_available: bool = True
) -> Backend:
    """The backend to run for `requested` ("auto" or a `Backend` value) on `device_type`."""
    if requested != AUTO:
        return Backend(requested)
    if device_type != "cuda":
        return Backend.TRANSFORMERS
    if vllm_installed:
        return Backend.VLLM
    return Backend.CONTINUOUS if continuous_available else Backend.TRANSFORMERS


def continuous_available() -> bool:
    """Whether the installed transformers has continuous batching (`ContinuousBatchingConfig`
    and `generate_batch`, transformers 5.x)."""
    try:
        from transformers import GenerationMixin
        from transformers.generation.configuration_utils import (  # noqa: F401 - probe
            ContinuousBatchingConfig,
        )
    except ImportError:
        return False
    return hasattr(GenerationMixin, "generate_batch")


def logprobs_can_differ(backend: Backend, trainer_dtype_differs: bool) -> bool:
    """Whether the generator's log-probs of a completion can differ from the trainer's.

    vLLM runs its own kernels on its own copy of the weights; continuous batching runs
    paged-attention kernels; and any backend differs where the trainer computes in another
    precision than the generator (bf16 autocast over fp32 master weights). Only plain
    `generate` over the trainer's module in the trainer's own precision computes the same.
    """
    return backend is not Backend.TRANSFORMERS or trainer_dtype_differs
