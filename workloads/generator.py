"""The paper's workload generator, Poisson arrivals and a CSV trace reader.

``docs/model.md`` §3 ("The paper's experiment"): nodes with no links between them; three
job generators (local, QoS, best effort); 1500-3000 jobs per run; Poisson arrivals with mean
inter-arrival ``lambda`` in {10, 100, 200, 500} s; strict QoS windows uniform in
100-500 s; subtasks per job uniform in 1..nodes; subtask execution time uniform in
1500-2500 s at the 1 GHz standard; node CPU uniform in 100-600 MHz; weights 1-4.
Every one of these is a field of :class:`PaperWorkloadParams`; the paper is silent on
the local and best-effort flows, whose defaults are documented in docs/decisions.md.

All randomness comes from ONE ``random.Random(seed)``, drawn in a fixed order (nodes,
QoS job count, QoS flow, best-effort flow, local flows node by node), so the same
parameters and seed give the same workload, and changing a later flow's parameters
leaves the earlier flows unchanged.

Units: work in the records is Mcycles (reference seconds x ``STANDARD_MHZ``); times,
windows and inter-arrivals in seconds of model time; speeds in MHz.
"""

from __future__ import annotations

import csv
import dataclasses
import functools
import math
import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, Field
from pydantic_core import ErrorDetails

from workloads.model import (
    STANDARD_MHZ,
    JobSpec,
    Node,
    QosClass,
    SubtaskSpec,
    WaitMode,
    Workload,
)
from workloads.spec import SpecError, parse_job, seconds_to_mcycles
from workloads.validation import Reason, Wording, check_fields, did_you_mean, fields_model

# ---------------------------------------------------------------------------------------
# Parameters


class Calibration(str, Enum):
    """How the paper's "subtask execution time uniform(1500, 2500) s" becomes work.

    ``expected`` (the default): the subtask's duration *at its expected rate*, so its work
    is ``seconds * x_i`` Mcycles with ``x_i = weight * rate_per_weight`` (Mcycles/s): a
    subtask runs 1500-2500 s when its node gives it exactly what admission promised.
    ``literal``: reference seconds at the 1 GHz grid standard (``seconds * 1000``
    Mcycles), the first reading; at the paper's 100-600 MHz nodes and 25 Mcycles/s per
    weight unit such a subtask needs 10,000-100,000 s at its expected rate, and even the
    paper's light load overloads the QoS queues (docs/decisions.md).
    """

    EXPECTED = "expected"
    LITERAL = "literal"


#: Field types of :class:`PaperWorkloadParams` (the dataclass ignores the metadata; the
#: pydantic model of its fields checks it, strictly: ``nodes=2.5`` is refused).
_Count = Annotated[int, Field(ge=1)]
_Positive = Annotated[float, Field(gt=0)]
_Range = tuple[_Positive, _Positive]
_CountRange = tuple[_Count, _Count]
_Fraction = Annotated[float, Field(ge=0, le=1)]


