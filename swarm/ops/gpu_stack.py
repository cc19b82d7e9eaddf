"""`swarm-node doctor`'s GPU checks: CUDA, the torch build, vLLM's import and version.

What a GPU node needs agrees only at certain versions: `constraints/gpu.txt` pins torch,
vLLM and transformers together (the pyproject's `gpu` extra pins vLLM alone, and is what an
installed wheel knows when the constraints file is not beside it). `probe` reads this
machine: torch's version and build (CPU, or the CUDA version it was built for), whether
CUDA is available and on which devices, the installed vLLM and transformers versions, and
whether vLLM imports (in a child process with a deadline: a broken CUDA library can hang or
kill the importer). `stack_findings` turns that into the doctor's findings, each one that is
not ok ending with what to run: problems only for what the config asks for (a CUDA device,
the vLLM backend), so a CPU node without vLLM stays healthy.

Deliberately not here: installing anything (the hint is `swarm.core.install`).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from swarm.core.install import GPU_CONSTRAINTS, GPU_INSTALL_HINT
from swarm.ops.doctor import Finding, ok, problem, warning

CONSTRAINTS = Path(__file__).resolve().parents[2] / GPU_CONSTRAINTS  # in a source checkout
IMPORT_TIMEOUT_S = 180.0  # importing vLLM loads torch and its CUDA libraries
PINNED = ("torch", "vllm", "transformers")
_PIN = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*==\s*([^\s;#]+)")
NO_VLLM_NEEDED = "generation.backend = 'transformers' needs none"


@dataclass(frozen=True)
class StackInfo:
    """What this machine has: versions are None where a package is not installed."""

    torch: str | None
    torch_cuda: str | None  # the CUDA version torch was built for; None: a CPU build
    cuda_available: bool
    devices: tuple[str, ...]  # the CUDA devices' names
    vllm: str | None
    vllm_import_error: str  # "" when vLLM imports (or is not installed)
    transformers: str | None


@dataclass(frozen=True)
class GpuNeeds:
    """What the config asks of the GPU stack."""

    cuda: bool  # policy.device is a CUDA device, or the vLLM backend (which needs one)
    vllm: bool  # generation.backend = 'vllm'

    @classmethod
    def from_config(cls, config) -> GpuNeeds:
        if config.node.role == "observer":  # loads no model
            return cls(False, False)
        vllm = config.generation.backend == "vllm"
        return cls(config.policy.device.startswith("cuda") or vllm, vllm)


def gpu_pins(constraints: Path = CONSTRAINTS) -> tuple[dict[str, str], str]:
    """The pinned versions and where they come from: `constraints/gpu.txt` in a source
    checkout, else the installed package's `gpu` extra (vLLM only)."""
    if constraints.is_file():
        pins = {}
        for line in constraints.read_text().splitlines():
            match = _PIN.match(line.split("#", 1)[0])
            if match:
                pins[match.group(1).lower()] = match.group(2)
        return pins, GPU_CONSTRAINTS
    pins = {}
    try:
        requires = importlib.metadata.requires("swarm-node") or []
    except importlib.metadata.PackageNotFoundError:
        requires = []
    for requirement in requires:
        name_version, _, marker = requirement.partition(";")
        match = _PIN.match(name_version)
        if match and re.search(r"""extra\s*==\s*["']gpu["']""", marker):
            pins[match.group(1).lower()] = match.group(2)
    return pins, "the gpu extra"


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def vllm_import_error(timeout: float = IMPORT_TIMEOUT_S) -> str:
    """Why `import vllm` fails in a fresh interpreter, in one line ("" when it imports)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", "import vllm"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"import vllm did not finish in {timeout:.0f}s"
    except OSError as e:
        return f"cannot start {sys.executable}: {e.strerror or e}"
    if done.returncode == 0:
        return ""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return lines[-1] if lines else f"import vllm exited with code {done.returncode}"


def probe() -> StackInfo:
    """This machine's GPU stack, as the node would meet it."""
    import torch

    available = bool(torch.cuda.is_available())
    devices = (
        tuple(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        if available
        else ()
    )
    vllm = _version("vllm") if importlib.util.find_spec("vllm") is not None else None
    return StackInfo(
        torch=torch.__version__,
        torch_cuda=torch.version.cuda,
        cuda_available=available,
        devices=devices,
        vllm=vllm,
        vllm_import_error=vllm_import_error() if vllm else "",
        transformers=_version("transformers"),
    )


def _release(version: str) -> str:
    """A version without its local part: '2.13.0+cu130' -> '2.13.0'."""
    return version.split("+", 1)[0]


def stack_findings(
    info: StackInfo, needs: GpuNeeds, pins: dict[str, str], source: str = GPU_CONSTRAINTS
) -> list[Finding]:
    """The doctor's findings about the GPU stack (pure: `probe`'s facts in, findings out)."""
    return [
        _torch_finding(info, needs, pins, source),
        _cuda_finding(info, needs),
        *_vllm_findings(info, needs, pins, source),
    ]


def _torch_finding(info: StackInfo, needs: GpuNeeds, pins: dict, source: str) -> Finding:
    if info.torch is None:
        return problem("torch", f"torch is not installed: {GPU_INSTALL_HINT}")
    build = f"CUDA {info.torch_cuda} build" if info.torch_cuda else "CPU build"
    text = f"torch {info.torch}, {build}"
    pin = pins.get("torch")
    if info.vllm and pin and _release(info.torch) != pin:
        level = problem if needs.vllm else warning
        return level("torch", f"{text}, but vLLM needs torch {pin} ({source}): {GPU_INSTALL_HINT}")
    return ok("torch", text)


def _cuda_finding(info: StackInfo, needs: GpuNeeds) -> Finding:
    if info.cuda_available:
        names = ", ".join(sorted(set(info.devices))) or "unnamed"
        return ok("cuda", f"CUDA available: {len(info.devices)} device(s) ({names})")
    asks = "the config asks for CUDA (policy.device or generation.backend = 'vllm')"
    if info.torch_cuda:
        why = f"torch is built for CUDA {info.torch_cuda} but sees no GPU"
        fix = "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"
    else:
        why, fix = "no CUDA: this torch is a CPU build", GPU_INSTALL_HINT
    if needs.cuda:
        return problem("cuda", f"{why}, and {asks}: {fix}")
    return ok("cuda", f"{why}; the node runs on CPU (for a GPU: {fix})")


def _vllm_findings(info: StackInfo, needs: GpuNeeds, pins: dict, source: str) -> list[Finding]:
    pin = pins.get("vllm")
    if info.vllm is None:
        if needs.vllm:
            return [
                problem(
                    "vllm",
                    "vLLM is not installed and generation.backend = 'vllm' needs it: "
                    f"{GPU_INSTALL_HINT}, or use generation.backend = 'transformers'",
                )
            ]
        return [ok("vllm", f"not installed ({NO_VLLM_NEEDED}; for vLLM: {GPU_INSTALL_HINT})")]
    level = problem if needs.vllm else warning
    out = []
    if info.vllm_import_error:
        out.append(
            level(
                "vllm",
                f"vLLM {info.vllm} does not import ({info.vllm_import_error}): {GPU_INSTALL_HINT}",
            )
        )
    if pin and info.vllm != pin:
        out.append(level("vllm", f"vLLM {info.vllm}, but {source} pins {pin}: {GPU_INSTALL_HINT}"))
    wanted = pins.get("transformers")
    if wanted and info.transformers and _release(info.transformers) != wanted:
        out.append(
            warning(
                "transformers",
                f"transformers {info.transformers} beside vLLM, but {source} pins {wanted}: "
                f"{GPU_INSTALL_HINT}",
            )
        )
    if not out:
        pinned = f", the version {source} pins" if pin else ""
        out.append(ok("vllm", f"vLLM {info.vllm} imports{pinned}"))
    return out
