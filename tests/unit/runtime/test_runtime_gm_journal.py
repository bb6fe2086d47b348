"""The global manager's job table over its journal: after any sequence of submissions,
subtask outcomes, cancellations, node losses, placement cycles and archiving, a service
rebuilt over the journal (a restarted global manager) has the same job table, core state
(jobs, pending queue in order, rates, user holdings, RNG), tokens, lost nodes, counters
and archive; finished jobs leave the table after ``keep_finished_s`` and are still read
by id, by ``describe(archived=True)`` (``status --all``) and by ``cancel``."""

from __future__ import annotations

import json
import logging
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clocks.base import ManualClock
from runtime.config import RuntimeConfig, runtime_core
from runtime.global_service import GlobalService
from runtime.job_journal import JOURNAL_TABLES, read_journal
from runtime.journal import Journal
from runtime.status import to_json
from runtime.timebase import ModelClock, TimeBase
from tests.unit.runtime.test_runtime_gm_recovery import Recorder
from tests.unit.runtime.test_runtime_wiring import JOBS, NODES, strict
from workloads.messages import SubtaskOutcome, SubtaskPhase
from workloads.model import EndPolicy

CYCLE = 10.0
KEEP_S = 200.0  # real s = model s (time scale 1)
BIG = strict("big", [300, 300, 300, 300], [4, 4, 4, 4], 300.0, 100.0)
SPECS = [*JOBS, BIG, replace(BIG, name="big-requeue", on_failure=EndPolicy.REQUEUE),
         replace(JOBS[0], user="alice", priority=2)]


class World:
    """A global manager over a journal, a manual clock and nodes that answer or not."""

    def __init__(self, directory: Path) -> None:
        self.config = RuntimeConfig(runtime_core(cycle=CYCLE), start_margin_s=0.0,
                                    time_scale=1.0, node_timeout=20, keep_finished_s=KEEP_S)
        self.manual = ManualClock(0.0)
        self.clock = ModelClock(self.manual, TimeBase(0.0, 1.0))
        self.path = directory / "gm.sqlite"
        self.gm = self.reopen()
        self.silent: set[str] = set()

    def reopen(self) -> GlobalService:
        return GlobalService(NODES, self.config, self.clock, Recorder(), self.path)

    def running(self) -> list[str]:
        return [j for j, i in self.gm.jobs.items() if i.state.value == "running"]

    def end_subtask(self, pick: int, state: SubtaskPhase) -> None:
        running = self.running()
        if not running:
            return
        info = self.gm.jobs[running[pick % len(running)]]
        open_ = info.open_subtasks()
        if open_:
            s = open_[0]
            self.gm.subtask_ended(SubtaskOutcome(
                info.run_id, s.index, s.node, state,
                self.clock.now(), 3 if state is SubtaskPhase.FAILED else None, ""))

    def tick(self, cycles: int) -> None:
        for _ in range(cycles):
            self.manual.set(self.manual.now() + CYCLE)
            for n in NODES:
                if n.name not in self.silent:
                    self.gm.node_answered(n.name, True)
            self.gm.check_nodes()
            self.gm.place_pending()
            self.gm.archive_finished()


def state_of(gm: GlobalService) -> dict[str, Any]:
    """What a restart must keep. A pending job's reasons are not journaled: the core
    keeps those of the last cycle, a restarted one works them out when asked."""
    derived = ("reason", "pending_reasons")
    return {
        "core": gm.core.snapshot(),
        "jobs": [(j, i.to_record()) for j, i in gm.jobs.items()],
        "tokens": {k: a.to_record() for k, a in gm.tokens.items()}, "lost": gm.lost,
        "counters": gm.counters,
        "archive": gm.archived_jobs(),
        "describe": [{k: v for k, v in d.items() if d["state"] != "pending" or k not in derived}
                     for d in map(to_json, gm.describe(archived=True).jobs)],
    }


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.integers(0, len(SPECS) - 1), st.booleans()),
        st.tuples(st.just("finish"), st.integers(0, 9), st.just(False)),
        st.tuples(st.just("fail"), st.integers(0, 9), st.just(False)),
        st.tuples(st.just("cancel"), st.integers(0, 9), st.just(False)),
        st.tuples(st.just("tick"), st.integers(1, 25), st.just(False)),
        st.tuples(st.just("silence"), st.integers(0, len(NODES) - 1), st.booleans()),
        st.tuples(st.just("reopen"), st.just(0), st.just(False)),
    ),
    max_size=25,
)