@dataclass(frozen=True, slots=True)
class PaperWorkloadParams:
    """Every knob of the paper's experiment (``docs/model.md`` §3), with the paper's defaults.

    QoS flow (the paper's): ``jobs`` QoS jobs (``None``: uniform integer in
    ``jobs_range``), Poisson arrivals with mean inter-arrival ``mean_interarrival``
    (lambda, s); each is strict with probability ``strict_fraction``, else loose; a
    strict job draws ``E_t`` and ``A_t`` independently, uniform in ``window_range`` (s);
    subtasks per job uniform in 1..``nodes``; each subtask's work uniform in
    ``subtask_time_range`` (reference seconds at 1 GHz) and its weight an integer uniform
    in ``weight_range``. Node speeds are integers of MHz uniform in ``speed_range``.
    ``calibration`` says how a subtask's time becomes work (:class:`Calibration`);
    ``rate_per_weight`` is the grid's ``u_t`` (Mcycles/s per weight unit) it uses, which
    should be the simulator's (``SimConfig.rate_per_weight``).

    Coupled members: with ``coupling`` (an exchange interval, s of nominal time) every
    QoS job of two or more subtasks is coupled (:attr:`JobSpec.coupling`) and waits at
    its exchanges as ``wait`` says; its members then run one span of nominal time, the
    first member's drawn time (at its own expected rate, so under
    ``calibration: literal`` the first member's reference seconds scaled by the weights),
    as the components of one coupled application do. The draws are the same either way,
    so ``coupling`` changes these jobs only.

    Local and best-effort flows (the paper says only that they exist): each a Poisson
    flow over the QoS flow's span ``[0, last QoS arrival]``. Local jobs: one flow per
    node, mean inter-arrival ``local_mean_interarrival`` or else ``lambda *
    local_interarrival_factor``; one subtask of weight 1 and work uniform in
    ``local_work_range`` (s). Best-effort jobs: one grid-wide flow, mean inter-arrival
    ``best_effort_mean_interarrival`` or else ``lambda * best_effort_interarrival_factor``;
    1..nodes subtasks with work uniform in ``best_effort_work_range`` (s) and weights in
    ``weight_range``. ``local_flow`` / ``best_effort_flow`` switch a flow off.

    The defaults of the two unspecified flows give each queue an offered load of about
    half its share on a mid-range (350 MHz) node at the light load ``lambda = 500`` s
    (local: 500 s of work every 10,000 s against 0.3 x 350 MHz; best effort: 350 s per
    subtask every 5,000 s against 0.2 x 350 MHz per node), and overload at
    ``lambda = 10`` s, the paper's overload case. Few large jobs rather than many small
    ones keep the simulator's queues short.
    """

    nodes: _Count = 3
    mean_interarrival: _Positive = 10.0
    jobs: _Count | None = None
    jobs_range: _CountRange = (1500, 3000)
    window_range: _Range = (100.0, 500.0)
    subtask_time_range: _Range = (1500.0, 2500.0)
    speed_range: _Range = (100.0, 600.0)
    weight_range: _CountRange = (1, 4)
    strict_fraction: _Fraction = 1.0
    local_flow: bool = True
    local_interarrival_factor: _Positive = 20.0
    local_mean_interarrival: _Positive | None = None
    local_work_range: _Range = (250.0, 750.0)
    best_effort_flow: bool = True
    best_effort_interarrival_factor: _Positive = 10.0
    best_effort_mean_interarrival: _Positive | None = None
    best_effort_work_range: _Range = (200.0, 500.0)
    #: Also given as its value (``"literal"``).
    calibration: Annotated[Calibration, Field(strict=False)] = Calibration.EXPECTED
    rate_per_weight: _Positive = 25.0
    coupling: _Positive | None = None
    #: Also given as its value (``"block"``).
    wait: Annotated[WaitMode, Field(strict=False)] = WaitMode.SPIN

    def __post_init__(self) -> None:
        checked = check_fields(self, _params_model(), _PARAMS_WORDING, "PaperWorkloadParams.")
        object.__setattr__(self, "calibration", checked["calibration"])
        object.__setattr__(self, "wait", checked["wait"])
        for name in ("jobs_range", "window_range", "subtask_time_range", "speed_range",
                     "weight_range", "local_work_range", "best_effort_work_range"):
            low, high = getattr(self, name)
            if low > high:
                raise ValueError(f"PaperWorkloadParams.{name}: low > high in {(low, high)!r}")
        lo, hi = self.speed_range
        if math.ceil(lo) > math.floor(hi):
            raise ValueError(
                "PaperWorkloadParams.speed_range: holds no whole MHz value, "
                f"got {self.speed_range!r}"
            )

    @property
    def local_interarrival(self) -> float:
        """Mean inter-arrival of each node's local flow, s."""
        if self.local_mean_interarrival is not None:
            return self.local_mean_interarrival
        return self.mean_interarrival * self.local_interarrival_factor

    @property
    def best_effort_interarrival(self) -> float:
        """Mean inter-arrival of the best-effort flow, s."""
        if self.best_effort_mean_interarrival is not None:
            return self.best_effort_mean_interarrival
        return self.mean_interarrival * self.best_effort_interarrival_factor


def _finite(bound: str) -> Reason:
    return lambda err: f"must be a finite number {bound}, got {err['input']!r}"


def _integer(err: ErrorDetails) -> str:
    return f"must be an integer >= 1, got {err['input']!r}"


def _pair(err: ErrorDetails) -> str:
    return f"must be a pair (low, high), got {err['input']!r}"


_RANGES = ("jobs_range", "window_range", "subtask_time_range", "speed_range", "weight_range",
           "local_work_range", "best_effort_work_range")
