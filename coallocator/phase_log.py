"""The phase-difference log: JSON Lines, one record per job per control period and one
summary record per job (``docs/model.md`` §3, "Phase difference").

Period record (``"type": "period"``): ``job``, ``period`` (k), ``real_time`` (s),
``mean_virtual`` (s), ``phase_difference`` (s), ``window`` (none | overall_behind |
overall_ahead | asynchrony), ``factors`` (signed, Mcycles/s, by subtask index),
``weights`` and ``virtual_weights`` (Mcycles/s, by subtask index), and, in the live
runtime, ``clock_offset`` (s) and ``clock_quality``.

Summary record (``"type": "summary"``): ``job``, ``qos``, ``subtasks``, ``periods``,
``mean_phase_difference`` and ``max_phase_difference`` (s, over the periods with at least
two running subtasks), ``completion_skew`` (s, last minus first subtask finish),
``turnaround`` (s, last finish minus arrival), ``completed``.

Writing is deterministic: keys sorted, floats as Python prints them, one record per line.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import IO, Any

from coallocator.controller import JobDecision
from workloads.native import picklable_frozen_records


@dataclass(frozen=True, slots=True)
class PeriodRecord:
    """One job's control period, as logged (the module docstring gives the units)."""

    job: str
    period: int
    real_time: float
    mean_virtual: float
    phase_difference: float
    window: str
    factors: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    virtual_weights: dict[str, float] = field(default_factory=dict)
    clock_offset: float | None = None
    clock_quality: str | None = None
    #: Live runtime: the seconds each subtask's clock was carried over a late report to
    #: this period's ``real_time``, by subtask index (None: every clock as reported).
    estimated: dict[str, float] | None = None
    type: str = "period"


@dataclass(frozen=True, slots=True)
class SummaryRecord:
    job: str
    qos: str
    subtasks: int
    periods: int
    mean_phase_difference: float
    max_phase_difference: float
    completion_skew: float | None
    turnaround: float | None
    completed: bool
    #: Control periods (of ``periods``) in which the phase difference exceeded the job's
    #: asynchrony window ``A_t``, and in which ``|mean T_V - T_R|`` exceeded its overall
    #: window ``E_t`` (0 for jobs without windows).
    window_violations: int = 0
    overall_violations: int = 0
    #: Why a job that did not complete ended (cancelled, failed, requeued after a node
    #: was lost); empty for a completed job.
    reason: str = ""
    #: Live runtime: periods (of ``periods``) in which a clock was carried over a late
    #: report (None: none).
    estimated_periods: int | None = None
    type: str = "summary"


class JobPhaseTracker:
    """Accumulates one job's phase differences and finish times into a summary."""

    __slots__ = (
        "job_id",
        "qos",
        "n_subtasks",
        "arrival",
        "periods",
        "phi_sum",
        "phi_max",
        "finishes",
        "asynchrony",
        "overall_deviation",
        "window_violations",
        "overall_violations",
        "estimated_periods",
    )

    def __init__(
        self,
        job_id: str,
        qos: str,
        n_subtasks: int,
        arrival: float,
        asynchrony: float = float("inf"),
        overall_deviation: float = float("inf"),
    ) -> None:
        self.job_id = job_id
        self.qos = qos
        self.n_subtasks = n_subtasks
        self.arrival = arrival
        self.periods = 0
        self.phi_sum = 0.0
        self.phi_max = 0.0
        self.finishes: list[float] = []
        self.asynchrony = asynchrony
        self.overall_deviation = overall_deviation
        self.window_violations = 0
        self.overall_violations = 0
        self.estimated_periods = 0

    def observe(self, phi: float, deviation: float = 0.0, estimated: bool = False) -> None:
        """Record one control period with >= 2 running subtasks: its phase difference
        ``phi`` and the job's ``mean T_V - T_R`` (``deviation``), both s; ``estimated``:
        a clock in it was carried over a late report."""
        self.periods += 1
        if estimated:
            self.estimated_periods += 1
        self.phi_sum += phi
        if phi > self.phi_max:
            self.phi_max = phi
        if phi > self.asynchrony:
            self.window_violations += 1
        if abs(deviation) > self.overall_deviation:
            self.overall_violations += 1

    def finished(self, t: float) -> None:
        self.finishes.append(t)

    @property
    def completed(self) -> bool:
        return len(self.finishes) >= self.n_subtasks

    def summary(self) -> SummaryRecord:
        done = self.completed
        return SummaryRecord(
            job=self.job_id,
            qos=self.qos,
            subtasks=self.n_subtasks,
            periods=self.periods,
            mean_phase_difference=self.phi_sum / self.periods if self.periods else 0.0,
            max_phase_difference=self.phi_max,
            completion_skew=(max(self.finishes) - min(self.finishes)) if done else None,
            turnaround=(max(self.finishes) - self.arrival) if done else None,
            completed=done,
            window_violations=self.window_violations,
            overall_violations=self.overall_violations,
            estimated_periods=self.estimated_periods or None,
        )


