"""A member held near its useful rate, through real components: ``coalloc up`` (policy
``sq_useful``: pace control and useful caps) on the shared Ray cluster, a ``progress:
reported`` job of two real processes that report through ``coalloc.progress``. Each
member first computes without waiting (no cap: it uses what its node and the host give
it), then needs little CPU per exchange and spins in ``progress.waiting()`` until its
partner's next exchange: its node caps it near its useful rate, and its CPU rate, read
from its process with psutil, falls well below its own rate of the first phase. Then the
job completes."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest
from support import cli_status as status
from support import deployed, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.integration]

#: A member: phase A computes without waiting; once the file argv[1] exists, every
#: exchange (every P s of wall time, the pace of a steady partner) it needs C s of CPU and
#: spins in a wait for the rest; it ends once argv[2] exists. It reports its exchanges.
MEMBER = r"""
import os, sys, time
from coalloc import progress

phase_b, done = sys.argv[1], sys.argv[2]
P, C = 0.025, 0.0005
t0 = time.monotonic()

def burn(cpu):
    end = time.process_time() + cpu
    while time.process_time() < end:
        pass

while not os.path.exists(done):
    step = int((time.monotonic() - t0) / P)
    burn(C)
    if os.path.exists(phase_b):
        with progress.waiting():
            while time.monotonic() < t0 + (step + 1) * P:  # spin until the partner is there
                pass
    progress.report(step + 1)
"""


def _cpu_s(pid: int) -> float:
    import psutil

    proc = psutil.Process(pid)
    total = 0.0
    for p in [proc, *proc.children(recursive=True)]:
        t = p.cpu_times()
        total += t.user + t.system
    return total


def test_a_member_that_spins_most_of_its_grant_is_capped_and_completes(
    ray_cluster: Any, capsys: Any, tmp_path: Path
) -> None:
    import coalloc
    from runtime.status import to_json

    script = tmp_path / "member.py"
    script.write_text(MEMBER)
    phase_b, done = tmp_path / "phase-b", tmp_path / "done"
    cmd = [sys.executable, str(script), str(phase_b), str(done)]
    # A total far beyond what it reports: the job stays behind real time, so pace control
    # never slows it; only the useful cap can.
    job = {"name": "useful-cap", "qos": "strict", "overall_deviation": 5000,
           "asynchrony": 5000, "progress": "reported", "progress_end": 1e6,
           "subtasks": [{"work": 20, "weight": 0.5, "command": cmd},
                        {"work": 20, "weight": 0.5, "command": cmd}]}
    with deployed(ray_cluster.address, tmp_path / "phase.jsonl", "--time-scale", "100",
                  "--policy", "sq_useful"):
        client = coalloc.connect(ray_cluster.address)
        (answer,) = client.submit_all([job])
        job_id = to_json(answer)["job_id"]

        def members(pred: Any) -> Any:
            (j,) = status(capsys, ray_cluster.address, job_id)["jobs"]
            subs = j["subtasks"]
            return subs if all(s.get("pid") and pred(s) for s in subs) else None

        def advanced(subs: list[Any], steps: float) -> Any:
            """The members once each reported ``steps`` more than in ``subs``."""
            was = {s["index"]: s["reported_time"] for s in subs}
            return wait_for(lambda: members(
                lambda s: s.get("reported_time", 0) >= was[s["index"]] + steps), timeout=120)

        def rates(subs: list[Any], steps: float) -> dict[int, float]:
            """Each member's CPU per second of wall time while it reports ``steps`` more."""
            before = {s["index"]: (_cpu_s(s["pid"]), time.monotonic()) for s in subs}
            after = advanced(subs, steps)
            out = {}
            for s in after:
                cpu0, t0 = before[s["index"]]
                out[s["index"]] = (_cpu_s(s["pid"]) - cpu0) / (time.monotonic() - t0)
            return out

        # Phase A: it computes all the time and never waits: no useful figures, no cap.
        subs = wait_for(lambda: members(lambda s: s.get("reported_time", 0) > 0), timeout=90)
        uncapped = rates(subs, 20)
        (j,) = status(capsys, ray_cluster.address, job_id)["jobs"]
        assert all(s.get("useful_cap") is None for s in j["subtasks"])

        # Phase B: it spins most of its time in its waits: its node caps it.
        phase_b.write_text("")
        subs = wait_for(lambda: members(
            lambda s: s.get("useful_cap") is not None and s["wait_fraction"] > 0.5),
            timeout=120)
        subs = advanced(subs, 20)  # a few cycles for the estimate to settle
        capped = rates(subs, 40)
        for s in subs:
            assert s["useful_rate"] < s["useful_cap"]
        for index, rate in capped.items():
            assert rate < 0.5 * uncapped[index], (capped, uncapped)

        done.write_text("")
        final = to_json(client.wait(job_id, timeout=120))
        assert final["state"] == "completed"
        assert all(s["exit_code"] == 0 for s in final["subtasks"])
