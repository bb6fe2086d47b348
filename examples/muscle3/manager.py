"""MUSCLE3's manager as one coalloc subtask: it publishes its location in the run's
key-value store (key ``muscle_manager``), where the component subtasks read it into
``MUSCLE_MANAGER`` (examples/muscle3.yaml, docs/coupled.md).

``python3 manager.py [muscle_manager options] MODEL.ymmsl``: the ``muscle_manager``
command itself, with one change. In MUSCLE3 0.11 a manager started without
``--start-all`` waits only for the instances it started (none) and shuts down at once:
instances started elsewhere then register with a manager that is stopping and hang.
This manager first waits, as MUSCLE3's manager without a run directory does, until every
instance has registered and deregistered. Without ``--run-dir`` it runs in
``$TMPDIR/muscle3-<run>``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import muscle3.muscle_manager as muscle_cli
from libmuscle.manager.manager import Manager

import coalloc.job

#: The key the components read the manager's location from.
LOCATION_KEY = "muscle_manager"


class CoallocManager(Manager):
    """The manager of ``muscle_manager``, published and waiting for outside instances."""

    def wait(self) -> bool:
        coalloc.job.put(LOCATION_KEY, self.get_server_location())
        self._instance_registry.wait()  # every instance registered, then deregistered
        return super().wait()


def main() -> None:
    args = sys.argv[1:]
    if not any(a == "--run-dir" or a.startswith("--run-dir=") for a in args):
        run = os.environ.get("COALLOC_RUN", "local")
        run_dir = Path(tempfile.gettempdir()) / f"muscle3-{run}"
        run_dir.mkdir(parents=True, exist_ok=True)
        args = ["--run-dir", str(run_dir), *args]
    muscle_cli.Manager = CoallocManager  # type: ignore[misc]
    muscle_cli.manage_simulation(args)


if __name__ == "__main__":
    main()
