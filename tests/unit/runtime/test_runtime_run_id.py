"""A job's run id (:class:`runtime.jobs.RunId`): the job id for its first run,
``<job id>.<n>`` for the n-th; read back from its text, also for job ids with dots."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runtime.jobs import JobInfo, RunId
from workloads.model import JobPhase, JobSpec, QosClass, SubtaskSpec

JOB_IDS = st.text(st.sampled_from("jx0123456789.-"), min_size=1, max_size=10)


@given(JOB_IDS, st.integers(1, 10_000), st.booleans())
def test_a_run_id_reads_back_from_its_text(job_id: str, dispatch: int, known: bool) -> None:
    run = RunId(job_id, dispatch)
    text = str(run)
    assert text == (job_id if dispatch == 1 else f"{job_id}.{dispatch}")
    if known or dispatch > 1:  # a first run is told from a later one by the known ids
        assert RunId.parse(text, {job_id} if known else set()) == run


def test_a_jobs_current_run_follows_its_dispatches() -> None:
    spec = JobSpec("a", QosClass.STRICT, (SubtaskSpec(1000.0),), 60.0, 30.0, job_id="j00007")
    info = JobInfo("j00007", spec, JobPhase.PENDING, "", 0.0)
    assert info.run == RunId("j00007") and info.run_id == "j00007"  # not placed yet
    info.dispatches = 1
    assert info.run_id == "j00007"
    info.dispatches = 3
    assert info.run == RunId("j00007", 3) and info.to_dict()["run_id"] == "j00007.3"
    assert "run_id" not in info.to_record()  # the dispatch count says it
    assert JobInfo.from_record(dict(info.to_record(), run_id="stale")).run_id == "j00007.3"
