"""The rules of `swarm-node doctor --network`: what each dial, AutoNAT answer, relay and dated
announcement means for a node, as findings (`swarm.ops.doctor.Finding`).

Pure: plain values in (`swarm.p2p.probe_types`), findings out; `network_doctor` does the
dialling. One line per bootstrap address, saying how far a dial got:

    reached | refused | timed out | unreachable | wrong swarm key | wrong peer ID |
    not on its allow-list | other protocol version | failed | this node itself |
    not on this node's allow-list

The node can take part (`takes_part`, exit code 0) when at least one bootstrap peer was
reached with the same swarm key and swarm-node's protocols, and it stayed connected; a
node with no bootstrap peer (other than itself) can take part as the first node of a swarm
when others can reach it: it listens, or a relay holds a reservation for it. Every other
finding (AutoNAT, the addresses peers see, relays, the clock) is ok or a warning: it says
how well the node takes part, not whether.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from swarm.ops.doctor import Finding, ok, problem, warning
from swarm.p2p.probe_types import DialReport, FirstBytes, KeyCheck, Tcp
from swarm.wire.streams import BLOB_PROTOCOL, PEER_EXCHANGE_PROTOCOL

OUR_PROTOCOLS = (BLOB_PROTOCOL, PEER_EXCHANGE_PROTOCOL)
SWARM_PREFIX = "/swarm/"
CONFIRMATIONS = 3  # agreeing AutoNAT answers that decide (swarm.p2p.libp2p.reachability)
AHEAD_NOTED_S = 1.0  # an announcement dated further ahead than this is worth a word


class Outcome(enum.StrEnum):
    REACHED = "reached"
    REFUSED = "refused"
    TIMED_OUT = "timed out"
    UNREACHABLE = "unreachable"
    WRONG_KEY = "wrong swarm key"
    WRONG_PEER = "wrong peer ID"
    NOT_ALLOWED = "not on its allow-list"
    OTHER_VERSION = "other protocol version"
    FAILED = "failed"
    ITSELF = "this node itself"
    NOT_ALLOWED_HERE = "not on this node's allow-list"


@dataclass(frozen=True)
class PeerResult:
    """How far a dial to one bootstrap address got: its outcome, the rest of its line, the
    address the peer saw this node at (reached peers only), and this machine's own IP on the
    connection."""

    peer_id: str
    addr: str
    outcome: Outcome
    detail: str
    observed: str = ""
    local_ip: str = ""


def short(peer_id: str) -> str:
    """A peer ID as `swarm-node peers` shows it: the last ten characters."""
    return f"…{peer_id[-10:]}" if len(peer_id) > 10 else peer_id


# ------------------------------------------------------------------ one bootstrap address


def before_dial(peer_id: str, own_id: str, allow_list: Sequence[str]) -> tuple[Outcome, str] | None:
    """What is known without dialling: the node itself, or a peer its own allow-list refuses."""
    if peer_id == own_id:
        return Outcome.ITSELF, "the address names this node's own peer ID: not dialled"
    if allow_list and peer_id not in allow_list:
        return Outcome.NOT_ALLOWED_HERE, (
            "this node's p2p.allow_list does not name it, so this node would close the "
            "connection itself: add its peer ID there"
        )
    return None


def tcp_result(
    first: FirstBytes, key: KeyCheck | None, where: str, timeout: float
) -> tuple[Outcome, str] | None:
    """The verdict of the first exchange (`key`: `key_check` of what the peer wrote); None
    when it spoke libp2p under this node's swarm key, and the dial goes on."""
    if first.tcp is Tcp.REFUSED:
        return Outcome.REFUSED, (
            f"nothing listens at {where} (the peer is down, or listens on another port)"
        )
    if first.tcp is Tcp.TIMED_OUT:
        return Outcome.TIMED_OUT, (
            f"no answer to the TCP connection within {timeout:g} s (a firewall drops it, "
            "the address is wrong, or the machine is off)"
        )
    if first.tcp is Tcp.SILENT:
        return Outcome.TIMED_OUT, (
            f"it accepted the TCP connection but said nothing within {timeout:g} s "
            "(no libp2p listener there, or one too busy to answer)"
        )
    if first.tcp is Tcp.UNREACHABLE:
        return Outcome.UNREACHABLE, f"{first.detail} (no route from here to {where})"
    if first.tcp is Tcp.CLOSED:
        return Outcome.FAILED, f"it closed the connection without a word ({first.detail})"
    return _key_result(key, len(first.data))


def _key_result(key: KeyCheck | None, size: int) -> tuple[Outcome, str] | None:
    if key is KeyCheck.SAME or key is None:
        return None
    texts = {
        KeyCheck.PEER_HAS_NONE: "it has none (it speaks libp2p in plain text) and this node "
        "has p2p.psk_file: give both the same key, or neither",
        KeyCheck.OTHER_KEY: "its first bytes do not decrypt to libp2p's with this node's key "
        "(p2p.psk_file): it has another key (or is no libp2p node)",
        KeyCheck.NODE_HAS_NONE: "it runs a private swarm (its first bytes are not plain "
        "libp2p) and this node has no key: set p2p.psk_file to the swarm's swarm.key",
    }
    if key in texts:
        return Outcome.WRONG_KEY, texts[key]
    return Outcome.FAILED, f"it wrote only {size} bytes, then closed (not a libp2p node?)"


