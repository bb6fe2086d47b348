"""The paper's workload generator, Poisson arrivals and the CSV trace reader."""

from __future__ import annotations

import dataclasses
import math
import random
import statistics
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from workloads.generator import (
    Calibration,
    PaperWorkloadParams,
    Workload,
    assign_ids,
    generate,
    load_trace_csv,
    poisson_arrivals,
    poisson_arrivals_until,
)
from workloads.model import STANDARD_MHZ, JobSpec, Node, QosClass, SubtaskSpec
from workloads.spec import SpecError, job_to_dict, mcycles_to_seconds, parse_job

SMALL = PaperWorkloadParams(nodes=4, mean_interarrival=50.0, jobs=60)


def in_range(x: float, lo: float, hi: float) -> bool:
    # random.uniform(a, b) may return b itself after rounding; allow one part in 1e12.
    return lo * (1 - 1e-12) <= x <= hi * (1 + 1e-12)


# --- determinism and ids ------------------------------------------------------------


def test_same_seed_same_workload_other_seed_differs() -> None:
    a = generate(SMALL, seed=7)
    assert generate(SMALL, seed=7) == a
    b = generate(SMALL, seed=8)
    assert [j.arrival for j in b.jobs] != [j.arrival for j in a.jobs]
    assert [n.speed_mhz for n in b.nodes] != [n.speed_mhz for n in a.nodes]


def test_jobs_sorted_and_numbered_in_order() -> None:
    w = generate(SMALL, seed=1)
    assert [j.job_id for j in w.jobs] == [f"j{k:05d}" for k in range(1, len(w.jobs) + 1)]
    arrivals = [j.arrival for j in w.jobs]
    assert arrivals == sorted(arrivals)
    assert w.seed == 1 and w.params == SMALL


def test_default_params_are_the_papers() -> None:
    p = PaperWorkloadParams()
    assert (p.nodes, p.mean_interarrival, p.jobs, p.jobs_range) == (3, 10.0, None, (1500, 3000))
    assert p.window_range == (100.0, 500.0)
    assert p.subtask_time_range == (1500.0, 2500.0)
    assert p.speed_range == (100.0, 600.0)
    assert p.weight_range == (1, 4)
    assert p.strict_fraction == 1.0


def test_job_count_drawn_from_range_when_not_given() -> None:
    p = PaperWorkloadParams(jobs_range=(5, 9), local_flow=False, best_effort_flow=False)
    counts = {len(generate(p, seed=s).jobs) for s in range(40)}
    assert counts <= set(range(5, 10)) and len(counts) > 1


def test_nodes_named_and_speeds_whole_mhz() -> None:
    w = generate(PaperWorkloadParams(nodes=12, jobs=1), seed=3)
    assert w.node_names == tuple(f"n{i}" for i in range(12))
    assert all(n.speed_mhz == round(n.speed_mhz) for n in w.nodes)
    assert all(isinstance(n.speed_mhz, float) for n in w.nodes)


# --- parameter ranges (hypothesis) ---------------------------------------------------


def _range(lo: float, hi: float) -> st.SearchStrategy[tuple[float, float]]:
    v = st.floats(min_value=lo, max_value=hi)
    return st.tuples(v, v).map(lambda t: (min(t), max(t)))


def _int_range(lo: int, hi: int) -> st.SearchStrategy[tuple[int, int]]:
    v = st.integers(lo, hi)
    return st.tuples(v, v).map(lambda t: (min(t), max(t)))


params_strategy = st.builds(
    PaperWorkloadParams,
    nodes=st.integers(1, 6),
    mean_interarrival=st.floats(min_value=0.5, max_value=1000),
    jobs=st.integers(1, 25),
    window_range=_range(1, 1000),
    subtask_time_range=_range(1, 5000),
    speed_range=_range(1, 5000).filter(lambda r: math.ceil(r[0]) <= math.floor(r[1])),
    weight_range=_int_range(1, 10),
    strict_fraction=st.floats(min_value=0, max_value=1),
    local_interarrival_factor=st.floats(min_value=0.5, max_value=50),
    local_work_range=_range(1, 1000),
    best_effort_interarrival_factor=st.floats(min_value=0.5, max_value=50),
    best_effort_work_range=_range(1, 1000),
    calibration=st.sampled_from(list(Calibration)),
    rate_per_weight=st.floats(min_value=0.5, max_value=100),
)


