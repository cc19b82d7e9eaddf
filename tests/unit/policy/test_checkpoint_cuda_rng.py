"""A checkpoint keeps each GPU's random generator state when there is one (CPU-faked CUDA)."""

import torch

from swarm.policy.checkpoint import CheckpointState, load_checkpoint, save_checkpoint


class FakeCuda:
    """torch.cuda's generator state functions for two devices, held on the CPU."""

    def __init__(self, states):
        self.states = states

    def get_rng_state_all(self):
        return [s.clone() for s in self.states]

    def set_rng_state_all(self, states):
        self.states = [s.clone() for s in states]


def test_cuda_generator_state_round_trips(tmp_path, monkeypatch):
    cuda = FakeCuda([torch.arange(4, dtype=torch.uint8), torch.arange(4, 8, dtype=torch.uint8)])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_rng_state_all", cuda.get_rng_state_all)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", cuda.set_rng_state_all)
    model = torch.nn.Linear(2, 2)
    state = CheckpointState(policy_version=1, round=1, model_name="m", base_hash="h")
    path = save_checkpoint(tmp_path, model, None, state)
    saved = [s.clone() for s in cuda.states]
    cuda.states = [torch.zeros(4, dtype=torch.uint8)] * 2  # sampling moved the generators on
    load_checkpoint(path, torch.nn.Linear(2, 2))
    assert all(torch.equal(a, b) for a, b in zip(cuda.states, saved, strict=True))
