"""The part makers: each of a node's parts built from its config.

Plain functions, one per part: the run folder, node.json and identity, the transport, the
generator, the trainer (none for the generator role), the verifier and the spot checker,
the sampling settings, the evaluation questions, and the sync parts (a trainer's delta
publisher or a generator's follower). `swarm.node.assembler.assemble` calls them in a
fixed order; the seed is set before the policy is loaded, so a node's start is
reproducible. Nothing here runs a round or touches the ledger.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from swarm.config import Config, memory
from swarm.config.memory import AUTO, prompt_tokens
from swarm.config.preflight import identity_problem
from swarm.core.errors import ConfigError, TransportError
from swarm.core.identity import (
    identity_exists,
    load_or_create_identity,
    peer_id_of,
    public_key_from_peer_id,
)
from swarm.exchange.pull import PullExchange, PullSettings
from swarm.monitor.display import Reporter, SilentReporter
from swarm.monitor.logs import NodeLog
from swarm.node.monitoring import Monitoring
from swarm.node.runlock import RunLock
from swarm.p2p.topic_tap import TopicTap
from swarm.p2p.transport import Transport
from swarm.policy.backends import (
    Backend,
    choose_backend,
    continuous_available,
    logprobs_can_differ,
)
from swarm.policy.delta import bf16_state_dict
from swarm.policy.generator import Generator, SamplingParams, TransformersGenerator
from swarm.policy.memory import checkpointing_on, model_shape
from swarm.policy.model import Policy
from swarm.policy.trainer import GRPOTrainer, OptimizerKind, OptimizerState, TrainerSettings
from swarm.sync.follower import DeltaFollower
from swarm.sync.publisher import DeltaPublisher
from swarm.sync.rules import Expectation
from swarm.tasks import Task, build_task, eval_specs, stream_seed
from swarm.tasks import cache as task_cache
from swarm.verify.gate import Verifier, VerifySettings
from swarm.verify.rescore_pool import RescoreWorker, WorkerSettings
from swarm.verify.spotcheck import SpotChecker, SpotCheckSettings

if TYPE_CHECKING:
    from swarm.p2p.libp2p import TransportSettings


def make_run_folder(config: Config) -> None:
    """Create the run folder (and its parents); one line if that is impossible."""
    try:
        config.run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ConfigError(
            f"cannot create run folder {config.run_dir}: {e.strerror or e}: "
            "choose a writable node.run_dir (--run-dir)"
        ) from None


@contextlib.contextmanager
def claim_run_folder(
    config: Config, reporter: Reporter | None, log: NodeLog | None
) -> Iterator[tuple[RunLock, Monitoring]]:
    """Make the run folder, take its lock and open the node's monitoring for the body,
    which builds the rest of the node; if the body fails, both are let go again."""
    make_run_folder(config)
    lock = RunLock.acquire(config.run_dir)
    try:
        monitoring = Monitoring(config, reporter or SilentReporter(), log)
    except BaseException:
        lock.release()
        raise
    try:
        yield lock, monitoring
    except BaseException:
        monitoring.close()
        lock.release()
        raise


def write_node_info(config: Config, peer_id: str, addrs: list[str], metrics_url: str = "") -> None:
    """node.json in the run folder: how other nodes (and `swarm-node demo`) reach this one,
    and where its metrics are served (`metrics`, with the bound port; absent without)."""
    info = {"peer_id": peer_id, "addrs": addrs, "pid": os.getpid(), "name": config.node.name}
    if metrics_url:
        info["metrics"] = metrics_url
    path = config.run_dir / "node.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(info, indent=2))
    os.replace(tmp, path)


def node_identity(config: Config, key_pair=None):
    """The node's key pair: `key_pair`, else the run folder's identity (made on first start).

    With an allow-list, a missing identity is not made (it would not be on the list) and
    an identity not on the list is refused: such a node would run cut off from its swarm."""
    path = config.run_dir / "identity.key"
    if key_pair is None and config.p2p.allow_list and not identity_exists(path):
        raise ConfigError(identity_problem(path, None, config.p2p.allow_list))
    key_pair = key_pair or load_or_create_identity(path)
    problem = identity_problem(path, peer_id_of(key_pair), config.p2p.allow_list)
    if problem:
        raise ConfigError(problem)
    return key_pair


def identity_and_transport(config: Config, transport: Transport | None, key_pair=None):
    """(key pair, peer ID, transport): `transport` if given, else libp2p as configured;
    refused if the transport speaks for another identity."""
    key_pair = node_identity(config, key_pair)
    peer_id = peer_id_of(key_pair)
    transport = transport or make_transport(config, key_pair)
    if transport.peer_id != peer_id:
        raise ConfigError("the transport's peer ID differs from the node's identity")
    return key_pair, peer_id, transport


def transport_settings(config: Config) -> TransportSettings:
    """The libp2p transport's settings from the config's `[p2p]` section (the rest keep the
    settings' defaults). Imports libp2p: call it only for a node that goes on the network."""
    from swarm.p2p.libp2p import CostSettings, TransportSettings

    p2p = config.p2p
    return TransportSettings(
        listen_addr=p2p.listen,
        bootstrap=tuple(p2p.bootstrap),
        psk=read_psk(p2p.psk_file) if p2p.psk_file else None,
        allow_list=tuple(p2p.allow_list),
        max_connections=p2p.max_connections,
        relay_service=p2p.relay_service,
        relays=tuple(p2p.relays),
        announce=tuple(p2p.announce),
        autonat_interval=p2p.autonat_interval,
        hole_punch=p2p.hole_punch,
        costs=CostSettings(
            rate=p2p.cost_rate,
            graylist_at=p2p.cost_graylist_at,
            ban_at=p2p.cost_ban_at,
            ban_s=p2p.cost_ban_s,
        ),
    )


def make_transport(config: Config, key_pair) -> Transport:
    """The libp2p transport this config describes (imported lazily: it pulls in trio and libp2p)."""
    from swarm.p2p.libp2p import Libp2pTransport

    return Libp2pTransport(transport_settings(config), key_pair=key_pair)


def read_psk(path: str) -> str:
    """The private swarm key in `path` as 64 hex characters.

    The file is in the libp2p pnet format (`/key/swarm/psk/1.0.0/`, an encoding line, the
    key); a bare 64-hex-character file from older versions is read with a warning.
    """
    from swarm.p2p.swarm_key import read_key_file

    return read_key_file(path).hex


def generator_backend(config: Config, policy: Policy) -> Backend:
    """The backend `generation.backend` names, "auto" resolved on this machine."""
    requested = config.generation.backend
    auto = requested == "auto" and policy.device.type == "cuda"
    installed = auto and ("vllm" in sys.modules or importlib.util.find_spec("vllm") is not None)
    return choose_backend(requested, policy.device.type, installed, auto and continuous_available())


def make_generator(config: Config, policy: Policy) -> Generator:
    """The configured generator backend for `policy`."""
    backend = generator_backend(config, policy)
    if backend is Backend.VLLM:
        from swarm.policy.vllm_generator import VLLMGenerator

        return VLLMGenerator(
            policy,
            gpu_memory_utilization=config.generation.gpu_memory_utilization,
            seed=config.node.seed,
            sleep=config.generation.vllm_sleep,
        )
    if backend is Backend.CONTINUOUS:
        from swarm.policy.continuous import ContinuousGenerator

        g = config.generation  # a round's completions decode together: the cache holds them all
        return ContinuousGenerator(
            policy.model,
            policy.tokenizer,
            policy.stop_token_ids,
            max(g.batch_size, g.questions_per_round * g.completions_per_question),
        )
    return TransformersGenerator(
        policy.model, policy.tokenizer, policy.stop_token_ids, config.generation.batch_size
    )


def trainer_settings(config: Config, policy: Policy) -> TrainerSettings:
    t = config.training
    bf16 = t.precision == "bf16" or (t.precision == "auto" and policy.device.type == "cuda")
    return TrainerSettings(
        lr=t.lr,
        weight_decay=t.weight_decay,
        clip_low=t.clip_low,
        clip_high=t.clip_high,
        kl_coef=t.kl_coef,
        max_grad_norm=t.max_grad_norm,
        micro_batch_size=micro_batch_size(config, policy),
        minibatch_size=t.minibatch_size,
        epochs=t.epochs,
        optimizer=OptimizerKind(t.optimizer),
        optimizer_state=OptimizerState(t.optimizer_state),
        shared_prefix=t.shared_prefix,
        gradient_checkpointing=checkpointing_on(t.gradient_checkpointing, parameter_count(policy)),
        autocast_bf16=bf16,  # the trainer's weights are fp32 whatever the policy's dtype
        importance_cap=config.generation.importance_cap
        if logprobs_can_differ(
            generator_backend(config, policy), bf16 or policy.dtype != torch.float32
        )
        else 0.0,
    )


def parameter_count(policy: Policy) -> int:
    """How many parameters the policy's model has."""
    return sum(p.numel() for p in policy.model.parameters())


def micro_batch_size(config: Config, policy: Policy) -> int:
    """`training.micro_batch_size`, with "auto" the largest micro-batch whose memory plan
    fits this machine (`swarm.config.memory`), for the loaded model and its tokenizer."""
    if config.training.micro_batch_size != AUTO:
        return int(config.training.micro_batch_size)
    shape = model_shape(policy.model.config.to_dict())
    prompt = prompt_tokens(config, policy.tokenizer)
    return memory.micro_batch_size(config, shape, prompt, policy.device.type == "cuda")


def make_trainer(config: Config, policy: Policy) -> GRPOTrainer | None:
    """The GRPO trainer; none for a generator, which has no optimizer: the trainer it
    follows makes its new versions."""
    if config.node.role == "generator":
        return None
    return GRPOTrainer(
        policy.model, policy.tokenizer.pad_token_id, trainer_settings(config, policy)
    )


def make_verifier(config: Config, peer_id: str) -> Verifier:
    """Every check on peers' groups, with this node's own ID (its groups are never a peer's).

    Peers' groups are re-scored in a bounded worker process (`verify.worker`), started by
    `Verifier.start` and stopped by `Verifier.close`; this process's own dataset cache gets
    its budget (`verify.task_cache_mb`) here."""
    task_cache.configure(config.verify.task_cache_mb << 20)
    rescorer = RescoreWorker(WorkerSettings.from_config(config)) if config.verify.worker else None
    return Verifier(VerifySettings.from_config(config), own_peer_id=peer_id, rescorer=rescorer)


def sampling_params(config: Config) -> SamplingParams:
    """How this node samples its completions (also what it declares on the wire)."""
    g = config.generation
    return SamplingParams(
        temperature=g.temperature, top_p=g.top_p, top_k=g.top_k, max_new_tokens=g.max_new_tokens
    )


def make_spot_checker(config: Config, policy: Policy) -> SpotChecker:
    """The token spot check on peers' groups that claim this node's model and version."""
    return SpotChecker(policy.model, policy.tokenizer, SpotCheckSettings.from_config(config))


def make_eval_tasks(config: Config, mix) -> list[Task]:
    """The fixed held-out questions of this node's task mix."""
    specs = eval_specs(mix, config.tasks.eval_seed, config.tasks.eval_size)
    return [build_task(s) for s in specs]


def make_sync(
    config: Config, transport: Transport, key_pair, peer_id: str, policy: Policy, version: int
) -> tuple[DeltaPublisher | None, DeltaFollower | None, Transport]:
    """The trainer's delta publisher (with sync.publish_deltas) or the generator's follower,
    and the transport the node uses from then on."""
    if config.node.role == "generator":
        follower = make_follower(config, transport, peer_id, policy, version)
        # Delta manifests go to the follower, never into the rollout inbox.
        return None, follower, TopicTap(transport, follower.topic, follower.offer)
    if config.sync.publish_deltas:
        return make_publisher(config, transport, key_pair, peer_id, policy), None, transport
    return None, None, transport


def make_follower(
    config: Config, transport: Transport, peer_id: str, policy: Policy, version: int
) -> DeltaFollower:
    """A generator's follower of the trainer named in sync.follow, from policy `version`."""
    sync = config.sync
    try:
        public_key_from_peer_id(sync.follow)
    except TransportError:
        raise ConfigError(f"sync.follow = {sync.follow!r} is not an Ed25519 peer ID") from None
    if sync.follow == peer_id:
        raise ConfigError("sync.follow names this node itself; give the peer ID of a trainer")
    if policy.dtype == torch.float16:  # bf16 values do not all fit in fp16
        raise ConfigError(
            "a generator holds the trainer's bf16 weights exactly only with policy.dtype float32 or bfloat16"
        )
    expect = Expectation(
        provider=sync.follow,
        swarm_id=config.p2p.swarm_id,
        model=policy.model_id,
        base_hash=policy.base_hash,
        max_bytes=sync.max_blob_mb * 1024 * 1024,
    )
    return DeltaFollower(
        transport,
        expect,
        bf16_state_dict(policy.model),
        version,
        fetch_timeout=sync.fetch_timeout_s,
        hold=sync.hold_deltas,
    )


def make_publisher(
    config: Config, transport: Transport, key_pair, peer_id: str, policy: Policy
) -> DeltaPublisher:
    """A trainer's publisher of its updates' deltas (started by `DeltaSync.publish_base`)."""
    sync = config.sync
    return DeltaPublisher(
        transport,
        key_pair,
        peer_id=peer_id,
        swarm_id=config.p2p.swarm_id,
        model=policy.model_id,
        base_hash=policy.base_hash,
        anchor_every=sync.anchor_every,
        keep_deltas=sync.keep_deltas,
        level=sync.zstd_level,
        refresh_holders_s=1.0,
    )


def make_exchange(
    config: Config,
    transport: Transport,
    verifier: Verifier,
    key_pair,
    peer_id: str,
    family: str = "",
) -> PullExchange | None:
    """The pull exchange with `p2p.exchange = "pull"`; None for gossip (`Sharing`'s own).
    `family`: this node's model family (`Policy.family`), announced with its groups."""
    if config.p2p.exchange != "pull":
        return None
    settings = pull_settings(config, family)
    return PullExchange(transport, verifier, config.p2p.swarm_id, key_pair, peer_id, settings)


def pull_settings(config: Config, family: str = "") -> PullSettings:
    """What a trainer's pull exchange asks and pulls a round, from `[p2p]` and `[sharing]`
    (how old an announcement may be is the verifier's `verify.max_age_s`)."""
    p2p = config.p2p
    shared = config.sharing.shared_groups
    return PullSettings(
        pull_lists=p2p.pull_lists,
        pull_groups=p2p.pull_groups if p2p.pull_groups >= 0 else (shared + 2 if shared else 0),
        per_peer_cap=config.sharing.per_peer_cap,
        max_version_lag=lag if (lag := config.sharing.max_version_lag) >= 0 else None,
        view_capacity=p2p.view_size,
        seed_salt=config.task_seed,
        family=family,
        same_family=config.sharing.shared_from == "same-family",
    )


def task_stream_seed(config: Config, peer_id: str) -> int:
    """The seed of this node's task stream: `tasks.seed`, bound to the peer ID under the pull
    exchange (its announcements name tasks of its own stream only)."""
    if config.p2p.exchange == "pull":
        return stream_seed(peer_id, config.task_seed)
    return config.task_seed
