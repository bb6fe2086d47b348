"""Job-spec files: parsing, every validation case, round trip, the examples."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coalloc.errors import UserError, is_unprintable
from workloads.model import STANDARD_MHZ, Demand, JobSpec, QosClass, SubtaskSpec
from workloads.spec import (
    SpecError,
    check_fits,
    job_to_dict,
    load_jobs,
    mcycles_to_seconds,
    parse_job,
    seconds_to_mcycles,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def strict_job(**over: object) -> dict[str, object]:
    job: dict[str, object] = {
        "name": "j",
        "qos": "strict",
        "overall_deviation": 300,
        "asynchrony": 120,
        "subtasks": [{"work": 1800, "weight": 1}, {"work": 3600, "weight": 2}],
    }
    job.update(over)
    return job


def error_of(mapping: object, index: int | None = 2, **kw: bool) -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_job(mapping, "jobs.yaml", index, **kw)
    return info.value


def write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


# --- the examples --------------------------------------------------------------------


def test_issue_example_parses_with_units_converted() -> None:
    (job,) = load_jobs(EXAMPLES / "coupled-sim.yaml")
    assert job.name == "coupled-sim"
    assert job.qos is QosClass.STRICT
    assert (job.overall_deviation, job.asynchrony, job.duration) == (300.0, 120.0, 1800.0)
    assert [s.work for s in job.subtasks] == [1800 * STANDARD_MHZ, 3600 * STANDARD_MHZ, 3600e3]
    assert [s.weight for s in job.subtasks] == [1.0, 2.0, 2.0]
    assert job.subtasks[0].demand is None
    assert job.subtasks[1].demand == Demand(cpu=1, memory_mb=512, io_mbps=5)
    assert job.subtasks[2].command is not None and job.subtasks[2].command[0] == "python3"
    assert job.job_id == ""


def test_jobs_json_holds_strict_loose_best_effort() -> None:
    jobs = load_jobs(EXAMPLES / "jobs.json")
    assert [j.qos for j in jobs] == [QosClass.STRICT, QosClass.LOOSE, QosClass.BEST_EFFORT]
    strict = jobs[0]
    # Small enough to run live in ~10-20 s at 100 model-seconds per real second.
    assert strict.n_subtasks == 3
    assert all(300e3 <= s.work <= 600e3 for s in strict.subtasks)
    loose = jobs[1]
    assert (loose.parallelism, loose.total_work, loose.total_weight) == (2, 600e3, 2.0)


# --- accepted forms ------------------------------------------------------------------


def test_parallelism_form_defaults_weight_to_one_per_subtask() -> None:
    job = parse_job({"name": "p", "qos": "loose", "work": 900, "parallelism": 3})
    assert job.subtasks == ()
    assert (job.parallelism, job.total_work, job.total_weight) == (3, 900e3, 3.0)
    assert job.n_subtasks == 3


def test_subtask_weight_defaults_to_one_and_duration_optional() -> None:
    job = parse_job({"name": "b", "qos": "best_effort", "subtasks": [{"work": 5}]})
    assert job.subtasks == (SubtaskSpec(work=5000.0, weight=1.0),)
    assert job.duration is None and job.overall_deviation is None


def test_single_job_file_and_list_file(tmp_path: Path) -> None:
    one = write(tmp_path, "one.yml", "name: a\nqos: loose\nsubtasks: [{work: 1}]\n")
    assert [j.name for j in load_jobs(one)] == ["a"]
    loose = {"name": "y", "qos": "loose", "subtasks": [{"work": 2}]}
    many = write(tmp_path, "many.json", json.dumps([strict_job(name="x"), loose]))
    assert [j.name for j in load_jobs(many)] == ["x", "y"]


def test_error_is_a_user_error_with_attributes() -> None:
    err = error_of(strict_job(subtasks=[{"work": -5}]))
    assert isinstance(err, UserError)
    assert err.file == "jobs.yaml"
    assert err.field == "jobs[2].subtasks[0].work"
    assert "must be > 0" in err.reason
    assert str(err) == f"jobs.yaml: jobs[2].subtasks[0].work: {err.reason}"


# --- validation: every case names file, field and reason ------------------------------


@pytest.mark.parametrize(
    ("work", "reason"),
    [
        (-5, "must be > 0"),
        (0, "must be > 0"),
        (float("nan"), "finite"),
        (float("inf"), "finite"),
        ("abc", "must be a number, got string 'abc'"),
        (True, "must be a number, got bool"),
        (None, "must be a number, got null"),
        ([1], "must be a number, got list"),
    ],
)
def test_bad_subtask_work(work: object, reason: str) -> None:
    err = error_of(strict_job(subtasks=[{"work": 10}, {"work": work}]))
    assert err.field == "jobs[2].subtasks[1].work"
    assert reason in err.reason


def test_numeric_string_gets_a_hint() -> None:
    err = error_of(strict_job(subtasks=[{"work": "1e3"}]))
    assert "bare number" in err.reason


@pytest.mark.parametrize("weight", [0, -1, float("nan"), "2", False])
def test_bad_subtask_weight(weight: object) -> None:
    err = error_of(strict_job(subtasks=[{"work": 10, "weight": weight}]))
    assert err.field == "jobs[2].subtasks[0].weight"


def test_bad_total_weight_and_work_in_parallelism_form() -> None:
    err = error_of({"name": "p", "qos": "loose", "work": 9, "weight": 0, "parallelism": 2})
    assert err.field == "jobs[2].weight" and "> 0" in err.reason
    err = error_of({"name": "p", "qos": "loose", "work": -9, "parallelism": 2})
    assert err.field == "jobs[2].work"


@pytest.mark.parametrize("missing", ["overall_deviation", "asynchrony"])
def test_strict_job_needs_both_windows(missing: str) -> None:
    job = strict_job()
    del job[missing]
    err = error_of(job, index=None)
    assert err.field == missing
    assert "required for a strict job" in err.reason


def test_strict_window_null_counts_as_missing_and_must_be_positive() -> None:
    assert error_of(strict_job(asynchrony=None)).field == "jobs[2].asynchrony"
    err = error_of(strict_job(overall_deviation=0))
    assert err.field == "jobs[2].overall_deviation" and "> 0" in err.reason


@pytest.mark.parametrize("qos", ["loose", "best_effort"])
def test_windows_rejected_for_non_strict_jobs(qos: str) -> None:
    err = error_of(strict_job(qos=qos))
    assert err.field == "jobs[2].overall_deviation"
    assert "only strict jobs" in err.reason


def test_unknown_key_suggests_the_close_one() -> None:
    err = error_of(strict_job(asynchrony_s=3))
    assert err.field == "jobs[2].asynchrony_s"
    assert "did you mean 'asynchrony'" in err.reason
    err = error_of(strict_job(subtasks=[{"work": 1, "wieght": 2}]))
    assert err.field == "jobs[2].subtasks[0].wieght"
    assert "did you mean 'weight'" in err.reason
    err = error_of(strict_job(subtasks=[{"work": 1, "demand": {"mem_mb": 2}}]))
    assert err.field == "jobs[2].subtasks[0].demand.mem_mb"
    assert "did you mean 'memory_mb'" in err.reason


def test_unknown_key_without_a_close_match_lists_known_keys() -> None:
    err = error_of(strict_job(zzzz=1))
    assert "known keys" in err.reason and "asynchrony" in err.reason


def test_bad_qos_suggests() -> None:
    err = error_of(strict_job(qos="strct"))
    assert err.field == "jobs[2].qos" and "did you mean 'strict'" in err.reason
    assert error_of(strict_job(qos=3)).field == "jobs[2].qos"
    assert "missing" in error_of({"name": "a", "subtasks": [{"work": 1}]}).reason


def test_local_qos_only_for_generators() -> None:
    job = {"name": "l", "qos": "local", "node": "n0", "subtasks": [{"work": 1}]}
    err = error_of(job)
    assert err.field == "jobs[2].qos" and "never submitted" in err.reason
    parsed = parse_job(job, allow_local=True)
    assert parsed.qos is QosClass.LOCAL and parsed.node == "n0"
    err = error_of({**job, "node": ""}, allow_local=True)
    assert err.field == "jobs[2].node"
    two = {**job, "subtasks": [{"work": 1}, {"work": 2}]}
    assert "exactly one subtask" in error_of(two, allow_local=True).reason
    assert error_of(strict_job(node="n1")).field == "jobs[2].node"


@pytest.mark.parametrize(
    ("command", "field", "reason"),
    [
        ("python3 -c 'x'", "command", "argv list, never a shell string"),
        ([], "command", "non-empty argv list"),
        (["python3", 3], "command[1]", "must be strings"),
        (["", "-c"], "command[0]", "non-empty"),
        ({"argv": "x"}, "command", "non-empty argv list"),
    ],
)
def test_bad_command(command: object, field: str, reason: str) -> None:
    err = error_of(strict_job(subtasks=[{"work": 1, "command": command}]))
    assert err.field == f"jobs[2].subtasks[0].{field}"
    assert reason in err.reason


def test_bad_demand() -> None:
    err = error_of(strict_job(subtasks=[{"work": 1, "demand": {"cpu": 0}}]))
    assert err.field == "jobs[2].subtasks[0].demand.cpu"
    err = error_of(strict_job(subtasks=[{"work": 1, "demand": {"memory_mb": -1}}]))
    assert err.field == "jobs[2].subtasks[0].demand.memory_mb"
    err = error_of(strict_job(subtasks=[{"work": 1, "demand": [1, 2]}]))
    assert err.field == "jobs[2].subtasks[0].demand" and "mapping" in err.reason


@pytest.mark.parametrize("extra", ["parallelism", "work", "weight"])
def test_subtasks_and_split_form_together(extra: str) -> None:
    err = error_of(strict_job(**{extra: 2}))
    assert err.field == f"jobs[2].{extra}"
    assert "not both" in err.reason


def test_neither_subtasks_nor_parallelism() -> None:
    err = error_of({"name": "a", "qos": "loose"})
    assert err.field == "jobs[2].subtasks" and "missing" in err.reason
    err = error_of({"name": "a", "qos": "loose", "work": 10})
    assert err.field == "jobs[2].parallelism" and "required" in err.reason
    err = error_of({"name": "a", "qos": "loose", "parallelism": 2})
    assert err.field == "jobs[2].work" and "required" in err.reason


@pytest.mark.parametrize("par", [0, -1, 2.0, True, "3"])
def test_bad_parallelism(par: object) -> None:
    err = error_of({"name": "a", "qos": "loose", "work": 10, "parallelism": par})
    assert err.field == "jobs[2].parallelism" and "integer >= 1" in err.reason


def test_subtasks_must_be_a_non_empty_list_of_mappings() -> None:
    assert "at least one" in error_of(strict_job(subtasks=[])).reason
    assert error_of(strict_job(subtasks="work: 1")).field == "jobs[2].subtasks"
    err = error_of(strict_job(subtasks=[5]))
    assert err.field == "jobs[2].subtasks[0]" and "mapping" in err.reason
    assert error_of(strict_job(subtasks=[{"weight": 2}])).field == "jobs[2].subtasks[0].work"


@pytest.mark.parametrize("name", ["", "  ", 5, None])
def test_job_name_must_be_non_empty_string(name: object) -> None:
    err = error_of(strict_job(name=name))
    assert err.field == "jobs[2].name"
    job = strict_job()
    del job["name"]
    assert error_of(job).field == "jobs[2].name"


def test_job_must_be_a_mapping_and_other_fields() -> None:
    err = error_of([1, 2], index=None)
    assert err.field == "" and "mapping" in str(err)
    assert error_of(strict_job(duration=-1)).field == "jobs[2].duration"
    assert error_of(strict_job(arrival=-1)).field == "jobs[2].arrival"
    assert parse_job(strict_job(arrival=0, duration=50)).duration == 50.0


def test_field_path_without_index_has_no_prefix() -> None:
    err = error_of(strict_job(subtasks=[{"work": 0}]), index=None)
    assert err.field == "subtasks[0].work"
    assert str(err).startswith("jobs.yaml: subtasks[0].work: ")


# --- files ---------------------------------------------------------------------------


def load_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_jobs(path)
    return info.value


def test_file_not_found(tmp_path: Path) -> None:
    err = load_error(tmp_path / "nope.yaml")
    assert err.file.endswith("nope.yaml") and "no such file" in err.reason
    assert str(err) == f"{err.file}: no such file"


def test_empty_files(tmp_path: Path) -> None:
    for name, text in [("e.yaml", ""), ("c.yaml", "# only a comment\n"), ("e.json", "  \n")]:
        assert "empty file" in load_error(write(tmp_path, name, text)).reason
    assert "empty list" in load_error(write(tmp_path, "l.json", "[]")).reason
    assert "got int" in load_error(write(tmp_path, "n.yaml", "3\n")).reason


def test_unparsable_yaml_names_the_line(tmp_path: Path) -> None:
    p = write(tmp_path, "bad.yaml", "name: a\nqos: strict\nsubtasks: [{work: 1}\n  oops: ]\n")
    err = load_error(p)
    assert err.field.startswith("line ") and "not valid YAML" in err.reason
    assert err.file == str(p)


def test_unparsable_json_names_line_and_column(tmp_path: Path) -> None:
    err = load_error(write(tmp_path, "bad.json", '{\n  "name": "a",\n  "qos": strict\n}\n'))
    assert err.field == "line 3, column 10" and "not valid JSON" in err.reason


def test_duplicate_keys_are_rejected(tmp_path: Path) -> None:
    p = write(tmp_path, "d.yaml", "name: a\nqos: loose\nqos: strict\nsubtasks: [{work: 1}]\n")
    err = load_error(p)
    assert err.field == "line 3" and "'qos' given twice" in err.reason
    err = load_error(write(tmp_path, "d.json", '{"name": "a", "name": "b"}'))
    assert "'name' given twice" in err.reason


def test_json_nan_rejected(tmp_path: Path) -> None:
    text = '{"name": "a", "qos": "loose", "subtasks": [{"work": NaN}]}'
    assert "NaN" in load_error(write(tmp_path, "nan.json", text)).reason


def test_yaml_nan_rejected_with_field(tmp_path: Path) -> None:
    p = write(tmp_path, "nan.yaml", "name: a\nqos: loose\nsubtasks: [{work: .nan}]\n")
    err = load_error(p)
    assert err.field == "subtasks[0].work" and "finite" in err.reason


def test_list_file_field_paths_carry_the_index(tmp_path: Path) -> None:
    jobs = [strict_job(), strict_job(), strict_job(subtasks=[{"work": 1}, {"work": "abc"}])]
    err = load_error(write(tmp_path, "three.json", json.dumps(jobs)))
    assert err.field == "jobs[2].subtasks[1].work"
    assert str(err) == f"{tmp_path / 'three.json'}: jobs[2].subtasks[1].work: {err.reason}"


def test_unknown_suffix_and_directory(tmp_path: Path) -> None:
    assert "unknown file type" in load_error(write(tmp_path, "x.txt", "name: a")).reason
    (tmp_path / "dir.yaml").mkdir()
    assert "directory" in load_error(tmp_path / "dir.yaml").reason


# --- check_fits ----------------------------------------------------------------------


def test_check_fits_names_the_field_used() -> None:
    job = parse_job(strict_job(subtasks=[{"work": 1}] * 4))
    check_fits(job, 4, "f.yaml")
    with pytest.raises(SpecError) as info:
        check_fits(job, 3, "f.yaml")
    assert info.value.field == "subtasks"
    assert "more subtasks than nodes" in info.value.reason and "4" in info.value.reason
    split = parse_job({"name": "p", "qos": "loose", "work": 9, "parallelism": 5})
    with pytest.raises(SpecError) as info:
        check_fits(split, 2, "f.yaml", index=1)
    assert info.value.field == "jobs[1].parallelism"


# --- round trip ----------------------------------------------------------------------


def test_examples_round_trip() -> None:
    for path in (EXAMPLES / "coupled-sim.yaml", EXAMPLES / "jobs.json"):
        for job in load_jobs(path):
            d = job_to_dict(job)
            assert json.loads(json.dumps(d)) == d
            assert parse_job(d) == job


_pos = st.floats(min_value=1e-3, max_value=1e7, allow_nan=False, allow_infinity=False)
_demands = st.none() | st.builds(
    Demand,
    cpu=st.floats(min_value=0.01, max_value=64),
    memory_mb=st.floats(min_value=0, max_value=1e6),
    io_mbps=st.floats(min_value=0, max_value=1e4),
)
_commands = st.none() | st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=4).map(tuple)
_subtasks = st.builds(
    SubtaskSpec,
    work=_pos.map(seconds_to_mcycles),
    weight=_pos,
    demand=_demands,
    command=_commands,
)


@st.composite
def job_specs(draw: st.DrawFn) -> JobSpec:
    qos = draw(st.sampled_from([QosClass.STRICT, QosClass.LOOSE, QosClass.BEST_EFFORT]))
    strict = qos is QosClass.STRICT
    base = JobSpec(
        # names are printable (control characters are refused; see the limits tests)
        name=draw(st.text(min_size=1, max_size=10).filter(str.strip).filter(
            lambda t: not any(map(is_unprintable, t)))),
        qos=qos,
        overall_deviation=draw(_pos) if strict else None,
        asynchrony=draw(_pos) if strict else None,
        duration=draw(st.none() | _pos),
        arrival=draw(st.just(0.0) | _pos),
    )
    if draw(st.booleans()):
        subs = tuple(draw(st.lists(_subtasks, min_size=1, max_size=5)))
        return dataclasses.replace(base, subtasks=subs)
    return dataclasses.replace(
        base,
        parallelism=draw(st.integers(1, 12)),
        total_work=seconds_to_mcycles(draw(_pos)),
        total_weight=draw(_pos),
    )


@settings(max_examples=120, deadline=None)
@given(job_specs())
def test_job_to_dict_round_trips(job: JobSpec) -> None:
    d = job_to_dict(job)
    assert json.loads(json.dumps(d)) == d
    assert parse_job(d) == job


@settings(max_examples=100, deadline=None)
@given(st.floats(min_value=1e-6, max_value=1e9))
def test_unit_conversion_round_trips(seconds: float) -> None:
    w = seconds_to_mcycles(seconds)
    back = mcycles_to_seconds(w)
    assert seconds_to_mcycles(back) == w
    assert math.isclose(back, seconds, rel_tol=1e-15)


# --- strict types and unknown keys (the pydantic edge) --------------------------------

ATTEMPTS = "must be an integer >= 1 (runs at most)"


@pytest.mark.parametrize(
    ("over", "field", "reason"),
    [
        ({"subtasks": [{"work": "100"}]}, "subtasks[0].work",
         "must be a number, got string '100' (write it as a bare number"),
        ({"max_attempts": True}, "max_attempts", f"{ATTEMPTS}, got True"),
        ({"max_attempts": 2.0}, "max_attempts", f"{ATTEMPTS}, got 2.0"),
        ({"max_attempts": "2"}, "max_attempts", f"{ATTEMPTS}, got '2'"),
        ({"priority": "1"}, "priority", "must be an integer (higher first), got str '1'"),
        ({"duration": "60"}, "duration", "must be a number, got string '60'"),
        ({"subtasks": [{"work": 1, "demand": {"cpu": "2"}}]}, "subtasks[0].demand.cpu",
         "must be a number, got string '2'"),
        ({"on_failure": True}, "on_failure", "must be one of requeue, fail, got True"),
        ({"on_node_loss": "requeu"}, "on_node_loss",
         "must be one of requeue, fail, got 'requeu'; did you mean 'requeue'?"),
        ({"subtasks": [{"work": 1, "command": None}]}, "subtasks[0].command",
         "must be a non-empty argv list, got None"),
    ],
)
def test_strict_types_are_not_coerced(over: dict[str, object], field: str, reason: str) -> None:
    err = error_of(strict_job(**over), index=None)
    assert err.field == field
    assert err.reason.startswith(reason)
    assert str(err) == f"jobs.yaml: {field}: {err.reason}" and "\n" not in str(err)


@pytest.mark.parametrize(
    ("over", "field", "reason"),
    [
        ({"durration": 5}, "durration", "unknown key; did you mean 'duration'?"),
        ({"max_attempt": 2}, "max_attempt", "unknown key; did you mean 'max_attempts'?"),
        ({"on_failur": "fail"}, "on_failur", "unknown key; did you mean 'on_failure'?"),
        ({"subtasks": [{"work": 1, "comand": ["x"]}]}, "subtasks[0].comand",
         "unknown key; did you mean 'command'?"),
        ({"subtasks": [{"work": 1, "demand": {"io": 1}}]}, "subtasks[0].demand.io",
         "unknown key; known keys: cpu, memory_mb, io_mbps"),
        ({"job_id": "j1"}, "job_id", "unknown key; known keys: name, qos, overall_deviation"),
    ],
)
def test_extra_keys_are_refused_with_a_suggestion(
    over: dict[str, object], field: str, reason: str
) -> None:
    err = error_of(strict_job(**over), index=None)
    assert (err.field, err.reason[: len(reason)]) == (field, reason)


def test_an_unknown_key_is_reported_before_other_errors() -> None:
    err = error_of(strict_job(subtasks=[{"work": -1}], prioritty=1))
    assert err.field == "jobs[2].prioritty" and "did you mean 'priority'" in err.reason


def test_tuples_from_the_python_client_are_lists() -> None:
    job = parse_job({"name": "t", "qos": "loose",
                     "subtasks": ({"work": 1, "command": ("a", "b"), "labels": ("x",)},)})
    assert job.subtasks[0].command == ("a", "b") and job.subtasks[0].labels == {"x"}
