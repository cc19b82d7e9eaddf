"""Experiment logs of a node: metrics.jsonl always, TensorBoard event files on request.

`JsonlReporter` appends one JSON object a line to `metrics.jsonl` in the run folder: a
`"kind": "round"` line per round (every `RoundReport` field), a `"kind": "eval"` line per
evaluation (every `EvalReport` field), each with its wall-clock `time`; an observer, which
has no rounds, writes a `"kind": "swarm"` line per pass (the `SwarmSample`). A resumed node
appends to the same file. `pandas.read_json(path, lines=True)` or `datasets` read it as is.

`TensorBoardReporter` (`monitor.tensorboard`, `join --tensorboard`) writes the same numbers
as TensorBoard scalars to `tensorboard/` in the run folder, for offline dashboards where no
experiment tracker is reachable. It needs the optional `tensorboard` package
(`pip install tensorboard`, or the project's `tensorboard` extra).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import time
from pathlib import Path
from typing import TextIO

from swarm.core.errors import ConfigError
from swarm.monitor.display import EvalReport, Reporter, RoundReport, SwarmSample

JSONL_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
TENSORBOARD_MISSING = (
    "monitor.tensorboard (--tensorboard) needs the tensorboard package: "
    "pip install tensorboard (or pip install 'swarm-node[tensorboard]')"
)


def round_record(report: RoundReport) -> dict:
    """A round as metrics.jsonl holds it."""
    return {
        "kind": "round",
        "time": time.time(),
        **dataclasses.asdict(report),
        "other_s": report.other_s,
    }


def eval_record(report: EvalReport) -> dict:
    """An evaluation as metrics.jsonl holds it."""
    return {"kind": "eval", "time": time.time(), **dataclasses.asdict(report)}


def swarm_record(sample: SwarmSample) -> dict:
    """A swarm sample as metrics.jsonl holds it (observers)."""
    return {"kind": "swarm", "time": time.time(), **dataclasses.asdict(sample)}


class JsonlReporter(Reporter):
    """Appends the node's rounds and evaluations (an observer's swarm samples) to a JSONL file."""

    def __init__(self, path: Path, samples: bool = False):
        self.path = Path(path)
        self.samples = samples
        self._file: TextIO | None = None

    def _write(self, record: dict) -> None:
        if self._file is None:
            self._file = self.path.open("a", encoding="utf-8")
        self._file.write(json.dumps(record, sort_keys=False, allow_nan=True) + "\n")
        self._file.flush()

    def round(self, report: RoundReport) -> None:
        self._write(round_record(report))

    def evaluation(self, report: EvalReport) -> None:
        self._write(eval_record(report))

    def swarm(self, sample: SwarmSample) -> None:
        if self.samples:
            self._write(swarm_record(sample))

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def tensorboard_available() -> bool:
    """Whether the tensorboard package (which torch's SummaryWriter needs) is installed."""
    return importlib.util.find_spec("tensorboard") is not None


def check_tensorboard() -> None:
    """One line naming the fix when TensorBoard logs are asked for but cannot be written."""
    if not tensorboard_available():
        raise ConfigError(TENSORBOARD_MISSING)


class TensorBoardReporter(Reporter):
    """Writes rounds, evaluations and swarm samples as TensorBoard scalars, step = round."""

    def __init__(self, folder: Path):
        check_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(folder))

    def round(self, r: RoundReport) -> None:
        scalars = {
            "reward/own_mean": r.mean_reward,
            "reward/batch_mean": r.batch_reward,
            "accuracy/own": r.accuracy,
            "train/policy_version": r.policy_version,
            "train/skipped": float(r.skipped),
            "train/trained_groups": r.trained_groups,
            "train/shared_groups": r.shared_groups,
            "time/generate_s": r.generate_s,
            "time/score_s": r.score_s,
            "time/train_s": r.train_s,
            "time/other_s": r.other_s,
            "time/round_s": r.total_s,
            "generation/tokens": r.tokens_generated,
            "generation/tagged": r.tagged,
        }
        if not r.skipped:
            scalars["train/loss"] = r.loss
        self._add(scalars, r.round)

    def evaluation(self, report: EvalReport) -> None:
        scalars = {"accuracy/heldout": report.accuracy}
        scalars |= {f"accuracy/heldout_{f}": a for f, a in report.by_family.items()}
        self._add(scalars, report.round)
        self.writer.flush()

    def swarm(self, s: SwarmSample) -> None:
        scalars = {
            "swarm/peers": s.peers,
            "swarm/groups_sent": s.groups_sent,
            "swarm/groups_received": s.groups_received,
            "swarm/groups_accepted": s.groups_accepted,
            "swarm/groups_rejected": sum(s.rejected.values()),
            "swarm/delta_manifests": s.manifests,
            "swarm/bytes_in": sum(s.bytes_in.values()),
            "swarm/bytes_out": sum(s.bytes_out.values()),
        }
        self._add(scalars, max(s.round - 1, 0))  # the round it was taken after

    def _add(self, scalars: dict, step: int) -> None:
        for tag, value in scalars.items():
            self.writer.add_scalar(tag, float(value), global_step=step)

    def close(self) -> None:
        self.writer.close()
