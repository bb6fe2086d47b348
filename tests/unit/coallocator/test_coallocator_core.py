"""ControllerCore: reports in, re-weight commands and phase-log records out."""

from __future__ import annotations

import pytest

from coallocator.controller import ControllerConfig
from coallocator.core import ControllerCore
from coallocator.messages import ProgressReport
from coallocator.phase_log import PeriodRecord, SummaryRecord
from workloads.messages import JobRegistration
from workloads.model import QosClass


def report(
    job: str, index: int, real: float, virtual: float, done: bool = False, seq: int = 0
) -> ProgressReport:
    return ProgressReport(
        job_id=job,
        subtask=index,
        node=f"n{index}",
        incarnation=0,
        seq=seq,
        real_time=real,
        virtual_time=virtual,
        expected_work=100.0,
        granted_work=100.0,
        done=done,
    )


def core(
    enabled: bool = True, log_every: int = 1, budgets: dict[str, float] | None = None
) -> tuple[ControllerCore, list[PeriodRecord | SummaryRecord]]:
    records: list[PeriodRecord | SummaryRecord] = []
    c = ControllerCore(
        ControllerConfig(),
        enabled=enabled,
        node_budgets=budgets if budgets is not None else {"n0": 100.0, "n1": 100.0},
        sink=records.append,
        log_every=log_every,
    )
    return c, records


def register_strict(c: ControllerCore, job: str = "j1", arrival: float = 0.0) -> None:
    # Two subtasks of admitted weight (expected rate) 50 Mcycles/s on n0 and n1;
    # E_t = 500 s, A_t = 100 s.
    c.register_job(JobRegistration(job, QosClass.STRICT, arrival,
                                   ((0, "n0", 50.0), (1, "n1", 50.0)), 500.0, 100.0))


def test_asynchrony_period_commands_records_and_slack() -> None:
    c, records = core()
    register_strict(c)
    assert c.node_slack() == {"n0": 50.0, "n1": 50.0}
    assert c.ingest(report("j1", 0, 1100.0, 1000.0))
    assert c.ingest(report("j1", 1, 1100.0, 1300.0))
    cmds = c.control_period(1100.0)
    # mean 1150, Asyn 300 > 100: SF_u,0 = 150 * 50 / 100 = 75, of which n0's slack has 50;
    # SF_d,1 = 75, of which 49.5 can go (floor 0.5).
    assert [(m.job_id, m.subtask, m.node, m.seq) for m in cmds] == [
        ("j1", 0, "n0", 1),
        ("j1", 1, "n1", 2),
    ]
    assert [w for m in cmds for w in (m.weight, m.virtual_weight)] == pytest.approx(
        [100.0, 0.0, 0.5, 49.5]
    )
    assert c.node_slack() == pytest.approx({"n0": 0.0, "n1": 50.0})
    (rec,) = records
    assert isinstance(rec, PeriodRecord)
    assert (rec.job, rec.period, rec.real_time, rec.window) == ("j1", 1, 1100.0, "asynchrony")
    assert (rec.mean_virtual, rec.phase_difference) == pytest.approx((1150.0, 300.0))
    assert rec.factors == pytest.approx({"0": 75.0, "1": -75.0})
    assert rec.weights == pytest.approx({"0": 100.0, "1": 0.5})
    assert rec.virtual_weights == pytest.approx({"0": 0.0, "1": 49.5})
    view = c.view("j1")
    assert view is not None
    assert view.virtual_times == (1000.0, 1300.0)
    assert view.window == "asynchrony"
    assert view.weights == pytest.approx((100.0, 0.5))
    assert view.done == (False, False)
    # A later period with the clocks back in step gives back the virtual weight.
    c.ingest(report("j1", 0, 1200.0, 1200.0))
    c.ingest(report("j1", 1, 1200.0, 1200.0))
    assert c.control_period(1200.0) == []
    assert records[-1].window == "none"
    assert c.view("j1").phase_difference == 0.0


