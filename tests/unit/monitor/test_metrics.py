"""The metrics catalogue, its exposition, and the sample Grafana dashboard that uses it."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from swarm.core.errors import ConfigError
from swarm.monitor.display import EvalReport, RoundReport, SwarmSample
from swarm.monitor.metrics import METRICS, MetricsReporter, parse_metrics_address

DASHBOARD = Path(__file__).resolve().parents[3] / "docs" / "grafana-dashboard.json"


def _exposed(reporter: MetricsReporter) -> dict[str, list]:
    """Sample name -> samples, from the exposition a scrape gets."""
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(reporter.exposition().decode()):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append(sample)
    return samples


def test_every_catalogued_metric_is_exposed_from_the_start():
    exposed = _exposed(MetricsReporter("127.0.0.1:0", "trainer"))
    for name, _kind, _ in METRICS:
        if name == "swarm_heldout_family_accuracy":
            continue  # one series per family, once an evaluation has run
        assert name in exposed, name


def test_reports_become_metric_values():
    reporter = MetricsReporter("127.0.0.1:0", "generator")
    reporter.identify("n", "12D3KooWx", "tiny@0123456789ab")
    report = RoundReport(
        round=4,
        policy_version=5,
        mean_reward=0.5,
        accuracy=0.25,
        groups=4,
        trained_groups=4,
        shared_groups=1,
        skipped=True,
        loss=0.0,
        generate_s=1.0,
        train_s=2.0,
        total_s=4.0,
        tokens_generated=40,
        score_s=0.5,
    )
    reporter.round(report)
    reporter.round(report)
    reporter.evaluation(EvalReport(5, 5, 0.75, 8, {"basic_arithmetic": 0.5}))
    reporter.swarm(
        SwarmSample(
            role="generator",
            round=5,
            policy_version=5,
            peers=3,
            groups_sent=8,
            groups_received=6,
            groups_accepted=4,
            rejected={"reward_mismatch": 2, "duplicate": 1},
            delta_applied=5,
            bytes_in={"gossip": 100, "blob": 5000},
            bytes_out={"gossip": 70},
            refused={"oversize_message": 1},
        )
    )
    m = {
        name: [(s.labels, s.value) for s in samples] for name, samples in _exposed(reporter).items()
    }
    assert m["swarm_node_info"] == [
        (
            {
                "name": "n",
                "peer_id": "12D3KooWx",
                "role": "generator",
                "model": "tiny@0123456789ab",
            },
            1.0,
        )
    ]
    assert m["swarm_rounds_total"] == [({}, 2.0)] and m["swarm_round"] == [({}, 5.0)]
    assert m["swarm_updates_skipped_total"] == [({}, 2.0)]
    assert m["swarm_loss"][0][1] != m["swarm_loss"][0][1]  # NaN: the update was skipped
    assert dict((s["phase"], v) for s, v in m["swarm_round_seconds_total"]) == {
        "generate": 2.0,
        "score": 1.0,
        "train": 4.0,
        "other": 1.0,
    }
    assert ({"family": "basic_arithmetic"}, 0.5) in m["swarm_heldout_family_accuracy"]
    rejected = {s["reason"]: v for s, v in m["swarm_groups_rejected_total"]}
    assert (
        rejected["reward_mismatch"] == 2 and rejected["duplicate"] == 1 and rejected["stale"] == 0
    )
    assert {s["channel"]: v for s, v in m["swarm_received_bytes_total"]} == {
        "gossip": 100,
        "blob": 5000,
    }
    assert {s["channel"]: v for s, v in m["swarm_sent_bytes_total"]} == {"gossip": 70, "blob": 0}
    assert m["swarm_delta_applied_version"] == [({}, 5.0)]
    refused = {s["reason"]: v for s, v in m["swarm_transport_refused_total"]}
    assert refused["oversize_message"] == 1 and refused["gossip_control_flood"] == 0


def test_several_nodes_in_one_process_keep_their_own_metrics():
    a, b = MetricsReporter("127.0.0.1:0", "trainer"), MetricsReporter("127.0.0.1:0", "observer")
    a.serve()
    b.serve()
    try:
        assert a.port != b.port
        a.swarm(SwarmSample(role="trainer", round=1, policy_version=1, peers=2, groups_sent=3))
        assert _exposed(a)["swarm_groups_sent_total"][0].value == 3
        assert _exposed(b)["swarm_groups_sent_total"][0].value == 0
    finally:
        a.close()
        b.close()
    assert not any(t.name == "metrics-http" for t in threading.enumerate())


@pytest.mark.parametrize("text", ["9400", ":9400", "localhost:", "host:port", "127.0.0.1:70000"])
def test_a_bad_metrics_address_is_one_line(text):
    with pytest.raises(ConfigError, match="expected HOST:PORT"):
        parse_metrics_address(text)


def test_metrics_addresses_parse():
    assert parse_metrics_address("0.0.0.0:9400") == ("0.0.0.0", 9400)
    assert parse_metrics_address("[::1]:0") == ("::1", 0)


def test_the_grafana_dashboard_uses_only_metrics_that_exist():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    assert len(exprs) >= 20
    used = {m for e in exprs for m in re.findall(r"\b(?:swarm|process)_[a-z_]+\b", e)}
    reporter = MetricsReporter("127.0.0.1:0", "trainer")
    reporter.evaluation(EvalReport(1, 1, 0.5, 4, {"basic_arithmetic": 0.5}))
    exposed = set(_exposed(reporter))
    assert used and used <= exposed, used - exposed
    catalogued = {name for name, _, _ in METRICS}
    assert {m for m in used if m.startswith("swarm_")} <= catalogued
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
