"""Does sharing pay? The SAPO experiment: arms of 8 nodes, tuned, run over paired seeds, judged.

Every unit is one swarm of `--nodes` real `Node`s (generator, verifier, GRPO trainer, ledger)
running one arm (`I/J`: I own groups and up to J peers' groups per update; a node generates I
questions a round, as in the paper's code) for `--rounds` rounds under one seed and learning
rate. The nodes run in ONE process over the in-memory transport, round-robin (a node sees its
peers' groups of the same or the previous round); `scripts/sapo_libp2p_check.py` runs one
arm as separate processes over libp2p for comparison. Arms, protocols, testbeds and the acceptance
rule live in `swarm.bench.experiment`; docs/SAPO.md explains them.

Each unit writes results/sapo/<protocol>-<testbed>/units/<arm>_s<seed>_lr<lr>.json when it
ends, so a stopped run loses at most the unit in progress; finished units are skipped.

    python scripts/sapo_experiment.py quick                  # smoke test: 2 arms, 3 rounds
    python scripts/sapo_experiment.py tune [--shard 0/2]     # every arm x lr on the tuning seed
    python scripts/sapo_experiment.py verdict [--shard 0/2]  # every arm at its best lr, 6 seeds
    python scripts/sapo_experiment.py control [--shard 0/2]  # the negative control, 6 seeds
    python scripts/sapo_experiment.py report                 # tables, verdict, JSON and PNG
    python scripts/sapo_experiment.py run --arms 8/0,4/4 --seeds 0 --lr 1e-4 --rounds 20

Per node and round it logs the mean reward of the node's own fresh rollouts (the learning
metric; summed over nodes and rounds it is the cumulative reward) and of its training batch
(what the paper's public code logs; the zero-advantage filter raises it without learning),
the share of its completions that tag their answer, and the shared groups it trained on per
task family. Held-out greedy accuracy per family is measured at the start and the end.

GPU (the paper's setting, one command): `--study sharing --testbed sapo --model Qwen/Qwen2.5-0.5B-Instruct
--device cuda --backend vllm --checkpoint-every 25` (nodes resume from their checkpoints).
"""

import sys

from swarm.bench.sapo_cli import main

if __name__ == "__main__":
    sys.exit(main())
