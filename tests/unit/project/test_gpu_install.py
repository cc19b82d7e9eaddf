"""The GPU install resolves to the torch that set-up installs (pip's resolver, dry run, PyPI).

`scripts/setup.sh gpu` and the Dockerfile's CUDA variant install torch first, then the project
with the `gpu` extra under constraints/gpu.txt. If the extra's vLLM wanted another torch, the
second install would replace it and set-up would stop. This asks pip what the `gpu` extra
resolves to, exactly as set-up installs it, without installing anything.
"""

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[3]
PYPI = "https://pypi.org/simple"


def _pins() -> dict[str, str]:
    """name -> version of each `name==version` line of constraints/gpu.txt."""
    text = (ROOT / "constraints" / "gpu.txt").read_text()
    return dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)", text, flags=re.M))


def _setup_torch() -> set[str]:
    """The torch versions scripts/setup.sh and the Dockerfile install first."""
    setup = re.findall(r'"torch==([0-9.]+)"', (ROOT / "scripts" / "setup.sh").read_text())
    docker = re.findall(r"ARG TORCH_VERSION=([0-9.]+)", (ROOT / "Dockerfile").read_text())
    return set(setup) | set(docker)


def test_setup_and_constraints_name_one_torch():
    assert _setup_torch() == {_pins()["torch"]}
    assert _pins()["vllm"] in (ROOT / "pyproject.toml").read_text()


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen(f"{PYPI}/vllm/", timeout=10) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_gpu_extra_resolves_to_the_torch_setup_installs(tmp_path):
    """Takes minutes: pip 23 downloads whole wheels (torch, vLLM) to read their metadata."""
    if not _pypi_reachable():
        pytest.skip("PyPI (https://pypi.org/simple) cannot be reached from this machine")
    report = tmp_path / "report.json"
    command = [
        sys.executable, "-m", "pip", "install", "--isolated", "--dry-run", "--ignore-installed",
        "--quiet", "--report", str(report), "--index-url", PYPI,
        "-c", str(ROOT / "constraints" / "gpu.txt"), f"{ROOT}[gpu]",
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    installs = {
        i["metadata"]["name"].lower(): i["metadata"]
        for i in json.loads(report.read_text())["install"]
    }
    pins = _pins()
    assert installs["torch"]["version"] in _setup_torch()
    assert installs["vllm"]["version"] == pins["vllm"]
    assert installs["transformers"]["version"] == pins["transformers"]
    # vLLM's own requirements agree with the pins (not only pip's choice under them).
    needs = {Requirement(r).name.lower(): Requirement(r) for r in installs["vllm"]["requires_dist"]}
    assert needs["torch"].specifier.contains(pins["torch"])
    assert needs["transformers"].specifier.contains(pins["transformers"])
    project = Requirement(
        next(d for d in installs["swarm-node"]["requires_dist"] if d.startswith("transformers"))
    )
    assert project.specifier.contains(pins["transformers"])
