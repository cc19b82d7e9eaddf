"""Configuration: one documented, frozen dataclass per component, loaded from TOML.

A config file has one table per component (`[node]`, `[policy]`, `[generation]`,
`[training]`, `[tasks]`, `[ledger]`, `[p2p]`, `[verify]`, `[sync]`, `[monitor]`); every key is
optional and defaults to the value documented below. Values are then overridden by environment
variables (`SWARM__<SECTION>__<KEY>=value`, e.g. `SWARM__TRAINING__LR=1e-5`) and finally by the
CLI (`--set training.lr=1e-5`, plus a few dedicated flags).

Any unknown section or key, wrong type or out-of-range value is a `ConfigError` whose
message names the file and the key, on one line. This module imports no torch, so
`swarm-node --help` stays instant.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from swarm.core.errors import ConfigError
from swarm.p2p.addresses import PEER_ID_PATTERN


def opt(
    default: Any,
    help: str,
    *,
    choices: tuple = (),
    min: float | None = None,
    max: float | None = None,
    path: bool = False,
):
    """A config field with its documentation and constraints (shown by `swarm-node config`).

    `path`: the value is a file or folder; a relative one in a config file is relative to
    that file's folder (see `load_config`)."""
    meta = {"help": help, "choices": choices, "min": min, "max": max, "path": path}
    if isinstance(default, list | dict):
        return field(default_factory=lambda: type(default)(default), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class NodeSection:
    """The daemon itself: who it is, where it keeps its files, how long it runs."""

    name: str = opt("node", "Display name of this node in tables and plots.")
    role: str = opt(
        "trainer",
        "trainer: generate, share and train; generator: follow a trainer's weights and share; observer: only collect and verify.",
        choices=("trainer", "generator", "observer"),
    )
    run_dir: str = opt(
        "runs/node",
        "Folder for this node's identity, ledger and checkpoints (created if missing; relative: to the config file's folder).",
        path=True,
    )
    rounds: int = opt(0, "Stop after this many rounds in total (0: run until stopped).", min=0)
    seed: int = opt(0, "Seed for sampling, task streams and everything random in this node.", min=0)
    checkpoint_every: int = opt(
        10, "Write a checkpoint every this many rounds (and always on a clean stop).", min=1
    )
    keep_checkpoints: int = opt(3, "How many recent checkpoints to keep on disk.", min=1)
    observe_every_s: float = opt(
        5.0,
        "Observer role: seconds between its passes over what arrived (node.rounds counts passes).",
        min=0.05,
        max=3600.0,
    )


@dataclass(frozen=True)
class PolicySection:
    """The policy model this node trains and samples from."""

    model: str = opt(
        "swarm-tiny",
        "Hugging Face model name or local path; 'swarm-tiny' is the built-in tiny model (built on first use).",
    )
    model_name: str = opt(
        "",
        "The name peers see for this model, before '@' and its content hash (e.g. 'qwen2.5-0.5b-math'); empty: the hub model's name, or the model type a local folder's config.json declares. Never the folder's name; peers compare models by content alone.",
    )
    device: str = opt("auto", "auto (CUDA if present, else CPU), cpu, cuda or cuda:N.")
    dtype: str = opt(
        "auto",
        "Weights dtype: auto (bf16 on GPU, fp32 on CPU), float32, bfloat16 or float16.",
        choices=("auto", "float32", "bfloat16", "float16"),
    )
    system_prompt: str = opt(
        "Solve the task. Think briefly if needed, then give only the final answer between <answer> and </answer>.",
        "System prompt for models with a chat template (the tiny model ignores it).",
    )


@dataclass(frozen=True)
class GenerationSection:
    """How completions are sampled each round."""

    backend: str = opt(
        "transformers",
        "transformers (CPU or GPU) or vllm (GPU only, needs the 'gpu' extra).",
        choices=("transformers", "vllm"),
    )
    questions_per_round: int = opt(
        16, "Questions drawn from the task mix per round.", min=1, max=4096
    )
    completions_per_question: int = opt(
        8, "Completions sampled per question: the GRPO group size.", min=2, max=256
    )
    temperature: float = opt(
        1.0, "Sampling temperature (0: greedy, which gives GRPO no signal).", min=0.0, max=10.0
    )
    top_p: float = opt(1.0, "Nucleus sampling mass.", min=0.0, max=1.0)
    top_k: int = opt(0, "Top-k sampling (0: off).", min=0)
    max_new_tokens: int = opt(16, "Longest completion, in tokens.", min=1, max=65536)
    batch_size: int = opt(
        32,
        "Sequences per generate call (transformers backend). Memory grows with it: with the "
        "tiny model, 128 peaked ~90 MB higher than 32 for the same round time on a CPU.",
        min=1,
    )
    gpu_memory_utilization: float = opt(
        0.5, "Share of GPU memory vLLM may take (vllm backend).", min=0.05, max=0.99
    )


@dataclass(frozen=True)
class TrainingSection:
    """The GRPO update and the SAPO batch mix."""

    lr: float = opt(
        3e-4,
        "AdamW learning rate (use ~1e-6 for real models; the tiny model needs far more).",
        min=0.0,
        max=1.0,
    )
    optimizer: str = opt(
        "adamw",
        "adamw: AdamW with betas 0.9/0.99 and training.weight_decay; adam: torch Adam with its "
        "defaults (betas 0.9/0.999, eps 1e-8, no weight decay), as in the SAPO paper.",
        choices=("adamw", "adam"),
    )
    weight_decay: float = opt(0.0, "AdamW weight decay.", min=0.0)
    clip_low: float = opt(
        0.2, "Lower clip of the probability ratio (1 - clip_low).", min=0.0, max=1.0
    )
    clip_high: float = opt(
        0.28, "Upper clip of the probability ratio (1 + clip_high).", min=0.0, max=10.0
    )
    kl_coef: float = opt(
        0.0, "Weight of the KL penalty to the starting model (0: no reference model kept).", min=0.0
    )
    max_grad_norm: float = opt(1.0, "Gradient clipping norm (0: no clipping).", min=0.0)
    micro_batch_size: int = opt(
        16,
        "Sequences per forward/backward; gradients accumulate over micro-batches (activation memory grows with it: 64 holds ~250 MB more than 16 for the tiny model).",
        min=1,
    )
    minibatch_size: int = opt(
        0,
        "Completions per optimizer step; a round makes as many steps as its batch fills (0: one step per round, however large the batch).",
        min=0,
    )
    epochs: int = opt(
        1,
        "Passes per round over the same batch (1: strictly on-policy when minibatch_size is 0).",
        min=1,
        max=16,
    )
    precision: str = opt(
        "auto",
        "auto (bf16 autocast on GPU, fp32 on CPU), fp32 or bf16.",
        choices=("auto", "fp32", "bf16"),
    )
    gradient_checkpointing: str = opt(
        "auto",
        "Recompute each layer's activations in the backward pass instead of keeping them: auto (on for a model of 10 M parameters or more, i.e. any real LM; off for the built-in tiny ones), on or off.",
        choices=("auto", "on", "off"),
    )
    shared_prefix: bool = opt(
        True,
        "Encode each prompt once per micro-batch and run its completions against its cache (same loss and gradients, less compute); false runs prompt + completion for every completion.",
    )
    scale_advantages: bool = opt(
        True,
        "Divide group advantages by the group's reward std (GRPO); false keeps them mean-centred only.",
    )
    local_groups: int = opt(16, "I: local rollout groups per update (SAPO).", min=0)
    shared_groups: int = opt(
        0,
        "J: shared groups from peers per update (SAPO; 0 trains on local experience only).",
        min=0,
    )
    per_peer_cap: int = opt(
        2, "At most this many of a batch's shared groups from any one peer (0: no cap).", min=0
    )
    max_version_gap: int = opt(
        1,
        "Skip shared groups of our own model more than this many policy versions behind us (-1: no bound; 1 measured best, see README).",
        min=-1,
    )
    max_age_s: float = opt(
        600.0, "Skip shared groups received longer ago than this (0: no bound).", min=0.0
    )
    pool_size: int = opt(
        4096, "Shared groups kept waiting for training (oldest dropped first).", min=1
    )
    pool_mb: float = opt(
        64.0,
        "Text of the shared groups kept waiting for training, in MB (oldest dropped first).",
        min=0.01,
    )
    signal_filter: str = opt(
        "all",
        "Which groups lose their place when all their rewards are equal: all (local and shared) "
        "or shared (shared only; every local group is trained on, as in the SAPO paper).",
        choices=("all", "shared"),
    )
    fresh_rounds: int = opt(
        0,
        "Train only on shared groups from each sender's newest this many rounds (1: its latest "
        "round, as the paper's swarm does; 0: any round the staleness bounds allow).",
        min=0,
    )
    shared_sampling: str = opt(
        "uniform",
        "How shared groups are drawn: uniform, or need (preferring task families this node "
        "has lately succeeded least on, see need_floor and need_window).",
        choices=("uniform", "need"),
    )
    need_floor: float = opt(
        0.05,
        "shared_sampling = need: weight of a family this node always solves, relative to 1 for "
        "one it never solves (weights are linear in the failure rate in between).",
        min=1e-6,
        max=1.0,
    )
    need_window: int = opt(
        10,
        "shared_sampling = need: rounds of this node's own groups its success per family is "
        "measured over.",
        min=1,
    )
    shared_advantage: str = opt(
        "group",
        "Baseline of a shared completion's advantage: group (its own group's mean, plain GRPO), "
        "joint (the node also generates G completions for the shared task and one baseline "
        "covers both; costs generation) or receiver (the node's own recent mean reward on the "
        "task's family, over need_window rounds). See docs/SAPO.md.",
        choices=("group", "joint", "receiver"),
    )
    shared_shaping: float = opt(
        0.0,
        "Policy shaping of shared completions' tokens: loss -A*p/(p+gamma) with this gamma "
        "instead of the clipped ratio (LUFFY's regularised importance weight; 0: off).",
        min=0.0,
        max=1.0,
    )
    shared_weight: float = opt(
        1.0,
        "With shared_normalizer = parts: the shared part's weight in the loss relative to the "
        "own part's (own tokens keep their total weight whatever the shared part holds).",
        min=0.0,
    )
    shared_normalizer: str = opt(
        "batch",
        "batch: every token of the batch weighs the same (shared tokens can swamp own ones); "
        "parts: own and shared tokens are normalised apart, the shared part times shared_weight.",
        choices=("batch", "parts"),
    )
    shuffle_shared_rewards: bool = opt(
        False,
        "A control for experiments only: shuffle each shared group's rewards over its "
        "completions before training (sharing should then teach nothing).",
    )


@dataclass(frozen=True)
class TasksSection:
    """What the node practises on, and how it is evaluated."""

    preset: str = opt(
        "easy",
        "Task mix: easy (what the tiny model can learn), sapo (the paper's nine datasets), or custom (use [[tasks.mix]]).",
        choices=("easy", "sapo", "custom"),
    )
    mix: list = opt(
        [],
        "With preset = custom: a list of tables {dataset, weight, config} of reasoning-gym datasets.",
    )
    seed: int = opt(-1, "Seed of this node's task stream (-1: derived from node.seed).", min=-1)
    format_reward: float = opt(
        0.1,
        "Reward added when a completion ends with its answer inside <answer></answer> (nothing after it).",
        min=0.0,
        max=1.0,
    )
    answer_rule: str = opt(
        "lenient",
        "Which text is scored as the answer: lenient (the last <answer></answer>, else the whole "
        "completion) or tagged (only a tagged answer; none scores 0, the SAPO paper's rule).",
        choices=("lenient", "tagged"),
    )
    partial_credit: bool = opt(
        True,
        "Keep reasoning-gym's partial credit (e.g. 0.5 for '13' when the answer is '3'); false: "
        "correctness is 1 for a fully correct answer, else 0.",
    )
    eval_size: int = opt(64, "Held-out questions for accuracy (0: no evaluation).", min=0)
    eval_seed: int = opt(
        1_000_003, "Seed of the held-out questions (no training stream uses it).", min=0
    )
    eval_every: int = opt(
        10, "Evaluate held-out accuracy every this many rounds (and at start and end).", min=1
    )

    def scoring(self):
        """These settings as a `swarm.tasks.Scoring` (how this node scores completions)."""
        from swarm.tasks import AnswerRule, Scoring  # tasks imports reasoning-gym: load it lazily

        return Scoring(self.format_reward, AnswerRule(self.answer_rule), self.partial_credit)


@dataclass(frozen=True)
class LedgerSection:
    """Where the contribution ledger lives."""

    url: str = opt(
        "",
        "SQLAlchemy URL of the ledger ('' : SQLite file ledger.sqlite in node.run_dir; a relative sqlite:/// path in a config file is relative to its folder).",
    )
    rejected_rows_per_peer: int = opt(
        32,
        "Rejected groups of one peer stored as rows (with their signed bytes) per "
        "ledger.count_window_s; past it they are only counted, as duplicates and a banned "
        "peer's messages always are (table rejection_counts).",
        min=0,
    )
    count_window_s: float = opt(
        3600.0,
        "Window of the per-peer row quota and of the rejection counters, in seconds.",
        min=1.0,
    )
    keep_days: float = opt(
        0.0,
        "Prune rejected rows, rejection counters and this node's own sent groups older than "
        "this many days (0: keep them all).",
        min=0.0,
    )
    keep_bodies_days: float = opt(
        0.0,
        "Drop the signed bytes of accepted groups older than this many days, keeping their "
        "rows and figures (0: keep them; never those younger than verify.max_age_s, which a "
        "restart reads back). Replay reports such a group as no_body.",
        min=0.0,
    )
    max_mb: int = opt(
        0,
        "Prune, oldest first, rejected rows and counters, then this node's own sent groups, "
        "then accepted groups' signed bytes (not their rows), while the ledger's data exceed "
        "this many MB (0: no cap). Rounds, updates, accepted groups' rows and their uses, "
        "and bytes younger than verify.max_age_s are never pruned.",
        min=0,
    )


@dataclass(frozen=True)
class P2PSection:
    """Networking. Solo mode is the same daemon with an empty bootstrap list."""

    swarm_id: str = opt("swarm-local", "Name of the swarm; messages of other swarms are rejected.")
    listen: str = opt(
        "/ip4/127.0.0.1/tcp/0",
        "Multiaddr to listen on (tcp/0: any free port; /ip4/0.0.0.0 to accept remote peers).",
    )
    bootstrap: list = opt(
        [], "Multiaddrs (/ip4/.../tcp/.../p2p/12D3KooW...) of peers to join through."
    )
    psk_file: str = opt(
        "",
        "File holding the private swarm key (libp2p swarm.key format; relative: to the config file's folder); '' : open swarm. Peers without the same key cannot connect.",
        path=True,
    )
    allow_list: list = opt(
        [],
        "Peer IDs allowed to connect and send (empty: anyone). Connections from other peers are closed.",
    )
    exchange: str = opt(
        "pull",
        "How rollout groups travel: pull (signed announcements served, a few sampled peers "
        "asked, only the groups sampled for training pulled and verified: a node's cost does "
        "not grow with the swarm; docs/SCALE.md) or gossip (every group to every node, each "
        "verified and recorded: a node's cost grows with the swarm). Every node of a swarm "
        "must use the same.",
        choices=("gossip", "pull"),
    )
    pull_lists: int = opt(
        8,
        "Pull exchange: peers (sampled from the node's view of the swarm) asked for their announcements each round.",
        min=1,
        max=64,
    )
    pull_groups: int = opt(
        -1,
        "Pull exchange: groups pulled and verified each round (-1: training.shared_groups + 2, none when that is 0).",
        min=-1,
        max=4096,
    )
    view_size: int = opt(
        64,
        "Pull exchange: peers in the node's random view of the swarm (bounded whatever the swarm's size).",
        min=4,
        max=64,
    )


# -- verification of peers' rollout groups --

WORKER_BASE_MB = 256  # what the verification worker holds before its dataset cache (about 160)


@dataclass(frozen=True)
class VerifySection:
    """How peers' rollout groups are checked, and when a peer is throttled or banned.

    These bounds reject; the sampler's own staleness keys (training.max_version_gap,
    training.max_age_s) only skip accepted groups at batch time and are much tighter.
    """

    max_age_s: float = opt(
        3600.0,
        "Reject groups created longer ago than this (0: no bound). Generous: sampling skips stale groups anyway.",
        min=0.0,
    )
    max_future_s: float = opt(
        300.0,
        "Reject groups dated further than this in the future (clock-skew allowance).",
        min=0.0,
    )
    max_version_lag: int = opt(
        1000,
        "Reject a group more than this many policy versions behind the newest one its sender has sent us (-1: no bound).",
        min=-1,
    )
    reward_tolerance: float = opt(
        1e-6,
        "Largest difference allowed between a claimed reward and the one recomputed locally.",
        min=0.0,
        max=1.0,
    )
    rate_groups_per_s: float = opt(
        100.0, "Sustained groups per second a peer may send (refill of its rate limit).", min=0.0
    )
    rate_burst: int = opt(
        4096, "Groups a peer may send at once (size of its rate-limit bucket).", min=1
    )
    copycat_overlap: float = opt(
        0.75,
        "Reject a group sharing at least this share of its completions with another peer's group for the same task spec (0: off).",
        min=0.0,
        max=1.0,
    )
    throttle_below: float = opt(
        0.5,
        "A peer whose reputation score falls below this gets its rate limit scaled by its score.",
        min=0.0,
        max=1.0,
    )
    ban_after: float = opt(
        50.0,
        "Ban a peer automatically once its hard rejections (bad signatures, false rewards, bad tasks...) reach this and its score is below ban_below (0: never).",
        min=0.0,
    )
    ban_below: float = opt(
        0.2,
        "Reputation score under which a peer with ban_after hard rejections is banned.",
        min=0.0,
        max=1.0,
    )
    spot_check_completions: int = opt(
        1,
        "Completions per group whose tokens are re-scored under our own policy when the sender declares our model, base and policy version (0: off).",
        min=0,
        max=256,
    )
    spot_check_groups_per_round: int = opt(
        1,
        "At most this many qualifying groups are spot-checked per round (each costs a forward pass).",
        min=0,
    )
    spot_check_min_prob: float = opt(
        1e-6,
        "A spot-checked token less likely than this under the declared sampler marks the group implausible.",
        min=0.0,
        max=1.0,
    )
    task_catalogue: list = opt(
        [],
        "Tasks peers' groups may name besides this node's own mix: a list of tables {dataset, config} (exact configs). A group naming any other dataset or config is rejected before its task is rebuilt (unlisted_task), so a peer cannot make this node build costly tasks.",
    )
    recheck_signatures: bool = opt(
        False,
        "Check each group's signature again when the round loop takes it from the inbox. Off by default: the transports queue only messages the gossip validator accepted, signature included.",
    )
    worker: bool = opt(
        True,
        "Rebuild peers' tasks and score their completions in a separate worker process, "
        "within verify.group_deadline_s and verify.worker_memory_mb (false: in the node's own "
        "process, unbounded; for tests and tools).",
    )
    group_deadline_s: float = opt(
        2.0,
        "Longest one peer's group may take to rebuild and score; past it the group is "
        "rejected (verify_timeout), and a worker stuck in C code is killed and restarted.",
        min=0.01,
        max=600.0,
    )
    worker_memory_mb: int = opt(
        1024,
        "Address-space limit of the verification worker; a group needing more is rejected "
        "(verify_memory) and the worker restarted.",
        min=256,
        max=1 << 20,
    )
    task_cache_mb: int = opt(
        128,
        "Built datasets kept for reuse, in MB, in the node's process and in its worker each "
        "(least recently used out first; measured, not counted in entries).",
        min=1,
        max=1 << 20,
    )
    peer_verify_share: float = opt(
        0.1,
        "Seconds of verification per second one peer's groups may use on average; past its "
        "share a peer's groups are rejected (verify_budget) until its share refills.",
        min=0.0,
        max=1.0,
    )
    peer_verify_burst_s: float = opt(
        2.0,
        "Seconds of verification one peer's groups may use at once (its share's bucket; "
        "0: no per-peer limit).",
        min=0.0,
    )


# -- sparse weight deltas: a trainer publishes them, a generator follows one trainer --


@dataclass(frozen=True)
class SyncSection:
    """Following a trainer's policy: sparse bf16 weight deltas, announced on gossip, fetched over a stream."""

    follow: str = opt(
        "",
        "Generator role: peer ID (12D3KooW...) of the trainer whose policy this node follows (required there).",
    )
    publish_deltas: bool = opt(
        False,
        "Trainer role: after every update, publish a sparse delta of the bf16 weights for followers.",
    )
    anchor_every: int = opt(
        10,
        "Trainer: also publish a full anchor every this many policy versions (late joiners start from it).",
        min=1,
    )
    keep_deltas: int = opt(
        20,
        "Trainer: keep serving this many most recent deltas (and the latest anchor) to followers that missed some.",
        min=1,
    )
    zstd_level: int = opt(
        1,
        "Trainer: zstd level of deltas and anchors (higher: a few % smaller, several times slower).",
        min=1,
        max=22,
    )
    max_blob_mb: int = opt(
        1024,
        "Generator: refuse a delta or anchor announced larger than this many MB.",
        min=1,
        max=1024,
    )
    fetch_timeout_s: float = opt(
        120.0, "Generator: give up fetching one delta or anchor after this many seconds.", min=1.0
    )
    hold_deltas: int = opt(
        4,
        "Generator: serve this many most recent applied deltas to other followers, and fetch from followers that hold one before the trainer (0: fetch from the trainer only), so the trainer's upload per version stays about constant.",
        min=0,
        max=64,
    )


@dataclass(frozen=True)
class MonitorSection:
    """What a node tells its operator besides the terminal: log file, metrics, experiment logs."""

    log_format: str = opt(
        "text",
        "node.log in the run folder (rotated): text (time, level, message) or json (one JSON "
        "object a line).",
        choices=("text", "json"),
    )
    log_max_mb: int = opt(10, "Rotate node.log when it reaches this many MB.", min=1, max=10_000)
    log_backups: int = opt(5, "Rotated logs kept (node.log.1 ... node.log.N).", min=0, max=1000)
    metrics: str = opt(
        "",
        "HOST:PORT to serve Prometheus metrics on (e.g. 127.0.0.1:9400; port 0: any free one); "
        "'' : off.",
    )
    tensorboard: bool = opt(
        False,
        "Also write TensorBoard event files to tensorboard/ in the run folder (needs the "
        "tensorboard package).",
    )


@dataclass(frozen=True)
class Config:
    """A node's whole configuration."""

    node: NodeSection = field(default_factory=NodeSection)
    policy: PolicySection = field(default_factory=PolicySection)
    generation: GenerationSection = field(default_factory=GenerationSection)
    training: TrainingSection = field(default_factory=TrainingSection)
    tasks: TasksSection = field(default_factory=TasksSection)
    ledger: LedgerSection = field(default_factory=LedgerSection)
    p2p: P2PSection = field(default_factory=P2PSection)
    verify: VerifySection = field(default_factory=VerifySection)
    sync: SyncSection = field(default_factory=SyncSection)
    monitor: MonitorSection = field(default_factory=MonitorSection)

    @property
    def run_dir(self) -> Path:
        return Path(self.node.run_dir)

    @property
    def ledger_url(self) -> str:
        return self.ledger.url or f"sqlite:///{self.run_dir / 'ledger.sqlite'}"

    @property
    def task_seed(self) -> int:
        return self.tasks.seed if self.tasks.seed >= 0 else 1000 + self.node.seed

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


SECTIONS: dict[str, type] = {
    f.name: typing.get_type_hints(Config)[f.name] for f in dataclasses.fields(Config)
}


# ---------------------------------------------------------------------------------------------
# Loading and validation


def who_set(origins: Mapping[tuple[str, str], str], source: str, *keys: str) -> str:
    """Who set these `section.key`s, for an error message: the strongest setter among them
    (a flag such as --rounds, then --set, then an env var, then the file); `source` (the
    file, or "defaults") if none of them was set."""
    pairs = [(section, name) for section, _, name in (key.partition(".") for key in keys)]
    found = [origins[k] for k in pairs if k in origins]
    return max(found, key=_origin_rank, default=source)


def _origin_rank(origin: str) -> int:
    if origin == "--set":
        return 2
    if origin.startswith("--"):
        return 3  # a dedicated flag such as --rounds
    return 1 if origin.startswith("environment variable") else 0


def build_config(
    raw: Mapping[str, Any], source: str = "config", origins: Mapping | None = None
) -> Config:
    """Validate a nested mapping (as read from TOML) into a `Config`.

    `source` names the file in error messages; `origins` maps (section, key) to where an
    override came from ("--set", an env var) so its errors name that instead.
    """
    origins = origins or {}
    sections = {}
    for section_name, section_data in raw.items():
        if section_name not in SECTIONS:
            where = next((o for (s, _), o in origins.items() if s == section_name), source)
            raise ConfigError(
                f"{where}: unknown section [{section_name}]{_suggest(section_name, SECTIONS)}"
            )
        if not isinstance(section_data, Mapping):
            raise ConfigError(f"{source}: [{section_name}] must be a table")
        sections[section_name] = _build_section(
            SECTIONS[section_name], section_name, section_data, source, origins
        )
    config = Config(**sections)
    _check_cross_field(
        config, lambda section, key, *also: who_set(origins, source, f"{section}.{key}", *also)
    )
    return config


def _build_section(cls: type, section: str, data: Mapping[str, Any], source: str, origins: Mapping):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    values = {}
    for key, value in data.items():
        origin = origins.get((section, key), source)
        where = f"{origin}: {section}.{key}"
        if key not in fields:
            raise ConfigError(f"{origin}: unknown key {section}.{key}{_suggest(key, fields)}")
        values[key] = _check_value(value, hints[key], fields[key].metadata, where)
    return cls(**values)


def _check_value(value: Any, expected: Any, meta: Mapping[str, Any], where: str) -> Any:
    value = _check_type(value, expected, where)
    if meta.get("choices") and value not in meta["choices"]:
        raise ConfigError(
            f"{where}: {value!r} is not one of {', '.join(map(str, meta['choices']))}"
        )
    if isinstance(value, int | float) and not isinstance(value, bool):
        if meta.get("min") is not None and value < meta["min"]:
            raise ConfigError(f"{where}: {value} is below the minimum {meta['min']}")
        if meta.get("max") is not None and value > meta["max"]:
            raise ConfigError(f"{where}: {value} is above the maximum {meta['max']}")
    return value


def _check_type(value: Any, expected: Any, where: str) -> Any:
    if expected is bool:
        if not isinstance(value, bool):
            raise ConfigError(f"{where}: expected true or false, got {value!r}")
        return value
    if expected is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{where}: expected an integer, got {value!r}")
        return value
    if expected is float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(f"{where}: expected a number, got {value!r}")
        if not math.isfinite(value):
            raise ConfigError(f"{where}: expected a finite number, got {value!r}")
        return float(value)
    if expected is str:
        if not isinstance(value, str):
            raise ConfigError(f"{where}: expected a string, got {value!r}")
        return value
    if expected is list:
        if not isinstance(value, list):
            raise ConfigError(f"{where}: expected a list, got {value!r}")
        return list(value)
    raise ConfigError(f"{where}: unsupported config type {expected}")  # a bug in a section class


def _check_cross_field(config: Config, origin) -> None:
    """Rules that involve more than one key; `origin(section, key)` names where a value came from."""
    source = origin("tasks", "mix", "tasks.preset")
    if config.tasks.preset == "custom" and not config.tasks.mix:
        raise ConfigError(f'{source}: tasks.mix must list datasets when tasks.preset = "custom"')
    if config.tasks.preset != "custom" and config.tasks.mix:
        raise ConfigError(f'{source}: tasks.mix is only used with tasks.preset = "custom"')
    listed = origin("verify", "task_catalogue")
    for i, entry in enumerate(config.verify.task_catalogue):
        if (
            not isinstance(entry, Mapping)
            or "dataset" not in entry
            or set(entry) - {"dataset", "config"}
        ):
            raise ConfigError(
                f"{listed}: verify.task_catalogue[{i}] must be a table with keys dataset and config"
            )
    for i, entry in enumerate(config.tasks.mix):
        if not isinstance(entry, Mapping) or "dataset" not in entry:
            raise ConfigError(f"{source}: tasks.mix[{i}] must be a table with a 'dataset' key")
        extra = set(entry) - {"dataset", "weight", "config"}
        if extra:
            raise ConfigError(
                f"{source}: tasks.mix[{i}]: unknown key {sorted(extra)[0]!r} (expected dataset, weight, config)"
            )
        if not isinstance(entry.get("config", {}), Mapping):
            raise ConfigError(f"{source}: tasks.mix[{i}].config must be a table")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, int | float) or not weight > 0:
            raise ConfigError(f"{source}: tasks.mix[{i}].weight must be a positive number")
    for i, addr in enumerate(config.p2p.bootstrap):
        if not isinstance(addr, str) or "/p2p/" not in addr:
            raise ConfigError(
                f"{origin('p2p', 'bootstrap')}: p2p.bootstrap[{i}] must be a multiaddr ending in /p2p/<peer id>, got {addr!r}"
            )
    _check_sync(config, origin)
    v = config.verify
    if v.worker and v.task_cache_mb + WORKER_BASE_MB > v.worker_memory_mb // 2:
        raise ConfigError(
            f"{origin('verify', 'task_cache_mb', 'verify.worker_memory_mb')}: verify.task_cache_mb ({v.task_cache_mb}) plus {WORKER_BASE_MB} MB must fit in half of verify.worker_memory_mb ({v.worker_memory_mb}): a group that takes the worker past half its limit is rejected"
        )
    if config.generation.temperature == 0 and config.node.role != "observer":
        raise ConfigError(
            f"{origin('generation', 'temperature', 'node.role')}: generation.temperature = 0 gives every group equal rewards and GRPO nothing to learn"
        )


