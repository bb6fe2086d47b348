"""The global manager's journal (:mod:`runtime.journal`): any sequence of changes, read
back after a reopen, gives the tables as an ordered dict model of them says, as of the
last commit; what was not committed is gone; a file that is not a journal is refused."""

from __future__ import annotations

import sqlite3
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.journal import SCHEMA_VERSION, Journal, JournalUnreadable, journal_files

TABLES = ("meta", "jobs")
KEYS = st.sampled_from([f"j{i}" for i in range(6)])
VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6)
    | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner,
                                                                max_size=3),
    max_leaves=6,
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.sampled_from(TABLES), KEYS, VALUES),
        st.tuples(st.just("delete"), st.sampled_from(TABLES), KEYS, st.none()),
        st.tuples(st.just("commit"), st.none(), st.none(), st.none()),
        st.tuples(st.just("rollback"), st.none(), st.none(), st.none()),
        st.tuples(st.just("reopen"), st.none(), st.none(), st.none()),
    ),
    max_size=40,
)


def _apply(model: dict[str, dict[str, Any]], op: str, table: str, key: str, value: Any) -> None:
    """The model: a table is an ordered dict (a put keeps an existing key's place)."""
    if op == "put":
        model[table][key] = value
    else:
        model[table].pop(key, None)


@settings(max_examples=60, deadline=None)
@given(OPS)
def test_any_sequence_of_changes_reads_back_as_committed_after_a_reopen(
    ops: list[tuple[str, Any, Any, Any]],
) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "gm.sqlite"
        journal = Journal(path, TABLES, dedupe=("meta",))
        committed: dict[str, dict[str, Any]] = {t: {} for t in TABLES}
        current = {t: dict(v) for t, v in committed.items()}
        for op, table, key, value in ops:
            if op in ("put", "delete"):
                getattr(journal, op)(table, key, *(() if op == "delete" else (value,)))
                _apply(current, op, table, key, value)
            elif op == "commit":
                journal.commit()
                committed = {t: dict(v) for t, v in current.items()}
            else:  # a rollback, or a crash and a restart: what was not committed is gone
                if op == "rollback":
                    journal.rollback()
                else:
                    journal.close()
                    journal = Journal(path, TABLES, dedupe=("meta",))
                current = {t: dict(v) for t, v in committed.items()}
                loaded = journal.load()
                assert {t: list(loaded[t].items()) for t in TABLES} == {
                    t: list(committed[t].items()) for t in TABLES}
        journal.commit()
        journal.close()
        loaded = Journal(path, TABLES).load()
        assert {t: list(loaded[t].items()) for t in TABLES} == {
            t: list(current[t].items()) for t in TABLES}


def test_a_deleted_key_put_again_moves_to_the_end_and_a_put_keeps_its_place(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gm.sqlite"
    journal = Journal(path, TABLES)
    for key in ("a", "b", "c"):
        journal.put("jobs", key, {"k": key})
    journal.commit()
    journal.put("jobs", "a", {"k": "a2"})
    journal.delete("jobs", "b")
    journal.put("jobs", "b", {"k": "b2"})
    journal.commit()
    journal.close()
    assert list(Journal(path, TABLES).load()["jobs"].items()) == [
        ("a", {"k": "a2"}), ("c", {"k": "c"}), ("b", {"k": "b2"})]


def test_the_file_is_private_and_in_wal_mode_and_a_dedupe_table_skips_unchanged_rows(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gm.sqlite"
    journal = Journal(path, TABLES, dedupe=("meta",))
    journal.put("meta", "rng", [1, 2, 3])
    journal.commit()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    wal = journal_files(path)[1]
    assert wal.exists() and stat.S_IMODE(wal.stat().st_mode) == 0o600
    size = wal.stat().st_size
    journal.put("meta", "rng", [1, 2, 3])  # unchanged: nothing to write
    journal.commit()
    assert wal.stat().st_size == size
    journal.put("jobs", "j1", [1, 2, 3])
    journal.commit()
    assert wal.stat().st_size > size
    journal.close()
    with sqlite3.connect(path) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


@pytest.mark.parametrize("content", [
    b'{"version": 2, "core": {"trunc', b"SQLite format 3\x00" + b"\x00" * 84, b"\x00" * 4096,
])
def test_a_file_that_is_not_a_journal_is_refused(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "gm.sqlite"
    path.write_bytes(content)
    with pytest.raises(JournalUnreadable):
        Journal(path, TABLES).load()


def test_another_version_or_missing_tables_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "gm.sqlite"
    Journal(path, TABLES).close()
    with pytest.raises(JournalUnreadable, match="tables: missing"):
        Journal(path, (*TABLES, "archive"))
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(JournalUnreadable, match="unknown journal version"):
        Journal(path, TABLES)


def test_a_row_that_is_not_json_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "gm.sqlite"
    Journal(path, TABLES).close()
    with sqlite3.connect(path) as db:
        db.execute("INSERT INTO jobs (key, value) VALUES ('j1', '{not json')")
    with pytest.raises(JournalUnreadable, match="not JSON"):
        Journal(path, TABLES).load()


def test_checkpoints_from_another_thread_keep_every_commit_and_bound_the_log(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gm.sqlite"
    journal = Journal(path, TABLES, autocheckpoint_pages=10**6)  # none on the writer's path
    done = threading.Event()
    folded: list[int] = []

    def checkpointer() -> None:
        while not done.is_set():
            folded.append(journal.checkpoint())

    thread = threading.Thread(target=checkpointer)
    thread.start()
    for i in range(200):
        journal.put("jobs", f"j{i}", {"i": i, "pad": "x" * 2000})
        journal.commit()
    done.set()
    thread.join()
    assert folded and journal.checkpoint() > 0
    wal = journal_files(path)[1]
    size = wal.stat().st_size
    for i in range(20):  # the log starts over once folded: it does not grow
        journal.put("jobs", f"j{i}", {"i": -i})
        journal.commit()
    assert wal.stat().st_size <= size
    journal.close()
    rows = Journal(path, TABLES).load()["jobs"]
    assert len(rows) == 200 and rows["j5"] == {"i": -5} and rows["j150"]["i"] == 150
