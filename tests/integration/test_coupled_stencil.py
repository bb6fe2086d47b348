"""The coupled stencil (examples/coupled-stencil.yaml) through real components: a
deployment on the shared 3-node Ray cluster, three member processes on distinct nodes
that find each other through the run's key-value store and exchange boundary cells over
ZeroMQ every step; member 0's checksum is the one-process field's."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from runtime.status import to_json
from tests.support import deployed

pytestmark = pytest.mark.ray

ROOT = Path(__file__).parents[2]
SCRIPT = ROOT / "examples" / "coupled-stencil" / "stencil.py"


def _reference(cells: int, steps: int) -> str:
    spec = importlib.util.spec_from_file_location("coupled_stencil_reference", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return str(module.checksum(module.solve(cells, steps)))


@pytest.fixture(scope="module")
def deployment(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("stencil") / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--time-scale", "100"):
        yield ray_cluster


@pytest.mark.parametrize("wait", ["spin", "block"])
def test_three_members_exchange_and_agree_on_the_checksum(deployment: Any, wait: str) -> None:
    import yaml

    import coalloc
    from runtime.state import coalloc_home

    spec = yaml.safe_load((ROOT / "examples" / "coupled-stencil.yaml").read_text())
    cells, steps = 600, 60
    # The example's job as written (strict, costs 1 : 2 : 4), smaller, with the script's
    # path absolute: members run in their local manager's directory.
    spec["name"] = f"stencil-{wait}"
    spec["env"].update(STENCIL_CELLS=cells, STENCIL_STEPS=steps, STENCIL_UNIT_MS=1,
                       STENCIL_WAIT=wait)
    for sub in spec["subtasks"]:
        sub["command"] = [sys.executable, str(SCRIPT)]
    assert [s["env"]["STENCIL_COST"] for s in spec["subtasks"]] == [1, 2, 4]
    client = coalloc.connect(deployment.address)
    [answer] = [to_json(a) for a in client.submit_all([spec])]
    assert answer["admitted"], answer
    job_id = answer["job_id"]
    rec = to_json(client.wait(job_id, timeout=300))
    logs = coalloc_home() / "logs" / "subtasks"
    texts = [(logs / f"{job_id}-{i}.log").read_text() for i in range(3)]
    assert rec["state"] == "completed", (rec, texts)
    assert len(set(rec["nodes"])) == 3, rec["nodes"]
    found = re.search(r"stencil checksum (\w+) cells (\d+) steps (\d+) members (\d+)",
                      texts[0])
    assert found, texts[0]
    assert found.groups() == (_reference(cells, steps), str(cells), str(steps), "3")
    for i, text in enumerate(texts):
        [line] = [ln for ln in text.splitlines() if ln.startswith("stencil stats ")]
        stats = json.loads(line.removeprefix("stencil stats "))
        assert (stats["rank"], stats["members"], stats["steps"]) == (i, 3, steps)
        assert (stats["cost"], stats["wait"]) == ([1.0, 2.0, 4.0][i], wait)
