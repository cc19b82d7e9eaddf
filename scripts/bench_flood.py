"""What floods cost a real node: its round time against its own baseline, its RSS and its
ledger growth, per attack class, with the attacker's process at nice 19.

    python scripts/bench_flood.py [--classes duplicates,garbage,ihave,bulk,hints] [--seconds 25]
                                  [--repeats 2] [--out results/flood/bench.json]

The victim is `swarm-node join` in its own process (defaults but light rounds of 4 questions
of 4 completions of 8 tokens, the tiny model on the CPU, the gossip exchange so that every
group reaches it, no evaluation), alone in its swarm. For
each class and repeat the bench measures a baseline window (no attacker) and then an attack
window of `--seconds` each, alternating, so a machine whose load drifts affects both alike.
The attacker is `lab.flood_attacker` run as a program, a separate process under
`nice -n 19` with a fresh identity each time (a banned one stays banned):

- duplicates: one valid signed group published again and again (each a new gossip message);
- garbage: signed gossip messages of 256 KB of random bytes;
- ihave: RPCs of 2,000 IHAVE entries under made-up topics, written on a raw stream;
- bulk: valid, distinct groups of large completions with honest rewards (accepted);
- hints: a trainer announcing 1 GiB as its holder hints to a follower. This one measures the
  follower's step itself (a process reading the hints every 0.2 s; each read's time and the
  process's RSS) against the same trainer serving 3 KB of honest hints, not a node's rounds.

A window's round time is the median of the victim's rounds that started in it (its ledger);
RSS is the victim's peak in the window minus its RSS at the window's start; ledger growth is
its pages in use at the end minus the start. Prints a table; writes JSON.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from lab.flood_attacker import CLASSES
from lab.flood_bench import run

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--classes", default=",".join(CLASSES))
    parser.add_argument("--seconds", type=float, default=25.0)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", default="swarm-tiny", help="the victim's policy.model")
    parser.add_argument("--out", default=str(ROOT / "results" / "flood" / "bench.json"))
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
