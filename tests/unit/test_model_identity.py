"""A model is named to peers by content: name@revision, folder@hash, never a local path."""

from __future__ import annotations

import json

import huggingface_hub.constants

from swarm.policy.source import IDENTITY_HASH_CHARS, content_digest, model_identity

BASE = "ab" * 32


def _folder(path, config: dict):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_a_built_in_model_keeps_its_name():
    assert model_identity("swarm-tiny", BASE) == "swarm-tiny"


def test_a_local_folder_is_its_name_and_a_hash_of_config_and_weights(tmp_path):
    folder = _folder(tmp_path / "deep" / "private" / "qwen-local", {"model_type": "llama"})
    identity = model_identity(str(folder), BASE)
    name, _, digest = identity.partition("@")
    assert name == "qwen-local" and len(digest) == IDENTITY_HASH_CHARS
    assert str(tmp_path) not in identity and "/" not in identity


def test_copies_of_one_model_agree_wherever_they_are(tmp_path, monkeypatch):
    config = {"model_type": "llama", "hidden_size": 8}
    here = _folder(tmp_path / "a" / "model", {**config, "transformers_version": "4.50.0"})
    there = _folder(
        tmp_path / "b" / "model",
        {**config, "transformers_version": "5.0.0", "_name_or_path": "/home/someone/model"},
    )
    assert model_identity(str(here), BASE) == model_identity(str(there), BASE)
    monkeypatch.chdir(tmp_path / "a")
    assert model_identity("model", BASE) == model_identity(str(here), BASE)  # relative path


def test_other_weights_or_config_are_another_model(tmp_path):
    folder = _folder(tmp_path / "model", {"model_type": "llama", "hidden_size": 8})
    other = _folder(tmp_path / "x" / "model", {"model_type": "llama", "hidden_size": 16})
    assert content_digest(folder, BASE) != content_digest(folder, "cd" * 32)
    assert model_identity(str(folder), BASE) != model_identity(str(other), BASE)


def test_a_hub_model_is_its_name_at_the_cached_revision(tmp_path, monkeypatch):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--org--tiny-chat"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    _folder(repo / "snapshots" / commit, {"model_type": "llama"})
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    assert model_identity("org/tiny-chat", BASE) == f"org/tiny-chat@{commit}"
    # not cached (cannot happen after loading it): named by its weights
    assert model_identity("org/other", BASE) == f"org/other@{BASE[:IDENTITY_HASH_CHARS]}"
