"""The rendezvous environment (:mod:`runtime.rendezvous`) and how the global manager
hands it out: every member of a run finds its job, attempt, index, count, node, the
torchrun variables, the MPI wait variables and its run's key-value credential; the job
file's ``env`` overrides any of them; a requeued gang is a new attempt with a new run,
credential and empty store. Driven in memory (a recording dispatch, a manual clock)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from clocks.base import ManualClock
from runtime.config import RuntimeConfig, runtime_core
from runtime.global_service import GlobalService
from runtime.kv_store import RunGone
from runtime.rendezvous import (
    MPI_WAIT_ENV,
    PORT_RANGE,
    KvAccess,
    Member,
    PortPool,
    kv_token,
    kv_token_ok,
    run_env,
)
from runtime.timebase import ModelClock, TimeBase
from workloads.messages import SubtaskOutcome, SubtaskPhase
from workloads.model import EndPolicy, JobPhase, JobSpec, Node, QosClass, Subtask, SubtaskSpec

NODES = [Node("n0", 1000.0), Node("n1", 1000.0), Node("n2", 1000.0)]
ADDRESSES = {"n0": "10.0.0.10", "n1": "10.0.0.11", "n2": "10.0.0.12"}
KV = KvAccess("http://10.0.0.1:8265", "api-secret")


def test_member_env_has_every_variable() -> None:
    members = [Member(0, "n1"), Member(1, "n0"), Member(2, "n2")]
    envs = run_env("job-7", 2, "job-7.3", members, ADDRESSES, 29501, KV)
    assert set(envs) == {0, 1, 2}
    one = dict(envs[1])
    assert one["COALLOC_JOB_ID"] == "job-7"
    assert one["COALLOC_ATTEMPT"] == "2"
    assert one["COALLOC_RUN"] == "job-7.3"
    assert (one["COALLOC_SUBTASK"], one["COALLOC_SUBTASKS"], one["COALLOC_NODE"]) == \
        ("1", "3", "n0")
    assert (one["RANK"], one["WORLD_SIZE"], one["LOCAL_RANK"], one["LOCAL_WORLD_SIZE"]) == \
        ("1", "3", "0", "1")
    # MASTER_ADDR: member 0's node, whichever node this member is on.
    assert {dict(e)["MASTER_ADDR"] for e in envs.values()} == {"10.0.0.11"}
    assert {dict(e)["MASTER_PORT"] for e in envs.values()} == {"29501"}
    for name, value in MPI_WAIT_ENV:
        assert one[name] == value
    assert one["COALLOC_KV_URL"] == KV.url
    assert kv_token_ok(KV.secret, "job-7.3", one["COALLOC_KV_TOKEN"])


def test_without_an_api_no_store_in_the_env() -> None:
    env = dict(run_env("j", 1, "j", [Member(0, "n0")], {}, 29500, None)[0])
    assert "COALLOC_KV_URL" not in env and "COALLOC_KV_TOKEN" not in env
    assert env["MASTER_ADDR"] == "127.0.0.1"  # no address known: the loopback


def test_job_env_overrides_and_subtask_env_overrides_it() -> None:
    members = [Member(0, "n0"), Member(1, "n1")]
    envs = run_env("j", 1, "j", members, ADDRESSES, 29500, KV,
                   job_env=(("I_MPI_WAIT_MODE", "0"), ("MASTER_PORT", "4000"), ("X", "job")),
                   subtask_env={1: (("X", "mine"),)})
    zero, one = dict(envs[0]), dict(envs[1])
    assert zero["I_MPI_WAIT_MODE"] == "0" and zero["MASTER_PORT"] == "4000"
    assert zero["X"] == "job" and one["X"] == "mine"


@given(st.lists(st.sampled_from(["n0", "n1", "n2"]), min_size=1, max_size=12))
def test_local_ranks_number_the_members_of_each_node(nodes: list[str]) -> None:
    members = [Member(i, n) for i, n in enumerate(nodes)]
    envs = {i: dict(e) for i, e in run_env("j", 1, "j", members, {}, 1, None).items()}
    for node in set(nodes):
        here = [i for i, n in enumerate(nodes) if n == node]
        assert [int(envs[i]["LOCAL_RANK"]) for i in here] == list(range(len(here)))
        assert {envs[i]["LOCAL_WORLD_SIZE"] for i in here} == {str(len(here))}
    assert {envs[i]["RANK"] for i in envs} == {str(i) for i in range(len(nodes))}


def test_credentials_name_one_run() -> None:
    a, b = kv_token("s", "job-1"), kv_token("s", "job-1.2")
    assert a != b
    assert kv_token_ok("s", "job-1", a) and not kv_token_ok("s", "job-1.2", a)
    assert not kv_token_ok("other secret", "job-1", a)
    assert not kv_token_ok("s", "job-1", "")


def test_port_pool_hands_out_free_ports_and_frees_ended_runs() -> None:
    pool = PortPool((5000, 5002))
    live = {"a", "b", "c"}
    assert pool.take("n0", "a", live.__contains__) == 5000
    assert pool.take("n0", "b", live.__contains__) == 5001
    assert pool.take("n1", "c", live.__contains__) == 5000  # per node
    assert pool.take("n0", "a", live.__contains__) == 5000  # the same run: the same port
    live.discard("a")
    assert pool.take("n0", "d", lambda r: r in live or r == "d") == 5000
    with pytest.raises(ValueError):
        PortPool((0, 10))


def test_port_pool_shares_the_oldest_port_when_full() -> None:
    pool = PortPool((5000, 5001))
    assert [pool.take("n0", r, lambda _: True) for r in "abc"] == [5000, 5001, 5000]


# --------------------------------------------------------------- the global manager
class Recorder:
    """A dispatch that records every subtask placed."""

    def __init__(self) -> None:
        self.placed: list[Subtask] = []
        self.cancelled: list[str] = []

    def register(self, reg: Any) -> None:
        pass

    def place(self, node: str, subtasks: list[Subtask], start: float) -> None:
        self.placed.extend(subtasks)

    def cancel(self, job_id: str, nodes: Any, reason: str = "") -> list[str]:
        self.cancelled.append(job_id)
        return []


def _service() -> tuple[GlobalService, Recorder]:
    cfg = RuntimeConfig(runtime_core(cycle=1.0), start_margin_s=0.0)
    rec = Recorder()
    gm = GlobalService(NODES, cfg, ModelClock(ManualClock(0.0), TimeBase(0.0, 1.0)), rec)
    gm.addresses = dict(ADDRESSES)
    gm.kv_access = KV
    return gm, rec


def _coupled(**kw: Any) -> JobSpec:
    subs = (SubtaskSpec(1000.0, command=("true",), env=(("ONLY_ONE", "1"),)),
            SubtaskSpec(1000.0, command=("true",)))
    return JobSpec(name="coupled", qos=QosClass.BEST_EFFORT, subtasks=subs,
                   env=(("OMPI_MCA_mpi_yield_when_idle", "0"),), **kw)


def test_dispatch_gives_each_member_its_rendezvous() -> None:
    gm, rec = _service()
    [answer] = gm.submit([_coupled()])
    gm.place_pending()
    by_index = {s.index: dict(s.env) for s in rec.placed}
    assert sorted(by_index) == [0, 1]
    job_id = answer["job_id"]
    node0 = next(s.node for s in rec.placed if s.index == 0)
    for i, env in by_index.items():
        assert env["COALLOC_JOB_ID"] == job_id and env["COALLOC_RUN"] == job_id
        assert env["COALLOC_SUBTASK"] == str(i) and env["COALLOC_SUBTASKS"] == "2"
        assert env["MASTER_ADDR"] == ADDRESSES[node0]
        assert env["MASTER_PORT"] == str(PORT_RANGE[0])
        assert env["OMPI_MCA_mpi_yield_when_idle"] == "0"  # the job file's env wins
        assert kv_token_ok(KV.secret, job_id, env["COALLOC_KV_TOKEN"])
    assert by_index[0].get("ONLY_ONE") == "1" and "ONLY_ONE" not in by_index[1]
    # The credential is never shown: not in the record's repr, not in the job's status.
    assert "COALLOC_KV_TOKEN" not in repr(rec.placed[0])
    assert by_index[0]["COALLOC_KV_TOKEN"] not in str(gm.job(job_id))


def test_synthetic_subtasks_carry_no_env() -> None:
    gm, rec = _service()
    gm.submit([JobSpec(name="synthetic", qos=QosClass.BEST_EFFORT,
                       subtasks=(SubtaskSpec(1000.0),))])
    gm.place_pending()
    assert [s.env for s in rec.placed] == [()]


def test_a_requeued_gang_is_a_new_attempt_with_an_empty_store() -> None:
    gm, rec = _service()
    [answer] = gm.submit([_coupled(on_failure=EndPolicy.REQUEUE, max_attempts=3)])
    job_id = answer["job_id"]
    gm.place_pending()
    first = {s.index: dict(s.env) for s in rec.placed}
    gm.kv_put(job_id, "addr", "10.0.0.10:5000")
    assert gm.kv_get(job_id, "addr", 0) == "10.0.0.10:5000"
    gm.subtask_ended(SubtaskOutcome(job_id, 1, first[1]["COALLOC_NODE"],
                                    SubtaskPhase.FAILED, 1.0, exit_code=3))
    assert gm.jobs[job_id].state is JobPhase.PENDING
    with pytest.raises(RunGone):
        gm.kv_get(job_id, "addr", 0)
    rec.placed.clear()
    gm.place_pending()
    second = {s.index: dict(s.env) for s in rec.placed}
    assert sorted(second) == [0, 1]
    run2 = second[0]["COALLOC_RUN"]
    assert run2 != job_id and second[0]["COALLOC_ATTEMPT"] == "2"
    assert second[0]["COALLOC_KV_TOKEN"] != first[0]["COALLOC_KV_TOKEN"]
    assert gm.kv_get(run2, "addr", 0) is None  # a fresh store
    gm.kv_put(run2, "addr", "again")
    assert gm.kv_get(run2, "addr", 0) == "again"


def test_runs_that_ended_free_their_store_and_port() -> None:
    gm, rec = _service()
    [answer] = gm.submit([_coupled()])
    job_id = answer["job_id"]
    gm.place_pending()
    gm.kv_put(job_id, "k", "v")
    gm.cancel(job_id)
    gm.archive_finished()  # every cycle: stores of runs no longer running go
    assert gm.kv.runs == 0
    with pytest.raises(RunGone):
        gm.kv_put(job_id, "k", "v")
    rec.placed.clear()
    gm.submit([_coupled()])
    gm.place_pending()
    assert {dict(s.env)["MASTER_PORT"] for s in rec.placed} == {str(PORT_RANGE[0])}


def test_env_survives_the_records_of_the_journal_and_the_node_checkpoint() -> None:
    """The job file's env is journaled with the spec; a subtask's env (with its
    credential) is kept in its node's checkpoint, for a subtask restored before it
    started."""
    import json

    from workloads.records import from_record, to_record

    spec = _coupled()
    assert from_record(JobSpec, json.loads(json.dumps(to_record(spec)))) == spec
    placed = Subtask("j", 0, "n0", QosClass.BEST_EFFORT, 1.0, 1.0, 1.0, 1.0,
                     command=("true",), env=(("COALLOC_KV_TOKEN", "t0k3n"),))
    assert from_record(Subtask, json.loads(json.dumps(to_record(placed)))) == placed
