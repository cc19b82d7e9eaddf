"""The SAPO experiment's GPU path: nodes on CUDA with vLLM generation, checkpointed. Skipped without CUDA."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def _experiment():
    spec = importlib.util.spec_from_file_location("sapo_experiment", SCRIPTS / "sapo_experiment.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_unit_runs_on_cuda_with_vllm_and_shares(tmp_path, tiny_model_path):
    pytest.importorskip("vllm")
    sys.path.insert(0, str(SCRIPTS))
    try:
        args = [
            "run",
            "--testbed",
            "tiny",
            "--device",
            "cuda",
            "--backend",
            "vllm",
            "--nodes",
            "2",
            "--arms",
            "2/2",
            "--seeds",
            "0",
            "--rounds",
            "3",
            "--completions",
            "4",
            "--max-new-tokens",
            "16",
            "--eval-size",
            "8",
            "--checkpoint-every",
            "1",
            "--results",
            str(tmp_path),
        ]
        assert _experiment().main(args) == 0
    finally:
        sys.path.remove(str(SCRIPTS))
    unit = json.loads((tmp_path / "paper-tiny" / "units" / "2-2_s0_lr0.0001.json").read_text())
    assert unit["rounds"] == 3 and sum(unit["shared_groups"]) > 0