def _check_sync(config: Config, origin) -> None:
    """The [sync] keys against the node's role."""
    follow, role = config.sync.follow, config.node.role
    if role == "generator" and not follow:
        raise ConfigError(
            f'{origin("node", "role", "sync.follow")}: node.role = "generator" needs sync.follow = the peer ID of the trainer to follow'
        )
    if follow and role != "generator":
        raise ConfigError(
            f'{origin("sync", "follow", "node.role")}: sync.follow is only used with node.role = "generator"'
        )
    if follow and not PEER_ID_PATTERN.match(follow):
        raise ConfigError(
            f"{origin('sync', 'follow')}: sync.follow = {follow!r} is not a peer ID (expected 12D3KooW followed by 44 base58 characters)"
        )
    if config.sync.keep_deltas < config.sync.anchor_every:
        raise ConfigError(
            f"{origin('sync', 'keep_deltas', 'sync.anchor_every')}: sync.keep_deltas ({config.sync.keep_deltas}) must be at least sync.anchor_every ({config.sync.anchor_every}), so a follower starting from the latest anchor finds every delta after it"
        )
    if config.sync.publish_deltas and role != "trainer":
        raise ConfigError(
            f'{origin("sync", "publish_deltas", "node.role")}: sync.publish_deltas needs node.role = "trainer" (only a trainer makes new versions)'
        )


def _suggest(name: str, options) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def task_mix(config: Config):
    """The `MixEntry` tuple the config selects (imports reasoning-gym lazily via swarm.tasks)."""
    from swarm.tasks import PRESET_MIXES, MixEntry

    if config.tasks.preset != "custom":
        return PRESET_MIXES[config.tasks.preset]
    return tuple(
        MixEntry(str(e["dataset"]), float(e.get("weight", 1.0)), dict(e.get("config", {})))
        for e in config.tasks.mix
    )


def describe_config() -> list[tuple[str, str, str]]:
    """(key, default, help) for every config key, for `swarm-node config keys` and docs."""
    rows = []
    for section, cls in SECTIONS.items():
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[operator]
            rows.append((f"{section}.{f.name}", repr(default), f.metadata.get("help", "")))
    return rows
