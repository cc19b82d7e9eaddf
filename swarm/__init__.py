"""swarm-node: a daemon for decentralized RL post-training of language models.

Each node runs its own policy and generator, trains it with GRPO on verifiable tasks,
shares signed rollouts with peers and keeps a local ledger of every contribution.
This package import is deliberately light: nothing here imports torch.
"""

__version__ = "0.1.0"
