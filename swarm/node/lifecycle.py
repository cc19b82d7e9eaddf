"""The node's life: built from its parts, started, run round after round, stopped, closed.

`Node` runs over its parts (`swarm.node.assembler.assemble` builds them from the config, resumed
from the newest checkpoint) and owns what spans rounds: node.json in the run folder,
evaluating and checkpointing when due, and stopping cleanly. Stopping (Ctrl-C or
`request_stop`) takes effect at the next round boundary and always leaves a checkpoint.

Driving a node by hand (tests, experiments) uses the same public calls `run()` does:
`start()`, then `run_round()` as often as wanted, `evaluate()`, and `close()`.

Besides the reporter it is given (the terminal's), a node reports to its node.log,
metrics.jsonl, and, as configured, TensorBoard files and Prometheus metrics
(`swarm.node.monitoring`); after each round they also get a `SwarmSample`.
"""

from __future__ import annotations

import threading

from swarm.config import Config
from swarm.config.preflight import check_role
from swarm.core.errors import ConfigError
from swarm.monitor.display import (
    EvalReport,
    Reporter,
    RoundReport,
    RunInfo,
    SwarmSample,
    shown_model,
)
from swarm.monitor.logs import NodeLog
from swarm.node.assembler import assemble, checkpoint_dir, part_of
from swarm.node.heap import map_large_blocks, mmap_threshold, release_free_memory
from swarm.node.makers import claim_run_folder, parameter_count, write_node_info
from swarm.node.monitoring import swarm_sample
from swarm.node.rounds import evaluate_by_family
from swarm.node.state import NodeState, OwnGroup
from swarm.p2p.transport import Transport
from swarm.policy.checkpoint import (
    CheckpointState,
    save_checkpoint,
)
from swarm.sync.follower import DeltaFollower
from swarm.sync.publisher import DeltaPublisher

PRUNE_EVERY = 50  # rounds between two applications of the ledger's retention
TRIM_EVERY = 10  # rounds between two returns of freed memory to the OS (swarm.node.heap)