def dial_result(report: DialReport, own_id: str, has_key: bool) -> tuple[Outcome, str]:
    """The verdict of the libp2p dial that followed a matching key."""
    if report.other_peer:
        return Outcome.WRONG_PEER, (
            f"another peer answers there ({report.other_peer}): fix the /p2p/ part of the "
            "address (the peer has a new identity?)"
        )
    if report.error:
        return Outcome.FAILED, f"the libp2p handshake failed after the key matched: {report.error}"
    if not report.kept:
        return Outcome.NOT_ALLOWED, (
            f"it closed the connection once the handshake named this node ({own_id}): add that "
            "peer ID to its p2p.allow_list (or it banned this node: 'swarm-node unban' there)"
        )
    mismatch = protocol_mismatch(report.protocols, report.px_unsupported)
    if mismatch:
        return Outcome.OTHER_VERSION, mismatch
    key = "same swarm key" if has_key else "no swarm key on either side"
    peers = "" if report.px_peers is None else f", {report.px_peers} peers in its peer exchange"
    return Outcome.REACHED, f"in {1000 * report.seconds:.0f} ms: {key}{peers}"


def protocol_mismatch(protocols: Sequence[str], px_unsupported: bool) -> str | None:
    """Why a peer's protocols (its Identify answer) are not this node's; None when it speaks
    them (or, without an answer, nothing says otherwise)."""
    ours = ", ".join(OUR_PROTOCOLS)
    if not protocols:
        if px_unsupported:
            return f"it does not speak {PEER_EXCHANGE_PROTOCOL} (this node speaks {ours})"
        return None
    if all(p in protocols for p in OUR_PROTOCOLS):
        return None
    theirs = sorted(p for p in protocols if p.startswith(SWARM_PREFIX))
    if theirs:
        return (
            f"it speaks {', '.join(theirs)}, this node {ours}: run the swarm's swarm-node "
            "version (or ask the peer to)"
        )
    return f"it speaks none of swarm-node's protocols ({ours}): a libp2p peer of another program?"


def bootstrap_findings(results: Sequence[PeerResult]) -> list[Finding]:
    """One line per bootstrap address: ok when reached (or this node itself); a failed one
    is a warning when another was reached, else a problem."""
    any_reached = any(r.outcome is Outcome.REACHED for r in results)
    findings = []
    for r in results:
        check = f"bootstrap {r.addr}"
        message = f"{r.outcome}: {r.detail}"
        if r.outcome in (Outcome.REACHED, Outcome.ITSELF):
            findings.append(ok(check, message))
        else:
            findings.append((warning if any_reached else problem)(check, message))
    return findings


# ------------------------------------------------------------------ the node as a whole


def takes_part(results: Sequence[PeerResult], listens: bool, reservations: int) -> bool:
    """Whether the node can take part (see the module's docstring)."""
    dialled = [r for r in results if r.outcome is not Outcome.ITSELF]
    if dialled:
        return any(r.outcome is Outcome.REACHED for r in dialled)
    return listens or reservations > 0


def summary(results: Sequence[PeerResult], listens: bool, reservations: int) -> Finding:
    """The verdict the exit code follows, in one line."""
    dialled = [r for r in results if r.outcome is not Outcome.ITSELF]
    reached = sum(r.outcome is Outcome.REACHED for r in dialled)
    if dialled and reached:
        return ok("network", f"can take part: {reached} of {len(dialled)} bootstrap peers reached")
    if dialled:
        return problem(
            "network",
            f"cannot take part: none of {len(dialled)} bootstrap addresses reached; fix what "
            "their lines say",
        )
    if takes_part(results, listens, reservations):
        how = "it listens" if listens else "a relay holds a reservation for it"
        return ok(
            "network",
            f"no bootstrap peer but itself: a first node, which peers find when they dial it "
            f"({how}); give others its address as their p2p.bootstrap",
        )
    return problem(
        "network",
        "cannot take part: no bootstrap peer (p2p.bootstrap), it listens on nothing "
        "(p2p.listen = '') and no relay holds a reservation for it: nobody can reach it",
    )


def seen_as_finding(results: Sequence[PeerResult]) -> Finding | None:
    """Where peers saw this node's connections come from (their Identify answers), and
    whether that is another IP than this machine's own on those connections (NAT)."""
    seen: dict[str, list[str]] = {}
    translated: set[str] = set()
    for r in results:
        ip = _ip_of(r.observed)
        if not ip:
            continue
        seen.setdefault(ip, []).append(short(r.peer_id))
        if r.local_ip and r.local_ip != ip:
            translated.add(r.local_ip)
    if not seen:
        return None
    where = "; ".join(f"{ip} (by {', '.join(peers)})" for ip, peers in seen.items())
    message = f"peers see this node's connections come from {where}"
    if translated:
        message += (
            f", not from this machine's own {', '.join(sorted(translated))}: a router "
            "translates them (NAT); peers dial it only where AutoNAT says so, else through "
            "p2p.relays"
        )
    return ok("seen as", message)


