"""Bulk cancel in the live global manager (``coalloc cancel JOB... --user --state``, as
``scancel``), driven in memory over the loopback grid of ``test_runtime_gm_faults``."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from runtime.job_journal import read_journal
from tests.unit.runtime.test_runtime_gm_faults import Grid
from tests.unit.runtime.test_runtime_wiring import strict

BIG = strict("big", [300, 300, 300, 300], [4, 4, 4, 4], 300.0, 100.0)


def submit(g: Grid, user: str) -> str:
    (a,) = g.gm.submit([replace(BIG, user=user)])
    return str(a["job_id"])


def test_filters_select_jobs_and_named_jobs_outside_them_are_skipped(tmp_path: Path) -> None:
    g = Grid(tmp_path)
    run_a = submit(g, "alice")  # takes the whole grid: the others wait
    pend_a, pend_b, pend_a2 = submit(g, "alice"), submit(g, "bob"), submit(g, "alice")
    assert [g.state(j) for j in (run_a, pend_a, pend_b)] == ["running", "pending", "pending"]
    out = g.gm.cancel_many(None, user="alice", state="pending")
    assert [(r["job_id"], r["was"], r["result"]) for r in out] == [
        (pend_a, "pending", "cancelled"), (pend_a2, "pending", "cancelled")]
    assert [g.state(j) for j in (run_a, pend_b)] == ["running", "pending"]
    # Named jobs outside the filters are listed as skipped, not cancelled.
    out = g.gm.cancel_many([run_a, pend_b], user="alice")
    assert [(r["job_id"], r["result"]) for r in out] == [
        (run_a, "cancelled"), (pend_b, "skipped: user bob")]
    stops = [c for c in g.dispatch.cancelled if c[0] == run_a]
    assert stops and stops[-1][2] == "cancelled" and len(stops[-1][1]) == 4
    out = g.gm.cancel_many([pend_b], state="running")
    assert out[0]["result"] == "skipped: pending, not running"
    # The journal holds the outcome (one write for the lot).
    rec = read_journal(g.journal)
    assert rec["jobs"][pend_a]["state"] == "cancelled"


def test_cancelling_a_job_that_is_over_says_so_and_unknown_ids_are_named(
    tmp_path: Path,
) -> None:
    g = Grid(tmp_path)
    job = submit(g, "alice")
    first = g.gm.cancel_many([job, "j99999", job])
    assert [(r["job_id"], r["result"]) for r in first] == [
        (job, "cancelled"), ("j99999", "unknown job id")]
    (again,) = g.gm.cancel_many([job])
    assert again["result"] == "already cancelled" and again["state"] == "cancelled"
    assert g.gm.cancel_many(None, state="pending") == []
    assert g.gm.cancel("j99999") is None
    rec = g.gm.cancel(job)
    assert rec is not None and rec.state == "cancelled"
