"""The partition soak's short form (``bench/bench_partitions.py --short``): two partitions
of random hosts during a six-job workload on four namespaced hosts, then strict jobs
with and without delay and loss on every link. The soak prints its figures; this checks
the ones that are not times: every job ends in a clear state, no member process is left
on any host, no attempt of a job ran beside another (members' own records), no node was
declared lost while the links were only slow.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from multihost import ROOT, require

pytestmark = [pytest.mark.multihost, pytest.mark.integration]


def test_the_partition_soak_short_form(tmp_path: Path) -> None:
    require()
    out = tmp_path / "soak.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "bench_partitions.py"), "--short",
         "--json", str(out)],
        capture_output=True, text=True, timeout=1800, cwd=str(ROOT),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    res = json.loads(out.read_text())
    part, delay = res["partitions"], res["delay"]
    assert part["unclear"] == [], part["jobs"]
    assert len(part["jobs"]) == res["args"]["jobs"]
    assert all(n == 0 for n in part["orphans"].values()), part["orphans"]
    assert delay["nodes_lost"] == 0
    assert delay["completed_delayed"] == delay["jobs_delayed"]
    assert part["overlaps"] == []
