"""A local manager's runtime rebuilt from its checkpoint (a manager Ray restarted)
continues its synthetic subtasks from the work done and re-attaches its process
subtasks without starting them again."""

from __future__ import annotations

import json
import stat
from pathlib import Path
from typing import Any

import pytest

from runtime.node_runtime import NodeRuntime
from tests.unit.runtime.test_runtime_node_runtime import (
    FakeExecutor,
    Q,
    make,
    subtask,
)
from workloads.model import Node


class Recordable(FakeExecutor):
    def checkpoint(self) -> Any:
        ex = self

        class Rec:
            def to_dict(self) -> dict[str, Any]:
                return {"tag": "t1", "pid": ex.pid, "cpu_s": ex.cpu_s_total}

        return Rec()


def run_until_done(rt: NodeRuntime, ended: list[Any], k0: int) -> int:
    for k in range(k0, k0 + 10_000):
        rt.tick(k * Q)
        if ended:
            return k
    raise AssertionError("not finished")


def test_a_synthetic_subtask_resumes_from_its_checkpoint(tmp_path: Path) -> None:
    node = Node("n0", 400.0)
    plain, _, _, plain_ended = make(node)
    plain.submit([subtask("j1", work=40_000.0)], start=0.0)
    k_plain = run_until_done(plain, plain_ended, 0)

    rt, _, _, _ = make(node)
    rt.checkpoint = tmp_path / "lm.json"
    rt.submit([subtask("j1", work=40_000.0)], start=0.0)
    for k in range(6):
        rt.tick(k * Q)
    data = json.loads(rt.checkpoint.read_text())
    assert stat.S_IMODE(rt.checkpoint.stat().st_mode) == 0o600
    (d,) = data["subtasks"]
    assert 0 < d["subtask"]["done_work"] < 40_000.0
    # The manager dies here; its successor (a new incarnation) restores the checkpoint.
    again, sink, _, ended = make(node)
    again.incarnation = 2
    assert again.restore(data, attach=lambda rec: pytest.fail("no process")) == 1
    assert again.scheduler.virtual_time(("j1", 0)) == pytest.approx(d["virtual_time"])
    k_again = run_until_done(again, ended, 6)
    # The same boundary as without the restart: no work lost, none counted twice.
    assert k_again == k_plain
    assert ended[0].state.value == "finished"
    assert sink.reports and sink.reports[-1].done


def test_a_process_subtask_is_reattached_not_restarted(tmp_path: Path) -> None:
    made: list[FakeExecutor] = []

    def factory(argv: tuple[str, ...], speed: float, out: Path | None,
                env: tuple[tuple[str, str], ...] = ()) -> FakeExecutor:
        made.append(Recordable(argv, cycles=4))
        return made[-1]

    node = Node("n0", 400.0)
    rt, _, _, _ = make(node, factory)
    rt.checkpoint = tmp_path / "lm.json"
    rt.submit([subtask("j2", command=("prog",))], start=0.0)
    rt.tick(0.0)
    rt.tick(Q)
    data = json.loads(rt.checkpoint.read_text())
    (d,) = data["subtasks"]
    assert d["executor"]["pid"] == 4242 and d["measured"] > 0

    adopted: list[dict[str, Any]] = []

    def attach(record: dict[str, Any]) -> FakeExecutor:
        adopted.append(record)
        # a leader that is not our child: the exit status comes from its status file
        ex = FakeExecutor(("prog",), cycles=1, pid=record["pid"], exit_code_at_end=0)
        ex.start()
        return ex

    again, _, _, ended = make(node, lambda *a: pytest.fail("must not start it again"))
    assert again.restore(data, attach) == 1
    assert adopted == [d["executor"]]
    snap = again.snapshot()["subtasks"][0]
    assert snap["state"] == "running" and snap["done_work"] == pytest.approx(d["measured"])
    run_until_done(again, ended, 2)
    (out,) = ended
    assert out.state.value == "finished" and out.exit_code == 0


