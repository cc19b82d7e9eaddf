"""How to install the GPU stack: the one hint every message about it gives.

`scripts/setup.sh gpu` installs the project with its `gpu` extra (vLLM) and holds torch,
vLLM and transformers to `constraints/gpu.txt`, versions that agree with one another (the
extra installed alone may bring a torch that vLLM's compiled ops do not link against).
A message that asks for vLLM, a config comment, the doctor and the docs all say this;
tests/integration/test_gpu_checks.py fails when another hint appears.

Deliberately not here: checking what is installed (`swarm.ops.doctor`, `swarm.config.preflight`).
"""

from __future__ import annotations

GPU_SETUP = "scripts/setup.sh gpu"
GPU_CONSTRAINTS = "constraints/gpu.txt"
GPU_INSTALL_HINT = f"run {GPU_SETUP} (vLLM, torch and transformers as {GPU_CONSTRAINTS} pins them)"
