"""Per-peer contribution queries, the doctor's rules and the cluster plan, on hand-built data."""

from __future__ import annotations

import json

import pytest

from swarm.config.load import load_config
from swarm.core.errors import SwarmError
from swarm.ledger import BanRow, DeltaRow, GroupRow, GroupUseRow, Ledger, PeerRow, RoundRow
from swarm.ops.cluster import Member, member_config, plan_hosts, plan_ports
from swarm.ops.contributions import (
    Window,
    contribution_timeline,
    own_contribution,
    parse_when,
    peer_contributions,
)
from swarm.ops.doctor import checkpoint_vs_ledger, round_findings

ALICE = "12D3KooWAlice"
BOB = "12D3KooWBob"
MALLORY = "12D3KooWMallory"


def _group(id, status, sender, t, source=None, reason="", reward=0.5, direction="received"):
    return GroupRow(
        id=id,
        content_hash=f"h{id}",
        direction=direction,
        status=status,
        reason=reason,
        sender=sender,
        source=sender if source is None else source,
        mean_reward=reward,
        recorded_at=t,
    )


def _round(r, t, superseded=False):
    return RoundRow(
        round=r,
        policy_version=r,
        started_at=t,
        questions=1,
        completions=1,
        mean_reward=0,
        accuracy=0,
        tokens_generated=0,
        generate_s=0,
        score_s=0,
        train_s=0,
        other_s=0,
        total_s=0,
        superseded=superseded,
    )


def _use(group_id, sender, r, adv, reward=0.5, skipped=False, superseded=False):
    return GroupUseRow(
        group_id=group_id,
        content_hash=f"h{group_id}",
        sender=sender,
        round=r,
        version_after=r + 1,
        skipped_update=skipped,
        advantages="[]",
        advantage_abs_sum=adv,
        mean_reward=reward,
        superseded=superseded,
    )


@pytest.fixture
def ledger(tmp_path):
    led = Ledger(f"sqlite:///{tmp_path / 'ledger.sqlite'}")
    with led.transaction() as s:
        s.add_all(
            [
                PeerRow(
                    peer_id=ALICE,
                    first_seen=100.0,
                    last_seen=400.0,
                    model="m-a",
                    addrs=json.dumps(["/ip4/1.2.3.4/tcp/1"]),
                ),
                PeerRow(peer_id=BOB, first_seen=150.0, last_seen=300.0, model="m-b"),
                _round(0, 110.0),
                _round(1, 210.0),
                _round(2, 310.0),
                _round(2, 290.0, superseded=True),
                _group(1, "accepted", ALICE, 105.0, reward=0.4),
                _group(2, "accepted", ALICE, 205.0, reward=0.8),
                _group(3, "rejected", ALICE, 206.0, reason="reward_mismatch"),
                _group(4, "accepted", BOB, 160.0, reward=1.0),
                _group(5, "rejected", BOB, 161.0, reason="duplicate"),
                _group(6, "rejected", BOB, 162.0, reason="duplicate"),
                # a forgery claiming to be Alice, delivered by Mallory: it counts against Mallory
                _group(7, "rejected", ALICE, 170.0, source=MALLORY, reason="bad_signature"),
                _group(8, "sent", "12D3KooWMe", 120.0, source="", reward=0.3, direction="sent"),
                _group(9, "sent", "12D3KooWMe", 220.0, source="", reward=0.5, direction="sent"),
                _use(1, ALICE, 0, 2.0, reward=0.5),
                _use(2, ALICE, 1, 3.0, reward=0.75),
                _use(4, BOB, 1, 1.0, skipped=True),  # in a skipped update: no contribution
                _use(4, BOB, 2, 5.0, superseded=True),  # lost to a restart: no contribution
                DeltaRow(
                    direction="received",
                    peer=ALICE,
                    kind="delta",
                    from_version=1,
                    to_version=2,
                    bytes=1000,
                    status="applied",
                    recorded_at=230.0,
                ),
                DeltaRow(
                    direction="received",
                    peer=ALICE,
                    kind="delta",
                    from_version=2,
                    to_version=3,
                    bytes=500,
                    status="rejected",
                    reason="bad_hash",
                    recorded_at=240.0,
                ),
                DeltaRow(
                    direction="sent",
                    peer=BOB,
                    kind="anchor",
                    to_version=3,
                    bytes=7000,
                    status="served",
                    recorded_at=250.0,
                ),
                DeltaRow(
                    direction="sent",
                    peer="",
                    kind="delta",
                    from_version=2,
                    to_version=3,
                    bytes=900,
                    status="published",
                    recorded_at=249.0,
                ),
                BanRow(peer_id=MALLORY, source="auto", reason="bad signatures", banned_at=180.0),
            ]
        )
    yield led
    led.close()


