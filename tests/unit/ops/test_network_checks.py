"""The rules of `doctor --network` (`swarm.ops.network_checks`): plain values in, findings out.
The dials themselves, against real peers: tests/integration/test_doctor_network.py."""

from __future__ import annotations

import pytest

from swarm.ops.network_checks import (
    Outcome,
    PeerResult,
    autonat_finding,
    before_dial,
    bootstrap_findings,
    clock_finding,
    dial_result,
    protocol_mismatch,
    relay_finding,
    seen_as_finding,
    summary,
    takes_part,
    tcp_result,
)
from swarm.p2p.probe_types import DialReport, FirstBytes, KeyCheck, Tcp

ME = "12D3KooWMe" + "1" * 42
PEER = "12D3KooWPeer" + "2" * 40
OURS = ("/swarm/blob/1.0.0", "/swarm/px/1.0.0")


def result(outcome: Outcome, observed: str = "", local_ip: str = "") -> PeerResult:
    addr = f"/ip4/1.2.3.4/tcp/4001/p2p/{PEER}"
    return PeerResult(PEER, addr, outcome, "detail", observed, local_ip)


def test_the_node_itself_and_a_peer_off_its_own_allow_list_are_not_dialled() -> None:
    assert before_dial(ME, ME, [])[0] is Outcome.ITSELF
    assert before_dial(PEER, ME, [ME])[0] is Outcome.NOT_ALLOWED_HERE
    assert before_dial(PEER, ME, [PEER]) is None
    assert before_dial(PEER, ME, []) is None


@pytest.mark.parametrize(
    ("first", "key", "outcome"),
    [
        (FirstBytes(Tcp.REFUSED), None, Outcome.REFUSED),
        (FirstBytes(Tcp.TIMED_OUT), None, Outcome.TIMED_OUT),
        (FirstBytes(Tcp.SILENT), None, Outcome.TIMED_OUT),
        (FirstBytes(Tcp.UNREACHABLE, detail="No route to host"), None, Outcome.UNREACHABLE),
        (FirstBytes(Tcp.CLOSED, detail="closed"), None, Outcome.FAILED),
        (FirstBytes(Tcp.ANSWERED, b"x" * 44), KeyCheck.OTHER_KEY, Outcome.WRONG_KEY),
        (FirstBytes(Tcp.ANSWERED, b"x" * 20), KeyCheck.PEER_HAS_NONE, Outcome.WRONG_KEY),
        (FirstBytes(Tcp.ANSWERED, b"x" * 20), KeyCheck.NODE_HAS_NONE, Outcome.WRONG_KEY),
        (FirstBytes(Tcp.ANSWERED, b"x" * 3), KeyCheck.TOO_SHORT, Outcome.FAILED),
    ],
)
def test_each_first_exchange_has_its_outcome(
    first: FirstBytes, key: KeyCheck | None, outcome: Outcome
) -> None:
    verdict = tcp_result(first, key, "1.2.3.4:4001", 2.0)
    assert verdict is not None and verdict[0] is outcome


def test_the_same_key_goes_on_to_the_dial() -> None:
    assert tcp_result(FirstBytes(Tcp.ANSWERED, b"x" * 44), KeyCheck.SAME, "h:1", 2.0) is None


def test_each_dial_has_its_outcome() -> None:
    good = DialReport(kept=True, protocols=OURS, px_peers=3, seconds=0.012)
    assert dial_result(good, ME, True) == (
        Outcome.REACHED,
        "in 12 ms: same swarm key, 3 peers in its peer exchange",
    )
    assert dial_result(DialReport(error="x", other_peer=PEER), ME, True)[0] is Outcome.WRONG_PEER
    assert dial_result(DialReport(error="Noise failed"), ME, True)[0] is Outcome.FAILED
    closed = dial_result(DialReport(kept=False, protocols=OURS), ME, False)
    assert closed[0] is Outcome.NOT_ALLOWED and ME in closed[1]
    later = DialReport(kept=True, protocols=("/swarm/blob/2.0.0", "/ipfs/id/1.0.0"))
    assert dial_result(later, ME, False)[0] is Outcome.OTHER_VERSION


def test_a_protocol_mismatch_names_both_sides() -> None:
    assert protocol_mismatch(OURS + ("/meshsub/1.1.0",), False) is None
    assert protocol_mismatch((), False) is None  # no Identify answer: nothing says otherwise
    assert "does not speak /swarm/px/1.0.0" in protocol_mismatch((), True)
    assert "it speaks /swarm/px/2.0.0, this node /swarm/blob/1.0.0, /swarm/px/1.0.0" in (
        protocol_mismatch(("/swarm/px/2.0.0",), False)
    )
    assert "none of swarm-node's protocols" in protocol_mismatch(("/ipfs/id/1.0.0",), False)