class Node:
    """A swarm node. Build with a config (and optionally a transport and a reporter), then `run()`."""

    def __init__(
        self,
        config: Config,
        transport: Transport | None = None,
        reporter: Reporter | None = None,
        key_pair=None,
        log: NodeLog | None = None,
    ):
        """`transport` defaults to libp2p as configured; `key_pair` to the run folder's identity;
        `log` to a node.log of the node's own (`swarm-node join` passes the one it opened).

        The node holds its run folder's lock (`swarm.node.runlock`) from here until `close()`:
        a second node on the same folder is refused before it loads anything."""
        check_role(config)
        if config.node.role == "observer":
            raise ConfigError(
                "node.role = 'observer' runs as swarm.node.observer.Observer, not Node"
            )
        self.config = config
        map_large_blocks()  # a round's large tensors go back to the OS when freed (swarm.node.heap)
        with claim_run_folder(config, reporter, log) as (self.run_lock, self.monitoring):
            self.reporter = self.monitoring.reporter
            self.parts = assemble(config, transport, key_pair, self.monitoring)
        if self.parts.model is not None:  # lower for a real model
            map_large_blocks(mmap_threshold(parameter_count(self.parts.model.policy)))
        self._stop = threading.Event()
        self._started = False

    def __getattr__(self, name: str):
        """A part read as the node's own attribute: `node.transport` is `node.parts.transport`,
        `node.policy` is `node.parts.model.policy` (`swarm.node.assembler`)."""
        return part_of(self.__dict__.get("parts"), name, self)

    @property
    def publisher(self) -> DeltaPublisher | None:
        """The trainer's delta publisher (with sync.publish_deltas)."""
        return self.delta_sync.publisher

    @property
    def follower(self) -> DeltaFollower | None:
        """The generator role's follower of its trainer."""
        return self.delta_sync.follower

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def checkpoint_dir(self):
        return checkpoint_dir(self.config)

    def request_stop(self) -> None:
        """Finish the current round, checkpoint, and return from `run()`."""
        self._stop.set()

    @property
    def stop_requested(self) -> bool:
        """Whether `request_stop` was called."""
        return self._stop.is_set()

    def start(self) -> None:
        """Join the swarm: start the transport, validate peers' groups as they arrive, and (a
        generator) listen for the followed trainer's manifests. A second call does nothing."""
        if self._started:
            return
        self.verifier.start()  # the verification worker gets ready in the background
        self.transport.set_refusal_hook(self.sharing.refused)  # recorded, the peer penalised
        self.transport.start()
        if self.sharing.exchange is not None:
            self.sharing.exchange.start()
        else:
            self.transport.subscribe(self.topic, self.sharing.validate)
        self.delta_sync.start()
        self.monitoring.start()
        self._started = True

    def stop(self) -> None:
        """Leave the swarm: close the transport (a closed libp2p transport cannot start again)."""
        self._started = False
        self.transport.close()

    def run(self) -> NodeState:
        """Run rounds until `node.rounds` rounds exist in total, or until stopped."""
        target = self.config.node.rounds
        self.start()
        self._write_node_info()
        self.reporter.start(
            RunInfo(
                name=self.config.node.name,
                model=shown_model(self.policy.model_id, self.config.policy.model),
                device=str(self.policy.device),
                run_dir=str(self.config.run_dir),
                peer_id=self.peer_id,
                start_round=self.state.round,
                target_rounds=target,
                notes=[
                    f"resumed from round {self.state.round}, policy v{self.state.policy_version}"
                ]
                if self.state.round
                else [],
                metrics_url=self.monitoring.metrics_url,
            )
        )
        try:
            if self.state.round == 0:
                self.evaluate()
            self.records.prune()
            while not self._stop.is_set() and (target == 0 or self.state.round < target):
                self.run_round()
                if self.state.round % PRUNE_EVERY == 0:
                    self.records.prune()
                if self.state.round % self.config.tasks.eval_every == 0:
                    self.evaluate()
                if self.state.round % self.config.node.checkpoint_every == 0:
                    self.checkpoint()
            self.sharing.final_drain()
            if self.state.round % self.config.tasks.eval_every != 0:
                self.evaluate()
            self.checkpoint()
        finally:
            self.reporter.stop()
            self.stop()
        return self.state

    def close(self) -> None:
        """Stop (if not stopped yet), release the generator and the ledger, then the run folder."""
        try:
            self.stop()
            self.delta_sync.close()  # fetches of the trainer's deltas since the last update
            self.generator.close()
            self.verifier.close()
            self.ledger.close()
        finally:
            try:
                self.monitoring.close()
            finally:
                self.run_lock.release()

    def _write_node_info(self) -> None:
        write_node_info(
            self.config, self.peer_id, self.transport.listen_addrs(), self.monitoring.metrics_url
        )

    # -- rounds, evaluation and checkpoints --------------------------------------------------------

    def run_round(self) -> RoundReport:
        """One round (`swarm.node.rounds`); it shares with peers once the node is started.
        The reporters then get the round's report and a `SwarmSample`."""
        report = self.rounds.run_round()
        if self.state.round % TRIM_EVERY == 0:
            release_free_memory()  # what the rounds freed goes back to the OS (swarm.node.heap)
        self.reporter.swarm(self.swarm_sample())
        return report

    def swarm_sample(self) -> SwarmSample:
        """What this node exchanged with the swarm so far (this process), and where it stands."""
        publisher, follower = self.delta_sync.publisher, self.delta_sync.follower
        return swarm_sample(
            self.config.node.role,
            self.state,
            self.sharing.stats,
            self.transport,
            delta_published=publisher.version if publisher else -1,
            delta_applied=follower.version if follower else -1,
        )

    def generate_groups(self) -> list[OwnGroup]:
        """This round's groups, generated and scored, without sharing or training on them."""
        return self.rounds.generate_groups()

    def evaluate(self) -> EvalReport | None:
        """Greedy accuracy on the fixed held-out questions; recorded in the ledger."""
        if not self.eval_tasks:
            return None
        accuracy, mean_reward, by_family = evaluate_by_family(
            self.policy, self.generator, self.eval_tasks, self.config
        )
        self.records.record_eval(len(self.eval_tasks), accuracy, mean_reward)
        report = EvalReport(
            self.state.round, self.state.policy_version, accuracy, len(self.eval_tasks), by_family
        )
        self.reporter.evaluation(report)
        return report

    def checkpoint(self):
        state = CheckpointState(
            policy_version=self.state.policy_version,
            round=self.state.round,
            model_name=self.config.policy.model,
            base_hash=self.policy.base_hash,
        )
        return save_checkpoint(
            self.checkpoint_dir,
            self.policy.model,
            self.trainer.optimizer if self.trainer else None,
            state,
            keep=self.config.node.keep_checkpoints,
        )
