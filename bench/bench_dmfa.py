"""Benchmark: DMFA-SRQ's sort-and-bisection against solving the seed's LP at every arrival.

For 500 and 5,000 arrivals (``--sizes``) with the experiment's Google-like demands
(``coalloc.experiments.dmfa``), time

* DMFA-SRQ: :func:`fairness.dmfa.dmfa_srq` over the whole sequence (best of ``--repeat``);
* the reference: at each arrival ``k``, build the LP (``k + 1`` variables, ``k + m``
  constraints, sparse) and solve it with HiGHS (``scipy.optimize.linprog``), starting from
  DMFA-SRQ's own previous allocation, and check that both find the same ``M_k``.

Up to ``--lp-all-up-to`` arrivals (default 1,000) the LP is solved at every arrival; above
that, only at ``--lp-samples`` evenly spaced arrivals, and its total is extrapolated: the
per-arrival times are interpolated linearly in ``k`` and summed over every arrival (each
sampled LP is timed best of ``--lp-repeat``). The table says which.

Run: ``python3 bench/bench_dmfa.py`` (about a minute on two cores).
"""

from __future__ import annotations

import argparse
import math
import platform
import sys
import time

import numpy as np
import scipy
from scipy import sparse
from scipy.optimize import linprog

from coalloc.experiments.dmfa import make_instance
from fairness.dmfa import dmfa_srq

# HiGHS' default feasibility tolerance (1e-7, absolute) is large against shares of order
# 1e-4: at 5,000 arrivals its M_k drifted up to 4e-5 (relative) above the true optimum,
# using more CPU than the pool holds. At 1e-10 it agrees with DMFA-SRQ to ~1e-12, at about
# the same speed.
HIGHS_OPTIONS = {"primal_feasibility_tolerance": 1e-10, "dual_feasibility_tolerance": 1e-10}


def lp_level(d: np.ndarray, w: np.ndarray, before: np.ndarray) -> float:
    """Solve the seed's LP for ``k = len(w)`` users (normalised demands ``d``, shares ``w``,
    previous allocation ``before``); returns ``M_k``."""
    k, m = d.shape
    rows = np.concatenate([np.arange(k), np.arange(k), k + np.repeat(np.arange(m), k)])
    cols = np.concatenate([np.arange(k), np.full(k, k), np.tile(np.arange(k), m)])
    vals = np.concatenate([-np.ones(k), w, d.T.ravel()])
    a_ub = sparse.csr_matrix((vals, (rows, cols)), shape=(k + m, k + 1))
    b_ub = np.concatenate([np.zeros(k), np.full(m, w.sum())])
    bounds = np.column_stack([np.append(before, 0.0), np.full(k + 1, np.inf)])
    cost = np.zeros(k + 1)
    cost[-1] = -1.0
    result = linprog(cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs",
                     options=HIGHS_OPTIONS)
    if result.status != 0:
        raise RuntimeError(f"HiGHS failed at k={k}: {result.message}")
    return float(result.x[-1])


def bench(
    n: int, seed: int, repeat: int, lp_samples: int, lp_all_up_to: int, lp_repeat: int
) -> dict[str, float | int | bool]:
    demands, shares = make_instance(n, 0, seed)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run = dmfa_srq(demands, shares)
        times.append(time.perf_counter() - start)
    dmfa_total = min(times)

    d = demands / demands.max(axis=1, keepdims=True)
    w = np.asarray(shares)
    sampled = n > lp_all_up_to and n > lp_samples
    ks = (np.unique(np.linspace(1, n, lp_samples).round().astype(int)) if sampled
          else np.arange(1, n + 1))
    lp_times = []
    worst = 0.0
    for k in ks:
        before = np.zeros(k - 1) if k == 1 else np.asarray(run.after(k - 1).dominant_shares)
        best = math.inf
        for _ in range(lp_repeat if sampled else 1):
            start = time.perf_counter()
            level = lp_level(d[:k], w[:k], np.append(before, 0.0)[: k])
            best = min(best, time.perf_counter() - start)
        lp_times.append(best)
        worst = max(worst, abs(level - run.levels[k - 1]) / run.levels[k - 1])
    if sampled:
        lp_total = float(np.interp(np.arange(1, n + 1), ks, lp_times).sum())
    else:
        lp_total = math.fsum(lp_times)
    return {"n": n, "dmfa": dmfa_total, "lp": lp_total, "lp_solved": len(ks),
            "sampled": sampled, "worst": worst}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="500,5000", help="arrival counts (default %(default)s)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3, help="DMFA-SRQ repeats (best of)")
    parser.add_argument("--lp-all-up-to", type=int, default=1000,
                        help="solve the LP at every arrival up to this many arrivals "
                             "(default %(default)s)")
    parser.add_argument("--lp-samples", type=int, default=40,
                        help="above that, solve the LP at this many evenly spaced "
                             "arrivals and extrapolate (default %(default)s)")
    parser.add_argument("--lp-repeat", type=int, default=3,
                        help="sampled LPs: best of this many solves (default %(default)s)")
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    print(f"DMFA-SRQ vs per-arrival LP (HiGHS, feasibility tolerances 1e-10, "
          f"scipy {scipy.__version__}), "
          f"Python {platform.python_version()}, numpy {np.__version__}, 2 resources", flush=True)
    rows = []
    for n in sizes:
        rows.append(bench(n, args.seed, args.repeat, args.lp_samples, args.lp_all_up_to,
                          args.lp_repeat))
        print(f"  done: {n} arrivals", file=sys.stderr)
    header = (f"{'arrivals':>8} | {'DMFA-SRQ total':>14} | {'per arrival':>11} | "
              f"{'LP total':>10} | {'per arrival':>11} | {'LP / DMFA':>9} | "
              f"{'max rel |dM|':>12} | LP timing")
    print(header)
    print("-" * len(header))
    for r in rows:
        n = int(r["n"])
        how = (f"sampled at {r['lp_solved']} of {n} arrivals (best of {args.lp_repeat}), "
               "extrapolated"
               if r["sampled"] else f"solved at all {n} arrivals")
        print(f"{n:>8} | {r['dmfa']:>12.4f} s | {1e3 * r['dmfa'] / n:>8.4f} ms | "
              f"{r['lp']:>8.2f} s | {1e3 * r['lp'] / n:>8.3f} ms | {r['lp'] / r['dmfa']:>8.0f}x | "
              f"{r['worst']:>12.1e} | {how}")
    print("LP time = building the sparse LP + HiGHS solve, from DMFA-SRQ's own previous "
          "allocation; DMFA-SRQ time = the whole sequence including input validation.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
