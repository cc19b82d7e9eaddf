"""`swarm-node doctor`: is a node's ledger and checkpoint state intact and consistent?

Checks, each reported as ok / warning / problem:

- the ledger: SQLite `integrity_check`, the schema version, that every table exists, and
  its size (on disk, in use, rows; `swarm.ledger.retention`);
- its history: live (not superseded) round numbers unique and contiguous from 0, one live
  update per live round, every use of a shared group pointing at a stored group;
- the checkpoints: each one's state readable, its weights file loadable (tensors finite, SHA-256
  shown), its optimizer state loadable, its model the ledger's model; and the newest one not
  ahead of the ledger (a checkpoint after round r needs live rounds 0..r-1 in the ledger).

A running node keeps writing its ledger while the doctor reads it, so the checks run on a
consistent snapshot: a SQLite ledger is first copied with SQLite's online backup API (one
read transaction: every committed round or none of a round), and the copy is checked.

Rounds recorded after the newest checkpoint are not a problem: a restart marks them superseded
and runs them again. A leftover `.tmp-*` folder is an interrupted checkpoint write, ignored
and removed by the next save.

The machine's GPU stack (CUDA, the torch build, vLLM against its pins) is checked by
`swarm.ops.gpu_stack`, whose findings the command adds to these.

Deliberately not here: repairing anything. The doctor only reads.
"""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy import func, inspect, select, text

from swarm.core.errors import CheckpointError, LedgerError
from swarm.ledger import (
    SCHEMA_VERSION,
    Base,
    GroupRow,
    GroupUseRow,
    Ledger,
    RoundRow,
    UpdateRow,
    get_meta,
)
from swarm.ledger.retention import describe, ledger_size

# Tables added after schema version 3 was first written: a ledger last opened by an older
# version lacks them until its node starts again (the tables are made then).
LATER_TABLES = frozenset({"rejection_counts"})


@dataclass(frozen=True)
class Finding:
    level: str  # "ok" | "warning" | "problem"
    check: str
    message: str


def ok(check: str, message: str) -> Finding:
    return Finding("ok", check, message)


def warning(check: str, message: str) -> Finding:
    return Finding("warning", check, message)


def problem(check: str, message: str) -> Finding:
    return Finding("problem", check, message)


# ---------------------------------------------------------------------------------------------
# Pure rules over plain data


def round_findings(live_rounds: list[int], live_update_rounds: list[int]) -> list[Finding]:
    """Live rounds must be 0..n-1 exactly once each, with exactly one live update per round."""
    out = []
    duplicates = (
        sorted({r for r in live_rounds if live_rounds.count(r) > 1})
        if len(set(live_rounds)) != len(live_rounds)
        else []
    )
    if duplicates:
        out.append(
            problem("rounds", f"live round numbers recorded more than once: {_few(duplicates)}")
        )
    missing = sorted(set(range(max(live_rounds) + 1)) - set(live_rounds)) if live_rounds else []
    if missing:
        out.append(problem("rounds", f"live rounds missing (history has gaps): {_few(missing)}"))
    if not duplicates and not missing:
        out.append(
            ok(
                "rounds",
                f"{len(live_rounds)} live rounds, numbered 0..{len(live_rounds) - 1} without gaps or duplicates"
                if live_rounds
                else "no rounds recorded yet",
            )
        )
    extra = sorted(set(live_update_rounds) - set(live_rounds))
    lacking = sorted(set(live_rounds) - set(live_update_rounds))
    dup = (
        sorted({r for r in live_update_rounds if live_update_rounds.count(r) > 1})
        if len(set(live_update_rounds)) != len(live_update_rounds)
        else []
    )
    if extra or lacking or dup:
        out.append(
            problem(
                "updates",
                f"live updates do not match live rounds (rounds without an update: {_few(lacking)}; "
                f"updates without a round: {_few(extra)}; updates recorded twice: {_few(dup)})",
            )
        )
    else:
        out.append(ok("updates", "one live update per live round"))
    return out


