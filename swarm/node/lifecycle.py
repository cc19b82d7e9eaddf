"""The node's life: built from its parts, started, run round after round, stopped, closed.

`Node` composes the parts (`swarm.node.assembly` builds them from the config) and owns
what spans rounds: resuming from the newest checkpoint, node.json in the run folder,
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

import torch

from swarm.config import Config, task_mix
from swarm.config.preflight import check_role
from swarm.core.errors import CheckpointError, ConfigError
from swarm.experience import ExperiencePool
from swarm.ledger import Ledger, get_meta, set_meta, supersede_after
from swarm.ledger.retention import Retention
from swarm.monitor.display import (
    EvalReport,
    Reporter,
    RoundReport,
    RunInfo,
    SwarmSample,
)
from swarm.monitor.logs import NodeLog
from swarm.node.assembly import (
    claim_run_folder,
    identity_and_transport,
    make_eval_tasks,
    make_exchange,
    make_generator,
    make_spot_checker,
    make_sync,
    make_trainer,
    make_verifier,
    sampling_params,
    task_stream_seed,
    write_node_info,
)
from swarm.node.following import Following
from swarm.node.heap import release_free_memory
from swarm.node.intake import Intake, SpotCheck
from swarm.node.monitoring import swarm_sample
from swarm.node.publishing import Publishing
from swarm.node.records import Records
from swarm.node.rounds import RoundLoop, evaluate_by_family
from swarm.node.sharing import Sharing
from swarm.node.state import LocalGroup, NodeState
from swarm.p2p.transport import Transport
from swarm.policy.checkpoint import (
    CheckpointState,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from swarm.policy.model import load_policy
from swarm.sync.follower import DeltaFollower
from swarm.sync.publisher import DeltaPublisher
from swarm.tasks import validate_mix
from swarm.wire import rollout_topic

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
        with claim_run_folder(config, reporter, log) as (self.run_lock, self.monitoring):
            self.reporter = self.monitoring.reporter
            self._assemble(transport, key_pair)

    def _assemble(self, transport: Transport | None, key_pair) -> None:
        config = self.config
        self.key_pair, self.peer_id, self.transport = identity_and_transport(
            config, transport, key_pair
        )
        self.topic = rollout_topic(config.p2p.swarm_id)
        self.pool = ExperiencePool(
            config.training.pool_size, int(config.training.pool_mb * 2**20)
        )  # peers' groups, re-scored, awaiting training
        self.verifier = make_verifier(config, self.peer_id)
        self.mix = validate_mix(task_mix(config))
        self.sampling = sampling_params(config)
        self.state = NodeState()
        self._stop = threading.Event()
        self._started = False
        self.ledger = Ledger(config.ledger_url)
        torch.manual_seed(config.node.seed)
        self.policy = load_policy(
            config.policy.model,
            config.policy.device,
            config.policy.dtype,
            shown_name=config.policy.model_name,
        )
        self.monitoring.identify(config.node.name, self.peer_id, self.policy.model_id)
        self.generator = make_generator(config, self.policy)
        self.trainer = make_trainer(config, self.policy)
        self.spot_checker = make_spot_checker(config, self.policy)
        self.eval_tasks = make_eval_tasks(config, self.mix)
        self.records = Records(
            self.ledger,
            self.state,
            self.reporter,
            config.tasks.scoring(),
            Retention.from_config(config),
        )
        self._resume()
        publisher, follower, self.transport = make_sync(
            config,
            self.transport,
            self.key_pair,
            self.peer_id,
            self.policy,
            self.state.policy_version,
        )
        self.following = Following(
            transport=self.transport,
            policy=self.policy,
            generator=self.generator,
            state=self.state,
            records=self.records,
            publisher=publisher,
            follower=follower,
        )
        exchange = make_exchange(config, self.transport, self.verifier, self.key_pair, self.peer_id)
        self.sharing = Sharing(
            config=config,
            transport=self.transport,
            verifier=self.verifier,
            intake=Intake(
                config,
                self.verifier,
                SpotCheck.from_config(config, self.spot_checker, self.policy, self.state),
            ),
            pool=self.pool,
            ledger=self.ledger,
            records=self.records,
            reporter=self.reporter,
            exchange=exchange,
            publishing=Publishing(
                config=config,
                key_pair=self.key_pair,
                peer_id=self.peer_id,
                topic=self.topic,
                transport=self.transport,
                verifier=self.verifier,
                policy=self.policy,
                sampling=self.sampling,
                state=self.state,
                reporter=self.reporter,
                exchange=exchange,
            ),
        )
        self.sharing.restore_memory()
        self.following.publish_base()
        self.rounds = RoundLoop(
            config=config,
            state=self.state,
            mix=self.mix,
            sampling=self.sampling,
            policy=self.policy,
            generator=self.generator,
            trainer=self.trainer,
            pool=self.pool,
            transport=self.transport,
            sharing=self.sharing,
            following=self.following,
            records=self.records,
            reporter=self.reporter,
            task_seed=task_stream_seed(config, self.peer_id),
        )

    @property
    def publisher(self) -> DeltaPublisher | None:
        """The trainer's delta publisher (with sync.publish_deltas)."""
        return self.following.publisher

    @property
    def follower(self) -> DeltaFollower | None:
        """The generator role's follower of its trainer."""
        return self.following.follower

    # -- lifecycle ------------------------------------------------------------------------------

    @property
    def checkpoint_dir(self):
        return self.config.run_dir / "checkpoints"

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
        self.following.start()
        self.monitoring.start()
        self._started = True

    def stop(self) -> None:
        """Leave the swarm: close the transport (a closed libp2p transport cannot start again)."""
        self._started = False
        self.transport.close()

    def _resume(self) -> None:
        """Load the newest checkpoint, if any; mark ledger rounds after it as superseded."""
        path = latest_checkpoint(self.checkpoint_dir)
        with self.ledger.transaction() as session:
            model = get_meta(session, "model")
            if model is not None and model != self.config.policy.model:
                raise ConfigError(
                    f"{self.config.run_dir} belongs to a node of model {model!r}, not {self.config.policy.model!r}: "
                    "use another node.run_dir"
                )
            set_meta(session, "model", self.config.policy.model)
            set_meta(session, "node_name", self.config.node.name)
            if path is None:
                supersede_after(session, -1)
                return
            state = load_checkpoint(
                path, self.policy.model, self.trainer.optimizer if self.trainer else None
            )
            if state.model_name != self.config.policy.model:
                raise CheckpointError(
                    f"{path} is a checkpoint of {state.model_name!r}, not {self.config.policy.model!r}"
                )
            self.state.round, self.state.policy_version = state.round, state.policy_version
            supersede_after(session, state.round - 1)
        self.generator.sync_weights(self.policy.model)

    def run(self) -> NodeState:
        """Run rounds until `node.rounds` rounds exist in total, or until stopped."""
        target = self.config.node.rounds
        self.start()
        self._write_node_info()
        self.reporter.start(
            RunInfo(
                name=self.config.node.name,
                model=self.config.policy.model,
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
            self.following.close()  # fetches of the trainer's deltas since the last update
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
        publisher, follower = self.following.publisher, self.following.follower
        return swarm_sample(
            self.config.node.role,
            self.state,
            self.sharing.stats,
            self.transport,
            delta_published=publisher.version if publisher else -1,
            delta_applied=follower.version if follower else -1,
        )

    def generate_groups(self) -> list[LocalGroup]:
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
