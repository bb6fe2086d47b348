"""Chaos soak: the live runtime on the session Ray cluster, three emulated
nodes, twenty strict jobs (some running real commands) submitted over time, while
``kill -9`` hits a random local manager, the controller and the global manager at random
times (seeded). At the end: every job is terminal (completed, or failed with a reason),
no subtask process is left (checked in /proc), the phase log parses, no control period
of a run was evaluated twice and every run has one summary, and ``status`` works.

Bounded: the soak itself takes about a minute on a loaded 2-core machine; every wait
polls with a deadline; nothing asserts a duration.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from support import cli_status as status
from support import deployed, run_cli, wait_for

from runtime.status import to_json
from tests.integration.test_runtime_restarts import kill9, ready_of, restarted

pytestmark = [pytest.mark.ray, pytest.mark.integration]

SEED = 8
JOBS = 20
#: Marks the commands of this soak in /proc (their argv), to find any left behind.
MARK = f"coalloc-chaos-{SEED}"
FINAL = {"completed", "failed", "cancelled", "expired", "rejected"}


def _job(rng: random.Random, i: int) -> dict[str, Any]:
    n = rng.choice([2, 2, 3])
    subtasks: list[dict[str, Any]] = [
        {"work": rng.uniform(150, 600), "weight": rng.choice([1, 1, 2])} for _ in range(n)
    ]
    if i % 5 == 0:  # a real command: a short CPU-bound Python loop
        subtasks[0]["command"] = [
            "python3", "-c",
            f"import time\n# {MARK}\nend = time.time() + 3\nwhile time.time() < end: pass",
        ]
    return {"name": f"chaos-{i}", "qos": "strict", "overall_deviation": 300,
            "asynchrony": 120, "subtasks": subtasks}


def _soak_processes() -> list[int]:
    """Live processes whose argv carries this soak's mark."""
    out = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and any(
                MARK in part for part in (p.info["cmdline"] or [])
            ):
                out.append(p.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return out


@pytest.fixture(scope="module")
def deployment(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Any:
    log = tmp_path_factory.mktemp("chaos") / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--nodes", "300,450,600", "--time-scale", "100",
                  "--seed", str(SEED)):
        yield ray_cluster, log


def test_random_kills_of_every_actor_lose_no_job(deployment: Any, capsys: Any) -> None:
    import coalloc
    from runtime.config import CONTROLLER_NAME, GLOBAL_NAME, LOCAL_PREFIX

    cluster, log = deployment
    rng = random.Random(SEED)
    client = coalloc.connect(cluster.address)
    nodes = client.deployment()["nodes"]
    specs = [_job(rng, i) for i in range(JOBS)]
    # Kills: each kind at least once, in a seeded order, a few seconds apart.
    victims = [GLOBAL_NAME, CONTROLLER_NAME, LOCAL_PREFIX + rng.choice(nodes)]
    victims += [rng.choice([GLOBAL_NAME, CONTROLLER_NAME] + [LOCAL_PREFIX + n for n in nodes])
                for _ in range(3)]
    rng.shuffle(victims)
    ids: list[str] = []
    submitted = 0
    kills: list[str] = []
    while submitted < JOBS or victims:
        if submitted < JOBS:
            batch = specs[submitted:submitted + rng.randint(2, 5)]
            # retried while the global manager restarts
            answers = [to_json(a) for a in client.submit_all(batch)]
            ids += [a["job_id"] for a in answers]
            submitted += len(batch)
        if victims and rng.random() < 0.7:
            name = victims.pop()
            old = kill9(name)
            kills.append(name)
            restarted(name, old)
        time.sleep(rng.uniform(0.5, 2.0))
    assert len(ids) == JOBS and len(set(ids)) == JOBS
    assert {GLOBAL_NAME, CONTROLLER_NAME} <= set(kills)
    assert any(k.startswith(LOCAL_PREFIX) for k in kills)

    # Every job ends in a clear state.
    def all_final() -> dict[str, str] | None:
        states = client.job_states(ids)
        return states if all(s in FINAL for s in states.values()) and \
            len(states) == JOBS else None

    states = wait_for(all_final, timeout=300, every=1.0)
    for jid, st in states.items():
        rec = to_json(client.job(jid))
        if st != "completed":
            assert st == "failed" and rec["reason"], rec
    assert sum(1 for s in states.values() if s == "completed") >= JOBS // 2, states
    attempts = [client.job(j).attempt for j in ids]
    with capsys.disabled():  # seen with pytest -s
        print(f"chaos: kills {kills}; states "
              f"{ {s: list(states.values()).count(s) for s in sorted(set(states.values()))} }; "
              f"runs requeued {sum(a - 1 for a in attempts)}")

    # No subtask process left behind.
    wait_for(lambda: not _soak_processes(), timeout=30)

    # status works; every budget is back.
    st = status(capsys, cluster.address)
    assert len(st["jobs"]) >= JOBS
    assert all(n["committed"] == pytest.approx(0.0, abs=1e-6) for n in st["nodes"])
    code, _, err = run_cli(capsys, "status", "--address", cluster.address)
    assert code == 0, err

    # The phase log parses; no period of a run evaluated twice; one summary per run.
    from coallocator.phase_log import read_log

    runs = {client.job(j).run_id for j in ids if states[j] == "completed"}

    def summarised() -> list[dict[str, Any]] | None:
        # Once every completed run's summary has reached the log (a line being written
        # is a torn tail until its newline: read again).
        recs = list(read_log(Path(log), on_torn=lambda _: None))
        done = {r["job"] for r in recs if r["type"] == "summary"}
        return recs if runs <= done else None

    try:
        records = wait_for(summarised, timeout=30)
    except AssertionError:
        recs = list(read_log(Path(log), on_torn=lambda _: None))
        missing = runs - {r["job"] for r in recs if r["type"] == "summary"}
        last = {r["job"]: r for r in recs if r["job"] in missing}
        jobs = [client.job(j) for j in ids if client.job(j).run_id in missing]
        raise AssertionError(f"completed runs without a summary: {sorted(missing)}; "
                             f"their last records: {list(last.values())}; kills {kills}; "
                             f"jobs {jobs}") from None
    times: dict[str, list[float]] = {}
    summaries: dict[str, int] = {}
    for r in records:
        if r["type"] == "period":
            times.setdefault(r["job"], []).append(float(r["real_time"]))
        elif r["type"] == "summary":
            summaries[r["job"]] = summaries.get(r["job"], 0) + 1
    for job, ts in times.items():
        assert all(a < b for a, b in zip(ts, ts[1:])), f"{job}: a period logged twice"
    assert all(c == 1 for c in summaries.values()), summaries
    assert runs <= set(summaries), runs - set(summaries)
    # The actors that were killed are up again.
    for name in set(kills):
        assert ready_of(name) is not None
