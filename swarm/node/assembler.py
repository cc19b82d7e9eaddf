"""One assembler for every node kind: `assemble(config, ...)` returns one `Parts`.

Every kind (trainer, generator, observer) has the same network half: an identity, a
transport, the rollout topic, a verifier, a ledger with its records, the exchange and the
intake (`Sharing`). A node with a model adds its model half: the policy (resumed from the
newest checkpoint), generator, trainer, spot checks, evaluation questions, delta sync
(`DeltaSync`) and the round loop. An observer adds its record of delta manifests, and takes
delta-topic messages off the rollout inbox (`TopicTap`). The parts are built in a fixed
order, the seed set before the policy is loaded, so a node's start is reproducible.

`Node` and `Observer` (swarm.node.lifecycle, swarm.node.observer) are the behaviour over
these parts: starting, the rounds or passes, stopping. The part makers themselves, one
plain function per part, are `swarm.node.makers`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from swarm.config import Config, task_mix
from swarm.config.preflight import OBSERVER_MODEL, ledger_model_problem
from swarm.core.errors import CheckpointError, ConfigError
from swarm.exchange.pull import PullExchange, PullSettings
from swarm.experience import ExperiencePool
from swarm.ledger import Ledger, get_meta, set_meta, supersede_after
from swarm.ledger.retention import Retention
from swarm.monitor.display import Reporter
from swarm.node.delta_sync import DeltaSync
from swarm.node.intake import Intake, SpotCheck
from swarm.node.makers import (
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
)
from swarm.node.monitoring import Monitoring
from swarm.node.publishing import Publishing
from swarm.node.records import Records
from swarm.node.rounds import RoundLoop
from swarm.node.sharing import Sharing
from swarm.node.state import NodeState
from swarm.p2p.topic_tap import TopicTap
from swarm.p2p.transport import Transport
from swarm.policy.checkpoint import latest_checkpoint, load_checkpoint
from swarm.policy.generator import Generator, SamplingParams
from swarm.policy.model import Policy, load_policy
from swarm.policy.trainer import GRPOTrainer
from swarm.sync.manifests import ManifestLog
from swarm.tasks import Task, validate_mix
from swarm.verify.gate import Verifier
from swarm.verify.spotcheck import SpotChecker
from swarm.wire import rollout_topic

OBSERVER_PULLS = 64  # groups an observer pulls a pass in a pull swarm when p2p.pull_groups is -1


@dataclass
class ModelParts:
    """What a node with a model adds: policy, generator, trainer (None for a generator),
    spot checks, evaluation, delta sync and the round loop."""

    policy: Policy
    generator: Generator
    trainer: GRPOTrainer | None
    spot_checker: SpotChecker
    eval_tasks: list[Task]
    mix: object
    sampling: SamplingParams
    delta_sync: DeltaSync
    rounds: RoundLoop


@dataclass
class Parts:
    """Everything a node kind runs on. `model` is None for an observer, `manifests` None for
    a node with a model."""

    config: Config
    key_pair: object
    peer_id: str
    transport: Transport
    topic: str
    verifier: Verifier
    ledger: Ledger
    state: NodeState
    records: Records
    pool: ExperiencePool
    exchange: PullExchange | None
    sharing: Sharing
    model: ModelParts | None = None
    manifests: ManifestLog | None = None


def part_of(parts: Parts | None, name: str, owner: object):
    """The part `name` of `parts` (or of its model half), as a node kind reads it as its own
    attribute (`node.transport`, `node.policy`); AttributeError naming `owner` otherwise."""
    for holder in (parts, getattr(parts, "model", None)):
        if holder is not None and name in holder.__dataclass_fields__:
            return getattr(holder, name)
    raise AttributeError(f"{type(owner).__name__!r} object has no attribute {name!r}")


def assemble(
    config: Config, transport: Transport | None, key_pair, monitoring: Monitoring
) -> Parts:
    """The parts of the node `config.node.role` describes (an observer, or one with a model).
    `transport` defaults to libp2p as configured, `key_pair` to the run folder's identity."""
    key_pair, peer_id, transport = identity_and_transport(config, transport, key_pair)
    if config.node.role == "observer":
        return _observer(config, key_pair, peer_id, transport, monitoring)
    return _with_model(config, key_pair, peer_id, transport, monitoring)


