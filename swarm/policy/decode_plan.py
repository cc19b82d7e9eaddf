"""How the continuous backend decodes on this machine: in which precision, with which
attention, with CUDA graphs or not. Pure functions of what the machine has (the caller
probes it), so every choice is tested on a CPU.

- **Precision**: a trainer keeps fp32 master weights. On CUDA with bf16, generation runs on
  a bf16 copy of them, refreshed at each call (2 bytes a weight held, one cast-copy of the
  weights a call); elsewhere on the module itself, in its own dtype (fp32 on a CPU).
- **Attention**: "paged" (`swarm.policy.paged`: each sequence reads its own pages, so a
  decode step costs sequences x the longest context) unless transformers' own continuous
  batching can run flash attention: CUDA, a 16-bit module and the flash-attn package
  (`flash_attn` or `flash_attn_interface`). Its other paths (sdpa, eager) attend every
  query to the keys of every sequence of the step through a dense mask; "library" asks for
  them anyway (the benchmark's comparison).
- **CUDA graphs**: transformers captures them only where no attention mask is needed, i.e.
  on its flash paths; on, there. The paged path runs eagerly (its shapes change each step).
- **Flash guard**: transformers 5.17 to 5.19 switch continuous batching to flash attention
  whenever a flash kernel is importable, without looking at the dtype; the kernels refuse
  fp32, so every request fails. 5.25 checks the dtype (versions in between unread: treated
  as not checking). Where that would happen the module is pinned to "paged|sdpa" for the
  call, which those versions never switch away from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

HALF = ("bfloat16", "float16")
FLASH_DTYPE_CHECKED = (5, 25)  # the first transformers read that checks before switching
ATTENTIONS = ("auto", "paged", "library")


def version_tuple(version: str) -> tuple[int, int]:
    """(major, minor) of a version string such as "5.17.0" or "5.25.0.dev0"."""
    found = re.match(r"(\d+)\.(\d+)", version)
    if not found:
        raise ValueError(f"not a version: {version!r}")
    return int(found.group(1)), int(found.group(2))


def generation_dtype(device_type: str, module_dtype: str, bf16_supported: bool) -> str:
    """The dtype generation runs in: bf16 for an fp32 module on a CUDA card with bf16, else
    the module's own."""
    if device_type == "cuda" and module_dtype == "float32" and bf16_supported:
        return "bfloat16"
    return module_dtype


def flash_attention_fails(transformers_version: str, dtype: str, flash_importable: bool) -> bool:
    """Whether transformers' continuous batching would switch a `dtype` module to a flash
    kernel that refuses it: a flash kernel importable, a non-16-bit dtype, and a version
    that switches without checking the dtype (before 5.25)."""
    old = version_tuple(transformers_version) < FLASH_DTYPE_CHECKED
    return flash_importable and dtype not in HALF and old


@dataclass(frozen=True)
class DecodePlan:
    """What a continuous-backend call runs."""

    dtype: str  # the precision generation runs in
    copy: bool  # on a copy of the weights in `dtype` (the module holds another dtype)
    attention: str  # "paged" (ours), "flash" or "sdpa" (transformers' continuous batching)
    cuda_graphs: bool  # transformers' CUDA graphs (its flash paths only)
    pin_sdpa: bool  # set "paged|sdpa" for the call, so transformers cannot switch to flash


def decode_plan(
    device_type: str,
    module_dtype: str,
    transformers_version: str,
    bf16_supported: bool = False,
    flash_package: bool = False,
    flash_importable: bool = False,
    attention: str = "auto",
) -> DecodePlan:
    """The plan for a module of `module_dtype` on `device_type`. `flash_package`: the
    flash-attn package (FA2 or FA3) is installed; `flash_importable`: transformers would find
    a flash kernel (the package, or its `kernels` fallback); `attention`: "auto", "paged"
    (always ours) or "library" (always transformers' continuous batching)."""
    if attention not in ATTENTIONS:
        raise ValueError(f"attention must be one of {ATTENTIONS}, not {attention!r}")
    dtype = generation_dtype(device_type, module_dtype, bf16_supported)
    flash = device_type == "cuda" and dtype in HALF and flash_package
    if attention == "paged" or (attention == "auto" and not flash):
        return DecodePlan(dtype, dtype != module_dtype, "paged", False, False)
    if flash:
        return DecodePlan(dtype, dtype != module_dtype, "flash", True, False)
    pin = flash_attention_fails(transformers_version, dtype, flash_importable)
    return DecodePlan(dtype, dtype != module_dtype, "sdpa", False, pin)