_PARAMS_WORDING = Wording(
    reasons={
        **{name: _finite("> 0") for name in (
            "mean_interarrival", "local_interarrival_factor", "local_mean_interarrival",
            "best_effort_interarrival_factor", "best_effort_mean_interarrival",
            "rate_per_weight", "coupling", "window_range[]", "subtask_time_range[]",
            "speed_range[]",
            "local_work_range[]", "best_effort_work_range[]")},
        **{name: _integer for name in ("nodes", "jobs", "jobs_range[]", "weight_range[]")},
        **{name: _pair for name in _RANGES},
        "strict_fraction": lambda err: f"must be a number in [0, 1], got {err['input']!r}",
        "calibration": lambda err: "must be one of " + ", ".join(c.value for c in Calibration)
        + f", got {err['input']!r}",
        "wait": lambda err: "must be one of " + ", ".join(w.value for w in WaitMode)
        + f", got {err['input']!r}",
    },
)


@functools.cache
def _params_model() -> type[BaseModel]:
    return fields_model(PaperWorkloadParams)


# ---------------------------------------------------------------------------------------
# Workload


def assign_ids(jobs: Iterable[JobSpec], width: int = 5) -> tuple[JobSpec, ...]:
    """Sort jobs by arrival (stable: ties keep their order) and number them j00001, ..."""
    ordered = sorted(jobs, key=lambda j: j.arrival)
    return tuple(
        dataclasses.replace(j, job_id=f"j{k:0{width}d}") for k, j in enumerate(ordered, start=1)
    )


# ---------------------------------------------------------------------------------------
# Poisson arrivals


def _check_mean(mean: float) -> None:
    if isinstance(mean, bool) or not isinstance(mean, (int, float)) or not math.isfinite(mean):
        raise ValueError(f"mean: must be a finite number > 0 (s), got {mean!r}")
    if mean <= 0:
        raise ValueError(f"mean: must be a finite number > 0 (s), got {mean!r}")


def poisson_arrivals(rng: random.Random, mean: float, n: int, start: float = 0.0) -> list[float]:
    """``n`` arrival times (s) of a Poisson process with mean inter-arrival ``mean`` (s).

    Inter-arrivals are exponential with rate ``1/mean``; the first arrival is one
    inter-arrival after ``start``. The result is non-decreasing.
    """
    _check_mean(mean)
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n: must be an integer >= 0, got {n!r}")
    rate = 1.0 / mean
    out: list[float] = []
    t = start
    for _ in range(n):
        t += rng.expovariate(rate)
        out.append(t)
    return out


def poisson_arrivals_until(
    rng: random.Random, mean: float, horizon: float, start: float = 0.0
) -> list[float]:
    """Arrival times (s) of a Poisson process on ``(start, horizon]``."""
    _check_mean(mean)
    rate = 1.0 / mean
    out: list[float] = []
    t = start + rng.expovariate(rate)
    while t <= horizon:
        out.append(t)
        t += rng.expovariate(rate)
    return out


# ---------------------------------------------------------------------------------------
# The generator

# Order of flows among jobs that arrive at the same instant (ties): QoS, best effort, local.
_FLOW_RANK = {QosClass.STRICT: 0, QosClass.LOOSE: 0, QosClass.BEST_EFFORT: 1, QosClass.LOCAL: 2}


def _grid_subtasks(
    rng: random.Random,
    nodes: int,
    work_range: tuple[float, float],
    weights: tuple[int, int],
    rate_per_weight: float | None = None,
) -> tuple[SubtaskSpec, ...]:
    """1..nodes subtasks. ``rate_per_weight`` None: the drawn seconds are reference
    seconds at 1 GHz; else seconds at the subtask's expected rate
    ``weight * rate_per_weight`` (Mcycles/s). The draws are the same either way."""
    count = rng.randint(1, nodes)
    subs = []
    for _ in range(count):
        seconds = rng.uniform(*work_range)
        weight = float(rng.randint(*weights))
        if rate_per_weight is not None:
            # The same time at the expected rate, as reference seconds at 1 GHz (so the
            # work goes through the one seconds -> Mcycles conversion job files use).
            seconds *= weight * rate_per_weight / STANDARD_MHZ
        work = seconds_to_mcycles(seconds)
        subs.append(SubtaskSpec(work=work, weight=weight))
    return tuple(subs)