def test_per_peer_figures(ledger):
    with ledger.reader() as s:
        peers = {p.peer_id: p for p in peer_contributions(s)}
    alice, bob, mallory = peers[ALICE], peers[BOB], peers[MALLORY]
    assert (alice.received, alice.accepted, alice.rejected) == (3, 2, 1)
    assert alice.rejected_by_reason == {"reward_mismatch": 1}
    assert alice.mean_reward == pytest.approx(0.6)
    assert (alice.used, alice.advantage_total, alice.advantage_mean) == (2, 5.0, 2.5)
    assert alice.used_reward == pytest.approx(0.625)
    assert (alice.deltas_from, alice.delta_bytes_from, alice.deltas_to) == (1, 1000, 0)
    assert (alice.model, alice.first_seen, alice.last_seen, alice.addrs) == (
        "m-a",
        100.0,
        400.0,
        ["/ip4/1.2.3.4/tcp/1"],
    )
    assert (bob.received, bob.accepted, bob.rejected_by_reason) == (3, 1, {"duplicate": 2})
    assert (bob.used, bob.advantage_total, bob.used_reward) == (0, 0.0, None)
    assert (bob.deltas_to, bob.delta_bytes_to) == (1, 7000)
    assert (mallory.received, mallory.rejected_by_reason, mallory.accepted) == (
        1,
        {"bad_signature": 1},
        0,
    )
    assert mallory.banned == "auto: bad signatures" and alice.banned == ""
    assert mallory.first_seen is None  # never in the peers table: known only from what it sent


def test_sorting_and_time_window(ledger):
    with ledger.reader() as s:
        assert [p.peer_id for p in peer_contributions(s, sort="advantage")][0] == ALICE
        assert [p.peer_id for p in peer_contributions(s, sort="rejected")][0] == BOB
        assert [p.peer_id for p in peer_contributions(s, sort="peer")] == sorted(
            [ALICE, BOB, MALLORY]
        )
        early = {p.peer_id: p for p in peer_contributions(s, Window(until=200.0))}
        late = {p.peer_id: p for p in peer_contributions(s, Window(since=200.0))}
        with pytest.raises(SwarmError, match="--sort must be one of"):
            peer_contributions(s, sort="karma")
    # group 1 arrived at 105 and was used in round 0 (started 110); group 2 at 205, used in round 1 (210)
    assert (early[ALICE].accepted, early[ALICE].used, early[ALICE].advantage_total) == (1, 1, 2.0)
    assert (late[ALICE].accepted, late[ALICE].used, late[ALICE].advantage_total) == (1, 1, 3.0)
    assert late[ALICE].deltas_from == 1 and early[ALICE].deltas_from == 0


def test_own_contribution(ledger):
    with ledger.reader() as s:
        own = own_contribution(s)
        late = own_contribution(s, Window(since=200.0))
    assert (
        own.groups_published,
        own.deltas_published,
        own.deltas_served,
        own.delta_bytes_served,
    ) == (2, 1, 1, 7000)
    assert own.mean_reward == pytest.approx(0.4) and own.served_to == {BOB: 1}
    assert late.groups_published == 1 and late.mean_reward == pytest.approx(0.5)


def test_timeline_is_cumulative_and_ordered(ledger):
    with ledger.reader() as s:
        timeline = contribution_timeline(s)
    assert timeline[ALICE] == [(105.0, 0.0, 1), (110.0, 2.0, 1), (205.0, 2.0, 2), (210.0, 5.0, 2)]
    assert timeline[BOB] == [(160.0, 0.0, 1)]
    assert MALLORY not in timeline


def test_parse_when():
    assert parse_when(None) is None
    assert parse_when("90s", now=1000.0) == 910.0
    assert parse_when("2h", now=10_000.0) == 10_000.0 - 7200
    assert parse_when("1700000000") == 1.7e9
    assert parse_when("2025-06-01T12:00") > 1.7e9
    with pytest.raises(SwarmError, match="cannot read time 'yesterday'"):
        parse_when("yesterday")


