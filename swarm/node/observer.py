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
from swarm.config.preflight import OBSERVER_MODEL, check_role, ledger_model_problem
from swarm.core.errors import ConfigError
from swarm.exchange.pull import PullExchange, PullSettings
from swarm.experience import ExperiencePool
from swarm.ledger import Ledger, get_meta, set_meta, touch_peer
from swarm.ledger.retention import Retention
from swarm.monitor.display import Reporter, RunInfo, SwarmSample
from swarm.monitor.logs import NodeLog
from swarm.node.assembly import (
    claim_run_folder,
    identity_and_transport,
    make_verifier,
    write_node_info,
)
from swarm.node.intake import Intake
from swarm.node.monitoring import OBSERVER, swarm_sample
from swarm.node.records import Records
from swarm.node.sharing import Sharing
from swarm.node.state import NodeState
from swarm.p2p.topic_tap import TopicTap
from swarm.p2p.transport import Transport
from swarm.sync.manifests import ManifestLog
from swarm.wire import rollout_topic

NO_MODEL = OBSERVER_MODEL
PRUNE_EVERY = 50  # passes between two applications of the ledger's retention
OBSERVER_PULLS = 64  # groups pulled a pass in a pull swarm when p2p.pull_groups is -1


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
            self._assemble(transport, key_pair)

    def _assemble(self, transport: Transport | None, key_pair) -> None:
        config = self.config
        self.key_pair, self.peer_id, inner = identity_and_transport(config, transport, key_pair)
        self.monitoring.identify(config.node.name, self.peer_id, "")
        self.topic = rollout_topic(config.p2p.swarm_id)
        self.manifests = ManifestLog(config.p2p.swarm_id)
        # Delta manifests go to the manifest log, never into the rollout inbox.
        self.transport = TopicTap(inner, self.manifests.topic, self.manifests.offer)
        self.verifier = make_verifier(config, self.peer_id)
        self.exchange = self._pull_exchange() if config.p2p.exchange == "pull" else None
        self.state = NodeState()
        self.ledger = Ledger(config.ledger_url)
        try:
            self._claim_ledger()
        except BaseException:
            self.ledger.close()
            raise
        self.records = Records(
            self.ledger,
            self.state,
            self.reporter,
            config.tasks.scoring(),
            Retention.from_config(config),
        )
        self.sharing = Sharing(
            config=config,
            transport=self.transport,
            verifier=self.verifier,
            intake=Intake(config, self.verifier),  # no model: no token spot check
            pool=ExperiencePool(1),  # it trains on nothing: the smallest pool there is
            ledger=self.ledger,
            records=self.records,
            reporter=self.reporter,
            exchange=self.exchange,
        )
        self.sharing.restore_memory()
        self.policy = None  # no model, by design
        self._stop = threading.Event()
        self._started = False
        self._shown: tuple[int, ...] | None = None

    def _pull_exchange(self) -> PullExchange:
        """What an observer of a pull swarm pulls: what is announced, not what would train."""
        p2p = self.config.p2p
        settings = PullSettings(
            lists_per_round=p2p.pull_lists,
            pull_groups=p2p.pull_groups if p2p.pull_groups >= 0 else OBSERVER_PULLS,
            per_sender_cap=0,
            max_age_s=self.config.verify.max_age_s,
            view_capacity=p2p.view_size,
            every_group=True,
        )
        return PullExchange(
            self.transport, self.verifier, p2p.swarm_id, self.key_pair, self.peer_id, settings
        )

    def _claim_ledger(self) -> None:
        """Mark the ledger an observer's (`peers` and `status` show it; a trainer is refused
        on it); refuse a trainer's, whose ledger would then no longer say whose it is."""
        with self.ledger.transaction() as session:
            problem = ledger_model_problem(self.config, get_meta(session, "model"))
            if problem:
                raise ConfigError(problem)
            set_meta(session, "node_name", self.config.node.name)
            set_meta(session, "model", NO_MODEL)

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
