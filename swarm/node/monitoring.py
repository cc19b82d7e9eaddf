"""What a node reports besides its terminal view: node.log, metrics.jsonl, TensorBoard, metrics.

`Monitoring` builds, from the `[monitor]` config, one `Reporters` that the node's parts
report to: the terminal's reporter (as given), the node's log (`swarm.monitor.logs`), its
experiment log and optional TensorBoard files (`swarm.monitor.explog`), and its Prometheus
metrics (`swarm.monitor.metrics`), served from `start()` until `close()`. `swarm_sample` takes
what a node exchanged with the swarm so far, for the reporters' `swarm` event.
"""

from __future__ import annotations

from swarm.config import Config
from swarm.monitor.display import Reporter, Reporters, SwarmSample
from swarm.monitor.explog import (
    JSONL_FILE,
    TENSORBOARD_DIR,
    JsonlReporter,
    TensorBoardReporter,
    check_tensorboard,
)
from swarm.monitor.logs import LogReporter, NodeLog
from swarm.monitor.metrics import MetricsReporter, parse_metrics_address
from swarm.node.state import NodeState, SharingStats
from swarm.p2p.transport import Transport

OBSERVER = "observer"


class Monitoring:
    """The node's reporters (see the module docstring); `log` if the caller opened node.log."""

    def __init__(self, config: Config, terminal: Reporter, log: NodeLog | None = None):
        m = config.monitor
        if m.tensorboard:
            check_tensorboard()  # before anything slow: one line naming the fix
        if m.metrics:
            parse_metrics_address(m.metrics)
        self._own_log = log is None
        self.log = log or NodeLog.for_config(config)
        parts: list[Reporter] = [terminal, LogReporter(self.log)]
        parts.append(
            JsonlReporter(config.run_dir / JSONL_FILE, samples=config.node.role == OBSERVER)
        )
        self.metrics: MetricsReporter | None = None
        try:
            if m.tensorboard:
                parts.append(TensorBoardReporter(config.run_dir / TENSORBOARD_DIR))
            if m.metrics:
                self.metrics = MetricsReporter(m.metrics, config.node.role)
                parts.append(self.metrics)
        except BaseException:
            self.reporter = Reporters(parts)
            self.close()
            raise
        self.reporter = Reporters(parts)

    def identify(self, name: str, peer_id: str, model: str) -> None:
        """Who the node is, for the metrics' labels (the model: its identity, never a path)."""
        if self.metrics is not None:
            self.metrics.identify(name, peer_id, model)

    def start(self) -> None:
        """Serve the metrics (if asked for)."""
        if self.metrics is not None:
            self.metrics.serve()

    @property
    def metrics_url(self) -> str:
        """Where the metrics are served, with the port bound (once started); '' without."""
        return self.metrics.url if self.metrics is not None else ""

    def close(self) -> None:
        """Close every reporter (the metrics server, the files), then node.log if it is ours."""
        try:
            self.reporter.close()
        finally:
            if self._own_log:
                self.log.close()


def swarm_sample(
    role: str,
    state: NodeState,
    stats: SharingStats,
    transport: Transport,
    *,
    delta_published: int = -1,
    delta_applied: int = -1,
    manifests: int = 0,
) -> SwarmSample:
    """What the node exchanged with the swarm so far (this process), and where it stands."""
    t = transport.stats()
    return SwarmSample(
        role=role,
        round=state.round,
        policy_version=state.policy_version,
        peers=len(transport.peers()),
        groups_sent=stats.published_groups,
        groups_received=stats.received_groups,
        groups_accepted=stats.accepted_groups,
        rejected=dict(stats.rejected_by_reason),
        manifests=manifests,
        delta_published=delta_published,
        delta_applied=delta_applied,
        bytes_in={"gossip": t.gossip_bytes_in, "blob": t.blob_bytes_in},
        bytes_out={"gossip": t.gossip_bytes_out, "blob": t.blob_bytes_out},
        refused=dict(getattr(t, "peer_refusals", None) or {}),
    )