def _with_model(config: Config, key_pair, peer_id: str, transport, monitoring) -> Parts:
    reporter = monitoring.reporter
    verifier = make_verifier(config, peer_id)
    mix = validate_mix(task_mix(config))
    state = NodeState()
    ledger = Ledger(config.ledger_url)
    torch.manual_seed(config.node.seed)
    policy = load_policy(
        config.policy.model,
        config.policy.device,
        config.policy.dtype,
        shown_name=config.policy.model_name,
    )
    monitoring.identify(config.node.name, peer_id, policy.model_id)
    generator = make_generator(config, policy)
    trainer = make_trainer(config, policy)
    spot_checker = make_spot_checker(config, policy)
    eval_tasks = make_eval_tasks(config, mix)
    records = _records(config, ledger, state, reporter)
    resume(config, ledger, state, policy, trainer, generator)
    publisher, follower, transport = make_sync(
        config, transport, key_pair, peer_id, policy, state.policy_version
    )
    delta_sync = DeltaSync(
        transport=transport,
        policy=policy,
        generator=generator,
        state=state,
        records=records,
        publisher=publisher,
        follower=follower,
    )
    pool = ExperiencePool(config.sharing.pool_size, int(config.sharing.pool_mb * 2**20))
    exchange = make_exchange(config, transport, verifier, key_pair, peer_id, policy.family)
    sampling = sampling_params(config)
    topic = rollout_topic(config.p2p.swarm_id)
    publishing = Publishing(
        config=config,
        key_pair=key_pair,
        peer_id=peer_id,
        topic=topic,
        transport=transport,
        verifier=verifier,
        policy=policy,
        sampling=sampling,
        state=state,
        reporter=reporter,
        exchange=exchange,
    )
    intake = Intake(config, verifier, SpotCheck.from_config(config, spot_checker, policy, state))
    sharing = Sharing(
        config=config,
        transport=transport,
        verifier=verifier,
        intake=intake,
        pool=pool,
        ledger=ledger,
        records=records,
        reporter=reporter,
        exchange=exchange,
        publishing=publishing,
    )
    sharing.restore_memory()
    delta_sync.publish_base()
    rounds = RoundLoop(
        config=config,
        state=state,
        mix=mix,
        sampling=sampling,
        policy=policy,
        generator=generator,
        trainer=trainer,
        pool=pool,
        transport=transport,
        sharing=sharing,
        delta_sync=delta_sync,
        records=records,
        reporter=reporter,
        task_seed=task_stream_seed(config, peer_id),
    )
    model = ModelParts(
        policy=policy,
        generator=generator,
        trainer=trainer,
        spot_checker=spot_checker,
        eval_tasks=eval_tasks,
        mix=mix,
        sampling=sampling,
        delta_sync=delta_sync,
        rounds=rounds,
    )
    return Parts(
        config, key_pair, peer_id, transport, topic, verifier, ledger, state, records, pool,
        exchange, sharing, model=model,
    )  # fmt: skip


def _observer(config: Config, key_pair, peer_id: str, inner, monitoring) -> Parts:
    monitoring.identify(config.node.name, peer_id, "")
    manifests = ManifestLog(config.p2p.swarm_id)
    # Delta manifests go to the manifest log, never into the rollout inbox.
    transport = TopicTap(inner, manifests.topic, manifests.offer)
    verifier = make_verifier(config, peer_id)
    exchange = (
        observer_exchange(config, transport, verifier, key_pair, peer_id)
        if config.p2p.exchange == "pull"
        else None
    )
    state = NodeState()
    ledger = Ledger(config.ledger_url)
    try:
        claim_for_observer(config, ledger)
    except BaseException:
        ledger.close()
        raise
    records = _records(config, ledger, state, monitoring.reporter)
    pool = ExperiencePool(1)  # it trains on nothing: the smallest pool there is
    sharing = Sharing(
        config=config,
        transport=transport,
        verifier=verifier,
        intake=Intake(config, verifier),  # no model: no token spot check
        pool=pool,
        ledger=ledger,
        records=records,
        reporter=monitoring.reporter,
        exchange=exchange,
    )
    sharing.restore_memory()
    topic = rollout_topic(config.p2p.swarm_id)
    return Parts(
        config, key_pair, peer_id, transport, topic, verifier, ledger, state, records, pool,
        exchange, sharing, manifests=manifests,
    )  # fmt: skip


def _records(config: Config, ledger: Ledger, state: NodeState, reporter: Reporter) -> Records:
    return Records(ledger, state, reporter, config.tasks.scoring(), Retention.from_config(config))


def observer_exchange(
    config: Config, transport: Transport, verifier: Verifier, key_pair, peer_id: str
) -> PullExchange:
    """What an observer of a pull swarm pulls: what is announced, not what would train."""
    p2p = config.p2p
    settings = PullSettings(
        pull_lists=p2p.pull_lists,
        pull_groups=p2p.pull_groups if p2p.pull_groups >= 0 else OBSERVER_PULLS,
        per_peer_cap=0,
        view_capacity=p2p.view_size,
        every_group=True,
    )
    return PullExchange(transport, verifier, p2p.swarm_id, key_pair, peer_id, settings)


def claim_for_observer(config: Config, ledger: Ledger) -> None:
    """Mark the ledger an observer's (`peers` and `status` show it; a trainer is refused
    on it); refuse a trainer's, whose ledger would then no longer say whose it is."""
    with ledger.transaction() as session:
        problem = ledger_model_problem(config, get_meta(session, "model"))
        if problem:
            raise ConfigError(problem)
        set_meta(session, "node_name", config.node.name)
        set_meta(session, "model", OBSERVER_MODEL)


def checkpoint_dir(config: Config):
    """Where a node's checkpoints are."""
    return config.run_dir / "checkpoints"


def resume(
    config: Config,
    ledger: Ledger,
    state: NodeState,
    policy: Policy,
    trainer: GRPOTrainer | None,
    generator: Generator,
) -> None:
    """Load the newest checkpoint, if any; mark ledger rounds after it as superseded."""
    path = latest_checkpoint(checkpoint_dir(config))
    model_name = config.policy.model
    with ledger.transaction() as session:
        model = get_meta(session, "model")
        if model is not None and model != model_name:
            raise ConfigError(
                f"{config.run_dir} belongs to a node of model {model!r}, not {model_name!r}: "
                "use another node.run_dir"
            )
        set_meta(session, "model", model_name)
        set_meta(session, "model_identity", policy.model_id)  # as peers see it: name@hash
        set_meta(session, "node_name", config.node.name)
        if path is None:
            supersede_after(session, -1)
            return
        saved = load_checkpoint(path, policy.model, trainer.optimizer if trainer else None)
        if saved.model_name != model_name:
            raise CheckpointError(
                f"{path} is a checkpoint of {saved.model_name!r}, not {model_name!r}"
            )
        state.round, state.policy_version = saved.round, saved.policy_version
        supersede_after(session, saved.round - 1)
    generator.sync_weights(policy.model)