@settings(max_examples=80, deadline=None)
@given(params_strategy, st.integers(0, 2**32))
def test_generated_values_respect_every_range(p: PaperWorkloadParams, seed: int) -> None:
    w = generate(p, seed)
    assert len(w.nodes) == p.nodes
    for node in w.nodes:
        assert p.speed_range[0] <= node.speed_mhz <= p.speed_range[1]
    grid = w.jobs_of(QosClass.STRICT, QosClass.LOOSE)
    assert len(grid) == p.jobs
    horizon = max(j.arrival for j in grid)
    for job in w.jobs:
        assert 0 < job.arrival <= horizon
        assert job.parallelism is None and job.subtasks
        assert 1 <= job.n_subtasks <= p.nodes
        for s in job.subtasks:
            if job.qos is QosClass.LOCAL:
                assert s.weight == 1.0
            else:
                assert s.weight == int(s.weight)
                assert p.weight_range[0] <= s.weight <= p.weight_range[1]
        if job.qos in (QosClass.STRICT, QosClass.LOOSE) and p.calibration is Calibration.EXPECTED:
            # seconds at the expected rate weight * rate_per_weight
            works = [s.work / (s.weight * p.rate_per_weight) for s in job.subtasks]
        else:
            works = [mcycles_to_seconds(s.work) for s in job.subtasks]
        work_range = {
            QosClass.STRICT: p.subtask_time_range,
            QosClass.LOOSE: p.subtask_time_range,
            QosClass.BEST_EFFORT: p.best_effort_work_range,
            QosClass.LOCAL: p.local_work_range,
        }[job.qos]
        assert all(in_range(x, *work_range) for x in works)
        if job.qos is QosClass.STRICT:
            assert job.overall_deviation is not None and job.asynchrony is not None
            assert in_range(job.overall_deviation, *p.window_range)
            assert in_range(job.asynchrony, *p.window_range)
        else:
            assert job.overall_deviation is None and job.asynchrony is None
        if job.qos is QosClass.LOCAL:
            assert job.n_subtasks == 1 and job.node in w.node_names
        else:
            assert job.node is None


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 12), st.integers(0, 1000))
def test_subtasks_never_exceed_nodes_and_cover_one_to_nodes(nodes: int, seed: int) -> None:
    p = PaperWorkloadParams(nodes=nodes, jobs=200, local_flow=False)
    counts = {j.n_subtasks for j in generate(p, seed).jobs}
    assert max(counts) <= nodes and min(counts) >= 1
    # 200+ uniform draws over at most 12 values: every value appears (miss prob < 1e-6).
    assert counts == set(range(1, nodes + 1))


def test_strict_fraction_changes_classes_only() -> None:
    def qos_jobs(frac: float) -> tuple[JobSpec, ...]:
        p = dataclasses.replace(SMALL, strict_fraction=frac, jobs=400)
        return generate(p, seed=5).jobs_of(QosClass.STRICT, QosClass.LOOSE)

    all_strict, none_strict, half = qos_jobs(1.0), qos_jobs(0.0), qos_jobs(0.5)
    assert all(j.qos is QosClass.STRICT for j in all_strict)
    assert all(j.qos is QosClass.LOOSE for j in none_strict)
    n_strict = sum(j.qos is QosClass.STRICT for j in half)
    # Binomial(400, 0.5): sd 10; 5 sd either side.
    assert 150 <= n_strict <= 250
    for a, b in zip(all_strict, half):
        assert (a.arrival, a.subtasks) == (b.arrival, b.subtasks)


def test_later_flows_do_not_disturb_earlier_ones() -> None:
    base = generate(SMALL, seed=11)
    busier = generate(dataclasses.replace(SMALL, local_work_range=(1.0, 2.0)), seed=11)
    assert base.jobs_of(QosClass.STRICT, QosClass.BEST_EFFORT) == busier.jobs_of(
        QosClass.STRICT, QosClass.BEST_EFFORT
    )
    assert base.jobs_of(QosClass.LOCAL) != busier.jobs_of(QosClass.LOCAL)


def test_flows_can_be_switched_off() -> None:
    p = dataclasses.replace(SMALL, local_flow=False, best_effort_flow=False)
    w = generate(p, seed=2)
    assert {j.qos for j in w.jobs} == {QosClass.STRICT}
    assert len(w.jobs) == 60
    w = generate(SMALL, seed=2)
    assert {j.qos for j in w.jobs} == {QosClass.STRICT, QosClass.LOCAL, QosClass.BEST_EFFORT}


def test_local_flow_per_node_with_its_own_rate() -> None:
    p = PaperWorkloadParams(
        nodes=3,
        mean_interarrival=10.0,
        jobs=3000,
        best_effort_flow=False,
        local_mean_interarrival=25.0,
    )
    w = generate(p, seed=4)
    horizon = w.jobs_of(QosClass.STRICT)[-1].arrival
    for node in w.node_names:
        local = [j for j in w.jobs_of(QosClass.LOCAL) if j.node == node]
        # Poisson count over the horizon: mean horizon/25 (~1200), sd ~35; 5 sd tolerance.
        expected = horizon / 25.0
        assert abs(len(local) - expected) <= 5 * math.sqrt(expected)
    assert p.local_interarrival == 25.0
    assert SMALL.local_interarrival == 50.0 * SMALL.local_interarrival_factor


