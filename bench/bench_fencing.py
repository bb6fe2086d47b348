"""Benchmark: a node cut off from the global manager fences itself (issue 26, section 4).

Each round submits a gang of two commands (each notes its own start and stop, also on the
SIGTERM a fence sends) with ``on_node_loss: requeue``, cuts the node of member 0 off from
the global manager mid-run with the global manager's fault hook ``isolate([node])`` (its
lease renewals fail, nothing of it is heard, no call reaches it), and measures:

* **stop**: real s from the cut until member 0's process is gone (psutil), against the
  target lease + 1 s;
* **lag**: how long after the node's lease ran out that was, the lease's expiry taken
  from the reference measured in the same run: the age of the node's lease at the cut
  (its local manager's ``ready()``), so ``lag = stop - (lease - age)``; the fence's own
  cost, whatever the phase of the renewals;
* **lost**: real s from the cut until ``status`` shows the node lost, against the node-loss
  window + 2 s;
* **overlap**: whether a member of attempt 2 started before member 0 of attempt 1 stopped
  (from the members' records): must never happen.

Then the cut heals, the gang's second attempt completes and the node rejoins (a new
incarnation). Prints each round and the median and worst of each figure.

Run: ``python3 bench/bench_fencing.py`` (``--rounds 5``, about 45 s a round on two
cores; ``--lease S`` and ``--node-timeout CYCLES`` are ``coalloc up``'s). It brings up its
own runtime (``coalloc up --nodes 3``, an embedded Ray head) in a private
``COALLOC_HOME`` and takes it down at the end.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fenced_member import member, records_of  # noqa: E402 - tests/ on the path first

TIME_SCALE = 100.0


def wait(predicate: Any, timeout: float, what: str, every: float = 0.02) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_fencing: timed out waiting for {what}")
        time.sleep(every)


def alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() not in (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)
    except psutil.NoSuchProcess:
        return False


def one_round(client: Any, gm: Any, work: Path, k: int) -> dict[str, float]:
    """One cut; its figures (real s) and whether the attempts overlapped (0/1)."""
    import ray

    from runtime.config import NAMESPACE, local_manager_name

    records, go = work / f"records-{k}", work / f"go-{k}"
    records.mkdir()
    job = client.submit({
        "name": f"fence-{k}", "qos": "strict", "overall_deviation": 100, "asynchrony": 50,
        "on_node_loss": "requeue", "max_attempts": 2,
        "subtasks": [{"work": 5, "command": member(records, go)} for _ in range(2)],
    })

    def running(run: str) -> Any:
        rec = client.status(job).jobs[0]
        subs = rec.subtasks
        return rec.run_id == run and all(
            s.state == "running" and s.pid for s in subs) and rec

    rec = wait(lambda: running(job), 120, f"{job} to run", every=0.2)
    node, pid = rec.subtasks[0].node, int(rec.subtasks[0].pid)
    lm = ray.get_actor(local_manager_name(node), namespace=NAMESPACE)
    lease = ray.get(lm.ready.remote(), timeout=30)["lease"]
    cut = time.monotonic()
    ray.get(gm.isolate.remote([node]), timeout=30)
    age = lease["age_s"] + (time.monotonic() - cut) / 2  # read just before the cut
    try:
        wait(lambda: not alive(pid), 120, f"member {pid} on {node} to stop")
        stop = time.monotonic() - cut
        wait(lambda: next(n for n in client.status().nodes if n.name == node).health
             == "lost", 120, f"{node} to be lost", every=0.05)
        lost = time.monotonic() - cut
    finally:
        ray.get(gm.isolate.remote([]), timeout=30)
    wait(lambda: running(f"{job}.2"), 120, f"{job}.2 to run", every=0.2)
    go.touch()
    final = client.wait(job, timeout=120)
    if final.state != "completed":
        raise SystemExit(f"bench_fencing: {job} ended {final.state}: {final.reason}")
    first, second = records_of(records, job), records_of(records, f"{job}.2")
    stopped_at = first[0].get("stop", float("inf"))
    overlap = any(r["start"] <= stopped_at for r in second.values())
    wait(lambda: next(n for n in client.status().nodes if n.name == node).health == "up",
         120, f"{node} to rejoin", every=0.2)
    return {"stop": stop, "lag": stop - (lease["lease_s"] - age), "lost": lost,
            "overlap": float(overlap), "lease": float(lease["lease_s"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--lease", default=None, help="coalloc up --lease (default: its own)")
    parser.add_argument("--node-timeout", type=int, default=50, help="coalloc up's")
    args = parser.parse_args(argv)
    home = tempfile.mkdtemp(prefix="bench-fencing-")
    os.environ["COALLOC_HOME"] = home
    os.environ.pop("RAY_ADDRESS", None)
    import coalloc
    from coalloc import cli
    from runtime.config import GLOBAL_NAME, NAMESPACE, RuntimeConfig
    from runtime.deploy import connect_ray
    from runtime.state import load_state

    up = ["up", "--nodes", "300,300,300", "--time-scale", str(TIME_SCALE),
          "--node-timeout", str(args.node_timeout)]
    if args.lease:
        up += ["--lease", args.lease]
    if cli.main(up) != 0:
        return 1
    window = RuntimeConfig(time_scale=TIME_SCALE, node_timeout=args.node_timeout).loss_window_s
    try:
        state = load_state()
        assert state is not None
        connect_ray(state.address)  # the embedded head's token authentication
        import ray

        client = coalloc.connect()
        gm = ray.get_actor(GLOBAL_NAME, namespace=NAMESPACE)
        rows = []
        for k in range(args.rounds):
            r = one_round(client, gm, Path(home), k)
            rows.append(r)
            print(f"round {k}: member stopped {r['stop']:.2f} s after the cut "
                  f"({r['lag']:+.2f} s after its lease ran out), node lost {r['lost']:.2f} s "
                  f"after it, attempts overlapped: {'YES' if r['overlap'] else 'no'}",
                  flush=True)
        lease = rows[0]["lease"]
        for key, target, what in (("stop", lease + 1, "cut -> member stopped"),
                                  ("lag", 1.0, "lease expiry -> member stopped"),
                                  ("lost", window + 2, "cut -> node declared lost")):
            vals = [r[key] for r in rows]
            print(f"{what}: median {statistics.median(vals):.2f} s, worst {max(vals):.2f} s "
                  f"(target <= {target:g} s; worst/target {max(vals) / target:.2f})")
        print(f"lease {lease:g} s, node-loss window {window:g} s, rounds {len(rows)}, "
              f"overlapping attempts {int(sum(r['overlap'] for r in rows))} (target 0), "
              f"load {os.getloadavg()[0]:.1f}")
    finally:
        cli.main(["down"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
