"""The memory plan against measured peak memory, on a CPU.

For each case, a `swarm-node join` process of the config (`--config`, else the defaults: the
built-in tiny model; a solo node) runs `--rounds` rounds (a held-out evaluation first,
a checkpoint at the end); its peak resident set size (the kernel's, through wait4) plus the
peak of its verification worker process (polled) is the measured peak. "before" is the plan
`swarm-node config --plan` makes for the config: it assumes every completion runs to
`generation.max_new_tokens` and every sampled completion enters the update. So that
completions do run that long, the join runs with no completion stopping before it (its
stop tokens suppressed until then; `--stops` lets them stop); an update trains only on
completions with an advantage, so "planned" is the same plan at the sizes the run reached
(recorded in the join process: the largest generate call, training pass and update, the
longest prompt and completion), and "error" compares it with the measured peak. The cases:

- `default`: the config as it is (without `--config`, the defaults: 16 x 8 a round, 16 new
  tokens, micro-batches of 16);
- `large`: 32 questions x 8, 64 new tokens, the update's 256 sequences in one pass;
- `large, checkpointing`: the same with gradient checkpointing on;
- `large, plain path`: the same without the shared prefix (every row runs its prompt);
- `large, micro-batches of 32`: the same update in 8 passes;
- `large, auto`: `training.micro_batch_size = "auto"`.

"error" is "planned" over "measured", less one. Exit 1 when a case is off by more than
--tolerance.

    python scripts/bench_memory_plan.py                         # every case, 2 rounds each
    python scripts/bench_memory_plan.py --case default --config node_config/smollm2-cpu.toml \
        --rounds 1 --out results/memory/plan-smollm2-cpu.json

    python scripts/bench_memory_plan.py --replan --out results/memory/plan-cpu.json

Prints a table and writes JSON (default results/memory/plan-cpu.json). `--replan` runs no
node: it plans the file's cases again with the current code at the sizes they reached.
"""

from __future__ import annotations

import argparse
import sys

from lab.memory_plan import CASES, run


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--case", choices=list(CASES), action="append", help="only these cases")
    parser.add_argument("--config", help="node config the cases start from (default: defaults)")
    parser.add_argument("--set", dest="sets", action="append", default=[], help="section.key=value")
    parser.add_argument("--rounds", type=int, default=2, help="rounds each node runs")
    parser.add_argument(
        "--stops",
        action="store_true",
        help="let completions stop before generation.max_new_tokens (default: none does)",
    )
    parser.add_argument("--tolerance", type=float, default=0.2, help="largest error allowed")
    parser.add_argument("--out", default="results/memory/plan-cpu.json", help="JSON results")
    parser.add_argument(
        "--replan",
        action="store_true",
        help="run nothing: plan the cases of --out again with the current code, at the sizes "
        "they reached, beside their measured peaks (after a change to the plan's constants)",
    )
    return parser.parse_args(argv)


def main(argv=None) -> int:
    return run(parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
