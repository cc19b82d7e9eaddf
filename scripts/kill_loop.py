"""kill -9 loop: a trainer and a follower on 127.0.0.1, one of them killed at random moments.

Two real nodes, each an ordinary `Node` in its own process: a trainer publishing a sparse
delta after every update, and a generator-role node following it over libp2p. Again and
again one of them is sent SIGKILL while it is in a round, fetching a delta or writing its
ledger, and restarted on the same run folder. Each node process notes the moments it enters
and leaves a delta fetch and a ledger write in a marks file (plain appends, visible after a
kill), so the loop can aim at a phase, and says afterwards which phase each kill hit.

After every kill it checks the killed node's ledger: `PRAGMA integrity_check` is "ok";
every row committed before the kill is there after the restart, unchanged but for the
columns a resume may update (`superseded`, a peer's last-seen time); no row appears twice;
live round numbers are unique and contiguous; `swarm-node doctor` finds no problem; and the
node resumes (commits a new round). At the end both nodes stop cleanly.

    python scripts/kill_loop.py                    # 50 kills, a table, runs/kill_loop.json
    python scripts/kill_loop.py --kills 10 --json /tmp/k.json --seed 3

Nodes are forked from a launcher that has already imported torch and libp2p, so a restart
costs the node's own start, not the imports. Every process here ends by itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from lab.kill_loop import run

ROOT = Path(__file__).resolve().parents[1]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kills", type=int, default=50)
    parser.add_argument("--seed", type=int, default=20250611)
    parser.add_argument("--json", default=str(ROOT / "runs" / "kill_loop.json"))
    parser.add_argument("--work", default=None, help="folder for the run folders (default: temp)")
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
