"""Job-file fields of reported progress: progress, progress_end, stall_after."""

from __future__ import annotations

from pathlib import Path

import pytest

from workloads.model import ProgressMode, ProgressSpec
from workloads.spec import SpecError, job_to_dict, load_jobs, parse_job

BASE = {"name": "j", "qos": "strict", "overall_deviation": 60, "asynchrony": 30,
        "subtasks": [{"work": 10, "command": ["prog"]}, {"work": 10, "command": ["prog"]}]}


def test_cpu_is_the_default_and_leaves_the_job_as_it_was() -> None:
    assert parse_job(dict(BASE)).progress is None
    assert parse_job(BASE | {"progress": "cpu"}) == parse_job(dict(BASE))
    assert "progress" not in job_to_dict(parse_job(BASE | {"progress": "cpu"}))


def test_reported_with_its_settings_round_trips() -> None:
    job = parse_job(BASE | {"progress": "reported", "progress_end": 500, "stall_after": 30})
    assert job.progress == ProgressSpec(ProgressMode.REPORTED, 500.0, 30.0)
    assert parse_job(job_to_dict(job)) == job
    assert parse_job(BASE | {"progress": "reported"}).progress == ProgressSpec()


@pytest.mark.parametrize(("extra", "field", "reason"), [
    ({"progress": "steps"}, "progress", "must be one of cpu, reported, got 'steps'"),
    ({"progress_end": 100}, "progress_end", "only with progress: reported"),
    ({"progress": "cpu", "stall_after": 5}, "stall_after", "only with progress: reported"),
    ({"progress": "reported", "progress_end": 0}, "progress_end", "must be > 0"),
    ({"progress": "reported", "stall_after": -1}, "stall_after", "must be > 0 s"),
    ({"progress": "reported", "progress_end": "1e3"}, "progress_end", "must be a number"),
    ({"progress": "reported", "subtasks": [{"work": 1, "command": ["p"]}, {"work": 1}]},
     "subtasks[1].command", "needs every subtask to run a command"),
])
def test_errors_name_the_field_and_the_reason(extra: dict[str, object], field: str,
                                              reason: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_job(BASE | extra, "job.yaml")
    assert exc.value.file == "job.yaml" and exc.value.field == field
    assert reason in exc.value.reason


def test_a_split_job_cannot_report(tmp_path: Path) -> None:
    p = tmp_path / "j.yaml"
    p.write_text("name: j\nqos: loose\nwork: 10\nparallelism: 2\nprogress: reported\n")
    with pytest.raises(SpecError, match=r"j.yaml: progress: reported needs subtasks with a "
                                        r"command"):
        load_jobs(p)


def test_the_example_job_file() -> None:
    examples = Path(__file__).resolve().parents[3] / "examples"
    (job,) = load_jobs(examples / "reported-progress.yaml")
    assert job.progress == ProgressSpec(ProgressMode.REPORTED, 200.0, 120.0)
    assert all(s.command for s in job.subtasks)