class Lost(FakeExecutor):
    exit_reason = "ended while its manager was down; exit status lost"


@pytest.mark.parametrize(
    ("code", "state", "needle"),
    [
        (0, "finished", None),
        (3, "failed", "command failed: exit status 3 (re-attached after a local manager"),
        (-15, "failed", "command failed: killed by signal 15 (SIGTERM) (re-attached"),
        (None, "failed", "command failed: ended while its manager was down; exit status lost"),
    ],
)
def test_a_reattached_command_ends_as_its_exit_status_says(
    tmp_path: Path, code: int | None, state: str, needle: str | None
) -> None:
    # The re-attached executor reports what the exit recorder wrote (or that nothing was
    # written): a failed command fails its subtask, never "finished" by default.
    node = Node("n0", 400.0)
    rt, _, _, _ = make(node, lambda argv, speed, out, env: Recordable(argv, cycles=4))
    rt.checkpoint = tmp_path / "lm.json"
    rt.submit([subtask("j3", command=("prog",))], start=0.0)
    rt.tick(0.0)
    rt.tick(Q)
    data = json.loads(rt.checkpoint.read_text())

    def attach(record: dict[str, Any]) -> FakeExecutor:
        ex = Lost(("prog",), cycles=1, pid=record["pid"], exit_code_at_end=code)  # type: ignore[arg-type]
        ex.start()
        return ex

    again, _, _, ended = make(node, lambda *a: pytest.fail("must not start it again"))
    assert again.restore(data, attach) == 1
    run_until_done(again, ended, 2)
    (out,) = ended
    assert out.state.value == state and out.exit_code == code
    if needle is None:
        assert out.reason in (None, "")
    else:
        assert out.reason is not None and out.reason.startswith(needle)


def test_a_checkpoint_of_another_node_is_refused(tmp_path: Path) -> None:
    rt, _, _, _ = make(Node("n0", 400.0))
    data = rt.checkpoint_state()
    other, _, _, _ = make(Node("n1", 400.0))
    with pytest.raises(ValueError, match="not this node"):
        other.restore(data, attach=lambda rec: None)


def test_an_idle_node_writes_its_checkpoint_once_not_every_cycle(tmp_path: Path) -> None:
    rt, _, _, ended = make(Node("n0", 400.0))
    rt.checkpoint = tmp_path / "lm.json"
    rt.tick(0.0)
    first = rt.checkpoint.stat().st_mtime_ns
    rt.checkpoint.write_text("{}")  # a later write would replace this
    for k in range(1, 5):
        rt.tick(k * Q)
    assert rt.checkpoint.read_text() == "{}"  # idle: not written again
    # Work arrives: written every boundary while it runs, and once more when it has left.
    rt.submit([subtask("j1", work=2_000.0)], start=5 * Q)
    rt.tick(5 * Q)
    assert json.loads(rt.checkpoint.read_text())["subtasks"]
    k = run_until_done(rt, ended, 6)
    data = json.loads(rt.checkpoint.read_text())
    assert data["subtasks"] == [] and data["boundary"] == k * Q
    assert [h["job_id"] for h in data["history"]] == ["j1"]
    assert first > 0


def test_a_checkpoint_removed_by_down_is_not_made_again(tmp_path: Path) -> None:
    """``down`` removes the restart file of a manager that did not answer its shutdown
    (SIGSTOPped); resumed before Ray's kill lands, the manager must not write it again."""
    rt, _, _, _ = make(Node("n0", 400.0))
    rt.checkpoint = tmp_path / "lm.json"
    rt.submit([subtask("j1", work=40_000.0)], start=0.0)
    rt.tick(0.0)
    assert rt.checkpoint.exists()
    rt.tick(Q)  # replaced while it is there
    rt.checkpoint.unlink()
    for k in range(2, 5):
        rt.tick(k * Q)
    assert not rt.checkpoint.exists()
