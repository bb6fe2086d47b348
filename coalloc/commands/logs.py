"""``coalloc logs``: read phase-difference logs (JSON Lines, :mod:`coallocator.phase_log`).

``coalloc logs summarize PATH [--json] [--per-job]``: for a log file, a table with one
row per job (mean and max phase difference, completion skew, turnaround) and the run
summary (averages over the completed strict jobs, the paper's statistic); for a directory,
one run-summary row per ``*.jsonl`` file in it (``--per-job`` adds each file's job table).

``coalloc logs plot PATH [--job ID] --out FILE.png [--asynchrony S]
[--overall-deviation S]``: one job's phase difference over real time (top) and its mean
virtual clock's lead over real time (bottom), with the control periods where a window
fired marked; ``--asynchrony`` draws ``A_t`` on the top panel and ``--overall-deviation``
draws ``+-E_t`` on the bottom one (period records do not carry the windows). The default
job is the one with the largest maximum phase difference.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coalloc.errors import UserError, escape_controls
from coalloc.flags import seconds_flag
from coalloc.tables import render as table

if TYPE_CHECKING:
    from coallocator.phase_log import TornLine

# Fields each record type must carry, and whether they may be null.
_PERIOD_FIELDS: tuple[tuple[str, bool], ...] = (
    ("real_time", False), ("phase_difference", False), ("mean_virtual", False),
)
_SUMMARY_FIELDS: tuple[tuple[str, bool], ...] = (
    ("mean_phase_difference", False), ("max_phase_difference", False),
    ("completion_skew", True), ("turnaround", True), ("periods", False),
)
_WINDOW_STYLE = {
    "asynchrony": ("tab:red", "v", "asynchrony window fired"),
    "overall_behind": ("tab:orange", "^", "overall window fired (job behind)"),
    "overall_ahead": ("tab:purple", "s", "overall window fired (job ahead)"),
    "overall_behind+asynchrony": (
        "tab:brown", "D", "job behind, nothing to speed up: asynchrony slow-downs"),
}


@dataclass(frozen=True, slots=True)
class PeriodPoint:
    """One logged control period of a job: real time ``t`` (s), phase difference ``phi``
    (s), mean virtual clock ``mean_virtual`` (s) and the window that fired."""

    t: float
    phi: float
    mean_virtual: float
    window: str


# -- reading -------------------------------------------------------------------------------


def log_files(path: Path) -> list[Path]:
    """``path`` itself, or the ``*.jsonl`` files of a directory, in natural order (numbers
    in names compare as numbers: ``n3-...`` before ``n12-...``)."""
    if path.is_dir():
        files = sorted((p for p in path.iterdir() if p.suffix == ".jsonl" and p.is_file()),
                       key=_natural_key)
        if not files:
            raise UserError(f"{path}: no .jsonl phase logs in this directory")
        return files
    if not path.exists():
        raise UserError(f"{path}: no such file or directory")
    return [path]


def _natural_key(path: Path) -> tuple[tuple[int, int | str], ...]:
    # (0, number) sorts before (1, text) so that the key stays totally ordered.
    return tuple((0, int(part)) if part.isdigit() else (1, part)
                 for part in re.split(r"(\d+)", path.name) if part)


def read_records(path: Path) -> list[dict[str, Any]]:
    """Every record of one log, each checked for the fields the commands use. Bad input
    becomes a one-line :class:`UserError` naming the file, line or record and field; a
    torn last line (a crash mid-write) is skipped with one warning line on stderr."""
    from coallocator.phase_log import LogFormatError, read_log

    records: list[dict[str, Any]] = []
    try:
        for rec in read_log(path, on_torn=warn_torn):
            _check_record(path, len(records) + 1, rec)
            records.append(rec)
    except LogFormatError as exc:
        raise UserError(str(exc)) from None
    except UnicodeDecodeError:
        raise UserError(f"{path}: not UTF-8 text (a phase log is JSON Lines)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    return records


def warn_torn(torn: TornLine) -> None:
    """One line on stderr for a torn last line of a log (``read_log``'s ``on_torn``)."""
    try:
        print(f"coalloc: warning: {escape_controls(torn.message())}", file=sys.stderr)
    except (BrokenPipeError, OSError, ValueError):  # nobody reads stderr
        pass


def _check_record(path: Path, index: int, rec: dict[str, Any]) -> None:
    fields = _PERIOD_FIELDS if rec["type"] == "period" else _SUMMARY_FIELDS
    for name, nullable in fields:
        value = rec.get(name, _MISSING)
        where = f"{path}: record {index} (job {rec['job']}): {name}"
        if value is _MISSING:
            raise UserError(f"{where}: missing")
        if value is None and nullable:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise UserError(f"{where}: must be a number, got {value!r}")


_MISSING = object()


# -- summarize -----------------------------------------------------------------------------


def _clean(value: Any) -> Any:
    """NaN -> None, so that JSON output stays valid."""
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def summarize_file(path: Path) -> dict[str, Any]:
    """``{"file", "jobs": [per-job summaries], "summary": run summary}`` of one log."""
    from coallocator.phase_log import summarize

    rows, run = summarize(read_records(path))
    return {
        "file": str(path),
        "jobs": [{k: _clean(v) for k, v in r.items() if k != "type"} for r in rows],
        "summary": {k: _clean(v) for k, v in asdict(run).items()},
    }


def format_jobs(jobs: Sequence[dict[str, Any]]) -> str:
    headers = ("job", "qos", "subtasks", "periods", "mean_phi_s", "max_phi_s", "viol_A_t",
               "skew_s", "turnaround_s", "completed", "ended")
    rows = []
    for j in jobs:
        periods = int(j.get("periods", 0) or 0)
        viol = (
            int(j["window_violations"]) / periods
            if periods and j.get("window_violations") is not None
            else None
        )
        rows.append((
            j["job"], j.get("qos") or "-", j.get("subtasks"), periods,
            _float(j.get("mean_phase_difference")), _float(j.get("max_phase_difference")),
            viol, _float(j.get("completion_skew")), _float(j.get("turnaround")),
            "yes" if j.get("completed") else "no", j.get("reason") or "-",
        ))
    return table(headers, rows, digits=(1, 1, 1, 1, 1, 1, 3, 1, 1, 1, 1),
                 align="<<>>>>>>>><")


_RUN_HEAD = ("jobs", "completed_strict", "mean_phi_s", "max_phi_s", "mean_skew_s",
             "mean_turnaround_s")


def _run_cells(s: dict[str, Any]) -> tuple[Any, ...]:
    return (s["jobs"], s["completed"], _float(s["mean_phase_difference"]),
            _float(s["max_phase_difference"]), _float(s["mean_completion_skew"]),
            _float(s["mean_turnaround"]))


def _float(value: Any) -> float | None:
    """Times print with one decimal even when the log holds a whole number."""
    return None if value is None else float(value)


def summarize_handler(args: argparse.Namespace) -> int:
    path = Path(args.path)
    files = log_files(path)
    results = [summarize_file(f) for f in files]
    if args.json:
        print(json.dumps({"logs": results}, indent=2, allow_nan=False))
        return 0
    single = not path.is_dir()
    if single or args.per_job:
        for res in results:
            if not single:
                print(f"== {res['file']}")
            print(format_jobs(res["jobs"]))
            print()
    if single:
        # The population of results.csv and the paper: completed strict jobs with >= 2
        # subtasks (phase_log.summarize).
        print("run summary (completed strict jobs with at least two subtasks):")
        print(table(_RUN_HEAD, [_run_cells(results[0]["summary"])], align=">" * 6))
    else:
        print(table(("log", *_RUN_HEAD),
                    [(Path(r["file"]).name, *_run_cells(r["summary"])) for r in results],
                    align="<" + ">" * 6))
    return 0


# -- plot ----------------------------------------------------------------------------------


def job_points(records: Sequence[dict[str, Any]]) -> dict[str, list[PeriodPoint]]:
    """The logged periods of every job, in time order."""
    out: dict[str, list[PeriodPoint]] = {}
    for rec in records:
        if rec["type"] == "period":
            out.setdefault(rec["job"], []).append(PeriodPoint(
                float(rec["real_time"]), float(rec["phase_difference"]),
                float(rec["mean_virtual"]), str(rec.get("window", "none"))))
    for pts in out.values():
        pts.sort(key=lambda p: p.t)
    return out


def pick_job(points: dict[str, list[PeriodPoint]], summaries: dict[str, dict[str, Any]]) -> str:
    """The job with the largest maximum phase difference (ties: the smallest id); the
    summary record's maximum is used when there is one (it sees every period, the log only
    every K-th and the firings)."""
    def peak(job: str) -> float:
        s = summaries.get(job)
        if s is not None and s.get("max_phase_difference") is not None:
            return float(s["max_phase_difference"])
        return max(p.phi for p in points[job])

    return min(points, key=lambda job: (-peak(job), job))


def _iter_ids(ids: Sequence[str], limit: int = 8) -> Iterator[str]:
    yield from ids[:limit]
    if len(ids) > limit:
        yield f"... ({len(ids)} in all)"


def _window(flag: str, text: str | None) -> float | None:
    """A window width from the command line: seconds, finite and > 0."""
    return None if text is None else seconds_flag(flag, text)


def plot_handler(args: argparse.Namespace) -> int:
    path = Path(args.path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory; logs plot reads one log file")
    asynchrony = _window("--asynchrony", args.asynchrony)
    overall_deviation = _window("--overall-deviation", args.overall_deviation)
    records = read_records(log_files(path)[0])
    points = job_points(records)
    summaries = {r["job"]: r for r in records if r["type"] == "summary"}
    if args.job is None:
        if not points:
            raise UserError(f"{path}: no period records to plot (an empty log, or only "
                            "single-subtask jobs)")
        job = pick_job(points, summaries)
    else:
        job = args.job
        if job not in points:
            if job in summaries:
                raise UserError(f"{path}: --job: {job} has no period records to plot "
                                "(it never ran two subtasks at once)")
            known = ", ".join(_iter_ids(sorted(points)))
            raise UserError(f"{path}: --job: no job {job!r} in this log (jobs: {known})")
    out = Path(args.out)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        plot_job(out, job, points[job], summaries.get(job), path.name,
                 asynchrony, overall_deviation)
    except (OSError, ValueError) as exc:
        # matplotlib raises ValueError for an unknown image format (file extension).
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UserError(f"{out}: cannot write the plot: {reason}") from None
    print(f"wrote {out} (job {job}, {len(points[job])} logged periods)")
    return 0


def plot_job(out: Path, job: str, points: Sequence[PeriodPoint], summary: dict[str, Any] | None,
             source: str, asynchrony: float | None, overall_deviation: float | None) -> None:
    """Draw one job's logged periods: phase difference (s) and ``T̄_v - T_R`` (s) against
    ``T_R`` (the log's ``real_time``: model s; live, real s x the time scale), firings
    marked, windows drawn when given."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ts = [p.t for p in points]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 6.5), sharex=True,
                                      constrained_layout=True,
                                      gridspec_kw={"height_ratios": [3, 2]})
    top.plot(ts, [p.phi for p in points], color="tab:blue", lw=1.2, marker=".", ms=3,
             label="phase difference Φ = max T_V − min T_V")
    bottom.plot(ts, [p.mean_virtual - p.t for p in points], color="tab:green", lw=1.2,
                marker=".", ms=3, label="T̄_v − T_R")
    bottom.axhline(0.0, color="grey", lw=0.8)
    for window, (colour, marker, label) in _WINDOW_STYLE.items():
        fired = [p for p in points if p.window == window]
        if fired:
            top.scatter([p.t for p in fired], [p.phi for p in fired], color=colour,
                        marker=marker, s=22, zorder=3, label=f"{label} ({len(fired)})")
            bottom.scatter([p.t for p in fired], [p.mean_virtual - p.t for p in fired],
                           color=colour, marker=marker, s=22, zorder=3)
    if asynchrony is not None:
        top.axhline(asynchrony, color="tab:red", ls="--", lw=1.0,
                    label=f"asynchrony window A_t = {asynchrony:g} s")
    if overall_deviation is not None:
        for sign in (1.0, -1.0):
            bottom.axhline(sign * overall_deviation, color="tab:orange", ls="--", lw=1.0,
                           label=(f"overall window ±E_t = {overall_deviation:g} s"
                                  if sign > 0 else None))
    top.set_ylabel("phase difference (s)")
    top.set_ylim(bottom=0)
    bottom.set_ylabel("mean virtual − real (s)")
    # The log's ``t`` is the period's boundary in model time (live: real s x time scale).
    bottom.set_xlabel("T_R, model time (model s)")
    for ax in (top, bottom):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
    title = f"{job} ({source})"
    if summary is not None:
        title += (f": mean Φ {float(summary['mean_phase_difference']):.1f} s, "
                  f"max Φ {float(summary['max_phase_difference']):.1f} s")
    top.set_title(title + "\n(logged periods only: every K-th period and every firing)",
                  fontsize=10)
    fig.savefig(out, dpi=110)
    plt.close(fig)


# -- registration --------------------------------------------------------------------------


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("logs", help="summarize or plot phase-difference logs")
    inner = parser.add_subparsers(dest="logs_command", metavar="ACTION")
    inner.required = True

    summ = inner.add_parser(
        "summarize", help="per-job table and run summary of a log (or a directory of logs)")
    summ.add_argument("path", metavar="PATH", help="a .jsonl phase log or a directory of them")
    summ.add_argument("--json", action="store_true", help="print JSON instead of tables")
    summ.add_argument("--per-job", action="store_true",
                      help="for a directory, also print each log's job table")
    summ.set_defaults(handler=summarize_handler)

    plot = inner.add_parser("plot", help="one job's phase difference over time, as a PNG")
    plot.add_argument("path", metavar="PATH", help="a .jsonl phase log")
    plot.add_argument("--job", default=None,
                      help="job id (default: the job with the largest max phase difference)")
    plot.add_argument("--out", required=True, metavar="FILE.png", help="image to write")
    plot.add_argument("--asynchrony", default=None, metavar="S",
                      help="draw the asynchrony window A_t (s) of the job")
    plot.add_argument("--overall-deviation", default=None, metavar="S",
                      help="draw the overall error window E_t (s) of the job")
    plot.set_defaults(handler=plot_handler)
