"""scripts/gpu_smoke.py runs on a GPU only; here: it imports, parses and refuses cleanly."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gpu_smoke.py"


def _load():
    spec = importlib.util.spec_from_file_location("gpu_smoke", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_is_clean():
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == ""
    assert "--tolerance" in done.stdout and "--rounds" in done.stdout


def test_arguments_and_their_defaults():
    smoke = _load()
    args = smoke.parse_args([])
    assert (args.rounds, args.model, args.gpu_memory) == (5, "Qwen/Qwen2.5-0.5B-Instruct", 0.35)
    args = smoke.parse_args(["--rounds", "2", "--tolerance", "0.1", "--model", "some/model"])
    assert (args.rounds, args.tolerance, args.model) == (2, 0.1, "some/model")


@pytest.mark.parametrize("bad", [["--rounds", "0"], ["--gpu-memory", "1.5"], ["--lr", "x"]])
def test_a_bad_argument_is_one_line_and_exit_2(bad, capsys):
    with pytest.raises(SystemExit) as stop:
        _load().parse_args(bad)
    assert stop.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal without a GPU")
def test_without_a_gpu_it_says_so_and_exits_2(capsys):
    assert _load().main([]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: gpu_smoke.py needs a CUDA GPU; none is visible here"
    )


def test_the_same_steps_run_on_a_cpu_with_the_transformers_generator(capsys):
    """A dry run: two rounds of a shipped testbed model, the checks of a GPU run included."""
    model = Path(__file__).resolve().parents[2] / "models" / "swarm-gap-0"
    argv = ["--generator", "transformers", "--tasks", "skills", "--device", "cpu"]
    argv += ["--model", str(model), "--rounds", "2", "--questions", "4", "--completions", "4"]
    assert _load().main(argv + ["--lr", "1e-4"]) == 0
    out = capsys.readouterr().out
    assert out.count("generator vs trainer log-prob") == 2
    assert "weights changed: 100.0% of elements" in out and out.rstrip().endswith("OK")


def test_cpu_needs_the_transformers_generator(capsys):
    with pytest.raises(SystemExit) as stop:
        _load().parse_args(["--device", "cpu"])
    assert stop.value.code == 2 and "--generator transformers" in capsys.readouterr().err
