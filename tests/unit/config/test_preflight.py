"""The checks before a node starts, piece by piece: addresses, ports, peer names, run-folder
locks, model sources, relative config paths and who set a value."""

from __future__ import annotations

import os
import socket

import pytest

from swarm.config import who_set
from swarm.config.load import load_config
from swarm.core.errors import ConfigError, RunFolderBusy, SwarmError
from swarm.node.runlock import RunLock, check_free
from swarm.ops.peer_ids import resolve_peer
from swarm.p2p.addresses import listen_problem, parse_dial, parse_listen
from swarm.policy.source import looks_like_path, model_problem

PEER = "12D3KooWLp6Fy6k9RjqjvRL2FaZg1x1A1uvBmUuUxsyDAzDzE7oa"
OTHER = "12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp"


def test_listen_and_dial_addresses():
    assert parse_listen("/ip4/127.0.0.1/tcp/4001").port == 4001
    assert parse_listen("/ip6/::1/tcp/0").host == "::1"
    assert parse_dial(f"/ip4/10.0.0.1/tcp/4001/p2p/{PEER}").peer_id == PEER
    for bad, message in [
        ("garbage", "is not a multiaddr: unknown protocol"),
        ("/ip4/127.0.0.1/udp/1", "must be /ip4/<ip>/tcp/<port>"),
        ("/dns4/example.org/tcp/1", "must be /ip4/<ip>/tcp/<port>"),
        (7, "must be a multiaddr string"),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_listen(bad)
    for bad, message in [
        ("/ip4/127.0.0.1/tcp/1", "must be /ip4/<ip>/tcp/<port>/p2p/12D3KooW"),
        (
            "/ip4/127.0.0.1/tcp/1/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N",
            "is not a peer ID",
        ),
    ]:
        with pytest.raises(ConfigError, match=message):
            parse_dial(bad)


def test_a_port_in_use_and_a_foreign_address_are_named():
    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen()
    try:
        port = busy.getsockname()[1]
        assert "already in use" in listen_problem(parse_listen(f"/ip4/127.0.0.1/tcp/{port}"))
    finally:
        busy.close()
    assert listen_problem(parse_listen("/ip4/127.0.0.1/tcp/0")) is None
    assert "not an address of this machine" in listen_problem(parse_listen("/ip4/192.0.2.7/tcp/0"))


def test_peer_names_full_prefix_or_short_form():
    known = {PEER, OTHER}
    assert resolve_peer(PEER, set()) == PEER  # a full ID needs no introduction
    assert resolve_peer("12D3KooWLp6", known) == PEER
    assert resolve_peer("…" + OTHER[-10:], known) == OTHER
    assert resolve_peer("..." + OTHER[-6:], known) == OTHER
    assert resolve_peer(OTHER[-10:], known) == OTHER  # as printed, without the ellipsis
    assert resolve_peer(" " + PEER[-4:], known) == PEER
    with pytest.raises(SwarmError, match="matches 2 peers"):
        resolve_peer("12D3KooWEyo", {OTHER, "12D3KooWEyoxyzxyzxyzxyzxyzxyzxyzxyzxyzxyzxyzxyzxyz"})
    with pytest.raises(SwarmError, match="no peer this ledger knows"):
        resolve_peer("12D3KooWzzz", known)
    for universal in ("12D3", "12D3KooW", "12D3KooWL", "1", "…12"):
        for peers in (known, {PEER}):  # one known peer is no excuse: 12D3 names them all
            with pytest.raises(SwarmError, match="too short to name one peer"):
                resolve_peer(universal, peers)
    # a text that is one peer's prefix and another's suffix names neither
    both = {"12D3KooWabc" + "x" * 41, "12D3KooW" + "y" * 41 + "12D3KooWabc"}
    with pytest.raises(SwarmError, match="matches 2 peers"):
        resolve_peer("12D3KooWabc", both)
    with pytest.raises(SwarmError, match="give a peer ID"):
        resolve_peer("…", known)


def test_one_node_per_run_folder(tmp_path):
    lock = RunLock.acquire(tmp_path)
    try:
        with pytest.raises(RunFolderBusy, match=f"in use by process {os.getpid()}"):
            RunLock.acquire(tmp_path)
        with pytest.raises(RunFolderBusy):
            check_free(tmp_path)
    finally:
        lock.release()
    lock.release()  # a second release does nothing
    check_free(tmp_path)
    check_free(tmp_path / "not-yet")  # a folder that does not exist is free
    RunLock.acquire(tmp_path).release()


def test_model_sources(tmp_path):
    assert looks_like_path("/models/x") and looks_like_path("./x") and looks_like_path("a/b/c")
    assert not looks_like_path("Qwen/Qwen2.5-0.5B-Instruct")
    assert "no such folder" in model_problem("/no/such/folder")
    folder = tmp_path / "m"
    folder.mkdir()
    assert "has no config.json" in model_problem(str(folder))
    (folder / "config.json").write_text("{}")
    assert "has no weights" in model_problem(str(folder))
    (folder / "model.safetensors").write_bytes(b"")
    assert "has no tokenizer" in model_problem(str(folder))
    (folder / "tokenizer.json").write_text("{}")
    assert model_problem(str(folder)) is None
    assert "not a Hugging Face model name" in model_problem("two words")
    assert model_problem("swarm-tiny") is None
    assert "no built-in model" in model_problem("swarm-tiny-xxl")


def test_relative_paths_follow_the_config_file(tmp_path, monkeypatch):
    path = tmp_path / "cluster" / "member-0" / "config.toml"
    path.parent.mkdir(parents=True)
    path.write_text(
        '[node]\nrun_dir = "."\n[p2p]\npsk_file = "../swarm.key"\n'
        '[ledger]\nurl = "sqlite:///db/ledger.sqlite"\n'
    )
    config = load_config(path, env={})
    assert config.run_dir == path.parent
    assert config.p2p.psk_file == str(tmp_path / "cluster" / "swarm.key")
    assert config.ledger.url == f"sqlite:///{path.parent / 'db' / 'ledger.sqlite'}"
    monkeypatch.chdir(
        tmp_path
    )  # a value given on the command line is relative to where it is typed
    assert load_config(path, ["node.run_dir=elsewhere"], env={}).run_dir == tmp_path / "elsewhere"
    assert load_config(None, env={}).run_dir == tmp_path / "runs" / "node"


def test_errors_blame_the_strongest_setter():
    origins = {
        ("sync", "keep_deltas"): "node.toml",
        ("sync", "anchor_every"): "--set",
        ("node", "rounds"): "--rounds",
        ("training", "lr"): "environment variable SWARM__TRAINING__LR",
    }
    assert who_set(origins, "node.toml", "sync.keep_deltas", "sync.anchor_every") == "--set"
    assert who_set(origins, "node.toml", "node.rounds", "sync.anchor_every") == "--rounds"
    assert who_set(origins, "node.toml", "training.lr", "sync.keep_deltas").startswith(
        "environment"
    )
    assert who_set(origins, "defaults", "tasks.preset") == "defaults"
    with pytest.raises(ConfigError, match="^--rounds: node.rounds: -1 is below the minimum 0"):
        load_config(None, env={}, flags={"node.rounds": ("--rounds", -1)})
    with pytest.raises(ConfigError, match="^--set: tasks.mix must list datasets"):
        load_config(None, ["tasks.preset=custom"], env={})