def test_completion_emits_a_summary_with_skew_and_turnaround() -> None:
    c, records = core()
    register_strict(c, arrival=100.0)
    for phi in (0.0, 40.0):
        c.ingest(report("j1", 0, 500.0, 500.0))
        c.ingest(report("j1", 1, 500.0, 500.0 + phi))
        c.control_period(500.0)
    c.ingest(report("j1", 0, 900.0, 900.0, done=True))
    assert c.view("j1") is not None
    c.ingest(report("j1", 1, 960.0, 960.0, done=True))
    assert c.view("j1") is None
    summary = records[-1]
    assert isinstance(summary, SummaryRecord)
    assert summary == c.summaries["j1"]
    assert (summary.job, summary.qos, summary.subtasks, summary.periods) == ("j1", "strict", 2, 2)
    assert summary.mean_phase_difference == pytest.approx(20.0)
    assert summary.max_phase_difference == pytest.approx(40.0)
    assert summary.completion_skew == pytest.approx(60.0)
    assert summary.turnaround == pytest.approx(860.0)
    assert summary.completed


def test_reports_for_unknown_jobs_or_subtasks_are_refused() -> None:
    c, _ = core()
    register_strict(c)
    assert c.ingest(report("nope", 0, 1.0, 1.0)) is False
    assert c.ingest(report("j1", 2, 1.0, 1.0)) is False
    assert c.ingest(report("j1", -1, 1.0, 1.0)) is False


def test_reports_after_done_are_ignored() -> None:
    c, _ = core()
    c.register_job(JobRegistration(
        "j1", QosClass.STRICT, 0.0, ((0, "n0", 50.0), (1, "n1", 50.0), (2, "n2", 5.0)), 1e9, 1e9
    ))
    c.ingest(report("j1", 0, 10.0, 10.0, done=True))
    assert c.ingest(report("j1", 0, 20.0, 999.0))
    assert c.view("j1").virtual_times[0] == 10.0


def test_loose_jobs_are_observed_but_never_controlled_nor_logged_per_period() -> None:
    c, records = core()
    c.register_job(JobRegistration("l1", QosClass.LOOSE, 0.0, ((0, "n0", 50.0), (1, "n1", 50.0))))
    c.ingest(report("l1", 0, 1000.0, 0.0))
    c.ingest(report("l1", 1, 1000.0, 2000.0))
    assert c.control_period(1000.0) == []
    assert records == []
    assert c.node_slack() == {"n0": 100.0, "n1": 100.0}  # loose weights hold no budget
    c.ingest(report("l1", 0, 1010.0, 0.0, done=True))
    c.ingest(report("l1", 1, 1010.0, 2000.0, done=True))
    (summary,) = records
    assert summary.qos == "loose"
    assert summary.mean_phase_difference == pytest.approx(2000.0)


def test_disabled_controller_logs_strict_jobs_without_acting() -> None:
    c, records = core(enabled=False)
    register_strict(c)
    c.ingest(report("j1", 0, 1100.0, 0.0))
    c.ingest(report("j1", 1, 1100.0, 5000.0))
    assert c.control_period(1100.0) == []
    (rec,) = records
    assert (rec.window, rec.phase_difference, rec.mean_virtual) == ("none", 5000.0, 2500.0)
    assert rec.weights == {"0": 50.0, "1": 50.0}
    assert rec.factors == {}


def test_a_job_with_one_running_subtask_is_neither_controlled_nor_observed() -> None:
    c, records = core()
    c.register_job(JobRegistration("j1", QosClass.STRICT, 0.0, ((0, "n0", 50.0),), 1.0, 1.0))
    c.ingest(report("j1", 0, 1000.0, 0.0))
    assert c.control_period(1000.0) == []
    assert records == []
    c.finish_all()
    assert records[-1].periods == 0 and not records[-1].completed


