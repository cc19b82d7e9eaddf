"""Operating a node: config dumps that load back, exporting the policy for Hugging Face,
a finished run that `join` leaves alone, a doctor that reads a live ledger consistently,
and the container files.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

from swarm.config.load import load_config
from swarm.ledger import EvalRow, Ledger, RoundRow, UpdateRow
from swarm.node import Node
from tests.conftest import small_config

ROOT = Path(__file__).resolve().parents[2]
PRESETS = sorted((ROOT / "node_config").glob("*.toml"))


def _cli(*args: str, cwd: Path | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return subprocess.run(
        [sys.executable, "-m", "swarm.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": path},
    )


@pytest.mark.parametrize("preset", PRESETS, ids=lambda p: p.name)
def test_config_dump_loads_back_to_the_same_config(preset, tmp_path):
    dumped = _cli("config", "--dump", "-c", str(preset))
    assert dumped.returncode == 0, dumped.stderr
    saved = (
        tmp_path / "elsewhere" / "node.toml"
    )  # saved away from the preset: paths were made absolute
    saved.parent.mkdir()
    saved.write_text(dumped.stdout)
    assert load_config(saved, env={}) == load_config(preset, env={})
    again = _cli("config", "--dump", "-c", str(saved))
    assert (
        again.returncode == 0 and again.stdout.split("\n", 1)[1] == dumped.stdout.split("\n", 1)[1]
    )


@pytest.fixture(scope="module")
def finished_node(tmp_path_factory, tiny_model_path):
    """A node that ran its 2 rounds and stopped (checkpoint written), and is still in memory."""
    run_dir = tmp_path_factory.mktemp("finished") / "node"
    node = Node(small_config(run_dir, node={"rounds": 2}))
    try:
        node.run()
    finally:
        node.close()
    return node


def test_export_is_a_hugging_face_model_with_the_nodes_policy(finished_node, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = tmp_path / "exported"
    result = _cli("export", "--run-dir", str(finished_node.config.run_dir), "--out", str(out))
    assert result.returncode == 0, result.stderr
    assert "policy v2 (round 2" in result.stdout
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    provenance = (out / "swarm_export.json").read_text()
    assert str(tmp_path.parent) not in provenance  # no local path, the run's or the model's
    assert json.loads(provenance)["run"] == finished_node.config.run_dir.name == "node"
    assert json.loads(provenance)["base_model"] == finished_node.policy.model_id
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    ids = torch.tensor([tokenizer("3 + 4 = ?\n", add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        exported = model(ids).logits
        trained = finished_node.policy.model(ids).logits
    assert torch.equal(exported, trained)
    again = _cli("export", "--run-dir", str(finished_node.config.run_dir), "--out", str(out))
    assert again.returncode == 2 and "already exists" in again.stderr


def test_join_with_its_rounds_done_exits_at_once(finished_node):
    run_dir = finished_node.config.run_dir

    def evals():
        ledger = Ledger(f"sqlite:///{run_dir / 'ledger.sqlite'}", create=False)
        try:
            with ledger.reader() as s:
                return s.query(EvalRow).count()
        finally:
            ledger.close()

    before = evals()
    started = time.perf_counter()
    result = _cli(
        "join", "--run-dir", str(run_dir), "--rounds", "2", "--set", 'policy.device="cpu"'
    )
    elapsed = time.perf_counter() - started
    assert result.returncode == 0, result.stderr
    assert f"{run_dir} already holds 2 rounds (node.rounds = 2): nothing to do" in result.stdout
    assert evals() == before  # no model load, no evaluation
    # the time is printed, not held to a bound: on shared cores a bound flakes (16 s seen)
    print(f"join on a finished run folder returned in {elapsed:.1f}s")


def _write_rounds(url: str, stop: threading.Event, written: list[int]) -> None:
    """A node's writer, as fast as it goes: each round and its update in one transaction."""
    ledger = Ledger(url)
    fields = dict(
        policy_version=0,
        started_at=0.0,
        questions=1,
        completions=1,
        mean_reward=0.0,
        accuracy=0.0,
        tokens_generated=1,
        generate_s=0.0,
        score_s=0.0,
        train_s=0.0,
        other_s=0.0,
        total_s=0.0,
    )
    update = dict(
        version_before=0,
        version_after=0,
        skipped=False,
        local_groups=1,
        shared_groups=0,
        samples=1,
        tokens=1,
        mean_reward=0.0,
        loss=0.0,
        grad_norm=0.0,
        clip_fraction=0.0,
        kl=0.0,
        seconds=0.0,
        created_at=0.0,
    )
    try:
        r = 0
        while not stop.is_set():
            with ledger.transaction() as s:
                s.add(RoundRow(round=r, **fields))
                s.add(UpdateRow(round=r, **update))
            written.append(r)
            r += 1
    finally:
        ledger.close()


def test_doctor_reads_a_live_ledger_consistently(tmp_path):
    from swarm.ops.doctor import diagnose

    url = f"sqlite:///{tmp_path / 'ledger.sqlite'}"
    Ledger(url).close()
    stop, written = threading.Event(), []
    writer = threading.Thread(target=_write_rounds, args=(url, stop, written))
    writer.start()
    try:
        checks = 0
        deadline = time.monotonic() + 8
        while time.monotonic() < deadline or len(written) < 20:
            findings = diagnose(url, None)
            bad = [f for f in findings if f.level == "problem"]
            assert not bad, bad
            checks += 1
    finally:
        stop.set()
        writer.join()
    print(f"{checks} doctor runs against {len(written)} rounds written meanwhile: all consistent")
    assert checks >= 3 and len(written) >= 20