@settings(max_examples=40, deadline=None)
@given(OPS)
def test_any_sequence_of_changes_replayed_after_a_reopen_gives_the_same_table(
    ops: list[tuple[str, int, bool]],
) -> None:
    with tempfile.TemporaryDirectory() as d:
        w = World(Path(d))
        for k, (op, arg, flag) in enumerate(ops):
            if op == "submit":
                w.gm.submit([SPECS[arg]], token=f"t{k}" if flag else None)
            elif op == "finish":
                w.end_subtask(arg, SubtaskPhase.FINISHED)
            elif op == "fail":
                w.end_subtask(arg, SubtaskPhase.FAILED)
            elif op == "cancel":
                live = [j for j, i in w.gm.jobs.items() if not i.state.final]
                if live:
                    w.gm.cancel_many([live[arg % len(live)]])
            elif op == "tick":
                w.tick(arg)
            elif op == "silence":
                (w.silent.add if flag else w.silent.discard)(NODES[arg].name)
            else:
                before = state_of(w.gm)
                w.gm.close()
                w.gm = w.reopen()
                assert state_of(w.gm) == before
        before = state_of(w.gm)
        w.gm.close()
        again = w.reopen()
        assert state_of(again) == before
        again.close()


def test_finished_jobs_leave_the_table_after_the_retention_and_are_still_read(
    tmp_path: Path,
) -> None:
    w = World(tmp_path)
    done, waits, runs = (a["job_id"] for a in w.gm.submit([BIG, BIG, JOBS[1]]))
    assert w.gm.job_states() == {done: "running", waits: "pending", runs: "running"}
    for _ in range(4):
        w.end_subtask(0, SubtaskPhase.FINISHED)
    assert w.gm.job_states()[done] == "completed"
    finished = w.gm.job(done)
    w.tick(int(KEEP_S / CYCLE) - 1)  # not yet: within its retention
    assert done in w.gm.jobs and w.gm.archived_jobs() == []
    w.tick(2)
    assert done not in w.gm.jobs and done not in w.gm.core.jobs
    assert set(w.gm.job_states()) == {waits, runs}  # the live table
    assert w.gm.job_states([done]) == {done: "completed"}  # by id, from the archive
    assert w.gm.job(done) == finished
    assert [j.job_id for j in w.gm.describe().jobs] == [waits, runs]
    assert [j.job_id for j in w.gm.describe(archived=True).jobs] == [waits, runs, done]
    assert w.gm.describe(done).jobs == [finished]
    (again,) = w.gm.cancel_many([done])
    assert again["result"] == "already completed"
    # A restarted manager reads the same archive; the journal keeps no row of it live.
    w.gm.close()
    w.gm = w.reopen()
    assert w.gm.job(done) == finished and done not in w.gm.jobs
    assert done not in read_journal(w.path)["jobs"]
    # Running and pending jobs never leave, however long they wait.
    w.tick(3 * int(KEEP_S / CYCLE))
    assert waits in w.gm.jobs and runs in w.gm.jobs


