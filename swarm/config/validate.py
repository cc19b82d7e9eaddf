"""Cross-field checks of a built `Config`: rules that involve more than one key (the task mix
and its preset, the catalogue, bootstrap addresses, [sync] against the node's role, the
verification worker's memory, a sampling temperature GRPO can learn from)."""

from __future__ import annotations

from collections.abc import Mapping

from swarm.config.nat import check_relays
from swarm.config.peers import AUTO_BYTE_BURST, WORKER_BASE_MB
from swarm.config.schema import Config
from swarm.core.errors import ConfigError
from swarm.p2p.addresses import PEER_ID_PATTERN
from swarm.wire.limits import MAX_GROUP_BYTES, MAX_MESSAGE_BYTES, MAX_PULLED_GROUP_BYTES

# What one honest peer costs at once in its cost budget (`swarm.p2p.libp2p.peer_costs.UNITS`):
# a connection (10), a stream (2), one RPC (1) carrying one gossip message (1) of the largest
# size (16 a MiB). `peer_costs.honest_peer_cost` is the same sum (tests check they agree).
HONEST_PEER_COST = 10.0 + 2.0 + 1.0 + 1.0 + 16.0 * MAX_MESSAGE_BYTES / 2**20


def check_cross_field(config: Config, origin) -> None:
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
    examples = origin("policy", "prompt_examples")
    for i, entry in enumerate(config.policy.prompt_examples):
        if (
            not isinstance(entry, Mapping)
            or set(entry) != {"question", "answer"}
            or not all(isinstance(v, str) and v for v in entry.values())
        ):
            raise ConfigError(
                f"{examples}: policy.prompt_examples[{i}] must be a table of two non-empty "
                "strings, question and answer"
            )
    _check_budgets(config, origin)
    if config.p2p.cost_ban_at <= config.p2p.cost_graylist_at:
        raise ConfigError(
            f"{origin('p2p', 'cost_ban_at')}: p2p.cost_ban_at ({config.p2p.cost_ban_at:g}) must be "
            f"above p2p.cost_graylist_at ({config.p2p.cost_graylist_at:g})"
        )
    p2p = config.p2p
    if p2p.exchange == "pull" and p2p.max_connections <= p2p.pull_lists:
        raise ConfigError(
            f"{origin('p2p', 'max_connections', 'p2p.pull_lists')}: p2p.max_connections ({p2p.max_connections}) must be above p2p.pull_lists ({p2p.pull_lists}): a node asks that many peers a round, and past its bound its fetches are refused"
        )
    for key in ("bootstrap", "relays"):
        for i, addr in enumerate(getattr(p2p, key)):
            if not isinstance(addr, str) or "/p2p/" not in addr:
                raise ConfigError(
                    f"{origin('p2p', key)}: p2p.{key}[{i}] must be a multiaddr ending in /p2p/<peer id>, got {addr!r}"
                )
    check_relays(config, origin)
    _check_sync(config, origin)
    v = config.verify
    if v.worker and v.task_cache_mb + WORKER_BASE_MB > v.worker_memory_mb // 2:
        raise ConfigError(
            f"{origin('verify', 'task_cache_mb', 'verify.worker_memory_mb')}: verify.task_cache_mb ({v.task_cache_mb}) plus {WORKER_BASE_MB} MB must fit in half of verify.worker_memory_mb ({v.worker_memory_mb}): a group that takes the worker past half its limit is rejected"
        )
    if config.sharing.shared_from != "any" and p2p.exchange != "pull":
        raise ConfigError(
            f"{origin('sharing', 'shared_from', 'p2p.exchange')}: sharing.shared_from = "
            f'{config.sharing.shared_from!r} needs p2p.exchange = "pull" (gossip delivers '
            "every peer's groups before their family is known)"
        )
    s = config.sharing
    if s.shared_weight_control != "fixed" and s.shared_normalizer != "parts":
        raise ConfigError(
            f"{origin('sharing', 'shared_weight_control', 'sharing.shared_normalizer')}: "
            f"sharing.shared_weight_control = {s.shared_weight_control!r} needs "
            'sharing.shared_normalizer = "parts" (under "batch" no part has a weight to set)'
        )
    if config.generation.temperature == 0 and config.node.role != "observer":
        raise ConfigError(
            f"{origin('generation', 'temperature', 'node.role')}: generation.temperature = 0 gives every group equal rewards and GRPO nothing to learn"
        )


def _check_budgets(config: Config, origin) -> None:
    """Budgets that would graylist, ban or starve an honest peer sending one connection and
    one group of the largest allowed size are refused, each in one line with the fix."""
    p2p, v = config.p2p, config.verify
    for key in ("cost_graylist_at", "cost_ban_at"):
        value = getattr(p2p, key)
        if value <= HONEST_PEER_COST:
            raise ConfigError(
                f"{origin('p2p', key)}: p2p.{key} ({value:g}) would punish every peer: one "
                f"connection and one message of the largest size already cost "
                f"{HONEST_PEER_COST:g}; set it above that (default "
                f"{3000 if key == 'cost_graylist_at' else 6000})"
            )
    largest = MAX_PULLED_GROUP_BYTES if p2p.exchange == "pull" else MAX_GROUP_BYTES
    burst = v.rate_bytes_burst
    if burst != AUTO_BYTE_BURST and 0 < burst < largest:
        raise ConfigError(
            f"{origin('verify', 'rate_bytes_burst')}: verify.rate_bytes_burst ({burst}) is "
            f"smaller than the largest group a peer may send ({largest} bytes with p2p.exchange "
            f"= {p2p.exchange!r}), so no such group would ever pass; set it to at least "
            f"{largest}, or -1 (automatic) or 0 (off)"
        )
    # a refill slower than one (largest) group per verify.max_age_s starves any sender: its
    # next group is too old by the time it may pass (0: groups never age out, none starves)
    window = v.max_age_s
    for key, need in (("rate_bytes_per_s", largest), ("rate_groups_per_s", 1)):
        if window == 0:
            break
        rate = getattr(v, key)
        if 0 < rate < need / window:
            raise ConfigError(
                f"{origin('verify', key)}: verify.{key} ({rate:g}) refills one group of the "
                f"largest size ({need} {'bytes' if need > 1 else 'group'}) more slowly than "
                f"verify.max_age_s ({window:g} s): set it to at least {need / window:.4g}, "
                f"or 0 (off)"
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
