"""A network-only node: a swarm member without a model, for measuring the network at scale.

It does every round what a trainer does on the network, with synthetic completions in
place of a model's (`lab.synthetic`): draws its round's task specs from a real task
mix, rebuilds the tasks, scores the made-up completions, signs the groups and shares them
through an exchange protocol (`swarm.exchange.base`); receives peers' groups through the
same cheap checks as a trainer (`Verifier.admit`), verifies every one it keeps fully (task
rebuilt, every reward re-scored, copycats) and pools it; then chooses a batch of I own and
J shared groups with the trainer's sampler (`swarm.batch_choice.choose_batch`). It does not
train, and instead of writing a ledger it counts the rows a trainer would write.

Each round returns a `RoundCost`: bytes in and out, CPU seconds, groups checked and
verified, ledger rows, and the shared groups it chose (sender, age) for fairness. Memory:
no torch, no transformers, no SQLAlchemy; with libp2p and the easy mix it peaked at 82 MB
speaking the pull exchange (8 processes) and at 85 MB (3 processes) to 117 MB (8)
speaking gossip, whose cost grows with the swarm (`scripts/bench_scale.py real`).

    node = NetworkNode.over_libp2p(NetworkNodeSettings(), listen="/ip4/127.0.0.1/tcp/0")
    node.start(); cost = node.run_round(); node.close()

`python -m lab.network_node` runs one as a process (`main`), a JSON line per round.
Its settings and the `RoundCost` record live in `network_settings`, the wall-clock pacing
of its rounds in `paced_rounds`.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import time
from collections.abc import Callable, Sequence

from lab.network_settings import (
    SYNTHETIC_BASE,
    SYNTHETIC_MODEL,
    ByteMeter,
    ExchangeKind,
    NetworkNodeSettings,
    RoundCost,
)
from lab.paced_rounds import run_paced, wait_connected, wait_start
from lab.synthetic import SyntheticRollouts, wire_group
from swarm.batch_choice import Candidate, Staleness, choose_batch
from swarm.core.errors import RejectedMessage
from swarm.core.reasons import Reason
from swarm.exchange.base import Exchange, GossipExchange
from swarm.exchange.pull import PullExchange, PullSettings
from swarm.experience import ExperiencePool, SharedGroup
from swarm.p2p.transport import Transport
from swarm.tasks import PRESET_MIXES, Scoring, stream_seed
from swarm.verify.gate import Verifier, VerifySettings
from swarm.verify.message import Accepted
from swarm.wire.signing import sign_group


class NetworkNode:
    """A model-less swarm member (see the module docstring)."""

    def __init__(
        self,
        settings: NetworkNodeSettings,
        transport: Transport,
        key_pair,
        *,
        clock: Callable[[], float] = time.time,
        byte_meter: ByteMeter | None = None,
        exchange: Exchange | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ):
        from swarm.core.identity import peer_id_of

        self.settings = settings
        self.transport = transport
        self.key_pair = key_pair
        self.peer_id = peer_id_of(key_pair)
        self.clock = clock
        self.monotonic = monotonic  # the pull exchange's round budget runs on it
        self.byte_meter = byte_meter or self._payload_bytes
        self.scoring = Scoring(settings.format_bonus)
        verify = settings.verify or VerifySettings(swarm_id=settings.swarm_id)
        self.verifier = Verifier(verify, clock=clock, own_peer_id=self.peer_id)
        self.rollouts = SyntheticRollouts(
            PRESET_MIXES[settings.preset], self.task_seed(), settings.shape, self.scoring
        )
        self.exchange = exchange or self._make_exchange()
        self.pool = ExperiencePool(settings.pool_size)
        self.round = 0
        # content hash -> created_at of pooled groups (bounded like the pool)
        self._created: collections.OrderedDict[str, float] = collections.OrderedDict()
        self._rows = 0

    def task_seed(self) -> int:
        """This node's task stream: bound to its peer ID under the pull exchange."""
        s = self.settings
        if s.exchange == ExchangeKind.PULL:
            return stream_seed(self.peer_id, max(s.task_seed, 0))
        if s.task_seed >= 0:
            return s.task_seed
        return int.from_bytes(hashlib.sha256(self.peer_id.encode()).digest()[:4], "big")

    def _make_exchange(self) -> Exchange:
        s = self.settings
        if s.exchange == ExchangeKind.GOSSIP:
            return GossipExchange(self.transport, self.verifier, s.swarm_id)
        pull = dataclasses.replace(s.pull, seed_salt=max(s.task_seed, 0))
        return PullExchange(
            self.transport,
            self.verifier,
            s.swarm_id,
            self.key_pair,
            self.peer_id,
            pull,
            clock=self.clock,
            monotonic=self.monotonic,
        )

    @classmethod
    def over_libp2p(
        cls,
        settings: NetworkNodeSettings,
        *,
        listen: str,
        bootstrap: Sequence[str] = (),
        key_pair=None,
        **transport_options,
    ) -> NetworkNode:
        """A node on its own libp2p transport; its bytes are this process's TCP bytes."""
        from lab.footprint import TcpMeter
        from swarm.core.identity import create_identity
        from swarm.p2p.libp2p import Libp2pTransport, TransportSettings

        key_pair = key_pair or create_identity()
        transport_settings = TransportSettings(
            listen_addr=listen, bootstrap=tuple(bootstrap), **transport_options
        )
        transport = Libp2pTransport(transport_settings, key_pair=key_pair)
        return cls(settings, transport, key_pair, byte_meter=TcpMeter().read)

    def _payload_bytes(self) -> tuple[int, int]:
        """(in, out) payload bytes the transport counted: gossip messages and blobs."""
        s = self.transport.stats()
        return s.gossip_bytes_in + s.blob_bytes_in, s.gossip_bytes_out + s.blob_bytes_out

    def start(self) -> None:
        self.transport.start()
        self.exchange.start()

    def close(self) -> None:
        if isinstance(self.exchange, PullExchange):
            self.exchange.close()
        self.transport.close()

    # -- one round ------------------------------------------------------------------------

    def run_round(self) -> RoundCost:
        cost = RoundCost(round=self.round)
        cpu, wall = time.process_time(), time.perf_counter()
        bytes_in, bytes_out = self.byte_meter()
        own = self.publish_round(cost)
        self.collect(cost)
        self.choose(own, cost)
        cost.peers = len(self.transport.peers())
        cost.ledger_rows += 2 + cost.peers  # the round and its update; each peer touched
        now_in, now_out = self.byte_meter()
        cost.bytes_in, cost.bytes_out = now_in - bytes_in, now_out - bytes_out
        cost.cpu_s = cost.work_cpu_s = time.process_time() - cpu
        cost.wall_s = time.perf_counter() - wall
        cost.extra = self.exchange.take_counters()
        view = getattr(self.exchange, "view", None)
        if view is not None:
            cost.extra["view_size"] = len(view.peers())
        cost.extra["banned"] = len(self.verifier.banned)
        cost.cheap_checked = cost.extra.get("cheap_checked", cost.cheap_checked)
        self.round += 1
        return cost

    def publish_round(self, cost: RoundCost) -> list[tuple[object, tuple[float, ...]]]:
        """Make, sign and share this round's groups; returns (group, rewards) pairs."""
        now = self.clock()
        made = self.rollouts.round_groups(self.round, self.settings.groups_per_round)
        signed = []
        for g in made:
            wire = wire_group(
                g,
                swarm_id=self.settings.swarm_id,
                sender=self.peer_id,
                model=SYNTHETIC_MODEL,
                base_hash=SYNTHETIC_BASE,
                policy_version=self.settings.policy_version,
                round_index=self.round,
                created_at=now,
                format_bonus=self.settings.format_bonus,
            )
            signed.append((sign_group(wire, self.key_pair), wire))
            self.verifier.note_own(wire)
        self.exchange.publish(signed)
        cost.published = len(signed)
        cost.ledger_rows += len(signed)  # one row per group sent
        return [(g, g.rewards) for g in made]

    def collect(self, cost: RoundCost) -> None:
        """Peers' groups: cheap-checked by the exchange, then verified fully and pooled."""
        accepted, rejected = self.exchange.collect()
        cost.cheap_checked += len(accepted) + len(rejected)
        fresh: list[Accepted] = []
        seen: set[str] = set()
        now = self.clock()
        for item in accepted:
            digest = item.signed.content_hash
            if digest in seen:
                rejected.append(item.rejected(Reason.DUPLICATE, "already received"))
                continue
            seen.add(digest)
            cost.verified += 1
            try:
                task, rewards = self.verifier.verify_content(
                    item.group, self.settings.format_bonus, self.scoring
                )
            except RejectedMessage as e:  # recorded like any other refusal
                rejected.append(item.rejected(e.reason, e.detail))
                continue
            self._pool(item, task, rewards, now)
            fresh.append(item)
        self.verifier.record(fresh, rejected)
        cost.accepted += len(fresh)
        cost.duplicates += sum(r.reason == Reason.DUPLICATE for r in rejected)
        cost.rejected += sum(r.reason != Reason.DUPLICATE for r in rejected)
        cost.ledger_rows += len(fresh) + len(rejected)  # one row per group received

    def _pool(self, item: Accepted, task, rewards, now: float) -> None:
        g = item.group
        self._rows += 1
        self.pool.add(
            SharedGroup(
                row_id=self._rows,
                content_hash=item.signed.content_hash,
                sender=g.sender,
                task=task,
                completions=g.completions,
                finished=g.finished,
                rewards=rewards,
                claimed_rewards=g.rewards,
                policy_version=g.policy_version,
                same_model=g.model == SYNTHETIC_MODEL,
                received_at=now,
                round=g.round,
                family=g.task.dataset,
            )
        )
        self._created[item.signed.content_hash] = g.created_at
        while len(self._created) > self.settings.pool_size:
            self._created.popitem(last=False)

    def choose(self, own, cost: RoundCost) -> None:
        """The batch a trainer would take: I own groups and J shared ones, the trainer's way."""
        s = self.settings
        now = self.clock()
        batch = choose_batch(
            [Candidate(g, rewards) for g, rewards in own],
            self.pool.candidates(),
            s.own_groups,
            s.shared_groups,
            seed=f"{self.peer_id}:batch:{self.round}",
            now=now,
            staleness=Staleness(max_version_lag=None, max_held_s=s.max_held_s or None),
            per_peer_cap=s.per_peer_cap or None,
        )
        self.pool.take(batch.shared)
        for g in batch.shared:
            created = self._created.pop(g.content_hash, now)
            cost.chosen.append((g.sender, max(0.0, now - created)))
        cost.ledger_rows += len(batch.shared)  # one group-use row each