# -- container ------------------------------------------------------------------------------------


def _compose():
    yaml = pytest.importorskip("yaml")
    return yaml.safe_load((ROOT / "compose.yaml").read_text())


def _bytes(size: str) -> int:
    """A Docker size ("64m", "4gb", a plain number of bytes) in bytes."""
    units = {"b": 1, "k": 2**10, "m": 2**20, "g": 2**30}
    text = str(size).lower().removesuffix("b") or "0"
    return int(text[:-1]) * units[text[-1]] if text[-1] in units else int(text)


def test_compose_gives_each_container_room_in_dev_shm_for_an_engines_weights():
    # An isolated vLLM engine reloads from a safetensors file the node writes to /dev/shm
    # (swarm.policy.vllm_generator.weights_folder), bf16: Docker's default /dev/shm is 64 MB.
    qwen_1_5b = 1_543_714_304  # Qwen2.5-1.5B's parameters: the larger GPU bench shape
    assert _bytes("64m") == 64 * 2**20 and _bytes("4gb") == 4 * 2**30
    for name, service in _compose()["services"].items():
        assert "shm_size" in service, name
        assert _bytes(service["shm_size"]) >= 2 * qwen_1_5b, name


def test_compose_cluster_references_files_that_exist(tmp_path):
    import ipaddress

    compose = _compose()
    init = shlex.split(compose["x-cluster-init"])
    assert init[:3] == ["swarm-node", "cluster", "init"]
    written = _cli(
        *init[1:], cwd=tmp_path
    )  # the documented command, run where compose.yaml would be
    assert written.returncode == 0, written.stderr
    subnet = ipaddress.ip_network(compose["networks"]["swarm"]["ipam"]["config"][0]["subnet"])
    services = compose["services"]
    assert sorted(services) == ["member-0", "member-1", "member-2", "observer-0"]
    for name, service in services.items():
        build = service["build"]
        assert (ROOT / build["context"] / build["dockerfile"]).is_file()
        (volume,) = service["volumes"]
        source, target = volume.split(":")
        folder = tmp_path / source
        assert folder.is_dir() and (folder / "identity.key").is_file() and target == "/data"
        command = service["command"]
        assert command[:3] == ["join", "--config", "/data/config.toml"]
        config = load_config(folder / "config.toml", env={})  # relative paths: valid at /data too
        address = service["networks"]["swarm"]["ipv4_address"]
        assert ipaddress.ip_address(address) in subnet
        assert config.p2p.listen.startswith(f"/ip4/{address}/tcp/"), (name, config.p2p.listen)
        assert config.run_dir == folder and Path(config.p2p.psk_file) == folder / "swarm.key"
        assert config.node.role == ("observer" if name.startswith("observer") else "trainer")
        allowed = (tmp_path / "cluster" / "allow_list.txt").read_text().split()
        assert sorted(config.p2p.allow_list) == sorted(allowed) and len(allowed) == 4
    observer = load_config(tmp_path / "cluster" / "observer-0" / "config.toml", env={})
    (published,) = services["observer-0"]["ports"]
    assert observer.monitor.metrics == "172.28.0.20:9400" and published.endswith(":9400:9400")
    assert len(observer.p2p.bootstrap) == 3
    assert 'ENTRYPOINT ["swarm-node"]' in (ROOT / "Dockerfile").read_text()


def _docker_works() -> bool:
    if shutil.which("docker") is None:
        return False
    return subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0


@pytest.mark.slow
@pytest.mark.skipif(not _docker_works(), reason="needs a running Docker daemon")
@pytest.mark.timeout(3600)
def test_image_builds_and_runs():
    tag = "swarm-node:test"
    built = subprocess.run(
        ["docker", "build", "-t", tag, str(ROOT)], capture_output=True, text=True, timeout=3000
    )
    assert built.returncode == 0, built.stderr[-3000:]
    ran = subprocess.run(
        ["docker", "run", "--rm", tag, "--version"], capture_output=True, text=True, timeout=120
    )
    assert ran.returncode == 0 and ran.stdout.startswith("swarm-node "), ran.stderr


@pytest.mark.slow  # builds the tiny model from scratch: minutes on 2 busy cores
@pytest.mark.timeout(1800)
def test_demo_output_on_a_fresh_machine_has_no_library_noise(tmp_path):
    env = {
        **os.environ,
        "SWARM_NODE_CACHE": str(tmp_path / "cache"),
        "PYTHONPATH": os.pathsep.join(
            p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
        ),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "swarm.cli",
            "demo",
            "--nodes",
            "1",
            "--rounds",
            "1",
            "--out",
            str(tmp_path / "demo"),
            "--set",
            "generation.questions_per_round=4",
            "--set",
            "tasks.eval_size=4",
        ],
        capture_output=True,
        text=True,
        timeout=1700,
        env=env,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    seen = result.stdout + result.stderr
    assert "Writing model shards" not in seen and seen.startswith("starting 1 node processes"), (
        seen[:500]
    )
    assert seen.rstrip().endswith("reward.png")
