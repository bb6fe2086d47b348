"""``coalloc experiment paper`` in the simulator's default mode writes the same bytes as
in its ``--step-every-cycle`` reference mode: ``results.csv`` and every phase log, for
every registered policy and both calibrations, on a small matrix."""

from __future__ import annotations

from pathlib import Path

import pytest

from coalloc import cli
from global_manager.policies import policies


# Literal subtasks run for hours of model time on the slow nodes: fewer of them.
@pytest.mark.parametrize(("calibration", "jobs"), [("expected", 10), ("literal", 4)])
def test_default_mode_writes_the_reference_modes_bytes(
    tmp_path: Path, calibration: str, jobs: int
) -> None:
    outs = []
    for mode in ([], ["--step-every-cycle"]):
        out = tmp_path / ("reference" if mode else "default")
        code = cli.main(["experiment", "paper", "--nodes", "2,3", "--lam", "40",
                         "--jobs", str(jobs), "--policies", ",".join(sorted(policies.names())),
                         "--seed", "3",
                         "--calibration", calibration, "--log-every", "1", "--workers", "1",
                         "--out", str(out), "--quiet", *mode])
        assert code == 0
        outs.append(out)
    default, reference = outs
    csv_bytes = (default / "results.csv").read_bytes()
    assert csv_bytes == (reference / "results.csv").read_bytes()
    assert csv_bytes.count(b"\n") == 1 + 2 * len(policies.names())
    logs = sorted(p.name for p in (reference / "logs").iterdir())
    assert logs == sorted(p.name for p in (default / "logs").iterdir())
    assert len(logs) == 2 * len(policies.names())
    for name in logs:
        assert (default / "logs" / name).read_bytes() == (reference / "logs" / name).read_bytes()
