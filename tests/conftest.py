"""Shared fixtures. Real-component tests share one Ray cluster per session."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

# ---------------------------------------------------------------------------- Ray
# One multi-node Ray cluster for the whole session: a head and two workers, each with one
# CPU, its own speed (the ``coalloc_mhz`` resource the live runtime reads) and a distinct
# custom resource. Created on first use by a ``@pytest.mark.ray`` test, shut down at the
# end of the session. coalloc's state file and logs go to a temporary COALLOC_HOME.

RAY_NODE_SPEEDS_MHZ: tuple[float, ...] = (300.0, 450.0, 600.0)


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    ray = pytest.importorskip("ray")
    from ray.cluster_utils import Cluster

    home = tmp_path_factory.mktemp("coalloc-home")
    old_home = os.environ.get("COALLOC_HOME")
    os.environ["COALLOC_HOME"] = str(home)
    if ray.is_initialized():  # pragma: no cover - a test left a connection behind
        ray.shutdown()
    head_mhz, *worker_mhz = RAY_NODE_SPEEDS_MHZ
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": {"coalloc_mhz": head_mhz, "coalloc_test_head": 1.0},
            "include_dashboard": False,
        },
    )
    try:
        for i, mhz in enumerate(worker_mhz, start=1):
            cluster.add_node(
                num_cpus=1, resources={"coalloc_mhz": mhz, f"coalloc_test_node_{i}": 1.0}
            )
        cluster.wait_for_nodes()
        ray.init(
            address=cluster.address,
            namespace="coalloc-tests",
            logging_level=logging.ERROR,
            log_to_driver=False,
        )
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()
        if old_home is None:
            os.environ.pop("COALLOC_HOME", None)
        else:
            os.environ["COALLOC_HOME"] = old_home


# ------------------------------------------------------------------------ multihost
# Four "hosts" out of network namespaces, each with its own address on a bridge and its
# own raylet, and a client namespace without one (tests/multihost.py,
# deploy/netns-cluster.sh), for the tests of one module. Root only: elsewhere the tests
# skip saying why, and fail under CI (CI=true).

MULTIHOST_HOSTS = 4


@pytest.fixture(scope="module")
def netns_cluster() -> Iterator[Any]:
    import shutil
    import tempfile
    from pathlib import Path

    from multihost import NetnsCluster, require

    require()
    # A short path: Ray's unix sockets live below it.
    directory = Path(tempfile.mkdtemp(prefix="mh-", dir="/tmp"))
    cluster = NetnsCluster(directory)
    try:
        cluster.up(MULTIHOST_HOSTS, clients=1)
        yield cluster
    finally:
        cluster.down()
        shutil.rmtree(directory, ignore_errors=True)
