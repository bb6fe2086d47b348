"""Fixtures shared by the experiment tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from coalloc.cli import main


@pytest.fixture(scope="module")
def runs(request: pytest.FixtureRequest,
         tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """The test module's tiny matrix (``coalloc experiment EXPERIMENT *TINY``, both
    module globals) written with one worker and, again, with two: the output
    directories by worker count."""
    experiment: str = request.module.EXPERIMENT
    tiny: list[str] = request.module.TINY
    out = {}
    for workers in (1, 2):
        d = tmp_path_factory.mktemp(f"{experiment}-w{workers}")
        assert main(["experiment", experiment, *tiny, "--workers", str(workers),
                     "--out", str(d)]) == 0
        out[workers] = d
    return out