def test_a_journal_without_retention_keeps_the_archive_in_memory(tmp_path: Path) -> None:
    w = World(tmp_path)
    gm = GlobalService(NODES, w.config, w.clock, Recorder(), None)
    (a,) = gm.submit([JOBS[1]])
    gm.cancel(a["job_id"])
    w.manual.set(KEEP_S + CYCLE)
    assert gm.archive_finished() == 1
    assert gm.job(a["job_id"]).state == "cancelled"  # type: ignore[union-attr]
    assert [j.job_id for j in gm.describe(archived=True).jobs] == [a["job_id"]]


@pytest.mark.parametrize("version", [2, 3])
def test_a_journal_of_an_old_version_is_moved_aside_with_one_line(
    tmp_path: Path, version: int, caplog: pytest.LogCaptureFixture,
) -> None:
    """There is no migration: a journal of another version (``data/journal_v3.json``,
    the tables of a version 3 journal; a whole-file JSON journal of version 2) is moved
    aside as one that cannot be read, with one log line naming its version, and the
    manager starts empty over a new journal."""
    path = tmp_path / "gm.sqlite"
    if version == 3:
        tables = json.loads((Path(__file__).parent / "data" / "journal_v3.json").read_text())
        journal = Journal(path, JOURNAL_TABLES)
        for table, rows in tables.items():
            for key, value in rows.items():
                journal.put(table, key, value)
        journal.commit()
        journal.close()
    else:
        path.write_text(json.dumps({"version": 2, "core": {}, "jobs": []}), encoding="utf-8")
    old = path.read_bytes()
    with caplog.at_level(logging.ERROR, logger="coalloc.runtime"):
        w = World(tmp_path)
    gm = w.gm
    assert not gm.recovered and not gm.jobs and gm.journal_error
    (line,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert line == gm.journal_error and "moved to" in line
    assert (f"a version {version} journal" in line) == (version == 3)
    (aside,) = tmp_path.glob("gm.sqlite.corrupt-*")
    assert aside.read_bytes() == old
    if version == 3:
        assert read_journal(aside)["meta"]["version"] == 3
    (a,) = gm.submit([JOBS[1]])  # the new journal is written and read back
    gm.close()
    assert a["job_id"] in w.reopen().jobs


def test_a_retried_token_gets_the_first_answers_until_its_keep_time_also_after_a_restart(
    tmp_path: Path,
) -> None:
    """A submission retried with its token makes no job for ``TOKEN_KEEP_S`` real s after
    its first answer, also across a restarted global manager; after that the token is
    forgotten (a retry is a new submission), and the table holds no token past its time."""
    from runtime import jobs

    w = World(tmp_path)
    first = w.gm.submit([SPECS[0]], token="retry-me")
    w.manual.set(jobs.TOKEN_KEEP_S * 0.5)
    w.gm.close()
    w.gm = w.reopen()
    assert w.gm.submit([SPECS[0]], token="retry-me") == first
    assert len(w.gm.jobs) == 1
    w.manual.set(jobs.TOKEN_KEEP_S + 1.0)  # time scale 1: model s = real s
    again = w.gm.submit([SPECS[1]], token="another")  # forgets the expired one first
    assert "retry-me" not in w.gm.tokens and "retry-me" not in read_journal(w.path)["tokens"]
    assert w.gm.submit([SPECS[1]], token="another") == again
    later = w.gm.submit([SPECS[0]], token="retry-me")
    assert later[0]["job_id"] != first[0]["job_id"] and len(w.gm.jobs) == 3
    assert w.gm.counters["tokens_forgotten_early"] == 0
    w.gm.close()


def test_a_token_forgotten_for_room_before_its_time_is_counted_and_logged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from runtime import global_service

    monkeypatch.setattr(global_service, "TOKENS_KEPT", 2)
    w = World(tmp_path)
    for k in range(3):
        w.gm.submit([SPECS[0]], token=f"t{k}")
    assert list(w.gm.tokens) == ["t1", "t2"]
    assert w.gm.counters["tokens_forgotten_early"] == 1
    assert any("would be applied again" in r.getMessage() for r in caplog.records)
    w.gm.close()
