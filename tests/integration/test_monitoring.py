"""What a node tells its operator: Prometheus metrics (scraped over HTTP), node.log,
metrics.jsonl and TensorBoard event files, for two nodes sharing over one process."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm.config.preflight import preflight
from swarm.core.errors import ConfigError
from swarm.core.identity import create_identity, peer_id_of
from swarm.core.reasons import Reason
from swarm.monitor import explog
from swarm.node import Node
from swarm.p2p import MemoryHub, MemoryTransport
from tests.conftest import small_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def scrape(url: str) -> dict[tuple[str, tuple], float]:
    """Every sample of a Prometheus text exposition: (name, sorted labels) -> value."""
    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        text = response.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _node(tmp_path, hub, name, seed, **monitor):
    key = create_identity(bytes([seed]) * 32)
    config = small_config(
        tmp_path / name,
        node={"name": name, "seed": seed},
        tasks={"eval_size": 4},
        monitor=monitor,
    )
    return Node(config, transport=MemoryTransport(peer_id_of(key), hub), key_pair=key)


@pytest.fixture(scope="module")
def swarm_of_two(tmp_path_factory, tiny_model_path):
    """Nodes a (metrics, JSON log, TensorBoard) and b (metrics too: its own registry) after
    two rounds each and an evaluation; a is scraped while it still runs."""
    tmp = tmp_path_factory.mktemp("monitoring")
    hub = MemoryHub()
    a = _node(
        tmp,
        hub,
        "a",
        1,
        metrics=f"127.0.0.1:{free_port()}",
        log_format="json",
        tensorboard=explog.tensorboard_available(),
    )
    b = _node(tmp, hub, "b", 2, metrics="127.0.0.1:0")
    reports = {"a": [], "b": []}
    try:
        for node in (a, b):
            node.start()
        for _ in range(2):
            reports["a"].append(a.run_round())
            reports["b"].append(b.run_round())
        evaluation = a.evaluate()
        samples = scrape(a.monitoring.metrics.url), scrape(b.monitoring.metrics.url)
    finally:
        a.close()
        b.close()
    return a, b, reports, evaluation, samples


def value(samples, metric, **labels):
    return samples[(metric, tuple(sorted(labels.items())))]


def test_metrics_are_scraped_over_http_per_node(swarm_of_two):
    a, b, reports, evaluation, (ma, mb) = swarm_of_two
    last = reports["a"][-1]
    assert (
        value(
            ma, "swarm_node_info", name="a", peer_id=a.peer_id, role="trainer", model="swarm-tiny"
        )
        == 1
    )
    assert (
        value(
            mb, "swarm_node_info", name="b", peer_id=b.peer_id, role="trainer", model="swarm-tiny"
        )
        == 1
    )
    assert value(ma, "swarm_round") == 2 and value(ma, "swarm_rounds_total") == 2
    assert value(ma, "swarm_policy_version") == a.state.policy_version
    assert value(ma, "swarm_reward_mean") == pytest.approx(last.mean_reward)
    assert value(ma, "swarm_batch_reward_mean") == pytest.approx(last.batch_reward)
    assert value(ma, "swarm_own_accuracy") == pytest.approx(last.accuracy)
    assert value(ma, "swarm_heldout_accuracy") == pytest.approx(evaluation.accuracy)
    for family, accuracy in evaluation.by_family.items():
        assert value(ma, "swarm_heldout_family_accuracy", family=family) == pytest.approx(accuracy)
    assert value(ma, "swarm_last_round_seconds", phase="generate") == pytest.approx(last.generate_s)
    assert value(ma, "swarm_last_round_seconds", phase="train") == pytest.approx(last.train_s)
    assert value(ma, "swarm_round_seconds_total", phase="generate") == pytest.approx(
        sum(r.generate_s for r in reports["a"])
    )
    assert value(ma, "swarm_tokens_generated_total") == sum(
        r.tokens_generated for r in reports["a"]
    )
    # sharing: a sent 2 rounds of groups; b received a's first round before its own round 0
    # and a's second before its round 1, all accepted
    questions = a.config.generation.questions_per_round
    assert value(ma, "swarm_groups_sent_total") == 2 * questions
    assert value(mb, "swarm_groups_received_total") == 2 * questions
    assert value(mb, "swarm_groups_accepted_total") == 2 * questions
    for reason in Reason:  # every reason is a series from the start
        assert value(mb, "swarm_groups_rejected_total", reason=str(reason)) == 0
    assert value(ma, "swarm_peers") == 1
    assert value(ma, "swarm_sent_bytes_total", channel="gossip") > 0
    # in one process every byte a published reached b (and only b)
    assert value(mb, "swarm_received_bytes_total", channel="gossip") == value(
        ma, "swarm_sent_bytes_total", channel="gossip"
    )
    assert value(ma, "process_resident_memory_bytes") > 0


def test_the_metrics_server_stops_with_the_node(swarm_of_two):
    a = swarm_of_two[0]
    with pytest.raises(OSError):
        urllib.request.urlopen(a.monitoring.metrics.url, timeout=5)


def test_node_log_has_time_level_and_each_round_as_json(swarm_of_two):
    a, _, reports, evaluation, _ = swarm_of_two
    lines = [json.loads(line) for line in (a.config.run_dir / "node.log").read_text().splitlines()]
    assert all({"time", "level", "logger", "message"} <= set(line) for line in lines)
    rounds = [line for line in lines if line.get("event") == "round"]
    assert [line["data"]["round"] for line in rounds] == [0, 1]
    assert rounds[-1]["data"]["mean_reward"] == pytest.approx(reports["a"][-1].mean_reward)
    assert rounds[0]["message"].startswith("round     0") and rounds[0]["level"] == "INFO"
    evals = [line for line in lines if line.get("event") == "evaluation"]
    assert evals[-1]["data"]["accuracy"] == pytest.approx(evaluation.accuracy)


def test_plain_node_log_by_default(swarm_of_two):
    b = swarm_of_two[1]
    lines = (b.config.run_dir / "node.log").read_text().splitlines()
    assert len(lines) >= 2 and " INFO    swarm.node: round     0 " in lines[0]


def test_metrics_jsonl_holds_every_round_and_evaluation(swarm_of_two):
    a, _, reports, evaluation, _ = swarm_of_two
    records = [
        json.loads(line) for line in (a.config.run_dir / "metrics.jsonl").read_text().splitlines()
    ]
    rounds = [r for r in records if r["kind"] == "round"]
    evals = [r for r in records if r["kind"] == "eval"]
    assert [r["round"] for r in rounds] == [0, 1]
    for record, report in zip(rounds, reports["a"], strict=True):
        for key in (
            "mean_reward",
            "batch_reward",
            "accuracy",
            "generate_s",
            "score_s",
            "train_s",
            "total_s",
            "tokens_generated",
            "policy_version",
            "skipped",
        ):
            assert record[key] == getattr(report, key)
        assert record["other_s"] == pytest.approx(report.other_s)
    assert (
        evals[-1]["accuracy"] == evaluation.accuracy
        and evals[-1]["by_family"] == evaluation.by_family
    )


def test_tensorboard_event_files_hold_the_rounds(swarm_of_two):
    pytest.importorskip("tensorboard", reason="the optional tensorboard package is not installed")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    a, _, reports, evaluation, _ = swarm_of_two
    events = EventAccumulator(str(a.config.run_dir / "tensorboard"))
    events.Reload()
    rewards = events.Scalars("reward/own_mean")
    assert [e.step for e in rewards] == [0, 1]
    assert [e.value for e in rewards] == pytest.approx([r.mean_reward for r in reports["a"]])
    assert events.Scalars("accuracy/heldout")[-1].value == pytest.approx(evaluation.accuracy)


def test_missing_tensorboard_is_one_line_naming_the_install(tmp_path, monkeypatch):
    monkeypatch.setattr(explog, "tensorboard_available", lambda: False)
    config = small_config(tmp_path / "n", monitor={"tensorboard": True})
    with pytest.raises(ConfigError, match=r"pip install tensorboard") as caught:
        preflight(config)
    assert "\n" not in str(caught.value)
    with pytest.raises(ConfigError, match=r"pip install tensorboard"):
        Node(config)  # also before any model is loaded, when built directly


def test_a_metrics_port_in_use_is_refused_before_loading(tmp_path):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        config = small_config(tmp_path / "n", monitor={"metrics": f"127.0.0.1:{port}"})
        with pytest.raises(ConfigError, match=f"port {port} on 127.0.0.1 is already in use"):
            preflight(config)


def test_the_metrics_url_with_its_bound_port_is_in_the_start_line_and_node_json(tmp_path):
    key = create_identity(b"\x07" * 32)
    config = small_config(
        tmp_path / "n",
        node={"rounds": 1},
        tasks={"eval_size": 2},
        monitor={"metrics": "127.0.0.1:0"},
    )
    node = Node(config, transport=MemoryTransport(peer_id_of(key), MemoryHub()), key_pair=key)
    try:
        node.run()
        url = node.monitoring.metrics_url
    finally:
        node.close()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    assert url == f"http://127.0.0.1:{port}/metrics" and port != 0
    assert json.loads((config.run_dir / "node.json").read_text())["metrics"] == url
    start = (config.run_dir / "node.log").read_text().splitlines()[0]
    assert start.endswith(f"; metrics at {url}"), start
