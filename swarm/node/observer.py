"""The observer role: a node without a model that watches and archives a swarm.

An observer joins like any node (identity, transport, allow-list, swarm key) but loads no
model, generates nothing and trains nothing. It subscribes to the swarm's rollout and
delta topics and runs, on everything that arrives, every check a trainer runs except the
token spot check (which needs the model): the gossip validator's cheap checks, then the
copycat check, the task rebuilt from its spec, the question and every claimed reward
recomputed (`swarm.node.intake.Intake`, with no spot check). It records every group in its
ledger (accepted ones with their signed bytes, so `swarm-node replay` re-verifies, exports
or trains on them) and every delta manifest (`swarm.sync.manifests`). Gossip relays what it
accepts to its other peers, so it also serves the swarm.

In a pull swarm (`p2p.exchange = "pull"`, the default) nothing is gossiped: each pass the
observer asks peers sampled from its view for their announcements and pulls what they
announce (`p2p.pull_groups` a pass, -1: 64; any fresh group, with or without signal; one
sender at a time), then checks and records each group as above. It serves what it pulled,
like any holder.

It works in passes rather than rounds: every `node.observe_every_s` seconds it drains what
arrived and records it; `node.rounds` (if not 0) is the number of passes to run. Its
reporters get a `SwarmSample` after each pass (metrics, metrics.jsonl, node.log).

Driving one by hand (tests) uses the calls `run()` does: `start()`, `observe()` as often as
wanted, and `close()`.
"""

from __future__ import annotations

import json
import threading
import time

from swarm.config import Config
from swarm.config.preflight import OBSERVER_MODEL, check_role
from swarm.core.errors import ConfigError
from swarm.ledger import touch_peer
from swarm.monitor.display import Reporter, RunInfo, SwarmSample
from swarm.monitor.logs import NodeLog
from swarm.node.assembler import assemble, part_of
from swarm.node.makers import claim_run_folder, write_node_info
from swarm.node.monitoring import OBSERVER, swarm_sample
from swarm.node.state import NodeState
from swarm.p2p.transport import Transport

NO_MODEL = OBSERVER_MODEL
PRUNE_EVERY = 50  # passes between two applications of the ledger's retention


class Observer:
    """A node of role "observer" (see the module docstring)."""

    def __init__(
        self,
        config: Config,
        transport: Transport | None = None,
        reporter: Reporter | None = None,
        key_pair=None,
        log: NodeLog | None = None,
    ):
        """As `swarm.node.Node`: `transport` defaults to libp2p as configured, `key_pair` to
        the run folder's identity, `log` to a node.log of its own. Holds the run folder's lock
        until `close()`."""
        check_role(config)
        if config.node.role != OBSERVER:
            raise ConfigError(f"Observer needs node.role = 'observer', not {config.node.role!r}")
        self.config = config
        with claim_run_folder(config, reporter, log) as (self.run_lock, self.monitoring):
            self.reporter = self.monitoring.reporter
            self.parts = assemble(config, transport, key_pair, self.monitoring)
        self.policy = None  # no model, by design
        self._stop = threading.Event()
        self._started = False
        self._shown: tuple[int, ...] | None = None

    def __getattr__(self, name: str):
        """A part read as the observer's own attribute: `observer.manifests` is
        `observer.parts.manifests` (`swarm.node.assembler`)."""
        return part_of(self.__dict__.get("parts"), name, self)

    # -- lifecycle ------------------------------------------------------------------------------

    def request_stop(self) -> None:
        """Finish the current pass and return from `run()`."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        return self._stop.is_set()

    def start(self) -> None:
        """Join the swarm: subscribe to its rollouts and delta manifests; serve metrics."""
        if self._started:
            return
        self.verifier.start()  # the verification worker gets ready in the background
        self.transport.set_refusal_hook(self.sharing.refused)  # recorded, the peer penalised
        self.transport.start()
        if self.exchange is None:
            self.transport.subscribe(self.topic, self.sharing.validate)
        else:
            self.exchange.start()
        self.transport.subscribe(self.manifests.topic, self.manifests.validator)
        self.monitoring.start()
        self._started = True

    def stop(self) -> None:
        """Leave the swarm (a closed libp2p transport cannot start again)."""
        self._started = False
        if self.exchange is not None:
            self.exchange.close()
        self.transport.close()

    def close(self) -> None:
        """Stop (if not stopped yet), then release the ledger, the reporters and the run folder."""
        try:
            self.stop()
            self.verifier.close()
            self.ledger.close()
        finally:
            try:
                self.monitoring.close()
            finally:
                self.run_lock.release()

    def run(self) -> NodeState:
        """Observe pass after pass until `node.rounds` passes (0: until stopped)."""
        target, every = self.config.node.rounds, self.config.node.observe_every_s
        self.start()
        metrics_url = self.monitoring.metrics_url
        write_node_info(self.config, self.peer_id, self.transport.listen_addrs(), metrics_url)
        self.reporter.start(
            RunInfo(
                name=self.config.node.name,
                model=NO_MODEL,
                device="-",
                run_dir=str(self.config.run_dir),
                peer_id=self.peer_id,
                start_round=0,
                target_rounds=target,
                metrics_url=metrics_url,
            )
        )
        try:
            while not self._stop.is_set() and (target == 0 or self.state.round < target):
                started = time.monotonic()
                if self.state.round % PRUNE_EVERY == 0:
                    self.records.prune()
                self.observe()
                self._stop.wait(max(0.0, every - (time.monotonic() - started)))
            self.sharing.final_drain()  # what peers sent during the last pass
            self.records.record_deltas(self.manifests.take())
            self.reporter.swarm(self.swarm_sample())
        finally:
            self.reporter.stop()
            self.stop()
        return self.state

    # -- one pass -------------------------------------------------------------------------------

    def observe(self) -> SwarmSample:
        """Record everything that arrived since the last pass; report where the swarm stands."""
        self.sharing.new_round()
        self.sharing.receive()  # the tap hands delta-topic messages to the manifest log
        self.records.record_deltas(self.manifests.take())
        self._touch_peers()
        self.state.round += 1
        sample = self.swarm_sample()
        self.reporter.swarm(sample)
        self._show(sample)
        return sample

    def swarm_sample(self) -> SwarmSample:
        """What this observer received and recorded so far (this process)."""
        return swarm_sample(
            OBSERVER,
            self.state,
            self.sharing.stats,
            self.transport,
            manifests=self.manifests.recorded,
        )

    def _touch_peers(self) -> None:
        """Connected peers and where they are reachable, in the ledger (as a round does)."""
        peers = self.transport.peers()
        if not peers:
            return
        now = time.time()
        with self.ledger.transaction() as session:
            for peer in peers:
                touch_peer(session, peer.peer_id, now, addrs=json.dumps(list(peer.addrs)))

    def _show(self, s: SwarmSample) -> None:
        """A line for the operator when something changed since the last one shown."""
        seen = (
            s.peers,
            s.groups_received,
            s.groups_accepted,
            s.manifests,
            sum(s.rejected.values()),
        )
        if seen == self._shown:
            return
        self._shown = seen
        rejected = sum(n for reason, n in s.rejected.items() if reason != "duplicate")
        self.reporter.message(
            f"pass {s.round}: {s.peers} peers; groups received {s.groups_received}, accepted "
            f"{s.groups_accepted}, rejected {rejected}; delta manifests {s.manifests}"
        )