def test_generated_jobs_round_trip_through_dicts() -> None:
    w = generate(SMALL, seed=9)
    for job in w.jobs:
        back = parse_job(job_to_dict(job), "gen", allow_local=True)
        assert back == dataclasses.replace(job, job_id="")


# --- Poisson arrivals ----------------------------------------------------------------


@pytest.mark.parametrize("mean", [10.0, 500.0])
def test_poisson_mean_close_to_lambda(mean: float) -> None:
    n = 20_000
    times = poisson_arrivals(random.Random(12), mean, n)
    gaps = [b - a for a, b in zip([0.0, *times], times)]
    assert all(g > 0 for g in gaps)
    # Exponential gaps: standard error of the mean is mean/sqrt(n) (0.71 %); allow 4 SE.
    assert abs(statistics.fmean(gaps) - mean) <= 4 * mean / math.sqrt(n)
    # And their distribution is exponential (Kolmogorov-Smirnov, 0.1 % level).
    assert stats.kstest(gaps, "expon", args=(0, mean)).pvalue > 1e-3


def test_generated_qos_flow_has_mean_lambda() -> None:
    p = PaperWorkloadParams(
        mean_interarrival=100.0, jobs=3000, local_flow=False, best_effort_flow=False
    )
    times = [j.arrival for j in generate(p, seed=21).jobs]
    gaps = [b - a for a, b in zip([0.0, *times], times)]
    # SE = 100/sqrt(3000) = 1.83 s; allow 4 SE.
    assert abs(statistics.fmean(gaps) - 100.0) <= 4 * 100.0 / math.sqrt(3000)


def test_poisson_until_stays_within_horizon_and_bad_arguments() -> None:
    times = poisson_arrivals_until(random.Random(1), 5.0, 1000.0)
    assert times == sorted(times) and all(0 < t <= 1000.0 for t in times)
    assert poisson_arrivals(random.Random(1), 5.0, 0) == []
    with pytest.raises(ValueError, match="mean"):
        poisson_arrivals(random.Random(1), 0.0, 3)
    with pytest.raises(ValueError, match="mean"):
        poisson_arrivals_until(random.Random(1), float("nan"), 3.0)
    with pytest.raises(ValueError, match="n: "):
        poisson_arrivals(random.Random(1), 1.0, -1)


# --- parameter and workload validation ---------------------------------------------------


@pytest.mark.parametrize(
    ("override", "field"),
    [
        ({"nodes": 0}, "nodes"),
        ({"nodes": 2.5}, "nodes"),
        ({"mean_interarrival": 0}, "mean_interarrival"),
        ({"jobs": 0}, "jobs"),
        ({"window_range": (500.0, 100.0)}, "window_range"),
        ({"subtask_time_range": (0.0, 10.0)}, "subtask_time_range[0]"),
        ({"speed_range": (100.2, 100.8)}, "speed_range"),
        ({"weight_range": (0, 4)}, "weight_range[0]"),
        ({"weight_range": (1.5, 4)}, "weight_range[0]"),
        ({"strict_fraction": 1.5}, "strict_fraction"),
        ({"local_interarrival_factor": -1.0}, "local_interarrival_factor"),
        ({"best_effort_mean_interarrival": 0.0}, "best_effort_mean_interarrival"),
        ({"local_work_range": (1.0,)}, "local_work_range"),
        ({"local_flow": 0}, "local_flow"),
        ({"mean_interarrival": "10"}, "mean_interarrival"),
        ({"calibration": "literl"}, "calibration"),
    ],
)
def test_bad_params_name_the_field(override: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError) as info:
        PaperWorkloadParams(**override)  # type: ignore[arg-type]
    assert str(info.value).startswith(f"PaperWorkloadParams.{field}: ")


def _job(
    job_id: str,
    arrival: float,
    name: str = "x",
    qos: QosClass = QosClass.LOOSE,
    node: str | None = None,
) -> JobSpec:
    return JobSpec(
        name=name,
        qos=qos,
        subtasks=(SubtaskSpec(work=1.0),),
        arrival=arrival,
        job_id=job_id,
        node=node,
    )


def test_workload_validation() -> None:
    nodes = (Node("n0", 100.0),)
    Workload(nodes, (_job("a", 1.0), _job("b", 2.0)))
    # Unsorted jobs are allowed (the simulator sorts them stably); jobs_of sorts too.
    unsorted = Workload(nodes, (_job("a", 2.0), _job("b", 1.0)))
    assert [j.job_id for j in unsorted.jobs_of(QosClass.LOOSE)] == ["b", "a"]
    with pytest.raises(ValueError, match=r"jobs\[1\]\.job_id"):
        Workload(nodes, (_job("a", 1.0), _job("a", 2.0)))
    with pytest.raises(ValueError, match="no node named"):
        Workload(nodes, (_job("a", 1.0, qos=QosClass.LOCAL, node="n9"),))
    with pytest.raises(ValueError, match="unique"):
        Workload((Node("n0", 1.0), Node("n0", 2.0)), ())


