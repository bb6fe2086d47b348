"""The one serializer (:mod:`workloads.records`): a record read back from what
:func:`to_record` wrote is the same record, floats bit for bit (no unit conversion); the
data is JSON (enums as their values, tuples and frozensets as lists); fields at their
defaults are left out; a record that does not fit raises a ``ValueError`` naming the
field."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.messages import SubtaskPhase, SubtaskReport
from workloads.model import JobSpec, QosClass, Subtask, SubtaskSpec
from workloads.records import from_record, to_record

_pos = st.floats(min_value=1e-9, max_value=1e12, allow_nan=False, allow_infinity=False)
_any = st.floats(allow_nan=False, allow_infinity=False)


@st.composite
def _subtasks(draw: st.DrawFn) -> Subtask:
    command = draw(st.none() | st.lists(st.text(max_size=5), min_size=1, max_size=3).map(tuple))
    return Subtask(
        job_id=draw(st.text(min_size=1, max_size=8)), index=draw(st.integers(0, 64)),
        node=draw(st.text(min_size=1, max_size=8)), qos=draw(st.sampled_from(QosClass)),
        work=draw(_pos), relative_weight=draw(_pos), expected_rate=draw(_pos),
        weight=draw(_pos), virtual_weight=draw(_any), rate_cap=draw(_any),
        done_work=draw(_any), start_time=draw(_any), finish_time=draw(st.none() | _any),
        command=command,
    )


@st.composite
def _specs(draw: st.DrawFn) -> JobSpec:
    subtasks = tuple(
        SubtaskSpec(draw(_pos), draw(_pos),
                    labels=frozenset(draw(st.lists(st.sampled_from("abc"), max_size=2))))
        for _ in range(draw(st.integers(1, 4)))
    )
    return JobSpec(draw(st.text(min_size=1, max_size=8)), QosClass.LOOSE, subtasks,
                   priority=draw(st.integers(-5, 5)))


@given(_subtasks())
def test_a_subtask_comes_back_bit_for_bit_through_json(s: Subtask) -> None:
    data = json.loads(json.dumps(to_record(s)))
    back = from_record(Subtask, data)
    assert back == s  # == : a field at its default is left out, -0.0 comes back 0.0
    for name in ("work", "relative_weight", "expected_rate", "weight"):
        assert getattr(back, name).hex() == getattr(s, name).hex()


@given(_specs())
def test_a_job_spec_comes_back_the_same(spec: JobSpec) -> None:
    data = json.loads(json.dumps(to_record(spec)))
    assert from_record(JobSpec, data) == spec
    for sub, d in zip(spec.subtasks, data["subtasks"]):
        assert sorted(d.get("labels", [])) == sorted(sub.labels)


def test_defaults_are_left_out_and_enums_are_their_values() -> None:
    r = SubtaskReport("j.2", 1, SubtaskPhase.RUNNING, 5.0)
    assert to_record(r) == {"run_id": "j.2", "index": 1, "state": "running", "done_work": 5.0}
    assert from_record(SubtaskReport, to_record(r)) == r


def test_a_record_that_does_not_fit_names_its_field() -> None:
    with pytest.raises(ValueError, match="index"):
        from_record(SubtaskReport, {"run_id": "j", "index": "one", "state": "running"})
    with pytest.raises(ValueError, match="state"):
        from_record(SubtaskReport, {"run_id": "j", "index": 1, "state": "asleep"})