# -- running one as a process (the benchmarks start many) ----------------------------------


# -- running one as a process (the benchmarks start many; pacing in `paced_rounds`) -------


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m lab.network_node`: one node over libp2p, a JSON line per round."""
    import argparse
    import json
    import sys

    from lab.footprint import peak_mb, rss_mb

    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--listen", default="/ip4/127.0.0.1/tcp/0")
    parser.add_argument("--bootstrap", action="append", default=[])
    parser.add_argument("--exchange", choices=[k.value for k in ExchangeKind], default="pull")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--period", type=float, default=2.0, help="seconds per round")
    parser.add_argument("--start-at", type=float, default=0.0, help="wall clock of round 0")
    parser.add_argument(
        "--start-file",
        default="",
        help="readiness barrier: wait for this file, round 0 at its time",
    )
    parser.add_argument("--groups", type=int, default=16, help="Q: groups per round")
    parser.add_argument("--shared", type=int, default=8, help="J")
    parser.add_argument("--lists", type=int, default=8, help="pull: peers asked a round")
    parser.add_argument("--pulls", type=int, default=10, help="pull: groups pulled a round")
    parser.add_argument(
        "--per-peer-cap", type=int, default=2, help="pull: groups a round per sender"
    )
    parser.add_argument("--version", type=int, default=0, help="the policy version it claims")
    parser.add_argument("--max-connections", type=int, default=64)
    parser.add_argument("--no-peer-exchange", action="store_true", help="discover by views only")
    parser.add_argument("--relay", action="append", default=[], help="a relay's multiaddr")
    parser.add_argument("--relay-service", action="store_true", help="relay for others")
    parser.add_argument("--no-hole-punch", action="store_true", help="stay on relayed connections")
    parser.add_argument("--linger", type=float, default=2.0, help="seconds served after the end")
    parser.add_argument(
        "--join-timeout", type=float, default=300.0, help="seconds to wait for a first peer"
    )
    args = parser.parse_args(argv)
    settings = NetworkNodeSettings(
        exchange=ExchangeKind(args.exchange),
        groups_per_round=args.groups,
        shared_groups=args.shared,
        per_peer_cap=args.per_peer_cap,
        pull=PullSettings(args.lists, args.pulls, args.per_peer_cap),
        policy_version=args.version,
    )
    node = NetworkNode.over_libp2p(
        settings,
        listen=args.listen,
        bootstrap=args.bootstrap,
        peer_exchange=not args.no_peer_exchange,
        max_connections=args.max_connections,
        relays=args.relay,
        relay_service=args.relay_service,
        hole_punch=not args.no_hole_punch,
    )
    node.start()

    def emit(record: dict) -> None:
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()

    # behind a readiness barrier (--start-file) a node is ready once it has joined
    barrier = args.bootstrap and args.start_file
    joined = wait_connected(node, args.join_timeout) if barrier else len(node.transport.peers())
    emit({"peer_id": node.peer_id, "addrs": node.transport.listen_addrs(), "peers": joined})
    start_at = wait_start(args.start_file) if args.start_file else args.start_at
    start_at = start_at or time.time() + 1.0
    try:
        run_paced(
            node,
            args.rounds,
            args.period,
            start_at,
            lambda c: emit({**c.as_dict(), "rss_mb": rss_mb(), "peak_mb": peak_mb()}),
        )
        time.sleep(args.linger)  # peers may still pull what this node announced
        stats = node.transport.stats()
        kinds = getattr(node.transport, "connection_kinds", None)
        emit(
            {
                "hole_punches": dict(getattr(stats, "hole_punches", {})),
                "connections": {
                    p.peer_id: kinds(p.peer_id) for p in node.transport.peers() if kinds
                },
            }
        )
    finally:
        node.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