def _ip_of(addr: str) -> str:
    parts = addr.split("/")
    return parts[2] if len(parts) > 2 and parts[1] in ("ip4", "ip6") else ""


def _specific(host: str) -> bool:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    return not (ip.is_unspecified or ip.is_loopback)


def autonat_finding(
    listens: bool,
    peers_reached: int,
    answers: Mapping[str, bool],
    addrs: Sequence[str],
    seen_ips: Sequence[str] = (),
) -> Finding:
    """AutoNAT's verdict from the answers of the peers asked to dial this node back at
    `addrs`; `seen_ips`: where those peers saw it (they dial back only there)."""
    if not listens:
        return ok(
            "AutoNAT",
            "not asked: this node listens on nothing (p2p.listen = ''): peers reach it only "
            "through p2p.relays",
        )
    if not peers_reached:
        return warning("AutoNAT", "not asked: no peer reached to dial this node back")
    where = ", ".join(addrs) or "its listen address"
    n = len(answers)
    back = sum(answers.values())
    elsewhere = [a for a in addrs if _specific(_ip_of(a)) and _ip_of(a) not in seen_ips]
    if not n and seen_ips and elsewhere:
        return warning(
            "AutoNAT",
            f"undecided: peers dial back only at the IP they see this node at "
            f"({', '.join(seen_ips)}), not at {', '.join(elsewhere)}: listen on 0.0.0.0, or "
            "set p2p.announce to the address peers can dial",
        )
    if not n:
        return ok(
            "AutoNAT",
            f"undecided: no peer answered (a peer answers a node once a minute; peers of "
            f"other programs may not speak AutoNAT); asked to dial {where}",
        )
    if back >= CONFIRMATIONS and back > n - back:
        return ok("AutoNAT", f"public: {back} of {n} peers dialled this node back at {where}")
    if n - back >= CONFIRMATIONS and n - back > back:
        return warning(
            "AutoNAT",
            f"private: {n - back} of {n} peers could not dial this node back at {where}: it "
            "pulls, but peers pull from it only through a relay (p2p.relays), or forward the "
            "port on the router and set p2p.announce",
        )
    level = ok if back else warning
    return level(
        "AutoNAT",
        f"undecided: {back} of {n} peers dialled this node back at {where} "
        f"({CONFIRMATIONS} agreeing answers decide; a running node asks every "
        "p2p.autonat_interval s)",
    )


def relay_finding(
    relay: str, circuit: str | None, tried: tuple[Outcome, str] | None, own_id: str
) -> Finding:
    """One line per `p2p.relays` entry: the reservation held (`circuit`), or why there is
    none (`tried`: the first exchange's verdict; None when the relay answered with this
    node's key)."""
    check = f"relay {relay}"
    if circuit:
        return ok(check, f"reservation held: peers reach this node at {circuit}")
    if tried is not None:
        outcome, detail = tried
        return warning(check, f"no reservation: {outcome}: {detail}")
    return warning(
        check,
        "no reservation: it answers with the same swarm key but granted none (is "
        f"p2p.relay_service on there, with room, and {own_id} on its allow-list?)",
    )


def clock_finding(
    newest: Mapping[str, float], now: float, max_future_s: float, max_age_s: float
) -> Finding:
    """What the peers' newest signed announcements (`newest`: peer -> its newest
    `created_at`) say of the clocks: a bound, not an offset. Neither libp2p's handshake nor
    swarm-node's protocol carries a peer's current time; an announcement carries the time
    its group was made, by the peer's clock, so one dated ahead of this clock shows a
    peer's clock ahead (or this one behind) by at least that much."""
    if not newest:
        return ok(
            "clock",
            "not measured: no message on the wire carries a peer's current time, and no peer "
            "served a dated announcement to bound it (a node serves them once it has run a round)",
        )
    peer, created = max(newest.items(), key=lambda item: item[1])
    ahead = created - now
    if ahead > max_future_s:
        return warning(
            "clock",
            f"{short(peer)}'s newest announcement is dated {ahead:.0f} s ahead of this "
            f"machine's clock, past verify.max_future_s ({max_future_s:g} s): one clock is off "
            "by at least that, and its groups are refused as from_future; set both by NTP",
        )
    if ahead > AHEAD_NOTED_S:
        return ok(
            "clock",
            f"{short(peer)}'s newest announcement is dated {ahead:.1f} s ahead of this "
            f"machine's clock (within verify.max_future_s, {max_future_s:g} s)",
        )
    age = now - created
    if max_age_s and age > max_age_s:
        return warning(
            "clock",
            f"the newest announcement of {len(newest)} peers is {age:.0f} s old, past "
            f"verify.max_age_s ({max_age_s:g} s): they are idle, or their clocks are behind",
        )
    return ok(
        "clock",
        f"no announcement of {len(newest)} peers is dated ahead of this machine's clock (the "
        f"newest is {age:.0f} s old); a clock behind cannot be told: nothing carries a peer's "
        "current time",
    )
