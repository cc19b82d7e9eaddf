"""A model is named to peers as name@content-hash, never by a local path or folder name, and
peers compare models by content alone."""

from __future__ import annotations

import json

import huggingface_hub.constants
import pytest

from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.policy.source import (
    IDENTITY_HASH_CHARS,
    content_digest,
    model_identity,
    model_name_problem,
    same_model,
)
from swarm.sync.rules import Expectation, check_manifest
from swarm.wire import DeltaManifest

BASE = "ab" * 32


def _folder(path, config: dict):
    path.mkdir(parents=True)
    (path / "config.json").write_text(json.dumps(config))
    return path


def test_a_built_in_model_keeps_its_name():
    assert model_identity("swarm-tiny", BASE) == "swarm-tiny"


def test_a_local_folder_is_its_declared_type_and_a_hash_never_its_folder_name(tmp_path):
    folder = _folder(tmp_path / "deep" / "private" / "qwen-local", {"model_type": "llama"})
    identity = model_identity(str(folder), BASE)
    name, _, digest = identity.partition("@")
    assert name == "llama" and len(digest) == IDENTITY_HASH_CHARS
    assert "qwen-local" not in identity and "private" not in identity and "/" not in identity
    untyped = _folder(tmp_path / "secret-name", {"hidden_size": 8})
    assert model_identity(str(untyped), BASE).startswith("model@")


def test_the_operator_chooses_the_name_peers_see(tmp_path):
    folder = _folder(tmp_path / "qwen-local", {"model_type": "llama"})
    chosen = model_identity(str(folder), BASE, "qwen2.5-math")
    assert chosen.startswith("qwen2.5-math@") and same_model(
        chosen, model_identity(str(folder), BASE)
    )
    assert model_identity("swarm-tiny", BASE, "tiny-run") == "tiny-run@swarm-tiny"
    assert same_model("tiny-run@swarm-tiny", "swarm-tiny")
    assert not same_model("swarm-tiny", "swarm-tiny-skill")
    assert model_name_problem("qwen2.5-math") is None and model_name_problem("org/x") is None
    for bad in ("a@b", "/home/me/model", "../model", "with space", "x" * 200, "-x"):
        assert model_name_problem(bad), bad


def test_same_weights_in_differently_named_folders_are_one_model(tmp_path):
    config = {"model_type": "qwen2", "hidden_size": 8}
    a = model_identity(str(_folder(tmp_path / "copyA" / "qwen-like", config)), BASE)
    b = model_identity(str(_folder(tmp_path / "copyB" / "my-finetune", config)), BASE)
    assert a == b and same_model(a, b)
    renamed = model_identity(str(tmp_path / "copyB" / "my-finetune"), BASE, "my-finetune-v2")
    assert renamed != a and same_model(renamed, a)
    other = model_identity(str(_folder(tmp_path / "c" / "qwen-like", config)), "cd" * 32)
    assert not same_model(other, a)


def _manifest(model: str) -> DeltaManifest:
    return DeltaManifest(
        swarm_id="s",
        provider="trainer",
        model=model,
        base_hash=BASE,
        kind="delta",
        from_version=0,
        to_version=1,
        size=10,
        payload_hash="00" * 32,
        result_hash="00" * 32,
        key="k",
        created_at=1.0,
    )


def test_a_follower_takes_deltas_of_its_model_under_another_name(tmp_path):
    config = {"model_type": "qwen2", "hidden_size": 8}
    mine = model_identity(str(_folder(tmp_path / "a" / "qwen-like", config)), BASE)
    theirs = model_identity(str(_folder(tmp_path / "b" / "x", config)), BASE, "my-finetune")
    expect = Expectation("trainer", "s", mine, BASE, 1 << 20)
    check_manifest(_manifest(theirs), expect)  # same content: taken
    other = model_identity(str(_folder(tmp_path / "c" / "y", {**config, "hidden_size": 16})), BASE)
    with pytest.raises(RejectedMessage) as refused:
        check_manifest(_manifest(other), expect)
    assert refused.value.reason == Reason.WRONG_BASE


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


def test_a_hub_model_is_its_name_at_its_content_hash(tmp_path, monkeypatch):
    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--org--tiny-chat"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    snapshot = _folder(repo / "snapshots" / commit, {"model_type": "llama"})
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    identity = model_identity("org/tiny-chat", BASE)
    assert identity == f"org/tiny-chat@{content_digest(snapshot, BASE)}"
    local = _folder(tmp_path / "downloaded" / "copy", {"model_type": "llama"})
    assert same_model(identity, model_identity(str(local), BASE))  # the hub's and a copy agree
    # not cached (cannot happen after loading it): named by its weights
    assert model_identity("org/other", BASE) == f"org/other@{BASE[:IDENTITY_HASH_CHARS]}"


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed once returned: connections are refused


def test_a_hub_model_offline_is_cached_or_refused_with_the_fix(tmp_path, monkeypatch):
    from swarm.policy.source import hub_problem, use_cache_offline

    commit = "0123456789abcdef0123456789abcdef01234567"
    repo = tmp_path / "models--org--cached"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    _folder(repo / "snapshots" / commit, {"model_type": "llama"})
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", f"http://127.0.0.1:{_closed_port()}")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    for name in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.setenv(name, "")  # recorded, so what use_cache_offline sets is undone
    problem = hub_problem("org/missing")
    assert "download it first" in problem and "HF_HUB_OFFLINE" in problem
    assert hub_problem("org/cached") is None
    assert not use_cache_offline("org/missing")  # not cached: the check above refuses it
    assert use_cache_offline("org/cached")  # cached, hub unreachable: load it offline
    assert huggingface_hub.constants.is_offline_mode()
