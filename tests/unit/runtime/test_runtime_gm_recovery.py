"""A global manager service rebuilt over its journal (a restarted global manager) has the
job table, budgets and RNG of the one that died, answers a retried submission once, and
picks up subtask outcomes it missed from the nodes' views."""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from runtime.config import RuntimeConfig, runtime_core
from runtime.global_service import GlobalService
from runtime.job_journal import read_journal
from tests.unit.runtime.test_runtime_wiring import JOBS, NODES, Loopback, _periods
from workloads.messages import SubtaskOutcome, SubtaskPhase, SubtaskReport


class Recorder:
    def __init__(self) -> None:
        self.calls: list[tuple[str, Any]] = []

    def register(self, reg: Any) -> None:
        self.calls.append(("register", reg.job_id))

    def place(self, node: str, subtasks: list[Any], start: float) -> None:
        self.calls.append(("place", (node, tuple(s.key for s in subtasks))))

    def cancel(self, job_id: str, nodes: Any, reason: str = "") -> list[str]:
        self.calls.append(("cancel", job_id))
        return []


def _service(tmp_path: Path, rec: Recorder) -> GlobalService:
    config = RuntimeConfig(runtime_core(cycle=10.0), start_margin_s=0.0)
    loop = Loopback(NODES, config, tmp_path / "l.jsonl")
    return GlobalService(NODES, loop.gm.config, loop.clock, rec, tmp_path / "gm.json")


def test_a_rebuilt_service_recovers_the_table_budgets_and_rng(tmp_path: Path) -> None:
    rec = Recorder()
    gm = _service(tmp_path, rec)
    answers = gm.submit(list(JOBS), token="t1")
    journal = tmp_path / "gm.json"
    assert stat.S_IMODE(journal.stat().st_mode) == 0o600
    admitted = [a for a in answers if a["admitted"]]
    first = admitted[0]
    gm.subtask_ended(SubtaskOutcome(first["job_id"], 0, first["nodes"][0],
                                    SubtaskPhase.FINISHED, 50.0, None, ""))
    gm.cancel(admitted[1]["job_id"])

    again = GlobalService(NODES, gm.config, gm.clock, Recorder(), journal)
    assert again.recovered and not gm.recovered
    assert again.job_states() == gm.job_states()
    assert again.core.committed == gm.core.committed and again.core.load == gm.core.load
    assert again.core.rng.getstate() == gm.core.rng.getstate()
    assert again.describe().jobs == gm.describe().jobs
    # The same next decision: a new job gets the same id and placement from both.
    assert gm.submit([JOBS[0]]) == again.submit([JOBS[0]])


def test_a_retried_submission_is_admitted_once(tmp_path: Path) -> None:
    rec = Recorder()
    gm = _service(tmp_path, rec)
    answers = gm.submit([JOBS[0]], token="tok")
    placed = list(rec.calls)
    again = GlobalService(NODES, gm.config, gm.clock, rec, tmp_path / "gm.json")
    assert again.submit([JOBS[0]], token="tok") == answers
    assert rec.calls == placed  # nothing dispatched twice
    assert len(again.job_states()) == 1


def test_reconcile_applies_outcomes_the_service_missed(tmp_path: Path) -> None:
    gm = _service(tmp_path, Recorder())
    (answer,) = gm.submit([JOBS[1]])
    job, nodes = answer["job_id"], answer["nodes"]
    assert sorted(gm.running_subtasks()) == sorted(nodes)
    gone = GlobalService(NODES, gm.config, gm.clock, Recorder(), tmp_path / "gm.json")
    views = {
        n: [SubtaskReport(job, i, SubtaskPhase.FINISHED, None, 90.0 + i)]
        for i, n in enumerate(nodes)
    }
    assert gone.reconcile(nodes[0], views[nodes[0]]) == 1
    assert gone.reconcile(nodes[0], views[nodes[0]]) == 0  # applied once
    assert gone.job_states()[job] == "running"
    assert gone.reconcile(nodes[1], views[nodes[1]]) == 1
    assert gone.job(job).state == "completed"  # type: ignore[union-attr]
    assert all(v == 0.0 for v in gone.core.committed.values())
    data = read_journal(tmp_path / "gm.json")
    assert {k: j["state"] for k, j in data["jobs"].items()} == {job: "completed"}


def test_a_restart_mid_run_makes_the_same_decisions(tmp_path: Path) -> None:
    config = RuntimeConfig(runtime_core(cycle=10.0), policy="sq", start_margin_s=0.0)
    plain = Loopback(NODES, config, tmp_path / "plain.jsonl")
    plain.gm.submit(list(JOBS))
    plain.run()
    plain.ctl.close()

    loop = Loopback(NODES, config, tmp_path / "restart.jsonl")
    journal = tmp_path / "journal.json"
    loop.gm = GlobalService(NODES, config, loop.clock, loop.gm.dispatch, journal)
    loop.gm.submit(list(JOBS))
    for k in range(100_000):
        if k == 20:  # the global manager dies and comes back; the nodes run on
            loop.gm = GlobalService(NODES, config, loop.clock, loop.gm.dispatch, journal)
            assert loop.gm.recovered
        loop.step(k)
        if all(s != "running" for s in loop.gm.job_states().values()):
            break
    loop.ctl.close()
    assert loop.gm.job_states() == plain.gm.job_states()
    assert _periods(tmp_path / "restart.jsonl") == _periods(tmp_path / "plain.jsonl")
