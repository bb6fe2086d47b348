"""A job file's ``env`` (the job's and a subtask's): variable names to text, checked
with the file, field and reason; kept through ``job_to_dict``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workloads.spec import MAX_ENV_VARS, SpecError, job_to_dict, parse_job

BASE: dict[str, Any] = {"name": "c", "qos": "best_effort",
                        "subtasks": [{"work": 10, "command": ["true"]}]}


def test_env_values_become_text() -> None:
    job = parse_job({**BASE, "env": {"I_MPI_WAIT_MODE": 0, "X": 1.5, "Y": "y"},
                     "subtasks": [{"work": 10, "command": ["true"], "env": {"Z": "z"}}]})
    assert job.env == (("I_MPI_WAIT_MODE", "0"), ("X", "1.5"), ("Y", "y"))
    assert job.subtasks[0].env == (("Z", "z"),)
    assert parse_job(job_to_dict(job)) == job


@pytest.mark.parametrize("env, field, reason", [
    ("A=1", "env", "must be a mapping (variable names to values"),
    ({"1A": "x"}, "env.1A", "'1A' is not a variable name"),
    ({"A-B": "x"}, "env.A-B", "is not a variable name"),
    ({"A": True}, "env.A", "must be a string or a number, got bool True"),
    ({"A": None}, "env.A", "must be a string or a number, got null"),
    ({"A": [1]}, "env.A", "must be a string or a number, got list"),
    ({"A": float("inf")}, "env.A", "must be a finite number"),
    ({"A": "a\0b"}, "env.A", "must not contain a NUL character"),
    ({f"V{i}": "x" for i in range(MAX_ENV_VARS + 1)}, "env", "more than the 256 allowed"),
])
def test_bad_env_is_one_clear_error(env: object, field: str, reason: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_job({**BASE, "env": env}, source="job.yaml")
    assert str(err.value).startswith(f"job.yaml: {field}: ")
    assert reason in str(err.value)


def test_bad_subtask_env_names_the_subtask() -> None:
    with pytest.raises(SpecError, match=r"job.yaml: subtasks\[0\].env.X: must be a string"):
        parse_job({**BASE, "subtasks": [{"work": 1, "env": {"X": {}}}]}, source="job.yaml")


@given(st.dictionaries(st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,10}", fullmatch=True),
                       st.text(alphabet=st.characters(blacklist_characters="\0"),
                               max_size=20), max_size=8))
def test_any_valid_env_round_trips(env: dict[str, str]) -> None:
    job = parse_job({**BASE, "env": env})
    assert dict(job.env) == env
    assert parse_job(job_to_dict(job)) == job
