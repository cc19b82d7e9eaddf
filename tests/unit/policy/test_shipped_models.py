"""Testbed models ship with the project, so paired seeds run the same bytes on every machine."""

from __future__ import annotations

import json
import shutil

import pytest

from swarm.core.errors import ModelError
from swarm.policy.skills import GAP_SWARM
from swarm.policy.tiny import (
    TINY_MODELS,
    ensure_tiny_model,
    model_digest,
    shipped_manifest,
    shipped_root,
    tiny_model_key,
)


def test_every_gap_model_ships_for_its_current_recipe_with_its_bytes():
    manifest = shipped_manifest()
    for profile in GAP_SWARM:
        entry = manifest.get(profile.name)
        assert entry, f"{profile.name} is not in models/MANIFEST.json: run scripts/ship_models.py"
        # a changed recipe without a re-shipped model would silently build other bytes
        assert entry["key"] == tiny_model_key(TINY_MODELS[profile.name])
        path = ensure_tiny_model(profile.name, quiet=True)
        assert path == shipped_root() / profile.name  # the shipped copy, never a local build
        assert model_digest(path) == entry["digest"]


def test_a_shipped_copy_that_differs_from_its_manifest_is_refused(tmp_path, monkeypatch):
    name = GAP_SWARM[0].name
    shutil.copytree(shipped_root() / name, tmp_path / name)
    entry = dict(shipped_manifest()[name])
    (tmp_path / "MANIFEST.json").write_text(json.dumps({name: entry}))
    monkeypatch.setenv("SWARM_NODE_MODELS", str(tmp_path))
    assert ensure_tiny_model(name, quiet=True) == tmp_path / name
    weights = tmp_path / name / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1  # one bit of one weight
    weights.write_bytes(bytes(data))
    with pytest.raises(ModelError, match="does not match"):
        ensure_tiny_model(name, quiet=True)


def test_the_digest_covers_weights_and_tokenizer(tmp_path):
    source = shipped_root() / GAP_SWARM[0].name
    shutil.copytree(source, tmp_path / "m")
    before = model_digest(tmp_path / "m")
    tokenizer = tmp_path / "m" / "tokenizer.json"
    tokenizer.write_text(tokenizer.read_text().replace("<pad>", "<pad2>", 1))
    assert model_digest(tmp_path / "m") != before


def test_testbed_model_names_are_built_in_not_hub_names(monkeypatch):
    from swarm.policy.skills import SKILL_SWARM
    from swarm.policy.source import model_problem

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # a hub name would now be refused at once
    for name in (GAP_SWARM[3].name, SKILL_SWARM[0].name, "swarm-tiny-bpe"):
        assert model_problem(name) is None
    assert "no built-in model" in model_problem("swarm-tiny-nope")