def checkpoint_vs_ledger(checkpoint_round: int | None, live_rounds: list[int]) -> Finding:
    """The newest checkpoint says `checkpoint_round` rounds were done: the ledger must hold them."""
    if checkpoint_round is None:
        return ok(
            "resume",
            "no checkpoint: a restart begins at round 0 (earlier rounds become superseded)",
        )
    have = len(set(live_rounds) & set(range(checkpoint_round)))
    if have < checkpoint_round:
        return problem(
            "resume",
            f"the newest checkpoint is after round {checkpoint_round}, but the ledger holds only "
            f"{have} of its live rounds 0..{checkpoint_round - 1}: committed records are missing",
        )
    after = len([r for r in live_rounds if r >= checkpoint_round])
    note = f"; {after} later rounds will be marked superseded and run again" if after else ""
    return ok("resume", f"a restart resumes after round {checkpoint_round}{note}")


def _few(items: list, limit: int = 8) -> str:
    shown = ", ".join(map(str, items[:limit]))
    return shown + (f" … ({len(items)} in all)" if len(items) > limit else "") if items else "none"


# ---------------------------------------------------------------------------------------------
# I/O: reading the ledger and the checkpoints


@contextlib.contextmanager
def snapshot(url: str) -> Iterator[str]:
    """The URL of a consistent copy of a SQLite ledger file, made with the online backup API
    in one step (a single read transaction, so a writer's commit is in the copy whole or not
    at all), removed afterwards. Other URLs, and files SQLite cannot back up (not a database),
    are read where they are."""
    if not url.startswith("sqlite:///") or not Path(url[len("sqlite:///") :]).is_file():
        yield url
        return
    source_path = Path(url[len("sqlite:///") :])
    with tempfile.TemporaryDirectory(prefix="swarm-doctor-") as tmp:
        copy = Path(tmp) / source_path.name
        try:
            source = sqlite3.connect(f"file:{source_path}?mode=rw", uri=True, timeout=10)
            try:
                with contextlib.closing(sqlite3.connect(copy)) as target:
                    source.backup(target)  # pages=-1: everything in one step
            finally:
                source.close()
        except sqlite3.Error:
            yield url  # not a database (or unreadable): the checks on the file itself say so
            return
        yield f"sqlite:///{copy}"


def ledger_findings(
    url: str, name: str | None = None
) -> tuple[list[Finding], list[int], str | None]:
    """Findings about the ledger, plus its live round numbers and model (for the checkpoint
    checks). `name` is how messages call the ledger (default: its URL)."""
    name = name or url
    ledger = Ledger(url, create=False)
    out: list[Finding] = []
    try:
        with ledger.reader() as session:
            tables = set(inspect(session.get_bind()).get_table_names())
            if "meta" not in tables:
                not_ours = problem("schema", f"{name} is not a swarm-node ledger (no meta table)")
                return [not_ours], [], None
            if ledger.engine.dialect.name == "sqlite":
                result = [row[0] for row in session.execute(text("PRAGMA integrity_check"))]
                if result == ["ok"]:
                    out.append(ok("integrity", "SQLite integrity_check: ok"))
                else:
                    out.append(
                        problem("integrity", f"SQLite integrity_check: {'; '.join(result[:5])}")
                    )
            version = get_meta(session, "schema_version")
            if version != str(SCHEMA_VERSION):
                out.append(
                    problem(
                        "schema", f"schema version {version!r}, this node reads {SCHEMA_VERSION}"
                    )
                )
            later = sorted((set(Base.metadata.tables) - tables) & LATER_TABLES)
            if later:
                out.append(
                    ok(
                        "schema",
                        f"tables of a newer version, made at the node's next start: {', '.join(later)}",
                    )
                )
            missing = sorted(set(Base.metadata.tables) - tables - LATER_TABLES)
            if missing:
                out.append(problem("schema", f"tables missing: {', '.join(missing)}"))
            elif version == str(SCHEMA_VERSION) and not later:
                out.append(
                    ok(
                        "schema",
                        f"schema version {SCHEMA_VERSION}, all {len(tables & set(Base.metadata.tables))} tables present",
                    )
                )
            if missing:
                return out, [], get_meta(session, "model")
            rounds = list(
                session.scalars(select(RoundRow.round).where(RoundRow.superseded.is_(False)))
            )
            updates = list(
                session.scalars(select(UpdateRow.round).where(UpdateRow.superseded.is_(False)))
            )
            out += round_findings(rounds, updates)
            dangling = session.scalar(
                select(func.count())
                .select_from(GroupUseRow)
                .where(~GroupUseRow.group_id.in_(select(GroupRow.id)))
            )
            if dangling:
                out.append(
                    problem(
                        "group uses", f"{dangling} uses of shared groups point at no stored group"
                    )
                )
            else:
                out.append(ok("group uses", "every use of a shared group points at a stored group"))
            return out, rounds, get_meta(session, "model")
    except LedgerError as e:
        return [*out, problem("ledger", str(e).replace(url, name))], [], None
    finally:
        ledger.close()