def period_record(
    decision: JobDecision,
    period: int,
    real_time: float,
    weights: dict[int, tuple[float, float]],
    clock_offset: float | None = None,
    clock_quality: str | None = None,
    estimated: dict[str, float] | None = None,
) -> PeriodRecord:
    """Build the log record of one job's control period. ``weights`` maps subtask index to
    (weight, virtual weight) after the decision was applied (Mcycles/s); ``estimated``:
    the seconds carried over a late report, by subtask index."""
    return PeriodRecord(
        job=decision.job_id,
        period=period,
        real_time=real_time,
        mean_virtual=decision.mean_virtual,
        phase_difference=decision.phase_difference,
        window=decision.window.value,
        factors={str(c.index): c.factor for c in decision.changes},
        weights={str(i): w for i, (w, _) in sorted(weights.items())},
        virtual_weights={str(i): v for i, (_, v) in sorted(weights.items())},
        clock_offset=clock_offset,
        clock_quality=clock_quality,
        estimated=estimated,
    )


def to_json_line(record: PeriodRecord | SummaryRecord) -> str:
    """One record as a deterministic JSON line (no trailing newline).

    The fields are read directly (their values are numbers, strings and flat dicts of
    them, which ``json`` writes as ``asdict`` would hand them over, without its deep
    copy: the same bytes, several times faster; the simulator writes a record per job and
    logged period)."""
    names = _FIELD_NAMES.get(type(record))
    if names is None:
        d = {k: v for k, v in asdict(record).items() if v is not None or k in _KEEP_NONE}
    else:
        d = {}
        for k in names:
            v = getattr(record, k)
            if v is not None or k in _KEEP_NONE:
                d[k] = v
    return _ENCODER.encode(d)


_KEEP_NONE = frozenset({"completion_skew", "turnaround"})
#: Field names of the records whose values are flat (see :func:`to_json_line`).
_FIELD_NAMES: dict[type, tuple[str, ...]] = {
    cls: tuple(f.name for f in fields(cls)) for cls in (PeriodRecord, SummaryRecord)
}
_ENCODER = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)