def _one_span(subs: tuple[SubtaskSpec, ...]) -> tuple[SubtaskSpec, ...]:
    """The subtasks of a coupled job, each with the first one's nominal time (work per
    weight), keeping its own weight."""
    per_weight = subs[0].work / subs[0].weight
    return tuple(dataclasses.replace(s, work=per_weight * s.weight) for s in subs)


def generate(params: PaperWorkloadParams | None = None, seed: int = 0) -> Workload:
    """The paper's workload for ``params`` (defaults: the paper's) and ``seed``.

    Deterministic: the same arguments give an equal :class:`Workload`. Jobs are sorted by
    arrival (ties: QoS, best effort, local; then node and sequence) and numbered
    ``j00001``, ``j00002``, ... in that order.
    """
    p = params if params is not None else PaperWorkloadParams()
    rng = random.Random(seed)

    lo, hi = p.speed_range
    nodes = tuple(
        Node(name=f"n{i}", speed_mhz=float(rng.randint(math.ceil(lo), math.floor(hi))))
        for i in range(p.nodes)
    )
    n_jobs = p.jobs if p.jobs is not None else rng.randint(*p.jobs_range)

    # (flow rank, node index, sequence) breaks arrival ties deterministically.
    keyed: list[tuple[tuple[float, int, int, int], JobSpec]] = []

    qos_arrivals = poisson_arrivals(rng, p.mean_interarrival, n_jobs)
    for k, t in enumerate(qos_arrivals, start=1):
        # Every draw is made whatever the class, so strict_fraction changes classes only.
        strict = rng.random() < p.strict_fraction
        e_t = rng.uniform(*p.window_range)
        a_t = rng.uniform(*p.window_range)
        per_weight = p.rate_per_weight if p.calibration is Calibration.EXPECTED else None
        subs = _grid_subtasks(rng, p.nodes, p.subtask_time_range, p.weight_range, per_weight)
        qos = QosClass.STRICT if strict else QosClass.LOOSE
        coupled = p.coupling is not None and len(subs) >= 2
        job = JobSpec(
            name=f"{qos.value}-{k:05d}",
            qos=qos,
            subtasks=_one_span(subs) if coupled else subs,
            overall_deviation=e_t if strict else None,
            asynchrony=a_t if strict else None,
            arrival=t,
            coupling=p.coupling if coupled else None,
            wait=p.wait if coupled else WaitMode.SPIN,
        )
        keyed.append(((t, 0, 0, k), job))
    horizon = qos_arrivals[-1]

    if p.best_effort_flow:
        arrivals = poisson_arrivals_until(rng, p.best_effort_interarrival, horizon)
        for k, t in enumerate(arrivals, start=1):
            subs = _grid_subtasks(rng, p.nodes, p.best_effort_work_range, p.weight_range)
            job = JobSpec(
                name=f"best_effort-{k:05d}", qos=QosClass.BEST_EFFORT, subtasks=subs, arrival=t
            )
            keyed.append(((t, 1, 0, k), job))

    if p.local_flow:
        for i, node in enumerate(nodes):
            arrivals = poisson_arrivals_until(rng, p.local_interarrival, horizon)
            for k, t in enumerate(arrivals, start=1):
                work = seconds_to_mcycles(rng.uniform(*p.local_work_range))
                job = JobSpec(
                    name=f"local-{node.name}-{k:05d}",
                    qos=QosClass.LOCAL,
                    subtasks=(SubtaskSpec(work=work, weight=1.0),),
                    arrival=t,
                    node=node.name,
                )
                keyed.append(((t, 2, i, k), job))

    keyed.sort(key=lambda item: item[0])
    jobs = tuple(
        dataclasses.replace(job, job_id=f"j{k:05d}") for k, (_, job) in enumerate(keyed, start=1)
    )
    return Workload(nodes=nodes, jobs=jobs, seed=seed, params=p)


# ---------------------------------------------------------------------------------------
# Trace reader

