"""The SAPO experiment's GPU path: nodes on CUDA with vLLM generation, checkpointed. Skipped without CUDA."""

import json

import pytest

from lab.sapo_cli import main

pytestmark = pytest.mark.gpu


def test_a_unit_runs_on_cuda_with_vllm_and_shares(tmp_path, tiny_model_path):
    pytest.importorskip("vllm")
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
    assert main(args) == 0
    unit = json.loads((tmp_path / "paper-tiny" / "units" / "2-2_s0_lr0.0001.json").read_text())
    assert unit["rounds"] == 3 and sum(unit["shared_groups"]) > 0