def drop_torn_tail(path: Path) -> int:
    """Cut a torn last line (no newline, not JSON) off an existing file and return the
    bytes removed (0 when there is none or no file); a last line that is JSON but lacks
    its newline gets one.

    A writer that appends to a log a crashed writer left (the restarted controller appends
    to the same phase log) would otherwise glue its first record onto the torn line, and
    the torn line would become a malformed line in the middle, which readers refuse.
    """
    try:
        fh = path.open("r+b")
    except FileNotFoundError:
        return 0
    with fh:
        end = fh.seek(0, os.SEEK_END)
        pos = end
        while pos > 0:
            start = max(0, pos - 65536)
            fh.seek(start)
            chunk = fh.read(pos - start)
            nl = chunk.rfind(b"\n")
            if nl >= 0:
                pos = start + nl + 1
                break
            pos = start
        if pos == end:
            return 0
        fh.seek(pos)
        tail = fh.read(end - pos)
        try:
            json.loads(tail.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            pass
        else:  # a complete record that only lacks its newline: keep it
            fh.seek(end)
            fh.write(b"\n")
            return 0
        fh.truncate(pos)
        fh.flush()
        os.fsync(fh.fileno())
        return end - pos


class PhaseLogWriter:
    """Appends records to a JSON Lines file (or any text stream)."""

    def __init__(self, target: str | Path | IO[str]) -> None:
        if isinstance(target, (str, Path)):
            path = Path(target)
            path.parent.mkdir(parents=True, exist_ok=True)
            #: Bytes of a torn last line removed before appending (a crashed writer's).
            self.dropped_torn_bytes = drop_torn_tail(path)
            self._stream: IO[str] = path.open("a", encoding="utf-8")
            self._owned = True
        else:
            self._stream = target
            self._owned = False
            self.dropped_torn_bytes = 0

    def write(self, record: PeriodRecord | SummaryRecord) -> None:
        self._stream.write(to_json_line(record) + "\n")

    def write_all(self, records: Iterable[PeriodRecord | SummaryRecord]) -> None:
        for r in records:
            self.write(r)

    def flush(self) -> None:
        self._stream.flush()

    def close(self) -> None:
        if self._owned:
            self._stream.close()

    def __enter__(self) -> PhaseLogWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LogFormatError(ValueError):
    """A phase log line that is not a valid record; names the file and line."""


@dataclass(frozen=True, slots=True)
class TornLine:
    """The last line of a log that the writer stopped in the middle of (a crash): not
    newline-terminated and not a valid record. ``line`` is its line number, ``size`` its
    length in bytes."""

    path: Path
    line: int
    size: int

    def message(self) -> str:
        return (f"{self.path}: skipped a torn last line ({self.size} bytes): "
                "the writer stopped mid-line")


class TornLineWarning(UserWarning):
    """Issued by :func:`read_log` for a torn last line when no ``on_torn`` is given."""


def read_log(
    path: str | Path, on_torn: Callable[[TornLine], None] | None = None
) -> Iterator[dict[str, Any]]:
    """Yield the records of a phase log (dicts). A bad line raises :class:`LogFormatError`
    naming the file, the line number and the reason.

    One exception: a torn last line, the last line when it has no trailing newline and is
    not a valid record (not UTF-8 or not JSON: a crash while the writer was appending), is
    skipped and reported: ``on_torn(TornLine(...))`` if given, else a
    :class:`TornLineWarning`. A complete (newline-terminated) bad line is an error wherever
    it is, and so is an unterminated last line that is valid JSON but not a record.
    """
    p = Path(path)
    with p.open("rb") as fh:
        for lineno, raw in enumerate(fh, 1):
            # Only the file's last line can lack the newline.
            last_unterminated = not raw.endswith(b"\n")
            try:
                line = raw.decode("utf-8").strip()
                if not line:
                    continue
                rec = json.loads(line)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                if last_unterminated:
                    torn = TornLine(p, lineno, len(raw))
                    if on_torn is not None:
                        on_torn(torn)
                    else:
                        warnings.warn(torn.message(), TornLineWarning, stacklevel=2)
                    return
                if isinstance(exc, UnicodeDecodeError):
                    raise LogFormatError(f"{p}: line {lineno}: not UTF-8 text") from None
                raise LogFormatError(f"{p}: line {lineno}: not JSON ({exc.msg})") from None
            if not isinstance(rec, dict) or rec.get("type") not in ("period", "summary"):
                raise LogFormatError(f"{p}: line {lineno}: type: must be 'period' or 'summary'")
            if "job" not in rec:
                raise LogFormatError(f"{p}: line {lineno}: job: missing")
            yield rec


@dataclass(frozen=True, slots=True)
class RunSummary:
    """Averages over the completed strict jobs with at least two subtasks of one log (the
    paper's statistic); ``completed`` counts them."""

    jobs: int
    completed: int
    mean_phase_difference: float
    max_phase_difference: float
    mean_completion_skew: float
    mean_turnaround: float


def summarize(records: Iterable[dict[str, Any]]) -> tuple[list[dict[str, Any]], RunSummary]:
    """Per-job summaries and the run summary of a log's records.

    Jobs with a summary record use it; jobs that only have period records (a live log
    still being written) get one computed from their periods (not completed).
    """
    summaries: dict[str, dict[str, Any]] = {}
    periods: dict[str, list[float]] = {}
    for rec in records:
        if rec["type"] == "summary":
            summaries[rec["job"]] = rec
        else:
            periods.setdefault(rec["job"], []).append(float(rec["phase_difference"]))
    for job, phis in periods.items():
        if job not in summaries:
            summaries[job] = {
                "job": job,
                "qos": "strict",
                "subtasks": None,
                "periods": len(phis),
                "mean_phase_difference": sum(phis) / len(phis),
                "max_phase_difference": max(phis),
                "completion_skew": None,
                "turnaround": None,
                "completed": False,
            }
    rows = [summaries[j] for j in sorted(summaries)]
    # The paper's population: completed strict jobs that have a phase at all (>= 2
    # subtasks), as RunResult.strict_completed() counts them.
    done = [
        r
        for r in rows
        if r["completed"] and r["qos"] == "strict" and (r.get("subtasks") or 0) >= 2
    ]

    def mean(key: str) -> float:
        vals = [float(r[key]) for r in done if r.get(key) is not None]
        return sum(vals) / len(vals) if vals else math.nan

    run = RunSummary(
        jobs=len(rows),
        completed=len(done),
        mean_phase_difference=mean("mean_phase_difference"),
        max_phase_difference=max(
            (float(r["max_phase_difference"]) for r in done), default=math.nan
        ),
        mean_completion_skew=mean("completion_skew"),
        mean_turnaround=mean("turnaround"),
    )
    return rows, run


# Compiled (workloads/native.py), a frozen record needs its constructor to be unpickled.
picklable_frozen_records(globals())
