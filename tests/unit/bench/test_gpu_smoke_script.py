"""The GPU smoke test (`scripts/gpu_smoke.py`, `lab.gpu_smoke`) runs on a GPU only;
here: the script parses and refuses cleanly, and the same steps run on a CPU."""

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lab.gpu_smoke import SmokeOptions, run

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "gpu_smoke.py"


def _script(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv], capture_output=True, text=True, timeout=120
    )


def test_help_is_clean():
    done = _script("--help")
    assert done.returncode == 0 and done.stderr == ""
    assert "--tolerance" in done.stdout and "--rounds" in done.stdout


def test_the_defaults():
    options = SmokeOptions()
    assert (options.rounds, options.model, options.gpu_memory) == (
        5,
        "Qwen/Qwen2.5-0.5B-Instruct",
        0.35,
    )
    assert (options.generator, options.device, options.tolerance) == ("vllm", "cuda", 0.05)


@pytest.mark.parametrize(
    "bad, says",
    [
        (["--rounds", "0"], "must be at least 1"),
        (["--gpu-memory", "1.5"], "--gpu-memory must lie in"),
        (["--lr", "x"], "invalid float value"),
        (["--device", "cpu"], "--generator transformers"),
    ],
)
def test_a_bad_argument_is_one_line_and_exit_2(bad, says):
    done = _script(*bad)
    assert done.returncode == 2 and done.stdout == ""
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("gpu_smoke.py: error:") and says in last


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_without_a_gpu_it_says_so_and_exits_2():
    done = _script()
    assert done.returncode == 2
    assert done.stderr.strip() == "error: gpu_smoke.py needs a CUDA GPU; none is visible here"


def test_the_same_steps_run_on_a_cpu_with_the_transformers_generator(capsys):
    """A dry run: two rounds of a shipped testbed model, the checks of a GPU run included."""
    options = SmokeOptions(
        model=str(ROOT / "models" / "swarm-gap-0"),
        rounds=2,
        questions=4,
        completions=4,
        lr=1e-4,
        generator="transformers",
        tasks="skills",
        device="cpu",
    )
    assert run(options) == 0
    out = capsys.readouterr().out
    assert out.count("generator vs trainer log-prob") == 2
    assert "weights changed: 100.0% of elements" in out and out.rstrip().endswith("OK")
