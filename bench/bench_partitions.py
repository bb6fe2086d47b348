"""Soak: network partitions, delay and loss on a cluster of namespaced hosts (root only).

Builds ``--hosts`` hosts out of network namespaces (``deploy/netns-cluster.sh``, through
``tests/multihost.py``), runs ``coalloc up`` on the head (root namespace) and then:

**partitions** (issue 26, section 4): a workload of ``--jobs`` gangs of 2-3 members
(``tests/multihost_member.py``: each keeps its own start, beat and stop records with its
attempt number in a file of its host; ``on_node_loss`` alternately ``requeue`` and
``fail``), submitted in waves, while ``--partitions`` times a random host's link goes
down for longer than the stall window (its processes run on) and comes back. Printed:

- every job's end state (a clear one: completed, failed, cancelled);
- overlapping attempts of one job, from the members' own records (target 0);
- member processes left per host once every job has ended (psutil, the namespace's
  processes; target 0) and members that never recorded a stop (killed);
- per partition: when the cut host's members stopped (fencing delay) against the lease
  + 1 s, and when the global manager declared the host lost against the stall window
  (``--node-timeout`` cycles) + 2 s.

**delay** (``tc netem delay 100ms 20ms loss 1%`` on every host's link, both ways): the
same strict synthetic jobs across three hosts without and with it, in alternating rounds
of one run for ``--minutes`` (so the delayed arm sees about half of it);
mean Φ of each (phase-log summaries) and their ratio (target <= 2), the report counters
(dropped reports) and the nodes declared lost while delayed for ``--minutes`` (target 0).

The cluster's Ray health checks are widened (:class:`multihost.NetnsCluster`) so a
cut-off host's raylet survives a partition and the host answers again when its link
returns, as a real machine behind a broken switch would. A soak, not a test: it asserts nothing;
``--json PATH`` writes the figures (``tests/integration/test_multihost_soak.py`` runs a
short form and checks them).

Run: ``sudo python3 bench/bench_partitions.py`` (about 12 minutes with the defaults),
``--mode delay --minutes 20`` for the false-loss figure (10 minutes delayed), ``--short``
for the CI form.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from multihost import (  # noqa: E402 - tests/ on the path first
    MEMBER,
    Deployment,
    Host,
    NetnsCluster,
    overlaps,
    records,
    unavailable,
)

CLEAR = ("completed", "failed", "cancelled")
T0 = time.monotonic()


def say(msg: str) -> None:
    print(f"[{time.monotonic() - T0:6.1f} s] {msg}", flush=True)


class Api:
    """The deployment's HTTP API as its admin (polled without a process per look)."""

    def __init__(self, dep: Deployment) -> None:
        from coalloc.api_client import HttpApi

        extra = dep.state["extra"]
        self.http = HttpApi(str(extra["api_url"]), str(extra["api_token"]), "", timeout=20.0)

    def status(self) -> Any:
        code, doc = self.http.request("GET", "/status")
        if code != 200:
            raise RuntimeError(f"status: HTTP {code}: {doc}")
        return doc


def write_job(path: Path, doc: dict[str, Any]) -> Path:
    path.write_text(json.dumps(doc))
    return path


def submit(dep: Deployment, path: Path) -> list[str]:
    done = dep.cli("submit", "-q", str(path))
    if done.returncode != 0:
        raise RuntimeError(f"submit {path.name}: {done.stderr.strip()}")
    return done.stdout.split()


def lease_s(node_timeout: int) -> float | None:
    """The local managers' lease at these settings (None: no fencing in this version)."""
    from runtime.config import RuntimeConfig

    cfg = RuntimeConfig(node_timeout=node_timeout)
    value = getattr(cfg, "lease_seconds", None)
    return float(value) if value is not None else None


def members_on(cluster: NetnsCluster, host: Host) -> list[psutil.Process]:
    """The gang members (multihost_member.py) that run in the host's namespace."""
    out = []
    for pid in cluster.pids(host):
        try:
            p = psutil.Process(pid)
            if str(MEMBER) in p.cmdline() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return out


