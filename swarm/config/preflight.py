"""Checking a whole config before a node loads anything: every config error `join` would hit.

`swarm-node join` runs these checks before it loads a model (which takes many seconds), and
`swarm-node config` runs the very same ones, so a config that `config` accepts does not fail
at start for a reason `config` could have named. Each problem is a `ConfigError` of one line
that names who set the value (the file, --set, an env var or a flag), the key, and the fix.

Cheapest checks first, so most mistakes are refused within a second or two:

1. the role; a value whose meaning changed is one WARNING line (`renames.CHANGED`); the run
   folder can be created and written;
2. the listen address parses and its port is free on an address of this machine; the
   bootstrap addresses and the allow-list's peer IDs parse; the metrics address parses and
   its port is free; TensorBoard is installed when asked for;
3. the swarm key file reads; the run folder's identity, if any, reads (made private if
   group or others could read it) and is on the allow-list (a member without its identity
   would otherwise make a new, unlisted one); a run folder with a ledger has its identity;
   the run folder's ledger belongs to this model;
4. the task mix builds;
5. the model: a local folder holds a config, weights and a tokenizer; a hub model is in the
   cache or the hub answers within seconds (no identity or ledger is made before); CUDA and
   vLLM are there when asked for; the task mix's prompts (a sample of the questions, formatted as the node
   formats them) plus `generation.max_new_tokens` fit the model's context (an observer has no
   model: none of these apply to it);
6. the memory plan: a round's peak memory, estimated from the model's config.json, fits the
   device (`swarm.config.memory`).

Deliberately not here: whether another process holds the run folder (`swarm.node.runlock`),
or anything that needs the model's weights.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from pathlib import Path

from swarm.config.memory import check_memory
from swarm.config.nat import NO_LISTEN, check_own_relay, warn_relays
from swarm.config.renames import CHANGED, changed_meanings
from swarm.config.schema import Config, longest_prompt, task_mix
from swarm.core.errors import ConfigError, SwarmError
from swarm.core.install import GPU_INSTALL_HINT
from swarm.p2p.addresses import (
    TcpAddress,
    check_peer_id,
    listen_problem,
    parse_dial,
    parse_listen,
    parse_relay,
)

logger = logging.getLogger(__name__)

ROLES = ("trainer", "generator", "observer")
OBSERVER = "observer"  # the role without a model
OBSERVER_MODEL = "none (observer)"  # what an observer's ledger says its model is

Where = Callable[..., str]


def _nowhere(*_keys: str) -> str:
    return "config"


def check_role(config: Config, where: Where = _nowhere) -> None:
    """Refuse a role this version does not have."""
    if config.node.role not in ROLES:
        raise ConfigError(
            f"{where('node.role')}: node.role = {config.node.role!r} is not a role; use "
            "'trainer', 'generator' or 'observer'"
        )


def preflight(config: Config, where: Where = _nowhere) -> None:
    """Every check, cheapest first; raises the first problem as a `ConfigError`.

    `where(*keys)` names who set those keys (`swarm.config.load.LoadedConfig.where`)."""
    for check in (
        check_role,
        warn_changed_meanings,
        check_run_folder,
        check_addresses,
        check_monitor,
        check_swarm_key,
        check_identity,
        check_ledger,
        check_tasks,
        check_model,
        check_device,
        check_context,
        check_memory,
    ):
        check(config, where)


def warn_changed_meanings(config: Config, where: Where = _nowhere) -> None:
    """One WARNING line for each key set to a value whose meaning changed, naming who set it."""
    values = {}
    for dotted in CHANGED:
        section, _, key = dotted.partition(".")
        values[dotted] = getattr(getattr(config, section), key)
    for dotted, line in changed_meanings(values).items():
        logger.warning("%s: %s", where(dotted), line)


def check_run_folder(config: Config, where: Where = _nowhere) -> None:
    """The run folder exists as a writable folder, or can be created."""
    path = Path(config.run_dir)
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    fix = "choose a writable node.run_dir (--run-dir)"
    if not existing.is_dir():
        what = "is a file" if existing == path else f"cannot be created: {existing} is a file"
        raise ConfigError(f"{where('node.run_dir')}: run folder {path} {what}, not a folder: {fix}")
    if not os.access(existing, os.W_OK | os.X_OK):
        verb = (
            "is not writable"
            if existing == path
            else f"cannot be created: {existing} is not writable"
        )
        raise ConfigError(f"{where('node.run_dir')}: run folder {path} {verb}: {fix}")


def check_addresses(config: Config, where: Where = _nowhere) -> None:
    """Listen address (parses, port free here; '' listens on nothing), bootstrap and relay
    addresses, allow-list IDs; what the NAT keys do poorly is logged (`nat.warn_relays`)."""
    p2p = config.p2p
    if p2p.listen != NO_LISTEN:
        try:
            address = parse_listen(p2p.listen)
        except ConfigError as e:
            raise ConfigError(f"{where('p2p.listen')}: p2p.listen: {e}") from None
        problem = listen_problem(address)
        if problem:
            raise ConfigError(f"{where('p2p.listen')}: p2p.listen = {p2p.listen!r}: {problem}")
    for key, parse in (("bootstrap", parse_dial), ("relays", parse_relay)):
        for i, addr in enumerate(getattr(p2p, key)):
            try:
                parse(addr)
            except ConfigError as e:
                raise ConfigError(f"{where('p2p.' + key)}: p2p.{key}[{i}]: {e}") from None
    warn_relays(config)
    for i, addr in enumerate(p2p.announce):
        try:
            parse_listen(addr)
        except ConfigError as e:
            raise ConfigError(f"{where('p2p.announce')}: p2p.announce[{i}]: {e}") from None
    for i, peer in enumerate(p2p.allow_list):
        try:
            check_peer_id(peer, "")
        except ConfigError as e:
            raise ConfigError(f"{where('p2p.allow_list')}: p2p.allow_list[{i}]:{e}") from None


def check_swarm_key(config: Config, where: Where = _nowhere) -> None:
    """The private swarm key file, if one is configured, reads as a 32-byte pnet key."""
    if not config.p2p.psk_file:
        return
    from swarm.p2p.swarm_key import read_key_file

    try:
        read_key_file(config.p2p.psk_file)
    except SwarmError as e:
        raise ConfigError(
            f"{where('p2p.psk_file')}: p2p.psk_file: {e}: give the swarm's key file (a private "
            "cluster's swarm.key from 'swarm-node cluster init'), or '' for an open swarm"
        ) from None


def check_identity(config: Config, where: Where = _nowhere) -> None:
    """The run folder's identity reads (made private if others could read it); with an
    allow-list it must exist and be on it; a run folder holding a ledger must hold its
    identity (a lost key is not replaced silently by a new peer)."""
    path = Path(config.run_dir) / "identity.key"
    peer_id = None
    if not path.exists() and not config.ledger.url and (path.parent / "ledger.sqlite").exists():
        raise ConfigError(
            f"{where('node.run_dir')}: {path.parent} holds a ledger but no identity.key: this "
            "node's identity was lost, and a new one would be another peer; put its identity.key "
            "back (from a backup), or use a new node.run_dir"
        )
    if path.exists():
        from swarm.core.identity import load_identity, peer_id_of

        try:
            peer_id = peer_id_of(load_identity(path))
        except SwarmError as e:
            raise ConfigError(f"{where('node.run_dir')}: {e}") from None
    problem = identity_problem(path, peer_id, config.p2p.allow_list)
    if problem:
        raise ConfigError(f"{where('p2p.allow_list', 'node.run_dir')}: {problem}")
    check_own_relay(config, peer_id, where)


def identity_problem(path: Path, peer_id: str | None, allowed: list[str]) -> str | None:
    """Why the identity at `path` (peer `peer_id`, None if there is none yet) cannot be used
    with this allow-list: a node not on its own allow-list would run cut off, unlisted."""
    if not allowed:
        return None
    if peer_id is None:
        return (
            f"no identity at {path}, but p2p.allow_list is set: a new identity would not be "
            "on it; point node.run_dir at the folder holding this member's identity.key"
        )
    if peer_id in allowed:
        return None
    shown = ", ".join(allowed[:4]) + (f", ... ({len(allowed)} in all)" if len(allowed) > 4 else "")
    return (
        f"this node's identity {path} is peer {peer_id}, which is not on p2p.allow_list "
        f"({shown}): use this member's own identity.key, or add the peer ID to every "
        "member's allow-list"
    )


def check_ledger(config: Config, where: Where = _nowhere) -> None:
    """A run folder's existing ledger belongs to a node of the configured model (an observer's:
    to an observer)."""
    if config.ledger.url or not (Path(config.run_dir) / "ledger.sqlite").exists():
        return
    from swarm.ledger import Ledger, get_meta

    ledger = Ledger(config.ledger_url, create=False)
    try:
        with ledger.reader() as session:
            model = get_meta(session, "model")
    except SwarmError:
        return  # not readable as a ledger: opening it at start says why
    finally:
        ledger.close()
    problem = ledger_model_problem(config, model)
    if problem:
        raise ConfigError(f"{where('policy.model', 'node.run_dir')}: {problem}")


def ledger_model_problem(config: Config, model: str | None) -> str | None:
    """Why a run folder whose ledger names `model` cannot serve this config's node, or None."""
    expected = OBSERVER_MODEL if config.node.role == OBSERVER else config.policy.model
    if model is None or model == expected:
        return None
    return (
        f"{config.run_dir} belongs to a node of model {model!r}, not {expected!r}: "
        "use another node.run_dir"
    )