#: Columns of a trace CSV (a header row is required; order is free):
#:   arrival            required, s >= 0: submission time
#:   qos                required: strict | loose | best_effort | local
#:   work_s             required: the subtasks' work in reference seconds at 1 GHz,
#:                      separated by ";" (e.g. "1800;3600;3600")
#:   weights            optional: the subtasks' relative weights, ";"-separated, as many
#:                      as work_s; empty = 1 each
#:   overall_deviation  E_t, s: required for strict rows, empty otherwise
#:   asynchrony         A_t, s: required for strict rows, empty otherwise
#:   duration           optional D_t, s
#:   node               required for local rows (the node's name), empty otherwise
#:   name               optional job name; default "trace-<line>"
TRACE_COLUMNS: tuple[str, ...] = (
    "arrival",
    "qos",
    "work_s",
    "weights",
    "overall_deviation",
    "asynchrony",
    "duration",
    "node",
    "name",
)
_REQUIRED_COLUMNS = ("arrival", "qos", "work_s")
_NUMBER_COLUMNS = ("arrival", "overall_deviation", "asynchrony", "duration")


def _cell_number(text: str, src: str, where: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise SpecError(src, where, f"must be a number, got {text!r}") from None


def _cell_list(text: str, src: str, where: str) -> list[float]:
    return [_cell_number(part.strip(), src, where) for part in text.split(";")]


def _column_of(field: str) -> str:
    """Trace column that holds a parse_job field path ('subtasks[1].work' -> 'work_s')."""
    if field.startswith("subtasks"):
        return "weights" if field.endswith(".weight") else "work_s"
    return field.split(".")[0].split("[")[0]


def load_trace_csv(path: str | Path) -> tuple[JobSpec, ...]:
    """Jobs from a CSV trace (columns in :data:`TRACE_COLUMNS`), sorted and numbered.

    Rows are sorted by arrival (ties keep file order) and get job ids ``j00001``, ...
    Raises :class:`SpecError` naming the file, ``line N, column C`` and the reason.
    """
    src = str(path)
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except FileNotFoundError:
        raise SpecError(src, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(src, "", f"cannot read: {exc}") from None
    except csv.Error as exc:
        raise SpecError(src, "", f"not valid CSV: {exc}") from None
    # Skip blank lines but keep the file's line numbers.
    numbered = [(i, r) for i, r in enumerate(rows, start=1) if any(c.strip() for c in r)]
    if not numbered:
        columns = ", ".join(_REQUIRED_COLUMNS)
        raise SpecError(src, "", f"empty file: expected a header row ({columns}, ...)")
    header_line, header = numbered[0]
    header = [h.strip() for h in header]
    for position, name in enumerate(header, start=1):
        if name not in TRACE_COLUMNS:
            raise SpecError(
                src,
                f"line {header_line}, column {position} ({name!r})",
                did_you_mean(name, TRACE_COLUMNS),
            )
    if len(set(header)) != len(header):
        raise SpecError(src, f"line {header_line}", "a column is named twice in the header")
    for name in _REQUIRED_COLUMNS:
        if name not in header:
            raise SpecError(src, f"line {header_line}", f"missing required column {name!r}")
    if len(numbered) == 1:
        raise SpecError(src, "", "holds a header but no jobs")

    jobs: list[JobSpec] = []
    for line, row in numbered[1:]:
        if len(row) != len(header):
            raise SpecError(
                src, f"line {line}", f"has {len(row)} cells, the header has {len(header)}"
            )
        cells = {name: cell.strip() for name, cell in zip(header, row)}

        def where(col: str, line: int = line) -> str:
            return f"line {line}, column {col}"

        mapping: dict[str, Any] = {"name": cells.get("name") or f"trace-{line}"}
        mapping["qos"] = cells["qos"]
        for col in _NUMBER_COLUMNS:
            if cells.get(col):
                mapping[col] = _cell_number(cells[col], src, where(col))
        if cells.get("node"):
            mapping["node"] = cells["node"]
        works = _cell_list(cells["work_s"], src, where("work_s"))
        weights: Sequence[float] = [1.0] * len(works)
        if cells.get("weights"):
            weights = _cell_list(cells["weights"], src, where("weights"))
            if len(weights) != len(works):
                raise SpecError(
                    src,
                    where("weights"),
                    f"{len(weights)} weights for {len(works)} subtasks in work_s",
                )
        mapping["subtasks"] = [{"work": w, "weight": r} for w, r in zip(works, weights)]
        try:
            jobs.append(parse_job(mapping, src, None, allow_local=True))
        except SpecError as exc:
            raise SpecError(src, where(_column_of(exc.field)), exc.reason) from None
    return assign_ids(jobs)
