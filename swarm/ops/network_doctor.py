"""`swarm-node doctor --network`: can this node reach its swarm, and can the swarm reach it?

With the node's own config, identity and swarm key, it starts a transport like the node's
(the same listen address, relays, allow-list and key; no bootstrap dials of its own, no peer
exchange, no periodic AutoNAT) and then:

1. dials each bootstrap address, one step at a time (`swarm.p2p.libp2p.probe`): a TCP
   connection, the peer's first bytes under the swarm key, the libp2p handshake (which checks
   the peer ID), Identify and peer exchange, and whether the peer keeps the connection;
2. asks the peers it reached to dial it back (AutoNAT), and reports the address they saw it at;
3. reports the reservation each relay of `p2p.relays` holds for it, or why there is none;
4. fetches each reached peer's served announcements, whose signed dates bound how far its
   clock is ahead of this machine's (nothing carries a peer's current time).

The rules (what each result means, the exit code) are `network_checks`. A node running on
the same config holds its listen port: the check then listens on another port of the same
address and says so. Without an identity in the run folder yet, it dials with a throwaway
one and says so (peers with an allow-list refuse it). It writes nothing.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from swarm.config.nat import NO_LISTEN
from swarm.core.errors import ConfigError, SwarmError
from swarm.core.identity import create_identity, identity_exists, load_identity, peer_id_of
from swarm.ops.doctor import Finding, ok, problem, warning
from swarm.ops.network_checks import (
    Outcome,
    PeerResult,
    autonat_finding,
    before_dial,
    bootstrap_findings,
    clock_finding,
    dial_result,
    relay_finding,
    seen_as_finding,
    summary,
    tcp_result,
)
from swarm.p2p.addresses import TcpAddress, listen_problem, parse_dial, parse_listen, parse_relay
from swarm.p2p.swarm_key import read_key_file

if TYPE_CHECKING:
    from libp2p.crypto.keys import KeyPair

DEFAULT_TIMEOUT_S = 5.0
AUTONAT_WAIT_S = 8.0  # a peer dials back within its dial-back timeout (5 s) per address
QUIET_LOGGERS = ("libp2p", "swarm.p2p", "multiaddr")


@dataclass(frozen=True)
class Target:
    """A configured peer address, as written and parsed."""

    addr: str
    tcp: TcpAddress


def network_findings(cfg, timeout: float = DEFAULT_TIMEOUT_S) -> list[Finding]:
    """Every finding of the network check, in the order printed; `timeout` bounds each step
    of each dial (TCP connection, first answer, handshake)."""
    from swarm.p2p.libp2p import TransportSettings
    from swarm.p2p.libp2p.probe import DiagnosticTransport

    bootstraps = _targets(cfg.p2p.bootstrap, "bootstrap", parse_dial)
    relays = _targets(cfg.p2p.relays, "relays", parse_relay)
    psk = read_key_file(cfg.p2p.psk_file).hex if cfg.p2p.psk_file else None
    key_pair, findings = _identity(cfg)
    listen, note = _listen_addr(cfg.p2p.listen)
    findings += [note] if note else []
    # the node's own keys where they decide what peers see (`swarm.node.transport_settings`
    # maps them all); dialling, peer exchange and AutoNAT run here, once
    settings = TransportSettings(
        listen_addr=listen,
        psk=psk,
        allow_list=tuple(cfg.p2p.allow_list),
        relays=tuple(cfg.p2p.relays),
        announce=tuple(cfg.p2p.announce),
        hole_punch=cfg.p2p.hole_punch,
        peer_exchange=False,
        autonat_interval=0,
        dial_timeout=timeout,
    )
    with _quiet_logs():
        transport = DiagnosticTransport(settings, key_pair=key_pair)
        try:
            transport.start()
        except SwarmError as exc:
            return [*findings, problem("transport", f"cannot start: {exc}")]
        try:
            findings += _checks(transport, cfg, bootstraps, relays, psk, timeout)
        finally:
            transport.close()
    return findings


def _checks(transport, cfg, bootstraps, relays, psk, timeout) -> list[Finding]:
    own_id = transport.peer_id
    results = _dial_all(transport, bootstraps, psk, timeout, tuple(cfg.p2p.allow_list))
    reached = [r for r in results if r.outcome is Outcome.REACHED]
    listens = cfg.p2p.listen != NO_LISTEN
    circuits = [a for a in transport.listen_addrs() if "/p2p-circuit" in a]
    findings = bootstrap_findings(results)
    findings.append(summary(results, listens, len(circuits)))
    seen = seen_as_finding(reached)
    findings += [seen] if seen else []
    findings.append(_autonat(transport, listens, reached))
    findings += [_relay(r, circuits, psk, timeout, own_id) for r in relays]
    findings.append(_clock(transport, reached, cfg, timeout))
    return findings


# ------------------------------------------------------------------ configuration


def _targets(addrs, key: str, parse) -> list[Target]:
    targets = []
    for i, addr in enumerate(addrs):
        try:
            targets.append(Target(addr, parse(addr)))
        except ConfigError as exc:
            raise ConfigError(f"p2p.{key}[{i}]: {exc}") from None
    return targets


def _identity(cfg) -> tuple[KeyPair, list[Finding]]:
    """The run folder's identity, or a throwaway one (said so) where there is none yet."""
    path = cfg.run_dir / "identity.key"
    if identity_exists(path):
        key_pair = load_identity(path)
        return key_pair, [ok("identity", f"{peer_id_of(key_pair)} ({path})")]
    key_pair = create_identity()
    return key_pair, [
        warning(
            "identity",
            f"none yet at {path}: dialled as a throwaway peer {peer_id_of(key_pair)}, which "
            "peers with an allow-list refuse ('swarm-node init' makes the node's own)",
        )
    ]