def check_model(config: Config, where: Where = _nowhere) -> None:
    """A local model folder holds a config, weights and a tokenizer; a hub model is cached or
    the hub is reachable; names are well formed."""
    from swarm.policy.source import model_name_problem, model_problem

    if config.node.role == OBSERVER:
        return
    problem = model_name_problem(config.policy.model_name)
    if problem:
        raise ConfigError(
            f"{where('policy.model_name')}: policy.model_name = "
            f"{config.policy.model_name!r}: {problem}"
        )
    problem = model_problem(config.policy.model)
    if problem:
        raise ConfigError(
            f"{where('policy.model')}: policy.model = {config.policy.model!r}: {problem}"
        )


def check_device(config: Config, where: Where = _nowhere) -> None:
    """CUDA when the device or the vLLM backend needs it; vLLM installed when asked for."""
    device, backend = config.policy.device, config.generation.backend
    if config.node.role == OBSERVER:
        return
    if backend == "vllm" and importlib.util.find_spec("vllm") is None:
        raise ConfigError(
            f"{where('generation.backend')}: generation.backend = 'vllm' needs the vllm package: "
            f"{GPU_INSTALL_HINT}, or use generation.backend = 'transformers'"
        )
    if not (device.startswith("cuda") or backend == "vllm"):
        return
    import torch

    if not torch.cuda.is_available():
        key = "policy.device" if device.startswith("cuda") else "generation.backend"
        value = device if device.startswith("cuda") else backend
        fix = "use 'auto' or 'cpu'" if key == "policy.device" else "use 'transformers'"
        raise ConfigError(
            f"{where(key)}: {key} = {value!r} needs CUDA, which this machine lacks: {fix}"
        )


