"""A journal store: keyed JSON records in named tables, in one sqlite file (what the global
manager keeps in it, and when: :mod:`runtime.job_journal`).

A write costs what changed: :meth:`Journal.put` and :meth:`Journal.delete` touch one row
each, and :meth:`Journal.commit` records the lot in one transaction (sqlite in WAL mode;
how far a commit is durable is :class:`Sync`, ``NORMAL`` by default: it survives the
process's crash; docs/decisions.md, "A journal whose writes cost what changed"). Nothing
written since the last commit survives a crash or a :meth:`Journal.rollback`.

Each table behaves as an ordered ``dict``: :meth:`Journal.load` gives its rows in the
order their keys were first put; putting an existing key keeps its place, deleting a key
and putting it again moves it to the end. Tables named in ``dedupe`` skip a put whose
value is the one last written for that key (small, often rewritten rows: the core's
counters and RNG).

The file is created 0600 (it names users and jobs); sqlite gives its ``-wal`` and
``-shm`` files the same permissions. A file that is not such a journal (another format, a
hand edit, a truncated copy, another :data:`SCHEMA_VERSION`) raises
:class:`JournalUnreadable` when it is opened (:class:`Journal`).

No Ray and no model here: values are JSON-able data, keys strings.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable
from enum import Enum
from pathlib import Path
from typing import Any

#: Version of the journal's layout (the file's ``PRAGMA user_version``).
SCHEMA_VERSION = 3
#: The sidecar files sqlite keeps beside the journal in WAL mode.
SIDECARS = ("-wal", "-shm")


class Sync(str, Enum):
    """How far :meth:`Journal.commit` makes a transaction durable (sqlite's
    ``synchronous`` in WAL mode). ``NORMAL``: written to the log before commit returns,
    so it survives the process's crash (the failure a restarted global manager recovers
    from); the log is fsync-ed at each checkpoint, so an OS crash or a power loss may
    lose the last transactions, never corrupt the file. ``FULL``: also fsync-ed at every
    commit (survives a power loss; costs the disk's fsync per change)."""

    NORMAL = "NORMAL"
    FULL = "FULL"


class JournalUnreadable(ValueError):
    """The file is not a journal this version can read (the message says why)."""


def journal_files(path: Path) -> list[Path]:
    """The journal ``path`` and its WAL sidecars (existing or not)."""
    return [path, *(path.with_name(path.name + s) for s in SIDECARS)]


class Journal:
    """An open journal (see the module docstring). Not thread-safe: the caller serialises
    (the global manager holds its lock)."""

    def __init__(
        self, path: Path, tables: Iterable[str], dedupe: Iterable[str] = (),
        sync: Sync = Sync.NORMAL, autocheckpoint_pages: int = 1000,
    ) -> None:
        """Open (creating if missing, 0600) the journal at ``path`` with ``tables``;
        ``sync``: how far a commit is made durable (:class:`Sync`);
        ``autocheckpoint_pages``: a commit that leaves the log longer than this many
        pages (4 KiB each) folds it into the file itself, on the writer's time (sqlite's
        ``wal_autocheckpoint``; :meth:`checkpoint` does it from another thread). Raises
        :class:`JournalUnreadable` if the file is not a readable journal."""
        self.path = path
        self.sync = Sync(sync)
        self.autocheckpoint_pages = int(autocheckpoint_pages)
        self._checkpointer: sqlite3.Connection | None = None
        self.tables = tuple(tables)
        if not self.tables or any(not t.isidentifier() for t in self.tables):
            raise ValueError(f"tables: expected identifiers, got {self.tables!r}")
        self.dedupe = frozenset(dedupe)
        #: Text last written per (table, key) of the ``dedupe`` tables.
        self._last: dict[tuple[str, str], str] = {}
        self._in_txn = False
        if not path.exists():
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600))
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise JournalUnreadable(f"cannot open: {exc}") from exc
        try:
            self._setup()
        except sqlite3.Error as exc:
            self._db.close()
            raise JournalUnreadable(f"not a journal ({type(exc).__name__}: {exc})") from exc
        except JournalUnreadable:
            self._db.close()
            raise

    def _setup(self) -> None:
        db = self._db
        version = int(db.execute("PRAGMA user_version").fetchone()[0])
        existing = {r[0] for r in db.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        if version == 0 and not existing:
            mode = db.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                raise JournalUnreadable(f"cannot use WAL mode (got {mode})")
            db.execute("BEGIN")
            for t in self.tables:
                db.execute(f"CREATE TABLE {t} (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        elif version != SCHEMA_VERSION:
            raise JournalUnreadable(f"version: unknown journal version {version}")
        else:
            missing = set(self.tables) - existing
            if missing:
                raise JournalUnreadable(f"tables: missing {sorted(missing)}")
            db.execute("PRAGMA journal_mode=WAL")
        db.execute(f"PRAGMA synchronous={self.sync.value}")
        db.execute(f"PRAGMA wal_autocheckpoint={self.autocheckpoint_pages}")

    # ------------------------------------------------------------------ writes
    def _begin(self) -> None:
        if not self._in_txn:
            self._db.execute("BEGIN IMMEDIATE")
            self._in_txn = True

    def put(self, table: str, key: str, value: object) -> None:
        """Write ``value`` (JSON-able) under ``key`` in ``table`` (in the open
        transaction; durable at :meth:`commit`)."""
        text = json.dumps(value, separators=(",", ":"))
        if table in self.dedupe:
            if self._last.get((table, key)) == text:
                return
            self._last[(table, key)] = text
        self._begin()
        self._db.execute(
            f"INSERT INTO {self._table(table)} (key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
            (key, text),
        )

    def delete(self, table: str, key: str) -> None:
        """Remove ``key`` from ``table`` (nothing if absent)."""
        self._last.pop((table, key), None)
        self._begin()
        self._db.execute(f"DELETE FROM {self._table(table)} WHERE key = ?", (key,))

    def commit(self) -> None:
        """Make every put and delete since the last commit durable, all or none. A failed
        commit rolls back and raises (nothing of it is recorded)."""
        if not self._in_txn:
            return
        try:
            self._db.execute("COMMIT")
        except sqlite3.Error:
            self.rollback()
            raise
        self._in_txn = False

    def rollback(self) -> None:
        """Forget every put and delete since the last commit."""
        if self._in_txn:
            self._in_txn = False
            self._last.clear()  # the dedupe cache may name values never committed
            try:
                self._db.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # sqlite rolled back already (it does on some errors)

    # ------------------------------------------------------------------- reads
    def load(self) -> dict[str, dict[str, Any]]:
        """Every table as an ordered ``{key: value}`` (see the module docstring);
        :class:`JournalUnreadable` if a row is not JSON."""
        out: dict[str, dict[str, Any]] = {}
        try:
            for t in self.tables:
                rows: dict[str, Any] = {}
                for key, text in self._db.execute(f"SELECT key, value FROM {t} ORDER BY rowid"):
                    rows[str(key)] = json.loads(text)
                    if t in self.dedupe:
                        self._last[(t, str(key))] = text
                out[t] = rows
        except sqlite3.Error as exc:
            raise JournalUnreadable(f"cannot read ({type(exc).__name__}: {exc})") from exc
        except ValueError as exc:
            raise JournalUnreadable(f"a row is not JSON ({exc})") from exc
        return out

    def get(self, table: str, key: str) -> object:
        """One row's value (None if absent), as committed or written in this
        transaction."""
        row = self._db.execute(
            f"SELECT value FROM {self._table(table)} WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def values(self, table: str) -> list[object]:
        """Every value of ``table``, in its order."""
        return [json.loads(text) for (text,) in self._db.execute(
            f"SELECT value FROM {self._table(table)} ORDER BY rowid")]

    def count(self, table: str) -> int:
        return int(self._db.execute(f"SELECT COUNT(*) FROM {self._table(table)}").fetchone()[0])

    def checkpoint(self) -> int:
        """Fold the log into the file without waiting for the writer (sqlite's PASSIVE
        checkpoint, on a connection of its own: callable from another thread than the
        writer's, one thread at a time). Returns the log's length in pages."""
        if self._checkpointer is None:
            self._checkpointer = sqlite3.connect(self.path, isolation_level=None,
                                                 check_same_thread=False)
        _, frames, _ = self._checkpointer.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        return int(frames)

    def close(self) -> None:
        """Close (the caller makes sure :meth:`checkpoint` is not running)."""
        self.rollback()
        if self._checkpointer is not None:
            self._checkpointer.close()
        self._db.close()

    def _table(self, table: str) -> str:
        if table not in self.tables:
            raise KeyError(f"{table}: not a table of this journal")
        return table
