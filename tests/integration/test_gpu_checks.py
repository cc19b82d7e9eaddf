"""The GPU stack as an operator meets it: one install hint everywhere (`scripts/setup.sh gpu`,
which holds vLLM, torch and transformers to constraints/gpu.txt)."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from swarm.core.errors import ConfigError, GeneratorError
from swarm.core.install import GPU_INSTALL_HINT, GPU_SETUP

ROOT = Path(__file__).resolve().parents[2]
# An install hint for the GPU extra or vLLM in any other form: pip on the extra or on vLLM.
OTHER_HINT = re.compile(r"pip install[^\n]*(\[gpu\]|\bvllm\b)", re.IGNORECASE)
SETUP_HINT = re.compile(r"(\S*)setup\.sh gpu\b")


def _project_text_files() -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    suffixes = {".py", ".md", ".toml", ".sh", ".txt", ".yml", ".yaml", ".cfg", ""}
    return [
        ROOT / name
        for name in listed
        if Path(name).suffix in suffixes
        and (ROOT / name).is_file()
        and "results/" not in name
        and ROOT / name != Path(__file__)  # its own examples of other hints
    ]


def test_every_gpu_install_hint_is_the_setup_script():
    others, setups = [], 0
    for path in _project_text_files():
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if OTHER_HINT.search(line):
                others.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
            for match in SETUP_HINT.finditer(line):
                setups += 1
                if not match.group(0).endswith(GPU_SETUP):  # the script, named from the root
                    others.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert others == [], "another install hint for the GPU stack:\n" + "\n".join(others)
    assert setups >= 3  # the presets and the README at least give it


def test_the_check_is_not_blind():
    assert OTHER_HINT.search("needs `pip install 'swarm-node[gpu]'`")
    assert OTHER_HINT.search("run pip install vllm==0.32.0")
    assert not OTHER_HINT.search("pip install tensorboard")


def test_asking_for_vllm_without_it_gives_the_hint(tmp_path, monkeypatch):
    from swarm.config import build_config
    from swarm.config.preflight import check_device

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, as where it is absent
    monkeypatch.setattr("importlib.util.find_spec", lambda name, *a: None)
    config = build_config({"generation": {"backend": "vllm"}}, "test")
    with pytest.raises(ConfigError) as preflight:
        check_device(config)
    assert GPU_INSTALL_HINT in str(preflight.value)

    import torch

    from swarm.policy import vllm_generator

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setenv(vllm_generator.MULTIPROCESSING, "1")
    with pytest.raises(GeneratorError) as generator:
        vllm_generator.VLLMGenerator(policy=None)
    assert str(generator.value) == f"vllm is not installed: {GPU_INSTALL_HINT}"


# ---------------------------------------------------------------------------------------------
# doctor: CUDA, the torch build, vLLM's import and version against the pins


def _doctor(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "swarm.cli", "doctor", "--gpu", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def test_doctor_on_this_machine_reads_the_real_stack():
    """Here: a CPU build of torch, no CUDA, no vLLM (checked, so the test says what it ran on)."""
    import importlib.util

    import torch

    if torch.cuda.is_available() or importlib.util.find_spec("vllm") is not None:
        pytest.skip("this test describes a machine without CUDA and vLLM")
    result = _doctor()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"ok       torch: torch {torch.__version__}, CPU build"
    assert lines[1].startswith("ok       cuda: no CUDA: this torch is a CPU build; the node runs")
    assert lines[2].startswith("ok       vllm: not installed") and GPU_SETUP in lines[2]
    assert lines[-1] == "healthy"
    wants = _doctor("--set", "generation.backend=vllm", "--json")
    assert wants.returncode == 1
    findings = {f["check"]: f for f in json.loads(wants.stdout)["findings"]}
    assert findings["cuda"]["level"] == findings["vllm"]["level"] == "problem"
    assert findings["vllm"]["message"] == (
        "vLLM is not installed and generation.backend = 'vllm' needs it: "
        f"{GPU_INSTALL_HINT}, or use generation.backend = 'transformers'"
    )


def test_the_pins_come_from_the_constraints_else_from_the_gpu_extra(tmp_path):
    from swarm.ops.gpu_stack import gpu_pins

    pins, source = gpu_pins()
    assert source == "constraints/gpu.txt" and set(pins) == {"torch", "vllm", "transformers"}
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'gpu = ["vllm=={pins["vllm"]}"]' in pyproject  # the extra agrees with the file
    installed, source = gpu_pins(tmp_path / "no-such-file.txt")
    assert source == "the gpu extra" and installed == {"vllm": pins["vllm"]}
    own = tmp_path / "gpu.txt"
    own.write_text("# a comment\ntorch==9.9.9  # why\nvllm == 1.2.3\nrequests\n")
    assert gpu_pins(own)[0] == {"torch": "9.9.9", "vllm": "1.2.3"}


PINS = {"torch": "2.13.0", "vllm": "0.32.0", "transformers": "5.19.0"}


def _info(**changes):
    from swarm.ops.gpu_stack import StackInfo

    base = StackInfo(
        torch="2.13.0+cu130",
        torch_cuda="13.0",
        cuda_available=True,
        devices=("NVIDIA H100 80GB HBM3",),
        vllm="0.32.0",
        vllm_import_error="",
        transformers="5.19.0",
    )
    return dataclasses.replace(base, **changes)


def _levels(info, vllm: bool = True, cuda: bool = True) -> dict[str, tuple[str, str]]:
    from swarm.ops.gpu_stack import GpuNeeds, stack_findings

    found = stack_findings(info, GpuNeeds(cuda=cuda or vllm, vllm=vllm), PINS)
    return {f.check: (f.level, f.message) for f in found}


def test_a_pinned_gpu_stack_is_healthy():
    found = _levels(_info())
    assert {check: level for check, (level, _) in found.items()} == {
        "torch": "ok",
        "cuda": "ok",
        "vllm": "ok",
    }
    assert found["torch"][1] == "torch 2.13.0+cu130, CUDA 13.0 build"
    assert found["cuda"][1] == "CUDA available: 1 device(s) (NVIDIA H100 80GB HBM3)"
    assert found["vllm"][1] == "vLLM 0.32.0 imports, the version constraints/gpu.txt pins"


@pytest.mark.parametrize(
    "changes, check, level, says",
    [
        ({"vllm": "0.31.0"}, "vllm", "problem", "vLLM 0.31.0, but constraints/gpu.txt pins 0.32.0"),
        (
            {"vllm_import_error": "ImportError: libcudart.so.13: cannot open shared object file"},
            "vllm",
            "problem",
            "vLLM 0.32.0 does not import (ImportError: libcudart.so.13",
        ),
        (
            {"torch": "2.14.0+cu130"},
            "torch",
            "problem",
            "torch 2.14.0+cu130, CUDA 13.0 build, but vLLM needs torch 2.13.0",
        ),
        ({"transformers": "5.24.0"}, "transformers", "warning", "transformers 5.24.0 beside"),
        (
            {"cuda_available": False, "devices": ()},
            "cuda",
            "problem",
            "torch is built for CUDA 13.0 but sees no GPU, and the config asks for CUDA",
        ),
        (
            {"torch": "2.13.0+cpu", "torch_cuda": None, "cuda_available": False, "devices": ()},
            "cuda",
            "problem",
            "no CUDA: this torch is a CPU build, and the config asks for CUDA",
        ),
    ],
)
def test_each_broken_part_is_found_and_says_what_to_run(changes, check, level, says):
    found = _levels(_info(**changes))
    assert found[check][0] == level and says in found[check][1], found
    fix = "check the driver (nvidia-smi) and CUDA_VISIBLE_DEVICES"
    fix = fix if "sees no GPU" in says else GPU_INSTALL_HINT
    assert found[check][1].endswith(fix) or f"{fix}," in found[check][1], found[check]


def test_a_node_that_does_not_ask_for_vllm_is_only_warned():
    found = _levels(_info(vllm="0.31.0", cuda_available=False, devices=()), vllm=False, cuda=False)
    assert found["vllm"][0] == "warning" and found["cuda"][0] == "ok"


def test_probe_reads_an_installed_vllm_that_does_not_import(tmp_path, monkeypatch):
    """A stand-in vLLM distribution (metadata and a module whose import fails the way a
    missing CUDA runtime makes it fail): `probe` reports its version and the import error."""
    from swarm.ops.gpu_stack import GpuNeeds, gpu_pins, probe, stack_findings

    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text(
        "raise ImportError('libcudart.so.13: cannot open shared object file')\n"
    )
    (site / "vllm-0.31.0.dist-info").mkdir()
    (site / "vllm-0.31.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: vllm\nVersion: 0.31.0\n"
    )
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.setenv("PYTHONPATH", str(site))  # the child process that imports it
    info = probe()
    assert info.vllm == "0.31.0"
    assert info.vllm_import_error == "ImportError: libcudart.so.13: cannot open shared object file"
    found = [
        f for f in stack_findings(info, GpuNeeds(True, True), *gpu_pins()) if f.check == "vllm"
    ]
    assert [(f.level, f.message.split(" (")[0].split(":")[0]) for f in found] == [
        ("problem", "vLLM 0.31.0 does not import"),
        ("problem", "vLLM 0.31.0, but constraints/gpu.txt pins 0.32.0"),
    ]
    result = _doctor(
        "--set", "generation.backend=vllm", env={**os.environ, "PYTHONPATH": str(site)}
    )
    assert result.returncode == 1 and "vLLM 0.31.0, but constraints/gpu.txt pins 0.32.0" in (
        result.stdout
    )
