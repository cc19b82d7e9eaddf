"""The GPU check's wheelhouse (`scripts/gpu_wheels.py`, `scripts/gpu_check.sh --wheels`).

Everything the check imports beyond torch, transformers and their requirements is in it:
the CPU dry run of the check is run in a fresh process and every distribution it imported
is accounted for, so a missing import fails here, not on the card. Its list is closed under
its own requirements (read for the GPU machine's Python 3.12 on Linux) and pins the versions
the dry run runs. `install` installs the wheelhouse alone (pip, no index, no dependencies)
into its own folder and names each requirement not met, in one line. The slow test runs
`scripts/gpu_check.sh`'s CPU dry run with TRL's arm on a Python that has only torch,
transformers, pandas and pyarrow of this venv, with TRL and the rest from the wheelhouse.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[3]
# the GPU machine's interpreter, for the requirements' markers
CARD = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "extra": "",
}
# Imported by the dry run where installed, required by nothing it runs: each with who tries it.
OPTIONAL = {
    "pillow": "transformers.utils.import_utils",
    "protobuf": "transformers (sentencepiece conversion)",
    "pytz": "pandas",
    "zstandard": "fsspec.compression",
    "requests": "trl.generation.vllm_client",
    "urllib3": "requests",
    "certifi": "requests",
    "charset-normalizer": "requests",
    "idna": "requests",
    "trio": "httpcore (huggingface_hub's HTTP client)",
    "outcome": "trio",
    "sniffio": "trio",
    "sortedcontainers": "trio",
    "attrs": "trio",
}


def _wheels():
    spec = importlib.util.spec_from_file_location("gpu_wheels", ROOT / "scripts" / "gpu_wheels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def requirements(name: str) -> set[str]:
    """What `name`, as installed here, requires on the GPU machine (no extras)."""
    out = set()
    for line in distribution(name).requires or []:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate(CARD):
            out.add(canonicalize_name(requirement.name))
    return out


def closure(names) -> set[str]:
    """`names` and everything they require, as installed here."""
    done: set[str] = set()
    todo = [canonicalize_name(n) for n in names]
    while todo:
        name = todo.pop()
        if name in done:
            continue
        done.add(name)
        try:
            todo += requirements(name)
        except PackageNotFoundError:
            continue  # required on the GPU machine's platform only
    return done


def test_the_wheelhouse_holds_what_the_dry_run_imports_beyond_torch_and_transformers(tmp_path):
    out = tmp_path / "tiny.json"
    run = (
        "import importlib.metadata as md, importlib.util, json, sys\n"
        "spec = importlib.util.spec_from_file_location('gpu_bench', sys.argv[1])\n"
        "bench = importlib.util.module_from_spec(spec); spec.loader.exec_module(bench)\n"
        "assert bench.main(sys.argv[2:]) == 0\n"
        "names = md.packages_distributions()\n"
        "used = {d for m in list(sys.modules) for d in names.get(m.split('.')[0], [])}\n"
        "print('IMPORTED', json.dumps(sorted(used)))\n"
    )
    args = ["--device", "cpu", "--shape", "tiny", "--no-swarm", "--backends", "transformers"]
    script = str(ROOT / "scripts" / "gpu_bench.py")
    done = subprocess.run(
        [sys.executable, "-c", run, script, *args, "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "trl" in {a["backend"] for a in json.loads(out.read_text())["arms"]}
    line = next(x for x in done.stdout.splitlines() if x.startswith("IMPORTED "))
    imported = {canonicalize_name(d) for d in json.loads(line.removeprefix("IMPORTED "))}
    wheels = _wheels()
    listed = {canonicalize_name(n) for n in (*wheels.WHEELS, *wheels.LARGE)}
    machine = closure(["torch", "transformers"])
    assert {"trl", "datasets", "accelerate", "pandas", "pyarrow"} <= imported
    unaccounted = imported - listed - machine - set(OPTIONAL) - {"swarm-node", "swarm-node-lab"}
    assert not unaccounted, f"imported by the dry run, in no wheel list: {sorted(unaccounted)}"


def test_the_wheel_list_is_closed_and_pins_what_the_dry_run_runs():
    wheels = _wheels()
    pins = {canonicalize_name(n): v for n, v in {**wheels.WHEELS, **wheels.LARGE}.items()}
    machine = closure(["torch", "transformers"])
    # torch and transformers bring the rest; fsspec too, but with no bound, and datasets has one
    assert set(pins) & machine <= {"fsspec"}
    for name in pins:
        missing = requirements(name) - set(pins) - machine
        assert not missing, f"{name} requires {sorted(missing)}, in no wheel list"
    installed = {name: distribution(name).version for name in pins}
    differ = {n: f"{installed[n]} here, {pins[n]} pinned" for n in pins if installed[n] != pins[n]}
    assert not differ, f"the dry run here runs other versions than the wheelhouse: {differ}"
    roots = {canonicalize_name(Requirement(r).name) for r in wheels.TRL_ROOTS}
    assert roots <= set(wheels.WHEELS) and "msgspec" in wheels.WHEELS
    assert wheels.unmet(wheels.ROOTS + wheels.TRL_ROOTS, sys.path) == []  # this venv has it all


def _wheel(folder: Path, name: str, version: str, requires=()) -> Path:
    """A minimal pure-Python wheel: one module, its metadata, its record."""
    path = folder / f"{name}-{version}-py3-none-any.whl"
    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
    metadata += "".join(f"Requires-Dist: {r}\n" for r in requires)
    wheel = "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files = {f"{name}.py": "", f"{info}/METADATA": metadata, f"{info}/WHEEL": wheel}
    record = "".join(f"{n},,\n" for n in files) + f"{info}/RECORD,,\n"
    with zipfile.ZipFile(path, "w") as archive:
        for n, text in {**files, f"{info}/RECORD": record}.items():
            archive.writestr(n, text)
    return path


def test_install_takes_the_wheelhouse_alone_and_names_each_requirement_not_met(
    tmp_path, monkeypatch, capsys
):
    wheels = _wheels()
    house, site, machine = tmp_path / "whl", tmp_path / "site", tmp_path / "machine"
    house.mkdir()
    machine.mkdir()
    _wheel(house, "alpha", "1.0", ["beta>=3", "gamma", "delta; python_version < '3'"])
    _wheel(house, "omega", "2.0")
    (machine / "beta-2.0.dist-info").mkdir()  # the machine's own, too old
    (machine / "beta-2.0.dist-info" / "METADATA").write_text("Name: beta\nVersion: 2.0\n")
    monkeypatch.setattr(wheels, "WHEELS", {"alpha": "1.0", "omega": "2.0"})
    monkeypatch.setattr(wheels, "LARGE", {"beta": "3.0"})
    monkeypatch.setattr(wheels, "ROOTS", ["omega"])
    monkeypatch.setattr(wheels, "TRL_ROOTS", ["alpha==1.0"])
    calls = []
    real = subprocess.run

    def recorded(command, *args, **kwargs):
        calls.append(command)
        return real(command, *args, **kwargs)

    monkeypatch.setattr(wheels.subprocess, "run", recorded)
    assert wheels.install(site, house, trl=True, path=[str(machine)]) == 2
    (pip,) = calls
    assert {"--no-index", "--no-deps", "--target"} <= set(pip) and str(site) in pip
    assert (site / "alpha.py").is_file() and (site / "omega.py").is_file()
    printed = capsys.readouterr().out.splitlines()
    assert printed[1:3] == [
        "error: alpha 1.0 needs beta>=3: 2.0 is installed",
        "error: alpha 1.0 needs gamma: not installed",
    ]
    assert "--wheels" in printed[3]
    calls.clear()
    assert wheels.install(site, house, trl=False, path=[str(machine)]) == 0


@pytest.mark.slow
def test_gpu_check_runs_the_dry_run_with_trl_from_the_wheelhouse_alone(tmp_path):
    """gpu_check.sh on a Python of this venv that sees only torch, transformers, pandas and
    pyarrow (and what they require): the wheelhouse, downloaded for this Python, brings the
    rest. Needs PyPI for the download (about 3 MB)."""
    copy = tmp_path / "checkout"
    for part in ("scripts/gpu_check.sh", "scripts/gpu_bench.py", "scripts/gpu_wheels.py"):
        (copy / part).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(ROOT / part, copy / part)
    shutil.copytree(ROOT / "swarm", copy / "swarm", ignore=shutil.ignore_patterns("__pycache__"))
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    got = subprocess.run(
        [sys.executable, str(copy / "scripts" / "gpu_wheels.py"), "download"]
        + ["--python-version", version, "--dest", str(copy / ".whl")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if got.returncode != 0:
        pytest.skip(f"no PyPI for the wheelhouse: {got.stdout[-300:]}")
    # the machine: a folder of links to this venv's torch, transformers, pandas, pyarrow, pip
    machine = (
        tmp_path / "machine" / "site-packages"
    )  # as an image's: dill pickles by reference there
    machine.mkdir(parents=True)
    keep = closure(["torch", "transformers", "pandas", "pyarrow", "pip"])
    assert not keep & {"trl", "datasets", "accelerate", "msgspec", "dill", "multiprocess"}
    for name in keep:
        try:
            files = distribution(name).files or []
        except PackageNotFoundError:
            continue
        for file in files:
            top = file.parts[0]
            source = Path(file.locate()).parents[len(file.parts) - 1] / top
            if top != ".." and source.exists() and not (machine / top).exists():
                (machine / top).symlink_to(source)
    bin_ = tmp_path / "bin"
    bin_.mkdir()
    python = bin_ / "python3"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    python.chmod(0o755)
    env = {
        "PATH": f"{bin_}:/usr/bin:/bin",
        "PYTHONPATH": str(machine),
        "GPU_CHECK_DIR": str(tmp_path / "gpu-check"),
        "HOME": str(tmp_path),
        "HF_HUB_OFFLINE": "1",
        **{k: v for k, v in os.environ.items() if k.startswith("SWARM_NODE_")},
    }
    out = tmp_path / "tiny.json"
    done = subprocess.run(
        ["bash", str(copy / "scripts" / "gpu_check.sh"), "--device", "cpu", "--shape", "tiny"]
        + ["--no-swarm", "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "installed 9 wheels" in done.stdout
    result = json.loads(out.read_text())
    arms = {a["backend"] for a in result["arms"]}
    assert {"transformers", "continuous", "trl"} <= arms, result["skipped"]
    assert result["trl"] == _wheels().WHEELS["trl"]
