"""An open ledger: its engine, sessions and transactions, and SQLite's settings.

SQLite runs in WAL mode with full sync, so a kill at any moment leaves every committed round
intact and no half-written one; library errors come out as one-line `LedgerError`s.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import create_engine, event
from sqlalchemy.exc import OperationalError, SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from swarm.core.errors import LedgerError
from swarm.ledger.schema import SCHEMA_VERSION, Base, Meta


class Ledger:
    """An open ledger database: an engine plus a session factory.

    The node that owns a ledger opens it with `create=True` (the schema is made on first
    start); anything that only reads (status, the demo's live table, replay) opens it with
    `create=False` and so never writes to another process's database.
    """

    def __init__(self, url: str, create: bool = True):
        self.url = url
        try:
            self.engine = create_engine(url)
            if self.engine.dialect.name == "sqlite":
                event.listen(self.engine, "connect", _sqlite_pragmas)
            if create:
                _create_schema(self.engine)
        except SQLAlchemyError as e:
            raise LedgerError(f"cannot open ledger {url}: {_one_line(e)}") from None
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if create:
            self._stamp_schema()

    def _stamp_schema(self) -> None:
        """Record the schema version once; another opener may record it at the same moment."""
        try:
            with self.transaction() as session:
                if session.get(Meta, "schema_version") is None:
                    session.add(Meta(key="schema_version", value=str(SCHEMA_VERSION)))
        except LedgerError:
            with self.reader() as session:
                if session.get(Meta, "schema_version") is None:
                    raise

    @contextmanager
    def transaction(self) -> Iterator[Session]:
        """A session whose work is committed together at the end, or not at all."""
        session = self._sessions()
        try:
            yield session
            session.commit()
        except SQLAlchemyError as e:
            session.rollback()
            raise LedgerError(f"ledger write failed ({self.url}): {_one_line(e)}") from None
        except BaseException:
            session.rollback()
            raise
        finally:
            session.close()

    @contextmanager
    def reader(self) -> Iterator[Session]:
        """A read-only session (nothing is committed)."""
        session = self._sessions()
        try:
            yield session
        except SQLAlchemyError as e:
            raise LedgerError(f"ledger read failed ({self.url}): {_one_line(e)}") from None
        finally:
            session.close()

    def close(self) -> None:
        self.engine.dispose()


def _create_schema(engine, attempts: int = 5) -> None:
    """Create missing tables; if another process creates them at the same moment, look again."""
    for attempt in range(attempts):
        try:
            Base.metadata.create_all(engine)
            return
        except OperationalError as e:
            if "already exists" not in str(e) or attempt == attempts - 1:
                raise
            time.sleep(0.05 * (attempt + 1))


def _one_line(e: Exception) -> str:
    """A library error as one line (SQLAlchemy appends the SQL and a link on further lines)."""
    text = str(getattr(e, "orig", None) or e).strip().splitlines()
    return f"{e.__class__.__name__}: {text[0] if text else ''}"


def _sqlite_pragmas(dbapi_connection, _record) -> None:
    # WAL: readers never block the writer and a killed writer never corrupts the file.
    # synchronous=FULL: a committed round survives even an OS crash, at one fsync per round.
    cursor = dbapi_connection.cursor()
    # A new ledger can give pages freed by pruning back to the file system
    # (`swarm.ledger.retention`); on an existing one this is a no-op.
    cursor.execute("PRAGMA auto_vacuum=INCREMENTAL")
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=FULL")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()
