"""Checkpoints: round trip, atomic replacement, pruning, clear errors."""

import json
import random

import pytest
import torch

from swarm.core.errors import CheckpointError
from swarm.policy.checkpoint import (
    CheckpointState,
    latest_checkpoint,
    list_checkpoints,
    load_checkpoint,
    read_state,
    save_checkpoint,
)


class Tied(torch.nn.Module):
    _tied_weights_keys = {"head.weight": "embed.weight"}

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(10, 4)
        self.head = torch.nn.Linear(4, 10, bias=False)
        self.head.weight = self.embed.weight


def _state(v, r):
    return CheckpointState(policy_version=v, round=r, model_name="m", base_hash="h")


def test_round_trip_restores_weights_optimizer_and_rng(tmp_path):
    torch.manual_seed(0)
    model = Tied()
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model.embed.weight.sum().backward()
    opt.step()
    random.seed(7)
    path = save_checkpoint(tmp_path, model, opt, _state(3, 5))
    expected_random, expected_torch = random.random(), torch.rand(3)
    other = Tied()
    other_opt = torch.optim.AdamW(other.parameters(), lr=0.1)
    state = load_checkpoint(path, other, other_opt)
    assert state == _state(3, 5)
    assert torch.equal(other.embed.weight, model.embed.weight)
    assert other.head.weight.data_ptr() == other.embed.weight.data_ptr()  # still tied
    assert other_opt.state_dict()["state"][0]["step"] == opt.state_dict()["state"][0]["step"]
    assert random.random() == expected_random and torch.equal(torch.rand(3), expected_torch)


def test_latest_pruning_and_stale_temporaries(tmp_path):
    model = Tied()
    (tmp_path / ".tmp-crashed").mkdir()
    for v in range(1, 6):
        save_checkpoint(tmp_path, model, None, _state(v, v * 2), keep=2)
    assert [p.name for p in list_checkpoints(tmp_path)] == ["v000004-r000008", "v000005-r000010"]
    assert latest_checkpoint(tmp_path).name == "v000005-r000010"
    assert not (tmp_path / ".tmp-crashed").exists()


def test_incomplete_checkpoint_is_ignored_and_corrupt_one_is_an_error(tmp_path):
    model = Tied()
    good = save_checkpoint(tmp_path, model, None, _state(1, 1))
    (tmp_path / "v000009-r000009").mkdir()  # no state.json: never completed
    assert latest_checkpoint(tmp_path) == good
    (good / "state.json").write_text(json.dumps({"format": 99}))
    with pytest.raises(CheckpointError, match="unknown checkpoint format"):
        read_state(good)
    (good / "state.json").write_text("{not json")
    with pytest.raises(CheckpointError):
        load_checkpoint(good, model)


def test_wrong_architecture_is_a_checkpoint_error(tmp_path):
    path = save_checkpoint(tmp_path, Tied(), None, _state(1, 1))
    with pytest.raises(CheckpointError):
        load_checkpoint(path, torch.nn.Linear(3, 3))


class Mixed(torch.nn.Module):
    """Weights and buffers of every kind a checkpoint may hold."""

    def __init__(self):
        super().__init__()
        self.low = torch.nn.Parameter(torch.randn(3, 5).to(torch.bfloat16))
        self.full = torch.nn.Parameter(torch.randn(7))
        self.register_buffer("steps", torch.arange(4, dtype=torch.int64))
        self.register_buffer("mask", torch.tensor([True, False, True]))
        self.register_buffer("scalar", torch.tensor(2.5, dtype=torch.float64))
        self.register_buffer("empty", torch.zeros(0, 3))


def test_weights_are_written_in_their_own_dtypes_as_safetensors_reads_them(tmp_path):
    from safetensors.torch import load_file

    torch.manual_seed(1)
    model = Mixed()
    path = save_checkpoint(tmp_path, model, None, _state(1, 1))
    read = load_file(path / "model.safetensors")
    assert set(read) == set(model.state_dict())
    for name, tensor in model.state_dict().items():
        assert read[name].dtype == tensor.dtype and torch.equal(read[name], tensor), name
    again = Mixed()
    load_checkpoint(path, again, restore_rng=False)
    assert all(torch.equal(t, read[n]) for n, t in again.state_dict().items())


# A checkpoint of 256 MB of weights: written from the tensors' own memory (safetensors 0.8
# serializes from pointers), the peak barely moves; a writer that made bytes of every
# weight first would add 256 MB.
CHECKPOINT_PEAK = """
import resource, sys, torch
from pathlib import Path
from swarm.policy.checkpoint import CheckpointState, save_checkpoint
model = torch.nn.ParameterList([torch.nn.Parameter(torch.rand(4 << 20)) for _ in range(16)])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
save_checkpoint(Path(sys.argv[1]), model, None, CheckpointState(1, 1, "m", "h"))
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024)
"""


def test_writing_a_checkpoint_makes_no_copy_of_the_weights(tmp_path):
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", CHECKPOINT_PEAK, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    before, after = map(int, done.stdout.split())
    assert after - before < 64, (before, after)  # MB; a full copy is 256
