"""What the global manager writes to its journal, when, how it recovers from it, and the
archive of finished jobs.

The journal (:class:`runtime.journal.Journal`, sqlite in WAL mode) holds the tables of
:data:`JOURNAL_TABLES`, in records of :mod:`workloads.records` (:data:`JOURNAL_VERSION`).
Write-ahead: the global manager marks what it changes (:meth:`JobJournal.changed`) and
writes it (:meth:`JobJournal.write`: the changed jobs' rows, the core's state, lost
nodes, counters and changed submission tokens) in one transaction after every change and
before the change is acted on or answered. A global manager built over an existing
journal recovers from it (:meth:`JobJournal.open`). A journal that cannot be read (a
disk error, a hand edit, another format or version: there is no migration) is moved
aside as ``<name>.corrupt-<ms>`` with its WAL files (:meth:`JobJournal.set_aside`), with
one log line that says so; the manager then starts empty.

Retention: a finished job stays in the job table ``keep_finished`` model s after it
ended, then moves to the ``archive`` table (kept in memory without a journal), where it
is still read by id (:meth:`JobJournal.due`, :meth:`JobJournal.archive`).

Not thread-safe: the global manager holds its lock around every call.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from global_manager.core import GlobalManagerCore
from runtime.identity import Credential
from runtime.jobs import Answered, JobInfo
from runtime.journal import Journal, JournalUnreadable, Sync, journal_files
from workloads.model import JobPhase

log = logging.getLogger("coalloc.runtime")

#: Version of the journal's records (its ``meta`` table's ``version``): records of
#: :mod:`workloads.records`. A journal of another version is set aside.
JOURNAL_VERSION = 5
#: The journal's tables, each keyed by id: ``meta`` (the core's :data:`CORE_STATE_KEYS`,
#: ``version``, ``lost``, ``counters``), ``jobs`` (the job table), ``core_jobs``,
#: ``pending`` and ``closed`` (the core's placed, pending and closed jobs), ``tokens``
#: (submission answers), ``archive`` (finished jobs past their retention, as status
#: shows them) and ``users`` (the API's credentials by user name, their hashes only:
#: :class:`runtime.identity.Credential`).
JOURNAL_TABLES = ("meta", "jobs", "core_jobs", "pending", "closed", "tokens", "archive",
                  "users")
#: The job tables a job's rows live in while it is in the job table.
JOB_TABLES = ("jobs", "core_jobs", "pending", "closed")
#: Log pages (4 KiB) after which a journal write folds the log into the file itself;
#: normally :meth:`JobJournal.checkpoint` does it first, off the writer's path.
JOURNAL_AUTOCHECKPOINT_PAGES = 8192
#: The keys of :meth:`GlobalManagerCore.snapshot_state`.
CORE_STATE_KEYS = ("next_id", "seq", "rng", "committed", "load", "user_held", "down", "drain")
#: What the journal cannot be read for: :class:`JournalUnreadable` and the errors a
#: record that does not fit raises while it is read back.
UNREADABLE = (OSError, ValueError, KeyError, TypeError, AttributeError)


def read_journal(path: Path) -> dict[str, dict[str, Any]]:
    """The tables of the global manager's journal at ``path`` (:data:`JOURNAL_TABLES`,
    each ``{id: record}``), for inspection; :class:`JournalUnreadable` if it is not
    one."""
    journal = Journal(path, JOURNAL_TABLES)
    try:
        return journal.load()
    finally:
        journal.close()


@dataclass(frozen=True, slots=True)
class Recovered:
    """The global manager's table as its journal holds it (the core's state is restored
    in place): the job table, submission answers by token, lost nodes (node -> why) and
    counters (the API's credentials: :meth:`JobJournal.users`)."""

    jobs: dict[str, JobInfo]
    tokens: dict[str, Answered]
    lost: dict[str, str]
    counters: dict[str, int]


class JobJournal:
    """The global manager's journal (see the module docstring), or, until :meth:`open`,
    only its retention and an archive in memory."""

    def __init__(self, keep_finished: float, sync: Sync = Sync.NORMAL) -> None:
        """``keep_finished``: model s a finished job stays in the job table; ``sync``:
        how far a write is durable (:class:`Sync`)."""
        self.keep_finished = keep_finished
        self.sync = sync
        self.path: Path | None = None
        self._journal: Journal | None = None
        #: Jobs changed since the last write, in the order they were first changed (new
        #: jobs: in the order they were made).
        self._dirty: dict[str, None] = {}
        self._dirty_tokens: set[str] = set()
        #: The core's record of each placed job as last written (a new record, after a
        #: requeue, is written at the end, where the core keeps it), and the order of the
        #: placements since the last write (the core keeps its records in that order).
        self._core_written: dict[str, object] = {}
        self._placements: dict[str, int] = {}
        #: (model s it may leave the table, job id) of finished jobs, a heap.
        self._leaving: list[tuple[float, str]] = []
        #: Archived jobs when there is no journal (their status records, by id).
        self._archived: dict[str, dict[str, Any]] = {}

    # ---------------------------------------------------------------- changes
    def changed(self, job_id: str) -> None:
        """Job ``job_id`` changed: the next :meth:`write` writes it."""
        self._dirty.setdefault(job_id, None)

    def placed(self, job_id: str) -> None:
        """Job ``job_id`` was placed (its core record is new): changed, and written after
        the jobs placed before it."""
        self.changed(job_id)
        self._placements[job_id] = len(self._placements) + 1

    def token_changed(self, token: str) -> None:
        """Submission token ``token`` was answered or forgotten."""
        self._dirty_tokens.add(token)

    def write(
        self, core: GlobalManagerCore, jobs: Mapping[str, JobInfo],
        tokens: Mapping[str, Answered], lost: Mapping[str, str],
        counters: Mapping[str, int],
    ) -> None:
        """Write what changed since the last write in one transaction: the core's
        counters, RNG, rates and holdings, ``lost``, ``counters``, and every changed job
        and token. A failed write propagates: nothing is acted on that is not recorded
        (what it would have written is written by the next one)."""
        dirty, self._dirty = self._dirty, {}
        changed_tokens, self._dirty_tokens = self._dirty_tokens, set()
        for job_id in dirty:
            info = jobs.get(job_id)
            if info is not None and info.state.final:
                heapq.heappush(self._leaving, (info.ended_at + self.keep_finished, job_id))
        j = self._journal
        if j is None:
            return
        try:
            for key, value in core.snapshot_state().items():
                j.put("meta", key, value)
            j.put("meta", "version", JOURNAL_VERSION)
            j.put("meta", "lost", dict(lost))
            j.put("meta", "counters", dict(counters))
            placed = [job_id for job_id in dirty if self._write_job(j, core, jobs, job_id)]
            placed.sort(key=lambda job_id: self._placements.get(job_id, 0))
            for job_id in placed:
                j.delete("core_jobs", job_id)  # a new record goes to the end
                j.put("core_jobs", job_id, core.snapshot_job(job_id))
                self._core_written[job_id] = core.jobs[job_id]
            for token in changed_tokens:
                if token in tokens:
                    j.put("tokens", token, tokens[token].to_record())
                else:
                    j.delete("tokens", token)
            j.commit()
            self._placements.clear()
        except BaseException:
            j.rollback()
            self._dirty.update(dirty)
            self._dirty_tokens |= changed_tokens
            for job_id in dirty:  # where the core's record stands is not known now
                self._core_written.pop(job_id, None)
            raise

    def _write_job(
        self, j: Journal, core: GlobalManagerCore, jobs: Mapping[str, JobInfo], job_id: str
    ) -> bool:
        """Stage job ``job_id``'s rows: the job table's record and the core's (placed,
        pending or closed), each deleted where the job has none. True if the core's
        record is new (placed since it was last written): the caller writes it, in the
        order of the placements."""
        info = jobs.get(job_id)
        if info is None:
            j.delete("jobs", job_id)
        else:
            j.put("jobs", job_id, info.to_record())
        rec = core.jobs.get(job_id)
        if rec is None:
            self._core_written.pop(job_id, None)
            j.delete("core_jobs", job_id)
        elif self._core_written.get(job_id) is rec:
            j.put("core_jobs", job_id, core.snapshot_job(job_id))
        pending = core.snapshot_pending(job_id)
        if pending is None:
            j.delete("pending", job_id)
        else:
            j.put("pending", job_id, pending)
        closed = core.closed.get(job_id)
        if closed is None:
            j.delete("closed", job_id)
        else:
            j.put("closed", job_id, closed.value)
        return rec is not None and self._core_written.get(job_id) is not rec

    def write_all(
        self, core: GlobalManagerCore, jobs: Mapping[str, JobInfo],
        tokens: Mapping[str, Answered], lost: Mapping[str, str],
        counters: Mapping[str, int],
    ) -> None:
        """Write the whole table into the (empty) journal, in one transaction."""
        for job_id in (*jobs, *core.jobs):
            self.changed(job_id)
        self._placements = {job_id: i for i, job_id in enumerate(core.jobs)}
        self._dirty_tokens.update(tokens)
        self.write(core, jobs, tokens, lost, counters)

    # --------------------------------------------------------------- recovery
    def open(self, path: Path, core: GlobalManagerCore) -> Recovered | None:
        """Open the journal at ``path`` (created if missing). If it holds a table,
        restore ``core`` from it and return the rest (None: it is empty). Raises one of
        :data:`UNREADABLE` if it cannot be read: call :meth:`set_aside` then."""
        self.path = path
        self._journal = Journal(path, JOURNAL_TABLES, ("meta",), self.sync,
                                JOURNAL_AUTOCHECKPOINT_PAGES)
        data = self._journal.load()
        meta = data["meta"]
        if not meta:
            return None
        version = meta.get("version")
        if version != JOURNAL_VERSION:
            raise JournalUnreadable(
                f"a version {version!r} journal; this code reads version {JOURNAL_VERSION}")
        snap = {k: meta[k] for k in CORE_STATE_KEYS}
        snap["closed"] = dict(data["closed"])
        snap["jobs"] = list(data["core_jobs"].values())
        snap["pending"] = sorted(data["pending"].values(), key=lambda r: int(r["seq"]))
        core.restore(snap)
        found = Recovered(
            jobs={str(k): JobInfo.from_record(d) for k, d in data["jobs"].items()},
            tokens={str(k): Answered.from_record(v) for k, v in data["tokens"].items()},
            lost={str(k): str(v) for k, v in meta.get("lost", {}).items()},
            counters={str(k): int(v) for k, v in meta.get("counters", {}).items()},
        )
        self._core_written = dict(core.jobs)
        self._leaving = [(i.ended_at + self.keep_finished, i.job_id)
                         for i in found.jobs.values() if i.state.final]
        heapq.heapify(self._leaving)
        log.warning(
            "global manager recovered %d jobs (%d running, %d pending) from %s",
            len(found.jobs),
            sum(1 for j in found.jobs.values() if j.state is JobPhase.RUNNING),
            sum(1 for j in found.jobs.values() if j.state is JobPhase.PENDING),
            path,
        )
        return found

    def set_aside(self, exc: BaseException) -> str:
        """The journal could not be read (``exc``, from :meth:`open`): move it aside as
        ``<name>.corrupt-<ms>`` with its WAL files, log one line that says so, and open
        an empty journal in its place. Returns that line."""
        path = self.path
        if path is None:
            raise ValueError("set_aside: no journal was opened")
        if self._journal is not None:
            self._journal.close()
            self._journal = None
        aside = path.with_name(f"{path.name}.corrupt-{int(time.time() * 1000)}")
        for f in journal_files(path):
            if f.exists():
                f.replace(f.with_name(f"{aside.name}{f.name[len(path.name):]}"))
        why = f"{path}: unreadable journal ({type(exc).__name__}: {exc}); moved to {aside}, " \
            "started with an empty job table"
        log.error("%s", why)
        self._core_written, self._leaving = {}, []
        self._dirty, self._dirty_tokens, self._placements = {}, set(), {}
        self._journal = Journal(path, JOURNAL_TABLES, ("meta",), self.sync,
                                JOURNAL_AUTOCHECKPOINT_PAGES)
        return why

    def users(self) -> list[Credential]:
        """The credentials the journal holds (none without a journal)."""
        if self._journal is None:
            return []
        return [Credential.from_record(v) for v in self._journal.values("users")
                if isinstance(v, dict)]

    def write_user(self, cred: Credential) -> None:
        """Record ``cred`` (added or revoked) in its own transaction; a failed write
        propagates (the change is then not made). Nothing without a journal."""
        j = self._journal
        if j is None:
            return
        try:
            j.put("users", cred.name, cred.to_record())
            j.commit()
        except BaseException:
            j.rollback()
            raise

    # ---------------------------------------------------------------- archive
    def due(self, jobs: Mapping[str, JobInfo], now: float) -> list[JobInfo]:
        """The finished jobs of ``jobs`` past their retention at model time ``now``, taken
        off the retention heap: :meth:`archive` them."""
        out: list[JobInfo] = []
        while self._leaving and self._leaving[0][0] <= now:
            _, job_id = heapq.heappop(self._leaving)
            info = jobs.get(job_id)
            if info is None or not info.state.final or \
                    info.ended_at + self.keep_finished > now:
                continue
            out.append(info)
        return out

    def archive(self, moved: Iterable[JobInfo], now: float) -> None:
        """Move the jobs ``moved`` (from :meth:`due`) to the archive, their job-table rows
        deleted, in one transaction; the caller then drops them from its table. A failed
        write propagates and puts them back on the retention heap (due at ``now``)."""
        moved = list(moved)
        j = self._journal
        if j is None:
            for info in moved:
                self._archived[info.job_id] = info.to_dict()
        else:
            try:
                for info in moved:
                    j.put("archive", info.job_id, info.to_dict())
                    for table in JOB_TABLES:
                        j.delete(table, info.job_id)
                j.commit()
            except BaseException:
                j.rollback()
                for info in moved:
                    heapq.heappush(self._leaving, (now, info.job_id))
                raise
        for info in moved:
            self._core_written.pop(info.job_id, None)
            self._dirty.pop(info.job_id, None)

    def archived(self, job_id: str) -> dict[str, Any] | None:
        """The record of an archived job (None: not archived)."""
        if self._journal is None:
            rec = self._archived.get(job_id)
            return None if rec is None else dict(rec)
        value = self._journal.get("archive", job_id)
        return dict(value) if isinstance(value, dict) else None

    def archived_jobs(self) -> list[dict[str, Any]]:
        """Every archived job's record, oldest archived first."""
        if self._journal is None:
            return [dict(r) for r in self._archived.values()]
        return [dict(r) for r in self._journal.values("archive") if isinstance(r, dict)]

    # -------------------------------------------------------------- the file
    def checkpoint(self) -> int:
        """Fold the log into the file (callable from another thread than the writer's,
        one at a time). Returns the log's length in pages (0: no journal)."""
        return 0 if self._journal is None else self._journal.checkpoint()

    def close(self) -> None:
        """Close the journal (nothing is written after this)."""
        if self._journal is not None:
            self._journal.close()
            self._journal = None
