"""The GPU stack as an operator meets it: one install hint everywhere (`scripts/setup.sh gpu`,
which holds vLLM, torch and transformers to constraints/gpu.txt)."""

from __future__ import annotations

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