def check_tasks(config: Config, where: Where = _nowhere) -> None:
    """Every dataset of the task mix builds with its config."""
    from swarm.tasks import validate_mix

    mix = task_mix(config)
    try:
        validate_mix(mix)
    except SwarmError as e:
        keys = where("tasks.mix", "tasks.preset")
        raise ConfigError(f"{keys}: task mix: {e}: {_mix_fix(mix)}") from None


def _mix_fix(mix) -> str:
    """What to do about a task mix that does not build: a dataset name, or its config."""
    import difflib

    from swarm.tasks.datasets import dataset_names

    names = dataset_names()
    for entry in mix:
        if entry.dataset not in names:
            close = difflib.get_close_matches(entry.dataset, sorted(names), n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            return f"{hint}tasks.mix takes reasoning-gym dataset names (e.g. 'chain_sum')"
    return "fix the dataset's config in tasks.mix (its keys are the reasoning-gym dataset's)"


def check_context(config: Config, where: Where = _nowhere) -> None:
    """The longest prompt of a sample of the mix's questions, plus the completion budget,
    fits the model's context (positions); skipped for a model that is not on this machine."""
    from swarm.policy.source import context_source

    if config.node.role == OBSERVER:
        return
    source = context_source(config.policy.model)
    if source is None:
        return
    limit = source.max_positions
    if limit is None:
        return
    try:
        tokenizer = source.tokenizer()
    except (OSError, ValueError, KeyError, IndexError, TypeError) as e:
        raise ConfigError(
            f"{where('policy.model')}: policy.model = {config.policy.model!r}: cannot load its "
            f"tokenizer: {e.__class__.__name__}: {e}"
        ) from None
    longest, dataset = longest_prompt(config, tokenizer)
    budget = config.generation.max_new_tokens
    if longest + budget <= limit:
        return
    keys = where("tasks.preset", "tasks.mix", "generation.max_new_tokens", "policy.model")
    if longest < limit:
        fix = (
            f"lower generation.max_new_tokens to at most {limit - longest}, "
            "or use a model with a longer context"
        )
    else:
        fix = (
            'use a task mix with shorter questions (tasks.preset = "easy") '
            "or a model with a longer context"
        )
    raise ConfigError(
        f"{keys}: prompts of the task mix reach {longest} tokens ({dataset}), which with "
        f"generation.max_new_tokens = {budget} exceeds the {limit} positions of "
        f"{config.policy.model!r}: {fix}"
    )


def check_monitor(config: Config, where: Where = _nowhere) -> None:
    """The metrics address parses and its port is free here; TensorBoard is installed if asked."""
    m = config.monitor
    if m.tensorboard:
        from swarm.monitor.explog import TENSORBOARD_MISSING, tensorboard_available

        if not tensorboard_available():
            raise ConfigError(f"{where('monitor.tensorboard')}: {TENSORBOARD_MISSING}")
    if not m.metrics:
        return
    import ipaddress
    import socket

    from swarm.monitor.metrics import parse_metrics_address

    try:
        host, port = parse_metrics_address(m.metrics)
    except ConfigError as e:
        raise ConfigError(f"{where('monitor.metrics')}: {e}") from None
    try:
        v6 = ipaddress.ip_address(host).version == 6
    except ValueError:
        v6 = False  # a host name: bound as IPv4, as the metrics server does
    family = socket.AF_INET6 if v6 else socket.AF_INET
    problem = listen_problem(TcpAddress(host, port, family))
    if problem:
        raise ConfigError(f"{where('monitor.metrics')}: monitor.metrics = {m.metrics!r}: {problem}")