def _listen_addr(listen: str) -> tuple[str, Finding | None]:
    """Where the check listens: the node's address, or another port of it while that one is
    in use (a node running on this config holds it)."""
    if listen == NO_LISTEN:
        return listen, None
    address = parse_listen(listen)
    trouble = listen_problem(address)
    if trouble is None:
        return listen, None
    if address.port != 0 and "in use" in trouble:
        family = "ip6" if address.family == socket.AF_INET6 else "ip4"
        other = f"/{family}/{address.host}/tcp/0"
        return other, ok(
            "listen",
            f"{listen} is in use (the node running?): the check listens on {other} instead, "
            "and AutoNAT's answer is for that port",
        )
    raise ConfigError(f"p2p.listen = {listen!r}: {trouble}")


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    """The libraries' own warnings about the failures the findings describe, silenced."""
    loggers = [logging.getLogger(name) for name in QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL + 1)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)


# ------------------------------------------------------------------ dialling


def _dial_all(transport, targets, psk, timeout, allow_list) -> list[PeerResult]:
    """Every bootstrap address's result, in the config's order: the first exchanges side by
    side, then the libp2p dials of those that answered with the same key."""
    from swarm.p2p.libp2p.probe import key_check

    own_id = transport.peer_id
    early = {i: before_dial(t.tcp.peer_id, own_id, allow_list) for i, t in enumerate(targets)}
    todo = [i for i, verdict in early.items() if verdict is None]
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(todo)))) as pool:
        firsts = dict(zip(todo, pool.map(lambda i: _first(targets[i], psk, timeout), todo)))
    results = []
    for i, target in enumerate(targets):
        verdict, observed, local_ip = early[i], "", ""
        if verdict is None:
            first = firsts[i]
            key = key_check(first.data, psk) if first.data else None
            where = f"{target.tcp.host}:{target.tcp.port}"
            verdict, local_ip = tcp_result(first, key, where, timeout), first.local_ip
        if verdict is None:
            report = transport.dial_report(target.tcp.peer_id, _bare(target.addr), timeout)
            verdict, observed = dial_result(report, own_id, psk is not None), report.observed
        peer_id = target.tcp.peer_id
        results.append(PeerResult(peer_id, target.addr, *verdict, observed, local_ip))
    return results


def _first(target: Target, psk: str | None, timeout: float):
    from swarm.p2p.libp2p.probe import first_bytes

    tcp = target.tcp
    return first_bytes(tcp.host, tcp.port, psk, timeout, tcp.family)


def _bare(addr: str) -> str:
    return addr.rsplit("/p2p/", 1)[0]


def _autonat(transport, listens: bool, reached: list[PeerResult]) -> Finding:
    # asked first: a node found private hands out its circuit addresses only
    addrs = [_bare(a) for a in transport.listen_addrs() if "/p2p-circuit" not in a]
    if listens and reached:
        transport.check_reachability(AUTONAT_WAIT_S)
    seen = list(dict.fromkeys(r.observed.split("/")[2] for r in reached if r.observed))
    return autonat_finding(listens, len(reached), transport.autonat_answers(), addrs, seen)


def _relay(relay: Target, circuits: list[str], psk, timeout, own_id: str) -> Finding:
    from swarm.p2p.libp2p.probe import key_check

    held = next((c for c in circuits if f"/p2p/{relay.tcp.peer_id}/p2p-circuit" in c), None)
    tried = None
    if held is None:
        first = _first(relay, psk, timeout)
        key = key_check(first.data, psk) if first.data else None
        tried = tcp_result(first, key, f"{relay.tcp.host}:{relay.tcp.port}", timeout)
    return relay_finding(relay.addr, held, tried, own_id)


def _clock(transport, reached: list[PeerResult], cfg, timeout: float) -> Finding:
    newest = {}
    for r in reached:
        created = _newest_announcement(transport, r.peer_id, timeout)
        if created is not None:
            newest[r.peer_id] = created
    return clock_finding(newest, time.time(), cfg.verify.max_future_s, cfg.verify.max_age_s)


def _newest_announcement(transport, peer_id: str, timeout: float) -> float | None:
    """The newest `created_at` among the announcements `peer_id` serves; None for none."""
    from swarm.wire import ANNOUNCEMENTS_KEY, decode_announcement, unpack_announcements

    try:
        served = transport.fetch_blob(peer_id, ANNOUNCEMENTS_KEY, timeout)
        items, _hints = unpack_announcements(served)
        dates = [decode_announcement(item.body).created_at for item in items]
    except SwarmError:
        return None
    return max(dates, default=None)
