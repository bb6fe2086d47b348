"""The simulator's speed: the paper's matrix in the default (lean) mode against the
``--step-every-cycle`` reference, in the same run, and the bytes they write.

1. The default matrix of ``coalloc experiment paper`` (nodes 3, 6, 9, 12 x lambda 10,
   100, 200, 500 s x policies sq, sq_paper, strict; the generator's 1500..3000 QoS jobs
   per cell; phase logs every 10th period and every firing, as the experiment writes
   them) through the experiment's own runner (:func:`coalloc.experiments.paper.run_matrix`)
   with ``--workers`` processes (2), once in the simulator's default mode and once in its
   reference mode (``step_every_cycle``: every node and the controller through their
   public per-cycle path, as the live runtime drives them). Printed: each mode's wall
   time, the sum of its runs' own wall times (what one worker would take), the ratio
   reference / default, the issue's 60 s target, and whether ``results.csv`` and every
   phase log are byte-identical between the two modes.
2. ``--placement``: the default matrix of ``coalloc experiment placement`` (every default
   policy; default mode only), against the same target.
3. ``--large``: one run of 100 nodes and 20,000 QoS jobs at lambda 100 s under ``sq``
   (default mode; ``--large-reference`` also runs the reference, which takes long),
   against the same target. ``--large-prefix N``: the ratio against the reference on the
   workload's first N jobs by arrival (every class; the same nodes), both modes in the
   same run, with whether their results are the same (the whole run's reference is too
   slow to wait for).

Where this installation runs the scheduling core compiled (``COALLOC_COMPILE=1``;
``workloads/native.py``), parts 1 and 2 also run the default mode in pure Python, from a
copy of the sources (:func:`workloads.native.source_tree`), for the compiled modules'
ratio, unless ``--no-pure``; each mode runs in its own process. Printed first: whether this
installation runs the listed modules compiled (if not, the default mode is pure Python).

``--small``: nodes 3, 6 x lambda 10, 500 s with 200 jobs per cell (and 2,000 jobs for
``--large``). A benchmark, not a test: it asserts nothing; a missed target is printed as
``MISS``. Usage: ``python3 bench/bench_sim.py [--small] [--workers N] [--placement]
[--large] [--large-prefix N] [--skip-matrix] [--no-pure]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import filecmp
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from coalloc.experiments import paper, placement
from workloads import native

#: Each matrix should take at most a minute on two cores, so that a change to the
#: scheduling core can be checked against the whole matrix while one waits.
TARGET_SECONDS = 60.0


def _verdict(wall: float) -> str:
    return "ok" if wall <= TARGET_SECONDS else "MISS"


def run_paper(nodes: tuple[int, ...], lams: tuple[float, ...], jobs: int | None,
              workers: int, seed: int, step_every_cycle: bool,
              out: Path) -> tuple[float, float]:
    """Run the paper matrix in one mode; write ``results.csv`` and the phase logs under
    ``out``; return (wall time, sum of the runs' own wall times), s."""
    log_dir = out / "logs"
    log_dir.mkdir(parents=True)
    cells = paper.make_cells(nodes, lams, paper.DEFAULT_POLICIES, seed, jobs,
                             log_dir=log_dir, step_every_cycle=step_every_cycle)
    label = ("reference" if step_every_cycle else
             "compiled" if any(native.compiled_modules().values()) else "pure")
    done = 0

    def tick(row: paper.Row) -> None:
        nonlocal done
        done += 1
        print(f"  [{label} {done}/{len(cells)}] n{row.nodes} lam{row.lam:g} {row.policy}: "
              f"{row.wall_seconds:.1f} s", file=sys.stderr, flush=True)

    start = time.perf_counter()
    rows = paper.run_matrix(cells, workers, progress=tick)
    wall = time.perf_counter() - start
    paper.write_csv(out / "results.csv", rows)
    return wall, sum(r.wall_seconds for r in rows)


def _same_tree(a: Path, b: Path) -> tuple[bool, int]:
    """Whether every file under ``a`` has a byte-identical twin under ``b`` (and no file
    is missing on either side); the number of files compared."""
    fa = sorted(p.relative_to(a) for p in a.rglob("*") if p.is_file())
    fb = sorted(p.relative_to(b) for p in b.rglob("*") if p.is_file())
    if fa != fb:
        return False, len(fa)
    return all(filecmp.cmp(a / p, b / p, shallow=False) for p in fa), len(fa)


def bench_paper(args: argparse.Namespace) -> None:
    nodes: tuple[int, ...]
    lams: tuple[float, ...]
    jobs: int | None
    if args.small:
        nodes, lams, jobs = (3, 6), (10.0, 500.0), 200
    else:
        nodes, lams, jobs = paper.DEFAULT_NODES, paper.DEFAULT_LAMBDAS, None
    print(f"1. paper matrix: nodes {','.join(map(str, nodes))} x lambda "
          f"{','.join(f'{x:g}' for x in lams)} s x {','.join(paper.DEFAULT_POLICIES)}, jobs "
          f"{jobs if jobs is not None else 'uniform 1500..3000'}, {args.workers} worker(s), "
          f"seed {args.seed}")
    modes = [("default", False, False), ("reference", True, False)]
    if _pure_wanted(args):
        modes.append(("pure", False, True))
    with tempfile.TemporaryDirectory(prefix="bench_sim-") as tmp:
        walls = {}
        for mode, ref, pure in modes:
            walls[mode] = _paper_in_process(nodes, lams, jobs, args, ref, pure,
                                            Path(tmp) / mode)
        same = {}
        for mode in walls:
            if mode != "default":
                csv = filecmp.cmp(Path(tmp) / "default" / "results.csv",
                                  Path(tmp) / mode / "results.csv", shallow=False)
                logs, n_logs = _same_tree(Path(tmp) / "default" / "logs",
                                          Path(tmp) / mode / "logs")
                same[mode] = (csv, logs, n_logs)
    print(f"{'mode':<10} {'wall_s':>8} {'sum_run_s':>10} {'target_s':>9} {'verdict':>8}")
    for mode, (wall, serial) in walls.items():
        print(f"{mode:<10} {wall:>8.1f} {serial:>10.1f} {TARGET_SECONDS:>9.0f} "
              f"{_verdict(wall) if mode == 'default' else '':>8}")
    (wd, sd) = walls["default"]
    for mode, label in (("reference", "reference (stepping)"), ("pure", "pure Python")):
        if mode in walls:
            wr, sr = walls[mode]
            csv, logs, n_logs = same[mode]
            print(f"{label} / default: wall {wr / wd:.2f}x, sum of runs {sr / sd:.2f}x; "
                  f"results.csv byte-identical: {csv}; phase logs byte-identical: {logs} "
                  f"({n_logs} files)")


def _paper_in_process(nodes: tuple[int, ...], lams: tuple[float, ...], jobs: int | None,
                      args: argparse.Namespace, ref: bool, pure: bool,
                      out: Path) -> tuple[float, float]:
    """:func:`run_paper` in a process of its own (``pure``: from a pure Python copy of the
    sources); (wall, sum of the runs' walls), s."""
    part = {"nodes": list(nodes), "lams": list(lams), "jobs": jobs, "workers": args.workers,
            "seed": args.seed, "step_every_cycle": ref, "out": str(out)}
    wall, serial = _in_process("paper", part, pure)
    return wall, serial


def _in_process(part: str, spec: dict[str, Any], pure: bool) -> list[float]:
    with tempfile.TemporaryDirectory(prefix="bench_sim-sources-") as tmp:
        env = (native.pure_python_env(native.source_tree(Path(tmp))) if pure
               else dict(os.environ))
        done = subprocess.run([sys.executable, __file__, "--run-part", part, json.dumps(spec)],
                              env=env, stdout=subprocess.PIPE, text=True, check=True)
    return [float(x) for x in json.loads(done.stdout.strip().splitlines()[-1])]


def _pure_wanted(args: argparse.Namespace) -> bool:
    """Whether to run the pure Python mode too: asked, and not what the default is."""
    return not args.no_pure and any(native.compiled_modules().values())


def _run_part(part: str, spec: dict[str, Any]) -> list[float]:
    """One part in this process, as :func:`_in_process` asks for it: the paper matrix's
    (wall, sum of the runs' walls), or the placement matrix's wall, s."""
    if part == "paper":
        wall, serial = run_paper(tuple(spec["nodes"]), tuple(spec["lams"]), spec["jobs"],
                                 spec["workers"], spec["seed"], spec["step_every_cycle"],
                                 Path(spec["out"]))
        return [wall, serial]
    cells = placement.make_cells(placement.DEFAULT_NODES, placement.DEFAULT_LAMBDAS,
                                 placement.DEFAULT_PLACEMENTS, placement.DEFAULT_USERS,
                                 spec["jobs"], spec["seed"],
                                 policies=placement.DEFAULT_POLICIES)
    start = time.perf_counter()
    placement.run_matrix(cells, spec["workers"])
    return [time.perf_counter() - start]


def bench_placement(args: argparse.Namespace) -> None:
    jobs = 50 if args.small else placement.DEFAULT_JOBS
    # The experiment's default matrix: its nodes, lambdas, placements and policies.
    runs = (len(placement.DEFAULT_NODES) * len(placement.DEFAULT_LAMBDAS)
            * len(placement.DEFAULT_PLACEMENTS) * len(placement.DEFAULT_POLICIES))
    spec = {"jobs": jobs, "seed": args.seed, "workers": args.workers}
    wall = _in_process("placement", spec, False)[0]
    print(f"2. placement matrix ({runs} runs: policies "
          f"{','.join(placement.DEFAULT_POLICIES)}, {jobs} jobs each, {args.workers} "
          f"worker(s)): {wall:.1f} s, "
          f"target {TARGET_SECONDS:.0f} s: {_verdict(wall)}", flush=True)
    if _pure_wanted(args):
        pure = _in_process("placement", spec, True)[0]
        print(f"   pure Python: {pure:.1f} s, pure / default {pure / wall:.2f}x")


def bench_large(args: argparse.Namespace) -> None:
    from global_manager.simulator import RunResult, SimConfig, simulate
    from workloads.generator import PaperWorkloadParams, generate
    from workloads.model import Workload

    nodes, jobs, lam = 100, (2_000 if args.small else 20_000), 100.0
    workload = generate(PaperWorkloadParams(nodes=nodes, mean_interarrival=lam, jobs=jobs,
                                            rate_per_weight=paper.DEFAULT_RATE_PER_WEIGHT),
                        seed=args.seed)
    def run(load: Workload, ref: bool) -> tuple[float, RunResult]:
        config = SimConfig(work_conserving=False, log_every=paper.DEFAULT_LOG_EVERY,
                           rate_per_weight=paper.DEFAULT_RATE_PER_WEIGHT,
                           step_every_cycle=ref)
        start = time.perf_counter()
        result = simulate(load, "sq", seed=args.seed, config=config)
        return time.perf_counter() - start, result

    if args.large or args.large_reference:
        modes = [("default", False)] + ([("reference", True)] if args.large_reference else [])
        results = {}
        for mode, ref in modes:
            wall, result = results[mode] = run(workload, ref)
            print(f"3. large run ({mode}): {nodes} nodes, {jobs} QoS jobs "
                  f"({len(workload.jobs)} jobs in all), lambda {lam:g} s, sq: {wall:.1f} s "
                  f"({result.cycles} cycles), target {TARGET_SECONDS:.0f} s"
                  + (f": {_verdict(wall)}" if mode == "default" else ""), flush=True)
        if "reference" in results:
            (wd, rd), (wr, rr) = results["default"], results["reference"]
            print(f"   reference / default {wr / wd:.2f}x; same results: "
                  f"{rd.to_json() == rr.to_json()}")
    if args.large_prefix:
        # The first N jobs by arrival (the simulator's order: a stable sort).
        first = tuple(sorted(workload.jobs, key=lambda j: j.arrival)[: args.large_prefix])
        prefix = dataclasses.replace(workload, jobs=first)
        (wd, rd), (wr, rr) = run(prefix, False), run(prefix, True)
        print(f"   its first {len(first)} jobs ({rd.cycles} cycles): default {wd:.1f} s, "
              f"reference {wr:.1f} s, reference / default {wr / wd:.2f}x; same results: "
              f"{rd.to_json() == rr.to_json()}", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--small", action="store_true",
                        help="nodes 3,6 x lambda 10,500 x 200 jobs (and smaller parts 2, 3)")
    parser.add_argument("--workers", type=int, default=2, help="matrix workers (default 2)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-matrix", action="store_true", help="leave out part 1")
    parser.add_argument("--placement", action="store_true", help="part 2")
    parser.add_argument("--large", action="store_true", help="part 3")
    parser.add_argument("--large-reference", action="store_true",
                        help="part 3 in the reference mode too (long)")
    parser.add_argument("--large-prefix", type=int, default=0, metavar="N",
                        help="part 3's ratio against the reference on its first N jobs "
                             "(both modes; 0: none)")
    parser.add_argument("--no-pure", action="store_true",
                        help="leave out the pure-Python runs of parts 1 and 2 (left out "
                             "anyway where nothing is compiled)")
    parser.add_argument("--run-part", nargs=2, metavar=("PART", "JSON"),
                        help=argparse.SUPPRESS)  # one part in this process, for _in_process
    args = parser.parse_args(argv)
    if args.run_part:
        print(json.dumps(_run_part(args.run_part[0], json.loads(args.run_part[1]))))
        return 0
    compiled = native.compiled_modules()
    print(f"bench_sim: python {sys.version.split()[0]}, {os.cpu_count()} CPU(s), "
          f"load average {os.getloadavg()[0]:.1f}; scheduling core compiled: "
          f"{sum(compiled.values())} of {len(compiled)} modules")
    if not args.skip_matrix:
        bench_paper(args)
    if args.placement:
        bench_placement(args)
    if args.large or args.large_reference or args.large_prefix:
        bench_large(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
