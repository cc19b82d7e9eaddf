"""Prometheus metrics of one node, served over HTTP (`monitor.metrics`, `join --metrics`).

`MetricsReporter` is a `Reporter`: it keeps the node's latest round, evaluation and swarm
sample (immutable reports, replaced on the node's thread) and turns them into metric
families when Prometheus scrapes (`NodeCollector.collect`, on the HTTP server's thread).
Every node has its own `CollectorRegistry`, so several nodes in one process (tests, an
in-process swarm) never share or clash over a metric. Every family is always exposed (a
value not known yet is NaN; every `Reason`, refusal, phase and channel label is present from
the start), so dashboards and alerts find each series from the first scrape.

`METRICS` is the catalogue (name, type, meaning): the docs list it and the sample Grafana
dashboard (docs/grafana-dashboard.json) uses only these names.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from swarm.core.errors import ConfigError
from swarm.core.reasons import Reason
from swarm.monitor.display import EvalReport, Reporter, RoundReport, RunInfo, SwarmSample
from swarm.p2p.transport import RefusalReason

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

PHASES = ("generate", "score", "train", "other")
CHANNELS = ("gossip", "blob")
NAN = float("nan")

# (name as exposed, type, help); a counter's samples carry the `_total` suffix.
METRICS: tuple[tuple[str, str, str], ...] = (
    ("swarm_node_info", "gauge", "Always 1; labels name the node (name, peer_id, role, model)."),
    (
        "swarm_round",
        "gauge",
        "Rounds completed in total, resumed runs included (an observer: passes of this run).",
    ),
    ("swarm_rounds_total", "counter", "Rounds this process ran."),
    ("swarm_policy_version", "gauge", "Policy version: updates applied since the base model."),
    (
        "swarm_delta_published_version",
        "gauge",
        "Version of the newest weights a trainer serves as deltas (-1: none).",
    ),
    (
        "swarm_delta_applied_version",
        "gauge",
        "A generator's version from its trainer's deltas (-1: none).",
    ),
    ("swarm_reward_mean", "gauge", "Mean reward of the node's own completions in the last round."),
    ("swarm_batch_reward_mean", "gauge", "Mean reward of the groups trained on in the last round."),
    ("swarm_own_accuracy", "gauge", "Share of own completions correct in the last round."),
    ("swarm_loss", "gauge", "Loss of the last update (NaN when it was skipped)."),
    (
        "swarm_updates_skipped_total",
        "counter",
        "Rounds whose update was skipped (no signal, generator).",
    ),
    ("swarm_tokens_generated_total", "counter", "Completion tokens this process generated."),
    (
        "swarm_heldout_accuracy",
        "gauge",
        "Greedy accuracy on the held-out questions, last evaluation.",
    ),
    ("swarm_heldout_family_accuracy", "gauge", "Held-out accuracy per task family (label family)."),
    (
        "swarm_last_round_seconds",
        "gauge",
        "Time of the last round by phase (generate, score, train, other).",
    ),
    ("swarm_round_seconds_total", "counter", "Time of all rounds by phase."),
    ("swarm_groups_sent_total", "counter", "Own groups published."),
    ("swarm_groups_received_total", "counter", "Peers' groups received (duplicates not counted)."),
    ("swarm_groups_accepted_total", "counter", "Peers' groups that passed every check."),
    (
        "swarm_groups_rejected_total",
        "counter",
        "Peers' groups refused, by reason (the ledger's codes).",
    ),
    ("swarm_delta_manifests_total", "counter", "Peers' delta manifests recorded (observer)."),
    ("swarm_peers", "gauge", "Peers connected."),
    (
        "swarm_received_bytes_total",
        "counter",
        "Payload bytes received, by channel: gossip (every message validated) and blob (fetched).",
    ),
    (
        "swarm_sent_bytes_total",
        "counter",
        "Payload bytes sent, by channel: gossip (each message published once, however many "
        "peers) and blob (served).",
    ),
    (
        "swarm_transport_refused_total",
        "counter",
        "What the transport refused from peers by itself, by reason.",
    ),
)


def parse_metrics_address(text: str) -> tuple[str, int]:
    """`HOST:PORT` (an IPv6 host in brackets) as (host, port); a `ConfigError` otherwise."""
    host, sep, port = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(
            f"monitor.metrics = {text!r}: expected HOST:PORT, e.g. 127.0.0.1:9400 "
            "(0.0.0.0 to be scraped from other machines)"
        )
    return host, int(port)


@dataclass(frozen=True)
class _Totals:
    """What the reporter adds up over rounds (replaced, never changed in place)."""

    rounds: int = 0
    skipped: int = 0
    tokens: int = 0
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))


class NodeCollector:
    """Builds every metric family from the latest reports (a prometheus_client collector)."""

    def __init__(self, role: str) -> None:
        self.identity = {"name": "", "peer_id": "", "role": role, "model": ""}
        self.start_round = 0
        self.last_round: RoundReport | None = None
        self.last_eval: EvalReport | None = None
        self.sample: SwarmSample | None = None
        self.totals = _Totals()

    def collect(self) -> Iterator:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        r, e, s, t = self.last_round, self.last_eval, self.sample, self.totals
        helps = {name: text for name, _, text in METRICS}

        def gauge(name, value, labels=None):
            family = GaugeMetricFamily(name, helps[name], labels=list(labels or {}))
            family.add_metric(list((labels or {}).values()), value)
            return family

        def counter(name, values: dict, label: str | None = None):
            base = name.removesuffix("_total")
            family = CounterMetricFamily(base, helps[name], labels=[label] if label else None)
            for key, value in values.items():
                family.add_metric([key] if label else [], value)
            return family

        yield gauge("swarm_node_info", 1.0, self.identity)
        yield gauge("swarm_round", float(s.round if s else self.start_round))
        yield counter("swarm_rounds_total", {"": t.rounds})
        yield gauge("swarm_policy_version", float(s.policy_version if s else NAN))
        yield gauge("swarm_delta_published_version", float(s.delta_published if s else -1))
        yield gauge("swarm_delta_applied_version", float(s.delta_applied if s else -1))
        yield gauge("swarm_reward_mean", r.mean_reward if r else NAN)
        yield gauge("swarm_batch_reward_mean", r.batch_reward if r else NAN)
        yield gauge("swarm_own_accuracy", r.accuracy if r else NAN)
        yield gauge("swarm_loss", NAN if r is None or r.skipped else r.loss)
        yield counter("swarm_updates_skipped_total", {"": t.skipped})
        yield counter("swarm_tokens_generated_total", {"": t.tokens})
        yield gauge("swarm_heldout_accuracy", e.accuracy if e else NAN)
        family = GaugeMetricFamily(
            "swarm_heldout_family_accuracy",
            helps["swarm_heldout_family_accuracy"],
            labels=["family"],
        )
        for name, accuracy in sorted((e.by_family if e else {}).items()):
            family.add_metric([name], accuracy)
        yield family
        last = dict(zip(PHASES, (r.generate_s, r.score_s, r.train_s, r.other_s))) if r else {}
        family = GaugeMetricFamily(
            "swarm_last_round_seconds", helps["swarm_last_round_seconds"], labels=["phase"]
        )
        for phase in PHASES:
            family.add_metric([phase], last.get(phase, NAN))
        yield family
        yield counter("swarm_round_seconds_total", t.seconds, "phase")
        yield from self._swarm_families(s, counter, gauge)

    @staticmethod
    def _swarm_families(s: SwarmSample | None, counter, gauge) -> Iterator:
        s = s or SwarmSample(role="", round=0, policy_version=0, peers=0)
        yield counter("swarm_groups_sent_total", {"": s.groups_sent})
        yield counter("swarm_groups_received_total", {"": s.groups_received})
        yield counter("swarm_groups_accepted_total", {"": s.groups_accepted})
        rejected = {str(reason): 0 for reason in Reason} | dict(s.rejected)
        yield counter("swarm_groups_rejected_total", rejected, "reason")
        yield counter("swarm_delta_manifests_total", {"": s.manifests})
        yield gauge("swarm_peers", float(s.peers))
        yield counter("swarm_received_bytes_total", _channels(s.bytes_in), "channel")
        yield counter("swarm_sent_bytes_total", _channels(s.bytes_out), "channel")
        refused = {str(reason): 0 for reason in RefusalReason} | dict(s.refused)
        yield counter("swarm_transport_refused_total", refused, "reason")


def _channels(values) -> dict[str, int]:
    return {channel: int(values.get(channel, 0)) for channel in CHANNELS}


class MetricsReporter(Reporter):
    """A node's metrics: fed as a reporter, served by `serve()` until `close()`."""

    def __init__(self, address: str, role: str):
        from prometheus_client import CollectorRegistry
        from prometheus_client.process_collector import ProcessCollector

        self.host, self.port = parse_metrics_address(address)
        self.registry = CollectorRegistry(auto_describe=False)
        self.collector = NodeCollector(role)
        self.registry.register(self.collector)
        ProcessCollector(registry=self.registry)  # memory, CPU and open files of the process
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """Where the metrics are served (the bound port, once serving)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def serve(self) -> None:
        """Start answering scrapes on the thread "metrics-http" (joined by `close`); one line if
        the address cannot be bound."""
        if self._server is not None:
            return
        from prometheus_client import start_http_server

        try:
            server, thread = start_http_server(self.port, self.host, registry=self.registry)
        except OSError as e:
            raise ConfigError(
                f"monitor.metrics = {self.host}:{self.port}: cannot serve metrics there: "
                f"{e.strerror or e}: choose a free port (or 0 for any)"
            ) from None
        self._server, self._thread = server, thread
        thread.name = "metrics-http"
        self.port = server.server_port

    def exposition(self) -> bytes:
        """The metrics as Prometheus text, as a scrape gets them."""
        from prometheus_client import generate_latest

        return generate_latest(self.registry)

    def identify(self, name: str, peer_id: str, model: str) -> None:
        """The labels of swarm_node_info (the model: its identity, never a local path)."""
        self.collector.identity = {
            **self.collector.identity,
            "name": name,
            "peer_id": peer_id,
            "model": model,
        }

    def start(self, info: RunInfo) -> None:
        self.collector.start_round = info.start_round

    def round(self, report: RoundReport) -> None:
        t = self.collector.totals
        phases = zip(PHASES, (report.generate_s, report.score_s, report.train_s, report.other_s))
        self.collector.totals = _Totals(
            rounds=t.rounds + 1,
            skipped=t.skipped + int(report.skipped),
            tokens=t.tokens + report.tokens_generated,
            seconds={phase: t.seconds[phase] + value for phase, value in phases},
        )
        self.collector.last_round = report

    def evaluation(self, report: EvalReport) -> None:
        self.collector.last_eval = report

    def swarm(self, sample: SwarmSample) -> None:
        self.collector.sample = sample

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()  # serve_forever returns, so the thread ends
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None
