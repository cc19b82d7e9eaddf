"""The config sections about peers: networking (`[p2p]`), checking their rollout groups
(`[verify]`), and following a trainer's weights (`[sync]`)."""

from __future__ import annotations

from dataclasses import dataclass

from swarm.config.fields import opt


@dataclass(frozen=True)
class P2PSection:
    """Networking. Solo mode is the same daemon with an empty bootstrap list."""

    swarm_id: str = opt("swarm-local", "Name of the swarm; messages of other swarms are rejected.")
    listen: str = opt(
        "/ip4/127.0.0.1/tcp/0",
        "Multiaddr to listen on (tcp/0: any free port; /ip4/0.0.0.0 to accept remote peers; "
        "'': listen on nothing, reached only through p2p.relays). Behind NAT keep a fixed port: "
        "hole punching dials from it.",
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
        "Pull exchange: groups pulled and verified each round (-1: sharing.shared_groups + 2, none when that is 0).",
        min=-1,
        max=4096,
    )
    view_size: int = opt(
        64,
        "Pull exchange: peers in the node's random view of the swarm (bounded whatever the swarm's size).",
        min=4,
        max=64,
    )
    relays: list = opt(
        [],
        "Multiaddrs (/ip4/.../tcp/.../p2p/12D3KooW..., or /dns4/<name>/tcp/...) of circuit relays "
        "(v2) for a node that cannot be dialled (behind NAT or a firewall): it keeps a reservation "
        "on each and tells peers its address through them; a peer's connection then crosses a "
        "relay until hole punching (p2p.hole_punch) moves it onto a direct one. Pull exchange only.",
    )
    relay_service: bool = opt(
        False,
        "Act as a circuit relay (v2) for peers that reserve a slot here (at most 32 reservations; "
        "each circuit at most an hour and 1 GiB). Needs an address the other peers can dial.",
    )
    hole_punch: bool = opt(
        True,
        "Move each peer that reached this node through a relay onto a direct connection (DCUtR "
        "hole punching through both NAT routers; needs p2p.listen with a fixed port). Failures "
        "are logged with what to do; the relayed connection then stays.",
    )
    announce: list = opt(
        [],
        "Addresses (/ip4/<ip>/tcp/<port>) to tell peers instead of the listened ones: the public "
        "address of a port forwarded to this node on a NAT router.",
    )
    autonat_interval: float = opt(
        300.0,
        "Seconds between reachability checks (AutoNAT): a few connected peers dial this node back; "
        "if they cannot, it hands out only its relay addresses and says so in its log. 0: never check.",
        min=0.0,
        max=86_400.0,
    )
    max_connections: int = opt(
        64,
        "Connected peers kept at most: past it the least recently used idle connections are "
        "closed (bootstrap peers too once the node knows 4 others; 0: no bound).",
        min=0,
        max=100_000,
    )
    cost_rate: float = opt(
        300.0,
        "Each peer's cost budget: units a second that leak away (an RPC or message costs 1, a "
        "connection or a refusal 10; docs/LIBP2P.md). What a peer may cost, sustained.",
        min=1.0,
    )
    cost_graylist_at: float = opt(
        3000.0,
        "A peer whose cost passes this has its RPCs dropped unparsed until it falls back under. "
        "Above what one honest peer costs at once (a connection, a stream, a message of the largest size: 22).",
        min=1.0,
    )
    cost_ban_at: float = opt(
        6000.0,
        "A peer whose cost passes this is disconnected and refused for cost_ban_s (its refusals "
        "are counted in the ledger as over_cost_budget). Above cost_graylist_at.",
        min=1.0,
    )
    cost_ban_s: float = opt(
        600.0, "How long a ban for cost lasts, in seconds.", min=1.0, max=30 * 86400.0
    )


# -- verification of peers' rollout groups --

WORKER_BASE_MB = 256  # what the verification worker holds before its dataset cache (about 160)
AUTO_BYTE_BURST = -1  # verify.rate_bytes_burst: derived from our own rounds (0 turns it off)


@dataclass(frozen=True)
class VerifySection:
    """How peers' rollout groups are checked, and when a peer is throttled or banned.

    These bounds reject; the sampler's own staleness keys (sharing.max_version_lag,
    sharing.max_held_s) only skip accepted groups at batch time and are much tighter.
    """

    max_age_s: float = opt(
        3600.0,
        "Reject groups created longer ago than this, in seconds, by the sender's clock (0: no bound); the pull exchange pulls no announcement older. Generous: sampling skips groups held past sharing.max_held_s anyway.",
        min=0.0,
    )
    max_future_s: float = opt(
        300.0,
        "Reject groups dated further than this in the future (clock-skew allowance).",
        min=0.0,
    )
    max_version_rewind: int = opt(
        1000,
        "Reject a group more than this many policy versions behind the newest one its sender has sent us (-1: no bound). Compare sharing.max_version_lag, which measures against our own version.",
        min=-1,
    )
    reward_tolerance: float = opt(
        1e-6,
        "Largest difference allowed between a claimed reward and the one recomputed locally.",
        min=0.0,
        max=1.0,
    )
    # In the four rate keys 0 means the same: that limit is off.
    rate_groups_per_s: float = opt(
        100.0,
        "Sustained groups per second a peer may send (refill of its rate limit; 0: no group rate limit).",
        min=0.0,
    )
    rate_burst: int = opt(
        4096,
        "Groups a peer may send at once (size of its rate-limit bucket; 0: no group rate limit).",
        min=0,
    )
    rate_bytes_per_s: float = opt(
        262144.0,
        "Sustained bytes of group bodies a peer may send per second (refill of its byte budget; a real model's round of 8 long groups a few minutes apart is a few tens of KB/s; 0: no byte limit).",
        min=0.0,
    )
    rate_bytes_burst: int = opt(
        AUTO_BYTE_BURST,
        "Bytes of group bodies a peer may send at once (its byte bucket; at least the largest group a peer may send, 4 MiB). -1: auto, two of our own rounds at 16 bytes a token (generation questions x completions x max_new_tokens), at least 8 MiB; 0: no byte limit.",
        min=-1,
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
        1e-10,
        "A spot-checked token less likely than this under the declared sampler marks the group implausible. An honest sampler draws such a token with a chance of at most this times the vocabulary size, per token (the tokens below the bound hold at most that much mass together): 1e-10 bounds it at 5e-6 for SmolLM2's 49,152 tokens, where 1e-6 allowed up to 5 %.",
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