def test_assign_ids_is_stable_on_ties() -> None:
    jobs = [_job("", 5.0, name="late"), _job("", 1.0), _job("", 1.0, name="tie")]
    out = assign_ids(jobs)
    assert [(j.job_id, j.arrival, j.name) for j in out] == [
        ("j00001", 1.0, "x"),
        ("j00002", 1.0, "tie"),
        ("j00003", 5.0, "late"),
    ]


# --- trace reader --------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "trace.csv") -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


GOOD = """arrival,qos,work_s,weights,overall_deviation,asynchrony,duration,node,name
30,loose,600;600,,,,,,
10,strict,1800;3600;3600,1;2;2,300,120,1800,,coupled

5,local,200,,,,,n1,
"""


def test_trace_reads_sorts_and_numbers(tmp_path: Path) -> None:
    jobs = load_trace_csv(write(tmp_path, GOOD))
    assert [(j.job_id, j.arrival, j.qos) for j in jobs] == [
        ("j00001", 5.0, QosClass.LOCAL),
        ("j00002", 10.0, QosClass.STRICT),
        ("j00003", 30.0, QosClass.LOOSE),
    ]
    strict = jobs[1]
    assert strict.name == "coupled"
    assert [s.work for s in strict.subtasks] == [1800 * STANDARD_MHZ, 3600e3, 3600e3]
    assert [s.weight for s in strict.subtasks] == [1.0, 2.0, 2.0]
    assert (strict.overall_deviation, strict.asynchrony, strict.duration) == (300, 120, 1800)
    assert jobs[0].node == "n1"
    assert jobs[2].name == "trace-2" and [s.weight for s in jobs[2].subtasks] == [1.0, 1.0]


@pytest.mark.parametrize(
    ("text", "field", "reason"),
    [
        ("arrival,qos,work_s\nabc,loose,1\n", "line 2, column arrival", "must be a number"),
        ("arrival,qos,work_s\n1,loose,1;x\n", "line 2, column work_s", "'x'"),
        ("arrival,qos,work_s\n1,loose,0\n", "line 2, column work_s", "> 0"),
        ("arrival,qos,work_s\n1,strict,1\n", "line 2, column overall_deviation", "required"),
        ("arrival,qos,work_s,weights\n1,loose,1;2,1\n", "line 2, column weights", "1 weights"),
        ("arrival,qos,work_s,weights\n1,loose,1,-2\n", "line 2, column weights", "> 0"),
        ("arrival,qos,work_s\n1,local,1\n", "line 2, column node", "node"),
        ("arrival,qos,work_s\n1,strct,1\n", "line 2, column qos", "did you mean 'strict'"),
        ("arrival,qos,work_s\n-1,loose,1\n", "line 2, column arrival", ">= 0"),
        ("arrival,qos,work_s\n1,loose\n", "line 2", "2 cells"),
        ("arival,qos,work_s\n", "line 1, column 1 ('arival')", "did you mean 'arrival'"),
        ("arrival,qos\n1,loose\n", "line 1", "missing required column 'work_s'"),
        ("arrival,qos,qos,work_s\n", "line 1", "named twice"),
        ("arrival,qos,work_s\n", "", "no jobs"),
        ("\n\n", "", "empty file"),
    ],
)
def test_trace_errors_name_line_and_column(
    tmp_path: Path, text: str, field: str, reason: str
) -> None:
    p = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_trace_csv(p)
    assert info.value.file == str(p)
    assert info.value.field == field
    assert reason in info.value.reason


def test_trace_missing_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such file"):
        load_trace_csv(tmp_path / "none.csv")


def test_params_are_strict_and_keep_their_messages() -> None:
    with pytest.raises(ValueError) as info:
        PaperWorkloadParams(nodes=2.5)  # type: ignore[arg-type]
    assert str(info.value) == "PaperWorkloadParams.nodes: must be an integer >= 1, got 2.5"
    with pytest.raises(ValueError) as info:
        PaperWorkloadParams(window_range=(1.0,))  # type: ignore[arg-type]
    assert str(info.value) == (
        "PaperWorkloadParams.window_range: must be a pair (low, high), got (1.0,)")
    with pytest.raises(ValueError) as info:
        PaperWorkloadParams(speed_range=(100.0, float("inf")))
    assert str(info.value) == (
        "PaperWorkloadParams.speed_range[1]: must be a finite number > 0, got inf")
    literal = PaperWorkloadParams(calibration="literal")  # type: ignore[arg-type]
    assert literal.calibration is Calibration.LITERAL