def test_log_every_writes_every_kth_period_and_whenever_a_window_fires() -> None:
    c, records = core(log_every=3)
    register_strict(c)
    c.ingest(report("j1", 0, 0.0, 0.0))
    c.ingest(report("j1", 1, 0.0, 0.0))
    for k in range(1, 7):
        c.control_period(10.0 * k)
    assert [r.period for r in records] == [3, 6]
    c.ingest(report("j1", 1, 70.0, 300.0))  # Asyn 300 > 100
    c.control_period(70.0)
    assert [r.period for r in records] == [3, 6, 7]
    with pytest.raises(ValueError, match="log_every"):
        ControllerCore(log_every=0)


def test_clock_offset_and_quality_reach_the_record() -> None:
    c, records = core()
    register_strict(c)
    c.control_period(0.0, clock_offset=0.002, clock_quality="ntp")
    assert (records[0].clock_offset, records[0].clock_quality) == (0.002, "ntp")


def test_cancel_and_finish_all_emit_incomplete_summaries() -> None:
    c, records = core()
    register_strict(c, "a")
    register_strict(c, "b")
    c.cancel("a")
    c.cancel("missing")  # no effect
    assert records[-1].job == "a" and records[-1].completed is False
    assert records[-1].completion_skew is None and records[-1].turnaround is None
    c.finish_all()
    assert records[-1].job == "b" and not records[-1].completed
    assert set(c.summaries) == {"a", "b"}
    assert c.jobs == {}


def test_no_budgets_means_no_slack() -> None:
    c, _ = core(budgets={})
    register_strict(c)
    c.ingest(report("j1", 0, 1100.0, 1000.0))
    c.ingest(report("j1", 1, 1100.0, 1300.0))
    cmds = c.control_period(1100.0)
    assert cmds[0].weight == 50.0  # SF_u wanted 75 but there is nothing to take


def test_last_running_subtask_gets_its_weight_back() -> None:
    c, _ = core()
    register_strict(c)
    c.ingest(report("j1", 0, 1100.0, 1000.0))
    c.ingest(report("j1", 1, 1100.0, 1300.0))
    c.control_period(1100.0)  # subtask 1 slowed to 0.5, virtual 49.5
    c.ingest(report("j1", 0, 1200.0, 1200.0, done=True))
    cmds = c.control_period(1200.0)
    # Nothing is left to keep in step with: its virtual subtask should go and the weight
    # return to the admitted 50 Mcycles/s.
    assert [(m.subtask, m.weight, m.virtual_weight) for m in cmds] == [(1, 50.0, 0.0)]
    # Once only: the next period has nothing more to say.
    assert c.control_period(1300.0) == []
    assert c.view("j1").weights[1] == 50.0


def test_disabled_controller_never_restores_weights() -> None:
    c, _ = core(enabled=False)
    register_strict(c)
    c.ingest(report("j1", 0, 100.0, 100.0, done=True))
    assert c.control_period(100.0) == []


def _rated(job: str, index: int, real: float, virtual: float, granted: float) -> ProgressReport:
    return ProgressReport(job, index, f"n{index}", 0, 0, real, virtual, 100.0, granted)


def test_quiet_periods_extrapolates_the_clocks_last_rates() -> None:
    # Subtask 0 runs at full rate (dT_V/dT_R = 1), subtask 1 at half: after p periods of
    # 10 s, Asyn = 5 p s; A_t = 100 s holds up to p = 20 (the window is a strict '>').
    # The overall window (|7.5 p - 10 p| > 500) would only fire after p = 200.
    c, _ = core()
    register_strict(c)
    c.ingest(_rated("j1", 0, 0.0, 0.0, 100.0))
    c.ingest(_rated("j1", 1, 0.0, 0.0, 50.0))
    assert c.quiet_periods(0.0, 10.0, 1000) == 20
    assert c.quiet_periods(0.0, 10.0, 7) == 7
    # Already outside the asynchrony window: not a single quiet period.
    c.ingest(_rated("j1", 1, 0.0, 500.0, 100.0))
    assert c.quiet_periods(0.0, 10.0, 1000) == 0
    # A disabled controller never acts, so every period is quiet.
    off, _ = core(enabled=False)
    register_strict(off)
    assert off.quiet_periods(0.0, 10.0, 33) == 33
