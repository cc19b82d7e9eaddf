"""Retired config keys: each with the key that replaced it, or why it is gone; and values
whose meaning changed.

A config file, an environment variable or a `--set` naming a retired key is refused in one
line that names its replacement (`swarm.config.build`), so an old config fails plainly
instead of being read as something it no longer means. Renames are kept here for good.

A value that a key still takes but that now means something else (`CHANGED`) is not
refused, since it may be meant: `config` and `join` say so in one WARNING line naming the
change (`changed_meanings`, run by `swarm.config.preflight`).
"""

from __future__ import annotations

from collections.abc import Mapping

# old "section.key" -> new "section.key"
RENAMED: dict[str, str] = {
    "training.local_groups": "training.own_groups",
    "training.shared_groups": "sharing.shared_groups",
    "training.shared_from": "sharing.shared_from",
    "training.per_peer_cap": "sharing.per_peer_cap",
    "training.max_version_gap": "sharing.max_version_lag",
    "training.max_age_s": "sharing.max_held_s",
    "training.pool_size": "sharing.pool_size",
    "training.pool_mb": "sharing.pool_mb",
    "training.fresh_rounds": "sharing.fresh_rounds",
    "training.shared_sampling": "sharing.shared_sampling",
    "training.need_floor": "sharing.need_floor",
    "training.need_window": "sharing.need_window",
    "training.shared_advantage": "sharing.shared_advantage",
    "training.shared_shaping": "sharing.shared_shaping",
    "training.shared_weight": "sharing.shared_weight",
    "training.shared_normalizer": "sharing.shared_normalizer",
    "verify.max_version_lag": "verify.max_version_rewind",
}

# old "section.key" -> why it has no replacement
REMOVED: dict[str, str] = {
    "training.shuffle_shared_rewards": (
        "the negative control of an experiment, no node setting: an experiment's arm sets it "
        "(lab.experiment, the 'shuf' option; RoundLoop.shuffle_shared_rewards)"
    ),
}


def retired(section: str, key: str) -> str | None:
    """What to tell the user of a retired `section.key`, or None if it is not retired."""
    dotted = f"{section}.{key}"
    if dotted in RENAMED:
        return f"{dotted} is now {RENAMED[dotted]}"
    if dotted in REMOVED:
        return f"{dotted} is no longer a config key: {REMOVED[dotted]}"
    return None


# "section.key" -> (value, what it means now, what it meant before)
CHANGED: dict[str, tuple[float, str, str]] = {
    "verify.rate_bytes_burst": (
        0,
        "no byte limit",
        "it meant automatic (two of our own rounds, at least 8 MiB), which is now -1",
    ),
    "verify.rate_bytes_per_s": (0, "no byte limit", "it meant a byte budget that never refilled"),
    "verify.rate_groups_per_s": (
        0,
        "no group rate limit",
        "it meant a group budget that never refilled",
    ),
    "verify.rate_burst": (0, "no group rate limit", "it was refused (the least was 1)"),
}


def changed_meanings(values: Mapping[str, object]) -> dict[str, str]:
    """For each `section.key` of `values` (effective values) whose value's meaning changed, one
    line saying what it means now and what it meant before."""
    return {
        dotted: f"{dotted} = {value:g} now means {now}; before, {before}"
        for dotted, (value, now, before) in CHANGED.items()
        if dotted in values and values[dotted] == value
    }