# ---------------------------------------------------------------------- partitions
def partitions(cluster: NetnsCluster, dep: Deployment, args: argparse.Namespace,
               work: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    api = Api(dep)
    recs = work / "records"
    recs.mkdir()
    window = args.node_timeout * 30.0 / 100.0  # cycles x the default real cycle
    lease = lease_s(args.node_timeout)
    node_of = {}
    st = api.status()
    for h in cluster.hosts:
        node_of[h.ns] = next(n["name"] for n in st["nodes"] if h.ns in n.get("labels", []))

    started_at = time.time()
    jobs: list[str] = []
    waves = max(1, min(args.partitions, 4))
    per_wave = [args.jobs // waves + (1 if i < args.jobs % waves else 0) for i in range(waves)]
    wave_at = {round(i * args.partitions / waves): n for i, n in enumerate(per_wave)}
    cuts: list[dict[str, Any]] = []
    for p in range(args.partitions + 1):
        if p in wave_at:
            for _ in range(wave_at[p]):
                i = len(jobs)
                member = [sys.executable, str(MEMBER), str(recs),
                          str(rng.randint(args.member_s // 2, args.member_s))]
                n = rng.choice((2, 3))
                doc = {"name": f"soak{i:02d}", "qos": "best_effort",
                       "on_node_loss": "requeue" if i % 2 == 0 else "fail",
                       "subtasks": [{"work": 10, "labels": ["nshost"], "command": member}] * n}
                jobs += submit(dep, write_job(work / f"soak{i:02d}.json", doc))
            say(f"submitted {len(jobs)}/{args.jobs} jobs")
        if p == args.partitions:
            break
        # Cut a host that runs members of the workload if there is one.
        busy = [h for h in cluster.hosts if members_on(cluster, h)]
        host = rng.choice(busy or cluster.hosts)
        node = node_of[host.ns]
        running = {m.pid for m in members_on(cluster, host)}
        hold = window + rng.uniform(4.0, 10.0)
        say(f"partition {p + 1}/{args.partitions}: {host.ns} ({node}, {len(running)} "
            f"members) cut for {hold:.0f} s")
        t_cut = time.time()
        t_cut_mono = time.monotonic()
        cluster.cut(host)
        lost_after = None
        while time.monotonic() - t_cut_mono < hold:
            if lost_after is None:
                try:
                    health = next(n["health"] for n in api.status()["nodes"]
                                  if n["name"] == node)
                except Exception:  # noqa: BLE001 - the API busy: look again
                    health = ""
                if health == "lost":
                    lost_after = time.monotonic() - t_cut_mono
                    say(f"  {node} declared lost {lost_after:.1f} s after the cut")
            time.sleep(0.25)
        cluster.restore(host)
        # The cut host's members: when each made its last record (or is still running).
        still = [m.pid for m in members_on(cluster, host) if m.pid in running]
        last: dict[int, float] = {}
        for r in records(recs):
            if r["pid"] in running:
                last[r["pid"]] = max(last.get(r["pid"], 0.0), r["t"])
        stopped = [t - t_cut for pid, t in last.items() if pid not in still]
        fence = max(stopped) if stopped and not still else None
        cuts.append({"host": host.ns, "node": node, "members": len(running),
                     "at_s": t_cut - started_at,
                     "held_s": hold, "lost_after_s": lost_after,
                     "members_stopped_after_s": fence, "members_running_at_restore": len(still)})
        say(f"  link back; {len(still)} of its {len(running)} members still ran "
            + (f"(last stopped {fence:.1f} s after the cut)" if fence is not None else ""))
        gap = rng.uniform(3.0, 8.0)
        time.sleep(gap)

    say("waiting for every job to end")
    deadline = time.monotonic() + args.drain_s
    states: dict[str, Any] = {}
    while time.monotonic() < deadline:
        st = api.status()
        states = {j["job_id"]: j for j in st["jobs"] if j["job_id"] in jobs}
        left = [j for j in states.values() if j["state"] not in CLEAR]
        if not left:
            break
        time.sleep(2.0)
    st = api.status()
    orphans = {h.ns: len(members_on(cluster, h)) for h in cluster.hosts}
    mine = records(recs)
    started = {r["pid"] for r in mine if r["kind"] == "start"}
    stopped_pids = {r["pid"] for r in mine if r["kind"] == "stop"}
    both = overlaps(mine)
    detail = []
    for job, a, b, _ in both:  # who ran when: each member of the two attempts
        spans: dict[int, list[Any]] = {}
        for r in mine:
            if r["job"] == job and r["attempt"] in (a, b):
                span = spans.setdefault(r["pid"], [r["attempt"], r["subtask"], r["node"],
                                                    r["t"], r["t"], r["kind"]])
                span[3], span[4], span[5] = min(span[3], r["t"]), max(span[4], r["t"]), r["kind"]
        t0 = started_at
        detail.append({"job": job, "members": [
            {"attempt": v[0], "subtask": v[1], "node": v[2], "from_s": round(v[3] - t0, 2),
             "to_s": round(v[4] - t0, 2), "last": v[5]} for v in sorted(spans.values())]})
    return {
        "overlap_detail": detail,
        "jobs": {j: {"state": s["state"], "attempt": s["attempt"], "reason": s["reason"]}
                 for j, s in sorted(states.items())},
        "unclear": sorted(j for j, s in states.items() if s["state"] not in CLEAR),
        "overlaps": both,
        "orphans": orphans,
        "members_started": len(started),
        "members_without_stop_record": len(started - stopped_pids),
        "partitions": cuts,
        "stall_window_s": window,
        "lease_s": lease,
        "nodes_lost": st["global_counters"]["nodes_lost"],
    }


def print_partitions(res: dict[str, Any]) -> None:
    print("\njob end states:")
    for job, s in res["jobs"].items():
        print(f"  {job}  {s['state']:<10} attempt {s['attempt']}  {s['reason'][:90]}")
    print(f"jobs not in a clear state: {len(res['unclear'])} {res['unclear']}")
    print(f"overlapping attempts (members' records): {len(res['overlaps'])} (target 0)")
    for job, a, b, both in res["overlaps"]:
        print(f"  {job}: attempts {a} and {b} ran together for {both:.1f} s")
    for d in res["overlap_detail"]:
        for m in d["members"]:
            print(f"    {d['job']} attempt {m['attempt']} member {m['subtask']} on {m['node']}: "
                  f"{m['from_s']:.1f}-{m['to_s']:.1f} s (last record: {m['last']})")
    print("member processes left per host once every job ended (target 0): "
          + ", ".join(f"{h} {n}" for h, n in res["orphans"].items()))
    print(f"members started {res['members_started']}, without a stop record (killed) "
          f"{res['members_without_stop_record']}")
    window, lease = res["stall_window_s"], res["lease_s"]
    fence_ref = f"lease + 1 s = {lease + 1:.1f} s" if lease is not None else "no lease (no fencing)"
    print(f"\nper partition (stall window {window:.1f} s; loss target <= {window + 2:.1f} s; "
          f"fencing target {fence_ref}):")
    print("  host        at s  members  held s  lost after s  members stopped after s")
    for c in res["partitions"]:
        lost_s = f"{c['lost_after_s']:.1f}" if c["lost_after_s"] is not None else "not lost"
        fence = (f"{c['members_stopped_after_s']:.1f}" if c["members_stopped_after_s"] is not None
                 else f"{c['members_running_at_restore']} still ran at restore")
        print(f"  {c['host']:<10} {c['at_s']:5.1f} {c['members']:>8}  {c['held_s']:6.1f}  "
              f"{lost_s:>12}  {fence}")
    lost = [c["lost_after_s"] for c in res["partitions"] if c["lost_after_s"] is not None]
    if lost:
        print(f"loss declared after: max {max(lost):.1f} s, mean {sum(lost) / len(lost):.1f} s "
              f"(target <= {window + 2:.1f} s): {'met' if max(lost) <= window + 2 else 'MISSED'}")
    fenced = [c["members_stopped_after_s"] for c in res["partitions"]
              if c["members"] and c["members_stopped_after_s"] is not None]
    if fenced and lease is not None:
        print(f"members stopped after the cut: max {max(fenced):.1f} s (target <= "
              f"{lease + 1:.1f} s): {'met' if max(fenced) <= lease + 1 else 'MISSED'}")


# ---------------------------------------------------------------------------- delay
def phase_summaries(dep: Deployment) -> dict[str, Any]:
    path = Path(dep.state["phase_log"])
    out = {}
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if rec.get("type") == "summary":
                out[rec["job"]] = rec
    return out


def run_strict(dep: Deployment, api: Api, work: Path, tag: str, n: int,
               hosts: list[Host]) -> list[str]:
    ids: list[str] = []
    for i in range(n):  # gangs of unequal members that share the hosts: pace control works
        doc = {"name": f"{tag}{i}", "qos": "strict", "overall_deviation": 300,
               "asynchrony": 120,
               "subtasks": [{"work": 400 * (k + 1), "weight": k + 1, "labels": [h.ns]}
                            for k, h in enumerate(hosts)]}
        ids += submit(dep, write_job(work / f"{tag}{i}.json", doc))
    while True:
        jobs = {j["job_id"]: j for j in api.status()["jobs"]}
        if all(jobs[j]["state"] in CLEAR for j in ids):
            return ids
        time.sleep(1.0)


#: The nodes' counts of placements that reached them after their start boundary: within
#: the next cycle (started on it, nothing lost) and later (the member starts out of step).
LATE = ("late_placements", "late_starts")


def late_counts(api: Api) -> dict[str, int]:
    nodes = api.status()["nodes"]
    return {k: sum(int(n.get("counters", {}).get(k, 0)) for n in nodes) for k in LATE}


def delay(cluster: NetnsCluster, dep: Deployment, args: argparse.Namespace,
          work: Path) -> dict[str, Any]:
    api = Api(dep)
    hosts = cluster.hosts[:3]
    # Clean and delayed rounds alternate (the same jobs each round), so both arms see the
    # same workload and the same drift of the machine's load; a single clean reference
    # round against many delayed ones compared different samples (3 jobs against 54).
    before = api.status()
    t_end = time.monotonic() + args.minutes * 60.0
    ref: list[str] = []
    slow: list[str] = []
    rounds = 0
    late = {"clean": dict.fromkeys(LATE, 0), "delayed": dict.fromkeys(LATE, 0)}

    def count_late(arm: str, ids: list[str]) -> list[str]:
        before = late_counts(api)
        ids = ids + run_strict(dep, api, work, f"{arm[:5]}{rounds}-", args.delay_jobs, hosts)
        after = late_counts(api)
        for k in LATE:
            late[arm][k] += after[k] - before[k]
        return ids

    while True:
        rounds += 1
        say(f"delay: round {rounds}: {args.delay_jobs} strict jobs across 3 hosts, clean links")
        ref = count_late("clean", ref)
        say(f"delay: round {rounds}: the same with delay 100ms 20ms loss 1% on every "
            "host's link, both ways")
        for h in cluster.hosts:
            cluster.netem(h, "delay", "100ms", "20ms", "loss", "1%")
        try:
            slow = count_late("delayed", slow)
        finally:
            for h in cluster.hosts:
                cluster.clear_netem(h)
        lost = api.status()["global_counters"]["nodes_lost"]
        say(f"delay: round {rounds} done ({len(slow)} delayed jobs), nodes lost so far "
            f"{lost}, {max(0.0, t_end - time.monotonic()):.0f} s left")
        if time.monotonic() >= t_end:
            break
    after = api.status()
    sums = phase_summaries(dep)

    def mean_phi(ids: list[str]) -> float | None:
        vals = [sums[j]["mean_phase_difference"] for j in ids if j in sums]
        return sum(vals) / len(vals) if vals else None

    def counters(st: Any) -> dict[str, int]:
        c = st["counters"]
        return {"reports_received": c["controller"]["reports_received"],
                "reports_applied": c["controller"]["reports_applied"],
                "dropped": c["transport"]["dropped_total"],
                "duplicates": c["transport"]["duplicates"],
                "stale": c["transport"].get("stale", 0)}

    states = {j["job_id"]: j["state"] for j in after["jobs"]}
    return {
        "mean_phi_clean": mean_phi(ref), "mean_phi_delayed": mean_phi(slow),
        "jobs_clean": len(ref), "jobs_delayed": len(slow),
        "completed_delayed": sum(states.get(j) == "completed" for j in slow),
        "violations_delayed": sum(sums[j]["window_violations"] for j in slow if j in sums),
        "violations_clean": sum(sums[j]["window_violations"] for j in ref if j in sums),
        "nodes_lost": after["global_counters"]["nodes_lost"]
        - before["global_counters"]["nodes_lost"],
        "minutes": args.minutes, "late": late,
        "counters_before": counters(before), "counters_after": counters(after),
    }


def print_delay(res: dict[str, Any]) -> None:
    clean, slow = res["mean_phi_clean"], res["mean_phi_delayed"]
    print("\ndelay 100 ms +- 20 ms, loss 1 % (both ways on every host's link):")
    print(f"  mean phi clean   {clean if clean is None else f'{clean:.1f}'} s "
          f"({res['jobs_clean']} jobs, {res['violations_clean']} A_t window violations)")
    print(f"  mean phi delayed {slow if slow is None else f'{slow:.1f}'} s "
          f"({res['jobs_delayed']} jobs, {res['completed_delayed']} completed, "
          f"{res['violations_delayed']} A_t window violations)")
    if clean and slow is not None:
        ratio = slow / clean
        print(f"  ratio {ratio:.2f} (target <= 2): {'met' if ratio <= 2 else 'MISSED'}")
    for arm, counts in res["late"].items():
        print(f"  placements after their start boundary, {arm}: "
              + ", ".join(f"{k} {v}" for k, v in counts.items()))
    b, a = res["counters_before"], res["counters_after"]
    print("  reports while delayed: " + ", ".join(f"{k} {a[k] - b[k]}" for k in a))
    print(f"  nodes declared lost over {res['minutes']:g} min of delay and loss: "
          f"{res['nodes_lost']} (target 0)")


# ----------------------------------------------------------------------------- main
def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("partitions", "delay", "both"), default="both")
    ap.add_argument("--hosts", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=20)
    ap.add_argument("--partitions", type=int, default=10)
    ap.add_argument("--member-s", type=int, default=40,
                    help="longest run of a member, real s (each draws half to all of it)")
    ap.add_argument("--node-timeout", type=int, default=50)
    ap.add_argument("--delay-jobs", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=1.0,
                    help="real minutes of alternating clean and delayed rounds "
                    "(20 for the 10-minute false-loss figure)")
    ap.add_argument("--drain-s", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--short", action="store_true",
                    help="the CI form: 3 hosts, 6 jobs, 2 partitions, 1 delayed round")
    ap.add_argument("--json", default=None, metavar="PATH", help="write the figures here")
    ap.add_argument("--keep", action="store_true",
                    help="keep the work directory (records, phase log, job files)")
    args = ap.parse_args()
    if args.short:
        args.hosts, args.jobs, args.partitions, args.member_s = 4, 6, 2, 30
        args.delay_jobs, args.minutes = 2, 0.0
    reason = unavailable()
    if reason is not None:
        print(f"bench_partitions: cannot build the namespaced cluster: {reason}",
              file=sys.stderr)
        return 3
    work = Path(tempfile.mkdtemp(prefix="mhb-", dir="/tmp"))
    cluster = NetnsCluster(work / "c")
    out: dict[str, Any] = {"args": vars(args)}
    try:
        say(f"building {args.hosts} namespaced hosts")
        cluster.up(args.hosts, mhz=[600 + 300 * (k % 4) for k in range(args.hosts)])
        dep = Deployment(cluster, work / "home")
        dep.up("--node-timeout", str(args.node_timeout))
        say(f"coalloc up on {cluster.address}")
        if args.mode in ("partitions", "both"):
            out["partitions"] = partitions(cluster, dep, args, work)
            print_partitions(out["partitions"])
        if args.mode in ("delay", "both"):
            out["delay"] = delay(cluster, dep, args, work)
            print_delay(out["delay"])
        dep.down()
    finally:
        for h in cluster.hosts:
            cluster.restore(h)
        cluster.down()
        if args.json:
            Path(args.json).write_text(json.dumps(out, indent=1))
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