def test_doctor_round_rules():
    assert all(f.level == "ok" for f in round_findings([0, 1, 2], [2, 0, 1]))
    dup = round_findings([0, 1, 1, 2], [0, 1, 2])
    assert [f.check for f in dup if f.level == "problem"] == ["rounds"]
    assert "more than once: 1" in dup[0].message
    twice = round_findings([0, 1, 2], [0, 1, 1, 2])
    assert [f.message for f in twice if f.level == "problem"] == [
        "live updates do not match live rounds (rounds without an update: none; updates without a round: none; "
        "updates recorded twice: 1)"
    ]
    lacking = round_findings([0, 1, 2], [0, 2])
    assert "rounds without an update: 1" in lacking[-1].message
    gap = round_findings([0, 2], [0, 2])
    assert gap[0].level == "problem" and "missing" in gap[0].message and "1" in gap[0].message
    assert round_findings([], [])[0].level == "ok"
    assert checkpoint_vs_ledger(3, [0, 1, 2, 3, 4]).level == "ok"
    assert "2 later rounds" in checkpoint_vs_ledger(3, [0, 1, 2, 3, 4]).message
    assert checkpoint_vs_ledger(3, [0, 1]).level == "problem"
    assert checkpoint_vs_ledger(None, []).level == "ok"


def test_cluster_plan_and_member_config(tmp_path):
    assert plan_hosts(3, []) == ["127.0.0.1"] * 3
    assert plan_hosts(2, ["10.0.0.1", "10.0.0.2"]) == ["10.0.0.1", "10.0.0.2"]
    for nodes, hosts, message in [
        (0, [], "--nodes must be between"),
        (2, ["a.b"], "not an IPv4 address"),
        (3, ["10.0.0.1", "10.0.0.2"], r"one per member \(3\), not 2"),
        (1, ["0.0.0.0"], "cannot be dialed"),
    ]:
        with pytest.raises(SwarmError, match=message):
            plan_hosts(nodes, hosts)
    with pytest.raises(SwarmError, match="--base-port"):
        plan_ports(3, ["127.0.0.1"] * 3, 65534)
    ids = [
        "12D3KooWEyoppNCUx8Yx66oV9fJnriXwCcXwDDUA2kj6vnc6iDEp",
        "12D3KooWDpJ7As7BWAwRMfu1VU2WCqNjvq387JEYKDBj4kx6nXTN",
    ]
    members = [Member(i, ids[i], "127.0.0.1", 4100 + i) for i in range(2)]
    path = tmp_path / "m0" / "config.toml"  # a member's config lives in its member folder
    path.parent.mkdir()
    path.write_text(member_config(members[0], members, "my-swarm"))
    config = load_config(path, env={})
    assert config.p2p.listen == "/ip4/127.0.0.1/tcp/4100" and config.p2p.swarm_id == "my-swarm"
    assert config.p2p.bootstrap == [f"/ip4/127.0.0.1/tcp/4101/p2p/{ids[1]}"]
    assert config.p2p.allow_list == ids
    assert config.p2p.psk_file == str(tmp_path / "m0" / "swarm.key")
    assert config.run_dir == tmp_path / "m0"  # relative to the config file: the folder can move


def test_refusals_are_shown_beside_rejections_in_both_tables():
    from io import StringIO

    from rich.console import Console

    from swarm.ops.contributions import OwnContribution, PeerContribution
    from swarm.ops.views import show_contributions, show_peers

    peer = PeerContribution(
        "12D3KooWLp6Fy6k9RjqjvRL2FaZg1x1A1uvBmUuUxsyDAzDzE7oa",
        received=2,
        rejected=2,
        rejected_by_reason={"bad_signature": 2},
        refused_by_reason={"oversize": 3, "unsigned": 1},
    )
    data = {
        "node_name": "n",
        "model": "swarm-tiny",
        "model_identity": "swarm-tiny",
        "groups_in_ledger": 2,
        "window": {"since": None, "until": None},
        "peers": [peer.as_dict()],
        "own": OwnContribution().__dict__,
    }
    for show in (show_peers, show_contributions):
        out = StringIO()
        show(data, False, Console(file=out, width=300))
        text = out.getvalue()
        assert "refused" in text and "4 (oversize 3, unsigned 1)" in text, text
    out = StringIO()
    show_peers(data, True, Console(file=out, width=300))
    shown = json.loads(out.getvalue())["peers"][0]
    assert shown["refused_by_reason"] == {"oversize": 3, "unsigned": 1}
    assert shown["rejected_by_reason"] == {"bad_signature": 2}
