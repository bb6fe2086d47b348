"""``coalloc experiment dmfa``: the DMFA-SRQ evaluation of the seed, reproduced.

For each number of users (``--users``, default 20, 100 and 500) and each run (``--runs``),
draw an instance (per-task CPU and memory demands and random shares summing to 1), let the
users arrive in the drawn order under DMFA-SRQ (:func:`fairness.dmfa.dmfa_srq`) and
allocate the same users at once with static weighted DRF
(:func:`fairness.dmfa.static_weighted_drf`). Compare the final allocations on the seed's
figures: minimum dominant share, sum of dominant shares, CPU and memory utilisation.

Demands come from ``--trace FILE.csv`` (columns ``cpu`` and ``memory``: per-task requests
as fractions of the pool, in ``[0, 1]``, like the Google cluster trace's normalised
requests; users are drawn from its rows without replacement) or, by default, from a seeded
bivariate log-normal modelled on that trace (:func:`google_like_demands`; see
docs/decisions.md). Every instance is seeded by ``(seed, users, run)``, so one run can be
rebuilt alone with :func:`make_instance`.

Writes into ``--out`` (default ``runs/dmfa``): ``results.csv`` (one row per users x run x
algorithm), ``summary.json`` (configuration, mean and standard deviation per users x
algorithm x figure) and ``dmfa.png`` (four panels, means with one-standard-deviation bars).
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any

from coalloc.errors import UserError
from coalloc.tables import cell
from coalloc.tables import render as table

if TYPE_CHECKING:
    import numpy as np

DEFAULT_USERS = (20, 100, 500)
DEFAULT_RUNS = 200
DEFAULT_OUT = "runs/dmfa"

# The default demand model (docs/decisions.md, "DMFA-SRQ"): log-normal per-task
# requests as fractions of the pool. Medians of a few hundredths, log-sd about 1 (so 90 %
# of requests lie within a factor ~5 of the median), CPU and memory positively correlated.
CPU_MEDIAN = 0.03
MEMORY_MEDIAN = 0.02
CPU_LOG_SD = 0.8
MEMORY_LOG_SD = 1.0
LOG_CORRELATION = 0.5
DEMAND_FLOOR = 1e-4  # the trace's smallest requests are of this order; keeps d > 0
# Shares: w_i proportional to Uniform(SHARE_LOW, 1), normalised to sum to 1.
SHARE_LOW = 0.1

CSV_COLUMNS = (
    "users", "run", "algorithm", "min_dominant_share", "sum_dominant_shares",
    "min_normalised_share", "cpu_utilization", "memory_utilization",
)
FIGURES = ("min_dominant_share", "sum_dominant_shares", "cpu_utilization",
           "memory_utilization")


class Algorithm(str, Enum):
    """The two policies the seed compares."""

    DMFA_SRQ = "dmfa_srq"
    STATIC_WEIGHTED_DRF = "static_weighted_drf"


@dataclass(frozen=True, slots=True)
class Row:
    """One line of ``results.csv``: the final allocation's figures (fractions of the pool;
    ``min_normalised_share`` is ``min_i x_i / w_i``, dimensionless)."""

    users: int
    run: int
    algorithm: str
    min_dominant_share: float
    sum_dominant_shares: float
    min_normalised_share: float
    cpu_utilization: float
    memory_utilization: float


# -- instances ---------------------------------------------------------------------------


def google_like_demands(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` per-task ``<cpu, memory>`` demands, fractions of the pool in
    ``[DEMAND_FLOOR, 1]``, from the correlated log-normal described at the top."""
    import numpy as np  # lazily: `coalloc --help` need not load numpy
    sd = np.array([CPU_LOG_SD, MEMORY_LOG_SD])
    cov = np.outer(sd, sd) * np.array([[1.0, LOG_CORRELATION], [LOG_CORRELATION, 1.0]])
    mean = np.log([CPU_MEDIAN, MEMORY_MEDIAN])
    demands = np.exp(rng.multivariate_normal(mean, cov, size=n, method="cholesky"))
    return np.clip(demands, DEMAND_FLOOR, 1.0)


