"""What offline verification of a whole ledger found: `verify_ledger` runs it into a
`VerifyReport` (by status and failure reason), `empty_export_reason` says why nothing can
be exported and `prompt_model_note` when the export's prompts are not the ledger's node's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

from swarm.core.reasons import Reason
from swarm.ops.replay.reading import (
    RETENTION_KEYS,
    TRAINABLE_STATUSES,
    WITHOUT_BYTES,
    StoredGroup,
    iter_rows,
    verify_row,
)
from swarm.verify.rescore_pool import Rescorer


@dataclass
class VerifyReport:
    """What offline verification found, by the row's recorded status and by failure reason.

    Every row passes, fails (`failed_by_reason`), or has no bytes to check
    (`without_bytes`: `body_pruned` for a sent or accepted group whose bytes retention
    dropped, `never_stored` for a rejected one refused before its bytes were fetched or
    decoded); `total` is their sum."""

    total: int = 0
    passed: int = 0
    failed_by_reason: Counter = field(default_factory=Counter)
    without_bytes: Counter = field(default_factory=Counter)
    by_status: dict[str, dict[str, int]] = field(
        default_factory=dict
    )  # status -> {"passed": n, "failed": n, "without_bytes": n}
    trainable_lost: Counter = field(default_factory=Counter)  # why sent/accepted rows did not pass
    trainable: int = 0  # passed, sent or accepted, distinct content

    @property
    def failed(self) -> int:
        return sum(self.failed_by_reason.values())

    def add(self, item: StoredGroup) -> None:
        """Count one row's outcome."""
        self.total += 1
        counts = self.by_status.setdefault(
            item.status, {"passed": 0, "failed": 0, "without_bytes": 0}
        )
        if item.passed:
            self.passed += 1
            counts["passed"] += 1
            return
        if item.without_bytes:
            self.without_bytes[item.reason] += 1
            counts["without_bytes"] += 1
        else:
            self.failed_by_reason[item.reason] += 1
            counts["failed"] += 1
        if item.status in TRAINABLE_STATUSES:
            self.trainable_lost[item.reason] += 1

    def summary(self) -> str:
        """One line: passed, failed (by reason), and the rows without bytes, told apart."""
        failed = ", ".join(f"{r} {n}" for r, n in self.failed_by_reason.most_common()) or "none"
        line = f"{self.total} stored groups: {self.passed} pass, {self.failed} fail ({failed})"
        pruned, never = (self.without_bytes[r] for r in WITHOUT_BYTES)
        if pruned or never:
            line += f"; {pruned + never} without bytes to check: "
            line += "; ".join(
                text
                for n, text in (
                    (
                        pruned,
                        f"{pruned} sent or accepted whose bytes were pruned ({RETENTION_KEYS})",
                    ),
                    (never, f"{never} rejected before their bytes were fetched or decoded"),
                )
                if n
            )
        return f"{line}; {self.trainable} distinct sent or accepted groups verified"

    def as_dict(self) -> dict:
        return {
            "total": self.total,
            "passed": self.passed,
            "failed": self.failed,
            "failed_by_reason": dict(self.failed_by_reason),
            "without_bytes": dict(self.without_bytes),
            "by_status": self.by_status,
            "trainable": self.trainable,
        }


def empty_export_reason(report: VerifyReport, swarm_id: str | None = None) -> str:
    """Why no group can be exported (or trained on), in one clause; "" when one can."""
    if report.trainable:
        return ""
    if report.total == 0:
        return "the ledger holds no rollout groups"
    kept = sum(sum(report.by_status.get(s, {}).values()) for s in TRAINABLE_STATUSES)
    if kept == 0:
        return (
            f"its {report.total} stored groups are all rejected ones, and only groups this "
            "node sent or accepted are exported"
        )
    lost = Counter(report.trainable_lost)
    pruned = lost.pop(Reason.BODY_PRUNED, 0)
    parts = [f"{pruned} had their bytes pruned ({RETENTION_KEYS})"] if pruned else []
    if lost:
        reasons = ", ".join(f"{r} {n}" for r, n in lost.most_common())
        parts.append(f"{sum(lost.values())} failed verification ({reasons})")
    if swarm_id is not None and lost.get(Reason.WRONG_SWARM):
        parts[-1] += f"; --swarm-id {swarm_id} keeps only that swarm's groups"
    return f"none of its {kept} sent or accepted groups passed: {'; '.join(parts)}"


def prompt_model_note(url: str, model: str) -> str:
    """One line when the ledger's node ran another `policy.model` than `model`, the one the
    export formats its prompts for; "" when they agree or the ledger does not say."""
    from swarm.config.preflight import OBSERVER_MODEL
    from swarm.ledger import Ledger, get_meta

    ledger = Ledger(url, create=False)
    try:
        with ledger.reader() as session:
            ran = get_meta(session, "model")
    finally:
        ledger.close()
    if ran is None or ran in (model, OBSERVER_MODEL):
        return ""
    return (
        f"note: this ledger's node ran policy.model = {ran!r}, and the prompts are formatted "
        f"for {model!r}: give that node's --config to format them as it prompted"
    )


def verify_ledger(
    url: str,
    format_weight: float,
    swarm_id: str | None = None,
    progress: Callable[[int], None] | None = None,
    rescorer: Rescorer | None = None,
) -> tuple[VerifyReport, list[StoredGroup]]:
    """Verify every stored group; return the report and the trainable groups (passed, sent or
    accepted, deduplicated). `rescorer`: as in `verify_row`."""
    report, trainable, seen = VerifyReport(), [], set()
    for row in iter_rows(url):
        item = verify_row(row, format_weight, swarm_id, rescorer=rescorer)
        report.add(item)
        if item.passed and item.status in TRAINABLE_STATUSES and item.content_hash not in seen:
            seen.add(item.content_hash)
            trainable.append(item)
        if progress is not None:
            progress(1)
    report.trainable = len(trainable)
    return report, trainable
