"""``coalloc experiment paper`` in the simulator's default mode writes the same bytes as
in its ``--step-every-cycle`` reference mode: ``results.csv`` and every phase log, for
every registered policy and both calibrations, on a small matrix."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coalloc import cli
from coalloc.experiments import paper
from global_manager.policies import policies


def write_matrix(out: Path, calibration: str, jobs: int, step_every_cycle: bool) -> None:
    """The experiment's runner and writer, without its plots."""
    (out / "logs").mkdir(parents=True)
    cells = paper.make_cells((2, 3), (40.0,), sorted(policies.names()), 3, jobs, log_every=1,
                             log_dir=out / "logs", calibration=calibration,
                             step_every_cycle=step_every_cycle)
    paper.write_csv(out / "results.csv", paper.run_matrix(cells, 1))


# Literal subtasks run for hours of model time on the slow nodes: fewer of them.
@pytest.mark.parametrize(("calibration", "jobs"), [("expected", 10), ("literal", 4)])
def test_default_mode_writes_the_reference_modes_bytes(
    tmp_path: Path, calibration: str, jobs: int
) -> None:
    default, reference = tmp_path / "default", tmp_path / "reference"
    write_matrix(default, calibration, jobs, False)
    write_matrix(reference, calibration, jobs, True)
    csv_bytes = (default / "results.csv").read_bytes()
    assert csv_bytes == (reference / "results.csv").read_bytes()
    assert csv_bytes.count(b"\n") == 1 + 2 * len(policies.names())
    logs = sorted(p.name for p in (reference / "logs").iterdir())
    assert logs == sorted(p.name for p in (default / "logs").iterdir())
    assert len(logs) == 2 * len(policies.names())
    for name in logs:
        assert (default / "logs" / name).read_bytes() == (reference / "logs" / name).read_bytes()


def test_the_flag_selects_the_reference_mode(tmp_path: Path) -> None:
    code = cli.main(["experiment", "paper", "--nodes", "2", "--lam", "40", "--jobs", "2",
                     "--policies", "strict", "--log-every", "0", "--workers", "1",
                     "--out", str(tmp_path), "--quiet", "--step-every-cycle"])
    assert code == 0
    config = json.loads((tmp_path / "results.json").read_text())["config"]
    assert config["step_every_cycle"] is True