def test_failures_are_problems_only_when_no_peer_was_reached() -> None:
    alone = bootstrap_findings([result(Outcome.REFUSED)])
    assert [f.level for f in alone] == ["problem"]
    assert alone[0].message == "refused: detail"
    mixed = bootstrap_findings([result(Outcome.REFUSED), result(Outcome.REACHED)])
    assert [f.level for f in mixed] == ["warning", "ok"]


@pytest.mark.parametrize(
    ("outcomes", "listens", "reservations", "expected"),
    [
        ([Outcome.REACHED, Outcome.TIMED_OUT], True, 0, True),
        ([Outcome.WRONG_KEY], True, 1, False),  # a bootstrap named and none reached
        ([], True, 0, True),  # a first node: peers dial it
        ([Outcome.ITSELF], True, 0, True),
        ([], False, 1, True),  # reached through its relay
        ([], False, 0, False),  # nobody reaches it, and it reaches nobody
    ],
)
def test_taking_part_and_its_summary_agree(
    outcomes: list[Outcome], listens: bool, reservations: int, expected: bool
) -> None:
    results = [result(o) for o in outcomes]
    assert takes_part(results, listens, reservations) is expected
    assert (summary(results, listens, reservations).level == "ok") is expected


def test_the_address_peers_see_flags_a_router_in_between() -> None:
    assert seen_as_finding([]) is None
    behind = seen_as_finding([result(Outcome.REACHED, "/ip4/203.0.113.5/tcp/51234", "192.168.1.2")])
    assert "come from 203.0.113.5 (by …2222222222)" in behind.message
    assert "not from this machine's own 192.168.1.2: a router translates them (NAT)" in (
        behind.message
    )
    direct = seen_as_finding([result(Outcome.REACHED, "/ip4/203.0.113.5/tcp/1", "203.0.113.5")])
    assert "NAT" not in direct.message


def test_autonat_needs_three_agreeing_answers() -> None:
    addrs = ["/ip4/1.2.3.4/tcp/4001"]
    three = {f"p{i}": True for i in range(3)}
    assert autonat_finding(True, 3, three, addrs).message.startswith("public: 3 of 3")
    failed = {f"p{i}": False for i in range(3)}
    private = autonat_finding(True, 3, failed, addrs)
    assert private.level == "warning" and private.message.startswith("private: 3 of 3")
    assert autonat_finding(True, 1, {"p": True}, addrs).message.startswith("undecided: 1 of 1")
    assert autonat_finding(True, 1, {}, addrs).message.startswith("undecided: no peer answered")
    assert autonat_finding(True, 0, {}, addrs).message.startswith("not asked: no peer reached")
    assert "listens on nothing" in autonat_finding(False, 2, {}, addrs).message
    # the peers saw it at another IP: they dial back only there, so none answered
    elsewhere = autonat_finding(True, 2, {}, addrs, ["203.0.113.5"])
    assert elsewhere.level == "warning"
    assert "only at the IP they see this node at (203.0.113.5), not at /ip4/1.2.3.4" in (
        elsewhere.message
    )


def test_a_relay_line_says_where_peers_reach_the_node_or_why_not() -> None:
    circuit = f"/ip4/1.2.3.4/tcp/4001/p2p/{PEER}/p2p-circuit/p2p/{ME}"
    held = relay_finding("relay", circuit, None, ME)
    assert held.level == "ok" and circuit in held.message
    down = relay_finding("relay", None, (Outcome.REFUSED, "nothing listens"), ME)
    assert down.message == "no reservation: refused: nothing listens"
    said_no = relay_finding("relay", None, None, ME)
    assert "granted none" in said_no.message and ME in said_no.message


def test_the_clock_is_bounded_only_by_announcements_dated_ahead() -> None:
    now = 1_000_000.0
    assert clock_finding({}, now, 300, 3600).message.startswith("not measured: ")
    far = clock_finding({PEER: now + 400}, now, 300, 3600)
    assert far.level == "warning" and "dated 400 s ahead" in far.message
    near = clock_finding({PEER: now + 5}, now, 300, 3600)
    assert near.level == "ok" and "5.0 s ahead" in near.message
    old = clock_finding({PEER: now - 30}, now, 300, 3600)
    assert old.level == "ok" and "a clock behind cannot be told" in old.message
    stale = clock_finding({PEER: now - 7200}, now, 300, 3600)
    assert stale.level == "warning" and "past verify.max_age_s" in stale.message
