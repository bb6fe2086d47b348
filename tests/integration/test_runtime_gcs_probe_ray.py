"""The check ``connect_ray`` makes before ``ray.init`` passes for a real Ray GCS (the
session's cluster): its port answers the HTTP/2 preface with SETTINGS at once. Guards the
assumption a Ray upgrade could break, which would refuse every live cluster."""

from __future__ import annotations

from typing import Any

import pytest

from runtime.deploy import gcs_problem

pytestmark = pytest.mark.ray


def test_a_live_ray_gcs_passes_the_check(ray_cluster: Any) -> None:
    assert gcs_problem(ray_cluster.address) is None
    import ray

    # The address Ray itself reports for the GCS, too.
    assert gcs_problem(str(ray.get_runtime_context().gcs_address)) is None
