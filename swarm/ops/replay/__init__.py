"""`swarm-node replay`: re-verify a ledger's stored rollout groups offline, export or train on them.

A ledger stores every group a node sent and every group it received, as the exact signed
bytes. Replay trusts none of the ledger's own columns: for each stored group it checks the
body against its recorded content hash, decodes it and checks the Ed25519 signature of its
sender (`swarm.wire.signing.verify_signed`), optionally the swarm id, rebuilds the task from
its spec and re-scores every completion (in the verification worker, within `verify`'s
deadline and memory limit, as a live node does), and compares those rewards with the ones
the sender claimed (`swarm.verify.rules.check_rewards`, with the format bonus the sender
declared). No network, no run folder: a ledger copied from another machine is enough.

What passes can be exported (one JSON line per completion: the prompt formatted for
`policy.model`, the completion, ground truth, reward and advantage, flat columns that
`datasets` and TRL read as they are) or used to train a fresh model
with the node's own GRPO path: one update per recorded round, its batch chosen from that
round's sent (own) and accepted (shared) groups by `swarm.batch_choice.choose_batch` with the
config's I, J and per-peer cap (groups without learning signal dropped), advantages from the
locally re-scored rewards, completions re-tokenized with the model's own tokenizer, and
`swarm.policy.trainer.GRPOTrainer` for the step. Replaying a node's own ledger with its own
config and base model thus retraces its training, offline.

Deliberately not here: the node's round loop, or deciding whether a peer is trustworthy.

- reading.py: `StoredGroup`, `verify_row` (one row re-verified), reading the ledger's rows
- report.py: `VerifyReport`, `verify_ledger` (every row, counted), `empty_export_reason`,
  `prompt_model_note`
- export.py: `export_records`, `write_jsonl`, `prompt_formatter`
- training.py: `TrainReport`, `plan_updates`, `train_offline`
"""

from swarm.ops.replay.export import export_records, prompt_formatter, write_jsonl
from swarm.ops.replay.reading import (
    RETENTION_KEYS,
    REWARD_TOLERANCE,
    TRAINABLE_STATUSES,
    WITHOUT_BYTES,
    StoredGroup,
    count_rows,
    iter_rows,
    verify_row,
)
from swarm.ops.replay.report import (
    VerifyReport,
    empty_export_reason,
    prompt_model_note,
    verify_ledger,
)
from swarm.ops.replay.training import TrainReport, plan_updates, train_offline, train_samples

__all__ = [
    "RETENTION_KEYS",
    "REWARD_TOLERANCE",
    "TRAINABLE_STATUSES",
    "WITHOUT_BYTES",
    "StoredGroup",
    "TrainReport",
    "VerifyReport",
    "count_rows",
    "empty_export_reason",
    "export_records",
    "iter_rows",
    "plan_updates",
    "prompt_formatter",
    "prompt_model_note",
    "train_offline",
    "train_samples",
    "verify_ledger",
    "verify_row",
    "write_jsonl",
]