def size_finding(copy_url: str, url: str) -> Finding:
    """How big the ledger is: its file on disk (`url`), pages in use and rows (`copy_url`)."""
    ledger = Ledger(copy_url, create=False)
    try:
        return ok("size", describe(ledger_size(ledger, on_disk=url)))
    except LedgerError as e:
        return warning("size", f"cannot measure the ledger: {e}")
    finally:
        ledger.close()


def checkpoint_findings(
    folder: Path, model: str | None, live_rounds: list[int] | None
) -> list[Finding]:
    """Findings about every checkpoint under `folder` (and the newest against the ledger's rounds)."""
    from swarm.policy.checkpoint import list_checkpoints, read_state

    if not folder.is_dir():
        return [
            ok("checkpoints", f"no checkpoint folder at {folder} (a node that never saved one)")
        ]
    out: list[Finding] = []
    temps = sorted(p.name for p in folder.glob(".tmp-*"))
    if temps:
        out.append(
            warning(
                "checkpoints",
                f"interrupted checkpoint writes left {len(temps)} temporary folders (removed by the next save)",
            )
        )
    complete = list_checkpoints(folder)
    newest_round = None
    for path in complete:
        try:
            state = read_state(path)
            digest = _check_weights(path)
            _check_optimizer(path)
        except CheckpointError as e:
            if path == complete[-1]:  # a restart loads exactly this one
                out.append(
                    problem("checkpoint", f"{e} (the newest checkpoint: a restart would fail)")
                )
                return out
            else:
                out.append(
                    warning("checkpoint", f"{e} (an older checkpoint: a restart uses a newer one)")
                )
            continue
        if model is not None and state.model_name != model:
            out.append(
                problem(
                    "checkpoint",
                    f"{path.name} is of model {state.model_name!r}, the ledger's node runs {model!r}",
                )
            )
            continue
        newest_round = state.round
        out.append(
            ok(
                "checkpoint",
                f"{path.name}: v{state.policy_version} after round {state.round}, loadable, weights sha256 {digest[:16]}…",
            )
        )
    if not complete:
        out.append(ok("checkpoints", "no complete checkpoint yet"))
    if live_rounds is not None:
        out.append(checkpoint_vs_ledger(newest_round, live_rounds))
    return out


def _check_weights(path: Path) -> str:
    """Load every tensor of model.safetensors (all finite); return the file's SHA-256."""
    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    weights = path / "model.safetensors"
    try:
        tensors = load_file(weights)
    except (OSError, SafetensorError) as e:
        raise CheckpointError(f"{path.name}: cannot load model.safetensors: {e}") from None
    bad = [
        name
        for name, t in tensors.items()
        if t.is_floating_point() and not bool(torch.isfinite(t).all())
    ]
    if bad:
        raise CheckpointError(f"{path.name}: non-finite weights in {', '.join(bad[:3])}")
    digest = hashlib.sha256()
    with weights.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _check_optimizer(path: Path) -> None:
    import pickle

    import torch

    optimizer = path / "optimizer.pt"
    if not optimizer.exists():
        return
    try:
        state = torch.load(
            optimizer, weights_only=False
        )  # our own file, written by save_checkpoint
    except (OSError, RuntimeError, EOFError, pickle.UnpicklingError) as e:
        raise CheckpointError(f"{path.name}: cannot load optimizer.pt: {e}") from None
    if not isinstance(state, dict) or "state" not in state:
        raise CheckpointError(f"{path.name}: optimizer.pt holds no optimizer state")


def diagnose(url: str | None, checkpoint_dir: Path | None) -> list[Finding]:
    """Every finding for a ledger and/or a checkpoint folder."""
    findings: list[Finding] = []
    rounds, model = None, None
    if url is not None:
        with snapshot(url) as copy:
            ledger, rounds, model = ledger_findings(copy, name=url)
            unreadable = ("schema", "ledger", "integrity")
            if not any(f.level == "problem" and f.check in unreadable for f in ledger):
                ledger.append(size_finding(copy, url))
        findings += ledger
    if checkpoint_dir is not None:
        findings += checkpoint_findings(checkpoint_dir, model, rounds)
    return findings


def healthy(findings: list[Finding]) -> bool:
    return not any(f.level == "problem" for f in findings)
