"""Job-file fields of the pending queue: user, priority, max_wait and subtask labels."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.model import JobSpec, Node, QosClass, SubtaskSpec
from workloads.spec import DEFAULT_USER, SpecError, job_to_dict, load_jobs, parse_job

BASE = {"name": "j", "qos": "loose", "subtasks": [{"work": 10}]}


def test_defaults() -> None:
    job = parse_job(dict(BASE))
    assert job.user == DEFAULT_USER == "default"
    assert job.priority == 0
    assert job.max_wait is None
    assert job.subtasks[0].labels == frozenset()


def test_fields_parse() -> None:
    job = parse_job(
        BASE | {"user": "alice", "priority": -3, "max_wait": 90,
                "subtasks": [{"work": 10, "labels": ["fast", "gpu", "fast"]}]}
    )
    assert (job.user, job.priority, job.max_wait) == ("alice", -3, 90.0)
    assert job.subtasks[0].labels == frozenset({"fast", "gpu"})


def test_default_user_is_the_callers(tmp_path: Path) -> None:
    p = tmp_path / "j.yaml"
    p.write_text("name: j\nqos: loose\nsubtasks: [{work: 1}]\n")
    assert load_jobs(p, default_user="bob")[0].user == "bob"
    p.write_text("name: j\nqos: loose\nuser: carol\nsubtasks: [{work: 1}]\n")
    assert load_jobs(p, default_user="bob")[0].user == "carol"


@pytest.mark.parametrize(
    ("extra", "field", "reason"),
    [
        ({"user": ""}, "user", "non-empty string"),
        ({"user": 3}, "user", "non-empty string"),
        ({"user": "a\x1bb"}, "user", "control characters"),
        ({"priority": 1.5}, "priority", "integer"),
        ({"priority": True}, "priority", "integer"),
        ({"priority": "high"}, "priority", "integer"),
        ({"max_wait": 0}, "max_wait", "> 0 s"),
        ({"max_wait": -1}, "max_wait", "> 0 s"),
        ({"max_wait": "1h"}, "max_wait", "number"),
        ({"subtasks": [{"work": 1, "labels": "fast"}]}, "subtasks[0].labels", "list"),
        ({"subtasks": [{"work": 1, "labels": [""]}]}, "subtasks[0].labels[0]", "non-empty"),
        ({"subtasks": [{"work": 1, "labels": [1]}]}, "subtasks[0].labels[0]", "non-empty"),
        ({"subtasks": [{"work": 1, "labels": ["a,b"]}]}, "subtasks[0].labels[0]", "','"),
        ({"subtasks": [{"work": 1, "label": ["a"]}]}, "subtasks[0].label", "did you mean 'labels'"),
        ({"priorty": 1}, "priorty", "did you mean 'priority'"),
        ({"max_wiat": 1}, "max_wiat", "did you mean 'max_wait'"),
    ],
)
def test_bad_fields(extra: dict, field: str, reason: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_job(BASE | extra, "job.yaml")
    assert exc.value.field == field
    assert reason in exc.value.reason
    assert str(exc.value).startswith(f"job.yaml: {field}: ")
    assert "\n" not in str(exc.value)


_label = st.text(alphabet="abcdefgh-_", min_size=1, max_size=5)


@given(
    user=st.sampled_from(["default", "alice", "bob"]),
    priority=st.integers(-5, 5),
    max_wait=st.none() | st.floats(0.5, 1e6),
    labels=st.lists(st.frozensets(_label, max_size=3), min_size=1, max_size=4),
)
def test_round_trip(
    user: str, priority: int, max_wait: float | None, labels: list[frozenset[str]]
) -> None:
    job = JobSpec(
        name="j", qos=QosClass.LOOSE,
        subtasks=tuple(SubtaskSpec(work=1000.0, labels=lab) for lab in labels),
        user=user, priority=priority, max_wait=max_wait,
    )
    assert parse_job(job_to_dict(job)) == job


def test_node_labels_are_a_frozenset() -> None:
    n = Node("n0", 1000.0, labels={"fast"})  # type: ignore[arg-type]
    assert n.labels == frozenset({"fast"})
    assert Node("n1", 1000.0).labels == frozenset()