def random_shares(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` shares ``w_i > 0`` proportional to ``Uniform(SHARE_LOW, 1)``, summing to 1."""
    raw = rng.uniform(SHARE_LOW, 1.0, size=n)
    return raw / raw.sum()


def make_instance(
    users: int, run: int, seed: int, trace: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The demands (``users x 2``, arrival order) and shares of one run; seeded by
    ``(seed, users, run)``. With ``trace`` (rows of ``<cpu, memory>``), users are drawn
    from its rows without replacement."""
    import numpy as np  # lazily: `coalloc --help` need not load numpy
    rng = np.random.default_rng([seed, users, run])
    if trace is None:
        demands = google_like_demands(rng, users)
    else:
        demands = trace[rng.choice(len(trace), size=users, replace=False)]
    return demands, random_shares(rng, users)


def load_trace(path: Path) -> np.ndarray:
    """Read ``<cpu, memory>`` rows from a CSV with a header naming ``cpu`` and ``memory``
    (other columns are ignored). Values: per-task requests as fractions of the pool, in
    ``[0, 1]``, not both zero. Raises :class:`UserError` naming file, line and field."""
    import numpy as np  # lazily: `coalloc --help` need not load numpy
    try:
        handle = path.open(newline="", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"{path}: cannot read: {exc.strerror or exc}") from None
    rows: list[tuple[float, float]] = []
    with handle:
        reader = csv.DictReader(handle)
        header = [h.strip() for h in (reader.fieldnames or [])]
        for column in ("cpu", "memory"):
            if column not in header:
                raise UserError(f"{path}: line 1: {column}: missing column "
                                "(the header must name cpu and memory)")
        reader.fieldnames = header
        try:
            for record in reader:
                line = reader.line_num
                values = []
                for column in ("cpu", "memory"):
                    text = (record.get(column) or "").strip()
                    try:
                        value = float(text)
                    except ValueError:
                        raise UserError(
                            f"{path}: line {line}: {column}: not a number: {text!r}") from None
                    if not 0.0 <= value <= 1.0:  # also refuses NaN
                        raise UserError(f"{path}: line {line}: {column}: must be in [0, 1] "
                                        f"(a fraction of the pool), got {text}")
                    values.append(value)
                if values[0] == 0.0 and values[1] == 0.0:
                    raise UserError(f"{path}: line {line}: cpu, memory: both zero "
                                    "(a task must demand something)")
                rows.append((values[0], values[1]))
        except csv.Error as exc:
            raise UserError(f"{path}: line {reader.line_num}: not valid CSV: {exc}") from None
        except UnicodeDecodeError:
            raise UserError(f"{path}: not UTF-8 text") from None
    if not rows:
        raise UserError(f"{path}: no data rows (expected a header and cpu,memory rows)")
    return np.array(rows)


# -- one run -------------------------------------------------------------------------------


def evaluate(users: int, run: int, demands: np.ndarray, shares: np.ndarray) -> list[Row]:
    """Both algorithms' final-allocation figures on one instance."""
    from fairness.dmfa import allocation_metrics, dmfa_srq, static_weighted_drf

    rows = []
    for algorithm, solve in (
        (Algorithm.DMFA_SRQ, lambda d, w: dmfa_srq(d, w).final),
        (Algorithm.STATIC_WEIGHTED_DRF, static_weighted_drf),
    ):
        metrics = allocation_metrics(solve(demands, shares), shares)
        rows.append(Row(
            users=users, run=run, algorithm=algorithm.value,
            min_dominant_share=metrics.min_dominant_share,
            sum_dominant_shares=metrics.sum_dominant_shares,
            min_normalised_share=metrics.min_normalised_share,
            cpu_utilization=metrics.utilization[0],
            memory_utilization=metrics.utilization[1],
        ))
    return rows


def summarise(rows: Sequence[Row]) -> dict[str, dict[str, dict[str, dict[str, float]]]]:
    """``{users: {algorithm: {figure: {"mean", "std", "min", "max"}}}}`` (population std)."""
    import numpy as np  # lazily: `coalloc --help` need not load numpy
    out: dict[str, dict[str, dict[str, dict[str, float]]]] = {}
    for row in rows:
        out.setdefault(str(row.users), {}).setdefault(row.algorithm, {})
    for users, by_algorithm in out.items():
        for algorithm in by_algorithm:
            mine = [r for r in rows if str(r.users) == users and r.algorithm == algorithm]
            for figure in CSV_COLUMNS[3:]:
                values = np.array([getattr(r, figure) for r in mine])
                by_algorithm[algorithm][figure] = {
                    "mean": float(values.mean()), "std": float(values.std()),
                    "min": float(values.min()), "max": float(values.max()),
                }
    return out


# -- output --------------------------------------------------------------------------------


def write_csv(path: Path, rows: Sequence[Row]) -> None:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(CSV_COLUMNS)
        for row in rows:
            record = asdict(row)
            writer.writerow([record[c] if isinstance(record[c], (int, str)) else
                             repr(record[c]) for c in CSV_COLUMNS])


def plot(path: Path, summary: dict[str, Any], users: Sequence[int], runs: int) -> None:
    """Four panels, DMFA-SRQ vs static weighted DRF, bars at the mean with one-standard-
    deviation error bars, grouped by number of users."""
    import matplotlib
    import numpy as np  # lazily: `coalloc --help` need not load numpy

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    titles = {
        "min_dominant_share": "Minimum dominant share  min$_i$ $x_i$",
        "sum_dominant_shares": "Sum of dominant shares  sum$_i$ $x_i$",
        "cpu_utilization": "CPU utilisation (fraction of pool)",
        "memory_utilization": "Memory utilisation (fraction of pool)",
    }
    labels = {Algorithm.DMFA_SRQ.value: "DMFA-SRQ (users arrive one by one)",
              Algorithm.STATIC_WEIGHTED_DRF.value: "static weighted DRF (all present)"}
    colours = {Algorithm.DMFA_SRQ.value: "#1f77b4",
               Algorithm.STATIC_WEIGHTED_DRF.value: "#ff7f0e"}
    fig, axes = plt.subplots(2, 2, figsize=(11, 8), constrained_layout=True)
    positions = np.arange(len(users))
    width = 0.38
    for ax, figure in zip(axes.flat, FIGURES):
        for offset, algorithm in ((-width / 2, Algorithm.DMFA_SRQ.value),
                                  (width / 2, Algorithm.STATIC_WEIGHTED_DRF.value)):
            means = [summary[str(u)][algorithm][figure]["mean"] for u in users]
            stds = [summary[str(u)][algorithm][figure]["std"] for u in users]
            ax.bar(positions + offset, means, width, yerr=stds, capsize=4,
                   color=colours[algorithm], label=labels[algorithm])
        ax.set_title(titles[figure])
        ax.set_xticks(positions, [str(u) for u in users])
        ax.set_xlabel("number of users")
        if figure == "min_dominant_share":
            ax.set_yscale("log")  # it falls roughly as 1/users
        elif figure.endswith("utilization"):
            ax.set_ylim(0.0, 1.05)
        ax.grid(axis="y", alpha=0.3)
    handles, names = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="outside lower center", ncol=2, fontsize=10)
    fig.suptitle("DMFA-SRQ vs static weighted DRF (final allocations; mean $\\pm$ 1 s.d. "
                 f"over {runs} runs per group)")
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- command line --------------------------------------------------------------------------


def _users_list(text: str) -> list[int]:
    try:
        values = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--users: not a comma-separated list of integers: {text!r}") from None
    if not values:
        raise UserError("--users: must name at least one number of users")
    for value in values:
        if value < 1:
            raise UserError(f"--users: must be >= 1, got {value}")
    return values


def run_experiment(
    users: Sequence[int], runs: int, seed: int, trace: np.ndarray | None,
    progress: Callable[[], None] | None = None,
) -> list[Row]:
    """All rows, users-major then run; ``progress()`` is called after each run."""
    rows: list[Row] = []
    for n in users:
        for run in range(runs):
            demands, shares = make_instance(n, run, seed, trace)
            rows.extend(evaluate(n, run, demands, shares))
            if progress is not None:
                progress()
    return rows


def handler(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    users = _users_list(args.users)
    if args.runs < 1:
        raise UserError(f"--runs: must be >= 1, got {args.runs}")
    trace = None
    if args.trace is not None:
        trace = load_trace(Path(args.trace))
        if len(trace) < max(users):
            raise UserError(f"{args.trace}: has {len(trace)} data rows, need at least "
                            f"{max(users)} (users are drawn without replacement; --users)")
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{out}: cannot create output directory: {exc.strerror}") from None
    with tqdm(total=len(users) * args.runs, desc="dmfa", unit="run", file=sys.stderr,
              disable=args.quiet) as bar:
        rows = run_experiment(users, args.runs, args.seed, trace, progress=lambda: bar.update())
    summary = summarise(rows)
    write_csv(out / "results.csv", rows)
    config = {
        "users": users, "runs": args.runs, "seed": args.seed,
        "demands": (str(args.trace) if args.trace is not None else {
            "model": "bivariate log-normal (per-task requests, fractions of the pool)",
            "cpu_median": CPU_MEDIAN, "memory_median": MEMORY_MEDIAN,
            "cpu_log_sd": CPU_LOG_SD, "memory_log_sd": MEMORY_LOG_SD,
            "log_correlation": LOG_CORRELATION, "floor": DEMAND_FLOOR, "ceiling": 1.0,
        }),
        "shares": f"proportional to Uniform({SHARE_LOW}, 1), normalised to sum to 1",
        "error_bars": "population standard deviation over runs",
    }
    (out / "summary.json").write_text(
        json.dumps({"config": config, "results": summary}, indent=2) + "\n", encoding="utf-8")
    plot(out / "dmfa.png", summary, users, args.runs)
    print(format_table(summary, users))
    print(f"wrote {out / 'results.csv'}, {out / 'summary.json'}, {out / 'dmfa.png'}")
    return 0


def format_table(summary: dict[str, Any], users: Sequence[int]) -> str:
    """Mean and standard deviation (``±``) of every figure, one row per user count and
    algorithm (magnitudes below 1e-3 in scientific notation)."""
    def num(value: float) -> str:
        return cell(value, 4, sci_below=1e-3)

    headers: list[str] = ["users", "algorithm"]
    for f in FIGURES:
        headers += [f, "±sd"]
    rows = []
    for n in users:
        for algorithm in Algorithm:
            figures = summary[str(n)][algorithm.value]
            row: list[Any] = [n, algorithm.value]
            for f in FIGURES:
                row += [num(figures[f]["mean"]), "±" + num(figures[f]["std"])]
            rows.append(row)
    return table(headers, rows, align="><" + ">" * (2 * len(FIGURES)))


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dmfa",
        help="DMFA-SRQ vs static weighted DRF (the seed's evaluation): CSV, JSON, PNG",
        description=(__doc__ or "").split("\n\n")[1],
    )
    parser.add_argument("--users", default=",".join(str(u) for u in DEFAULT_USERS),
                        help="comma-separated numbers of users (default %(default)s)")
    parser.add_argument("--runs", type=int, default=DEFAULT_RUNS,
                        help="repeated runs per number of users (default %(default)s; "
                             "the seed used 1000)")
    parser.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    parser.add_argument("--trace", default=None, metavar="FILE.csv",
                        help="per-task demands from a CSV with columns cpu,memory "
                             "(fractions of the pool) instead of the built-in model")
    parser.add_argument("--out", default=DEFAULT_OUT,
                        help="output directory (default %(default)s)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    parser.set_defaults(handler=handler)
