"""Reported progress through real components: ``coalloc up`` on the shared Ray cluster,
a ``progress: reported`` job whose members are real processes that report with
``coalloc.progress`` over the node's real UDP socket. The reported time, not CPU time,
sets each member's virtual time (in ``status`` and in the phase log's ``mean_virtual``);
bad datagrams (garbage, oversize, NaN, a foreign key, time going back) are dropped and
counted in status while the members run on and complete; members that stop reporting
show as stalled."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from support import cli_status as status
from support import deployed, run_cli, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.integration]

MEMBER = r'''
import os, socket, sys, time
from coalloc import progress
from local_manager.progress_wire import ADDR_ENV, KEY_ENV, encode, parse_addr

go = sys.argv[1]
addr, key = parse_addr(os.environ[ADDR_ENV]), os.environ[KEY_ENV]
bad = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for data in (b"garbage", b"x" * 4000, f"CPR1 {key} nan - 0 0\n".encode(),
             encode("f" * 32, 99.0, 100.0, 0.0, False)):
    bad.sendto(data, addr)
progress.report(25)  # the total is the job file's progress_end
while not os.path.exists(go):  # hold at a quarter until the test has looked
    time.sleep(0.02)
bad.sendto(encode(key, 10.0, None, 0.0, False), addr)  # back in time: dropped
with progress.waiting():
    time.sleep(0.05)
progress.report(50)
while not os.path.exists(go + "2"):  # hold at a half
    time.sleep(0.02)
progress.report(100)
'''


def test_a_reported_clock_drives_virtual_time_and_bad_datagrams_are_counted(
    ray_cluster: Any, capsys: Any, tmp_path: Path
) -> None:
    import coalloc
    from runtime.status import to_json

    script = tmp_path / "member.py"
    script.write_text(MEMBER)
    go = tmp_path / "go"
    cmd = [sys.executable, str(script), str(go)]
    job = {"name": "reported", "qos": "strict", "overall_deviation": 5000,
           "asynchrony": 5000, "progress": "reported", "progress_end": 100,
           "stall_after": 200,
           "subtasks": [{"work": 20, "command": cmd}, {"work": 20, "command": cmd}]}
    log = tmp_path / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--time-scale", "100"):
        client = coalloc.connect(ray_cluster.address)
        (answer,) = client.submit_all([job])
        job_id = to_json(answer)["job_id"]

        def at_a_quarter() -> Any:
            (j,) = status(capsys, ray_cluster.address, job_id)["jobs"]
            subs = j["subtasks"]
            return j if all(s.get("reported_time") == 25.0 and s.get("virtual_time")
                            is not None and s["virtual_time"] > s["start_time"]
                            for s in subs) else None

        j = wait_for(at_a_quarter, timeout=90)
        for s in j["subtasks"]:
            nominal = s["work"] / s["expected_rate"]
            assert s["virtual_time"] == pytest.approx(s["start_time"] + 0.25 * nominal,
                                                      rel=1e-9)
            assert s["progress"] == pytest.approx(0.25) and s["state"] == "running"
        expected = j["subtasks"][0]["start_time"] + 0.25 * (
            j["subtasks"][0]["work"] / j["subtasks"][0]["expected_rate"])

        def dropped() -> Any:
            st = status(capsys, ray_cluster.address, job_id)
            nodes = {s["node"] for s in st["jobs"][0]["subtasks"]}
            c = [st["counters"]["local_managers"][n] for n in nodes]
            ok = all(x["progress_dropped_malformed"] >= 1 and x["progress_dropped_oversize"]
                     >= 1 and x["progress_dropped_not_finite"] >= 1
                     and x["progress_dropped_bad_key"] >= 1 for x in c)
            return st if ok else None

        wait_for(dropped, timeout=30)
        # The phase log's periods see the reported clock: both members at a quarter.
        def logged() -> Any:
            recs = [json.loads(x) for x in Path(log).read_text().splitlines() if x]
            return [r for r in recs if r.get("job") == job_id and r["type"] == "period"
                    and r["mean_virtual"] == pytest.approx(expected, rel=1e-9)]

        assert wait_for(logged, timeout=30)

        # Held at a quarter, the members send nothing new: stalled after stall_after.
        def stalled() -> Any:
            (j,) = status(capsys, ray_cluster.address, job_id)["jobs"]
            return all(s.get("stalled") for s in j["subtasks"])

        wait_for(stalled, timeout=60)
        code, out, _ = run_cli(capsys, "status", "--address", ray_cluster.address, job_id)
        assert code == 0 and out.count("running (stalled)") == 2
        go.write_text("")

        def at_a_half() -> Any:
            (j,) = status(capsys, ray_cluster.address, job_id)["jobs"]
            subs = j["subtasks"]
            return subs if all(s.get("reported_time") == 50.0 and s["virtual_time"] ==
                               pytest.approx(s["start_time"] + 0.5 * s["work"]
                                             / s["expected_rate"], rel=1e-9)
                               for s in subs) else None

        # Dropped going back in time, counted on the member; it ran on and reported on.
        for s in wait_for(at_a_half, timeout=60):
            assert s["progress_dropped"] == {"backwards": 1} and s["progress_reports"] >= 2
            assert s["state"] == "running" and s["wait_s"] > 0
        (tmp_path / "go2").write_text("")
        final = to_json(client.wait(job_id, timeout=90))
        assert final["state"] == "completed"
        assert all(s["exit_code"] == 0 for s in final["subtasks"])
