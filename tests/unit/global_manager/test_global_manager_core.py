"""GlobalManagerCore: expected rates, all-or-nothing admission, the parallelism split rule,
cancel and finish releasing budget, seeded placement; the policy registry."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coallocator.controller import ControlMode
from global_manager.core import GlobalConfig, GlobalManagerCore
from global_manager.policies import PolicyName, get_policy, policies
from local_manager.scheduler import VirtualSubtaskMode
from workloads.model import Demand, JobSpec, Node, QosClass, SubtaskSpec

# Strict budgets at QoS share 0.5: a 100, b 200, c 300 Mcycles/s (overbooked: x 1.05).
NODES = (Node("a", 200.0), Node("b", 400.0), Node("c", 600.0))


def gm(policy: str = "strict", nodes=NODES, seed: int = 0, **kw: object) -> GlobalManagerCore:
    return GlobalManagerCore(
        nodes, get_policy(policy, **kw), GlobalConfig(25.0, 0.5), random.Random(seed)
    )


def strict(*weights: float, work: float = 1000.0, name: str = "s", **kw: object) -> JobSpec:
    return JobSpec(
        name=name,
        qos=QosClass.STRICT,
        subtasks=tuple(SubtaskSpec(work=work * w, weight=w) for w in weights),
        overall_deviation=100.0,
        asynchrony=100.0,
        **kw,  # type: ignore[arg-type]
    )


def test_expected_rates_weights_and_commitments() -> None:
    g = gm()
    adm = g.submit(strict(1.0, 2.0), now=5.0)
    assert adm.admitted and adm.reason == ""
    s0, s1 = adm.subtasks
    # x_i = r_i * u_t with u_t = 25 Mcycles/s per weight unit; weight starts at x_i.
    assert (s0.expected_rate, s0.weight, s1.expected_rate, s1.weight) == (25.0, 25.0, 50.0, 50.0)
    assert (s0.relative_weight, s0.work, s0.start_time, s0.qos) == (
        1.0,
        1000.0,
        5.0,
        QosClass.STRICT,
    )
    assert s0.demand == Demand()
    # Largest subtask to the node with most free budget.
    assert (s1.node, s0.node) == ("c", "b")
    assert g.committed_view() == {"a": 0.0, "b": 25.0, "c": 50.0}
    assert g.jobs[adm.job_id].running == {0, 1}


def test_target_duration_sets_the_rate_per_weight() -> None:
    # w / r = 1000 and 1500 Mcycles per weight unit; D_t = 100 s: u_t = 15 Mcycles/s.
    spec = JobSpec(
        "d",
        QosClass.STRICT,
        (SubtaskSpec(1000.0, 1.0), SubtaskSpec(3000.0, 2.0)),
        overall_deviation=10.0,
        asynchrony=10.0,
        duration=100.0,
    )
    adm = gm().submit(spec, 0.0)
    assert [s.expected_rate for s in adm.subtasks] == pytest.approx([15.0, 30.0])


def test_all_or_nothing_nothing_committed_when_one_subtask_does_not_fit() -> None:
    g = gm()
    g.submit(strict(10.0), 0.0)  # 250 on c: c has 50 left, b 200, a 100
    before = (dict(g.committed), dict(g.load), dict(g.jobs))
    adm = g.submit(strict(7.0, 3.0, 3.0), 1.0)  # 175 -> b, 75 -> a, 75 -> c (only 50)
    assert not adm.admitted and adm.subtasks == ()
    assert adm.reason == "no free node can take subtask 2 (expected rate 75 Mcycles/s)"
    assert (dict(g.committed), dict(g.load), dict(g.jobs)) == before


def test_strict_versus_five_percent_overbooking_on_a_node_at_the_limit() -> None:
    one = (Node("a", 400.0),)  # strict budget 200, overbooked 210 Mcycles/s
    for policy, admitted in (("strict", False), ("sq", True), ("sq_no_overbooking", False)):
        g = gm(policy, one)
        assert g.submit(strict(8.0), 0.0).admitted  # 200: exactly the strict budget
        adm = g.submit(strict(0.4), 1.0)  # 10 more
        assert adm.admitted is admitted, policy
        assert g.committed["a"] == pytest.approx(210.0 if admitted else 200.0)
    g = gm("sq", one)
    g.submit(strict(8.0), 0.0)
    assert not g.submit(strict(0.44), 1.0).admitted  # 11 > 10 left even with 5 %
    # No admission control at all: anything goes.
    g = gm("none", one)
    assert all(g.submit(strict(8.0), float(t)).admitted for t in range(5))


def test_more_subtasks_than_nodes_is_rejected() -> None:
    adm = gm().submit(strict(1.0, 1.0, 1.0, 1.0), 0.0)
    assert (adm.admitted, adm.reason) == (False, "4 subtasks but only 3 nodes")


def test_non_strict_jobs_do_not_count_against_the_strict_budget() -> None:
    g = gm(nodes=(Node("a", 100.0),))
    loose = JobSpec("l", QosClass.LOOSE, (SubtaskSpec(1.0, 40.0),))
    best = JobSpec("b", QosClass.BEST_EFFORT, (SubtaskSpec(1.0, 40.0),))
    assert g.submit(loose, 0.0).admitted and g.submit(best, 0.0).admitted
    assert g.committed["a"] == 0.0
    assert g.load["a"] == pytest.approx(2000.0)
    assert g.submit(strict(2.0), 0.0).admitted  # 50 = the whole strict budget


def test_local_jobs_are_pinned_to_their_node() -> None:
    g = gm()
    local = JobSpec("x", QosClass.LOCAL, (SubtaskSpec(10.0, 1.0),), node="a")
    adm = g.submit(local, 0.0)
    assert [s.node for s in adm.subtasks] == ["a"]
    assert g.committed["a"] == 0.0 and g.load["a"] == 25.0
    bad = g.submit(JobSpec("y", QosClass.LOCAL, (SubtaskSpec(10.0, 1.0),), node="zz"), 0.0)
    assert not bad.admitted and "known node" in bad.reason


def test_parallelism_split_weights_follow_free_budget_and_finish_together() -> None:
    g = gm()
    g.submit(strict(2.0), 0.0)  # 50 on c: free a 100, b 200, c 250
    spec = JobSpec(
        "p",
        QosClass.STRICT,
        parallelism=3,
        total_work=1.1e6,
        total_weight=11.0,
        overall_deviation=100.0,
        asynchrony=100.0,
    )
    adm = g.submit(spec, 1.0)
    assert adm.admitted
    # Ranked by free budget: c (250), b (200), a (100); r_j = 11 * f_j / 550.
    assert [s.node for s in adm.subtasks] == ["c", "b", "a"]
    assert [s.relative_weight for s in adm.subtasks] == pytest.approx([5.0, 4.0, 2.0])
    assert [s.work for s in adm.subtasks] == pytest.approx([5e5, 4e5, 2e5])
    assert [s.expected_rate for s in adm.subtasks] == pytest.approx([125.0, 100.0, 50.0])
    # w_j / r_j equal for all: at their expected rates they finish together.
    ratios = [s.work / s.relative_weight for s in adm.subtasks]
    assert ratios == pytest.approx([1e5] * 3)
    assert sum(s.work for s in adm.subtasks) == pytest.approx(1.1e6)


def test_parallelism_split_that_does_not_fit_commits_nothing() -> None:
    g = gm()
    spec = JobSpec(
        "p",
        QosClass.STRICT,
        parallelism=2,
        total_work=1e5,
        total_weight=30.0,  # 750 Mcycles/s > the 500 free on the two best nodes
        overall_deviation=1.0,
        asynchrony=1.0,
    )
    adm = g.submit(spec, 0.0)
    assert not adm.admitted and "no free node can take subtask 0" in adm.reason
    assert g.committed == {"a": 0.0, "b": 0.0, "c": 0.0}


def test_parallelism_split_of_a_best_effort_job_follows_cpu_rate() -> None:
    spec = JobSpec("p", QosClass.BEST_EFFORT, parallelism=2, total_work=1e4, total_weight=3.0)
    adm = gm().submit(spec, 0.0)
    # Least loaded per MHz with no load: ties by name -> a (200 MHz), b (400 MHz).
    assert [s.node for s in adm.subtasks] == ["a", "b"]
    assert [s.relative_weight for s in adm.subtasks] == pytest.approx([1.0, 2.0])


def test_cancel_releases_the_budget_and_finished_subtasks_release_theirs() -> None:
    g = gm()
    adm = g.submit(strict(1.0, 2.0, 3.0), 0.0)
    assert sum(g.committed.values()) == pytest.approx(150.0)
    assert g.subtask_finished(adm.job_id, 2) is False
    assert g.subtask_finished(adm.job_id, 2) is False  # twice: no double release
    assert sum(g.committed.values()) == pytest.approx(75.0)
    running = g.cancel(adm.job_id)
    assert [s.index for s in running] == [0, 1]
    assert g.committed == {"a": 0.0, "b": 0.0, "c": 0.0}
    assert g.load == {"a": 0.0, "b": 0.0, "c": 0.0}
    assert g.jobs[adm.job_id].cancelled
    with pytest.raises(KeyError):
        g.cancel("nope")
    other = g.submit(strict(1.0, 1.0), 1.0)
    assert g.subtask_finished(other.job_id, 0) is False
    assert g.subtask_finished(other.job_id, 1) is True
    assert g.subtask_finished("nope", 0) is False


def test_job_ids_and_duplicates() -> None:
    g = gm()
    assert g.submit(strict(1.0), 0.0).job_id == "j00001"
    assert g.submit(strict(1.0, job_id="mine"), 0.0).job_id == "mine"
    dup = g.submit(strict(1.0, job_id="mine"), 0.0)
    assert not dup.admitted and "already in use" in dup.reason
    assert not g.submit(JobSpec("e", QosClass.STRICT), 0.0).admitted


def test_random_placement_is_deterministic_under_the_seed() -> None:
    nodes = tuple(Node(f"n{i}", 1000.0) for i in range(6))

    def placements(seed: int) -> list[tuple[str, ...]]:
        g = gm("sq", nodes, seed, placement="random")
        return [
            tuple(s.node for s in g.submit(strict(1.0, 1.0), float(t)).subtasks) for t in range(6)
        ]

    assert placements(1) == placements(1)
    assert placements(1) != placements(2)


def test_constructor_and_config_validation() -> None:
    with pytest.raises(ValueError, match="duplicate node name 'a'"):
        GlobalManagerCore((Node("a", 1.0), Node("a", 2.0)), get_policy("sq"))
    with pytest.raises(ValueError, match="at least one node"):
        GlobalManagerCore((), get_policy("sq"))
    with pytest.raises(ValueError, match="rate_per_weight"):
        GlobalConfig(rate_per_weight=0.0)
    with pytest.raises(ValueError, match="qos_share"):
        GlobalConfig(qos_share=1.5)
    g = GlobalManagerCore(NODES, get_policy("sq"))
    assert g.node_budgets() == pytest.approx({"a": 105.0, "b": 210.0, "c": 315.0})


def test_policy_registry() -> None:
    assert policies.names() == sorted(p.value for p in PolicyName)
    sq = get_policy("sq")
    assert (sq.admission, sq.controller, sq.overbooking) == ("measured_capacity", True, 0.05)
    assert sq.admission_policy().measures_capacity
    assert sq.virtual_mode is VirtualSubtaskMode.PACED
    assert sq.controller_config.mode is ControlMode.PACE and sq.lend_paced
    paper = get_policy("sq_paper")
    assert (paper.admission, paper.controller, paper.overbooking) == ("overbooking", True, 0.05)
    assert paper.virtual_mode is VirtualSubtaskMode.IDLE
    assert paper.controller_config.mode is ControlMode.WINDOWS
    assert not get_policy("sq_no_lend").lend_paced
    assert not get_policy("sq_no_boost").controller_config.straggler_boost
    st = get_policy("strict")
    assert (st.admission, st.controller) == ("strict", False)
    assert get_policy("none").admission_policy().name == "none"
    assert get_policy("sq_no_overbooking").controller
    wc = get_policy("sq_work_conserving")
    assert wc.virtual_mode is VirtualSubtaskMode.WORK_CONSERVING
    assert get_policy("sq", overbooking=0.1).admission_policy().budget(100.0, 0.5) == (
        pytest.approx(55.0)
    )
    with pytest.raises(ValueError, match="unknown policy 'fast'"):
        get_policy("fast")


def _parallel(qos: QosClass = QosClass.STRICT, **kw: object) -> JobSpec:
    windows = {"overall_deviation": 100.0, "asynchrony": 100.0} if qos is QosClass.STRICT else {}
    return JobSpec("p", qos, parallelism=2, **windows, **kw)  # type: ignore[arg-type]


def test_parallelism_job_without_total_work_is_rejected_with_a_reason() -> None:
    g = gm()
    for kw in ({}, {"total_work": 0.0}, {"total_work": -5.0}):
        adm = g.submit(_parallel(total_weight=2.0, **kw), 0.0)
        assert not adm.admitted and adm.reason.startswith("total_work:"), kw
    assert g.committed == {"a": 0.0, "b": 0.0, "c": 0.0}


def test_parallelism_job_without_total_weight_gets_one_per_subtask() -> None:
    # As in job files: a missing total weight means weight 1 per subtask.
    adm = gm().submit(_parallel(total_work=1e4), 0.0)
    assert adm.admitted
    assert sum(s.relative_weight for s in adm.subtasks) == pytest.approx(2.0)
    assert sum(s.work for s in adm.subtasks) == pytest.approx(1e4)
    bad = gm().submit(_parallel(total_work=1e4, total_weight=0.0), 0.0)
    assert not bad.admitted and bad.reason.startswith("total_weight:")


def test_local_job_without_subtasks_is_rejected_not_crashed() -> None:
    spec = JobSpec("x", QosClass.LOCAL, parallelism=1, total_work=10.0, total_weight=1.0, node="a")
    adm = gm().submit(spec, 0.0)
    assert not adm.admitted and "local job needs one subtask" in adm.reason


def test_sq_admits_on_the_qos_capacity_a_node_measured_and_strict_does_not() -> None:
    """A node whose other queues are idle gives its QoS queue the whole node (work-
    conserving queues): sq's budget follows what the node measured, strict's stays at
    its share; a measure that moves the budget wakes the pending queue."""
    one = (Node("a", 400.0),)
    g = gm("sq", one)
    assert g.measures_capacity and not gm("strict", one).measures_capacity
    assert g.budget("a") == pytest.approx(210.0)
    assert g.submit(strict(8.0), 0.0).admitted  # 200 of 210
    assert not g.submit(strict(8.0), 1.0).admitted  # 400 > 210: rejected (queue: reject)
    g.queue.changed = False
    assert g.observe_qos_capacity("a", 400.0)  # the node's other queues are empty
    assert g.queue.changed
    assert g.budget("a") == pytest.approx(420.0)
    assert g.submit(strict(8.0), 2.0).admitted  # 400 of 420
    assert not g.observe_qos_capacity("a", 400.0)  # the same measure: nothing moved
    assert not g.observe_qos_capacity("a", math.nan)  # ignored
    assert g.observe_qos_capacity("a", 100.0)
    # Local work came: the budget falls back to the share; what runs is not touched.
    assert g.budget("a") == pytest.approx(210.0) and g.committed["a"] == pytest.approx(400.0)
    with pytest.raises(KeyError):
        g.observe_qos_capacity("zz", 1.0)
    s = gm("strict", one)
    assert not s.observe_qos_capacity("a", 400.0) and s.budget("a") == 200.0


def test_a_job_that_fits_only_an_idle_node_waits_under_sq_and_is_rejected_under_strict() -> None:
    """"Could it ever be placed" is asked against the budget ceiling: under measured
    capacity an idle node takes (1 + 0.05) x its whole rate, so a job above the share
    waits (queue: wait) for the local work to leave; strict's ceiling is its share."""
    one = (Node("a", 400.0),)
    big = strict(12.0)  # 300 Mcycles/s: above the share's 210, within the node's 420
    g = GlobalManagerCore(one, get_policy("sq"), GlobalConfig(25.0, 0.5, queue="wait"))
    assert g.budget_ceiling("a") == pytest.approx(420.0)
    g.observe_qos_capacity("a", 250.0)  # local work holds the rest of the node
    adm = g.submit(big, 0.0)
    assert adm.pending and not adm.admitted
    assert not g.place_pending(30.0).placed  # 300 > 1.05 x 250
    g.observe_qos_capacity("a", 400.0)  # the local work left
    (placed,) = g.place_pending(60.0).placed
    assert placed.job_id == adm.job_id and g.committed["a"] == pytest.approx(300.0)
    s = GlobalManagerCore(one, get_policy("strict"), GlobalConfig(25.0, 0.5, queue="wait"))
    assert s.budget_ceiling("a") == 200.0
    rejected = s.submit(big, 0.0)
    assert not rejected.admitted and not rejected.pending and rejected.reasons


def test_the_snapshot_is_its_state_and_its_jobs_and_forget_drops_only_jobs_that_are_over(
) -> None:
    g = gm()
    done = g.submit(strict(1.0, 2.0), now=0.0).job_id
    g.subtask_finished(done, 0)
    running = g.submit(strict(1.0), now=1.0).job_id
    cancelled = g.submit(strict(1.0), now=2.0).job_id
    g.cancel(cancelled)
    snap = g.snapshot()
    assert {k: snap[k] for k in g.snapshot_state()} == g.snapshot_state()
    assert snap["jobs"] == [g.snapshot_job(j) for j in g.jobs]
    assert g.snapshot_job("j99999") is None and g.snapshot_pending(done) is None
    with pytest.raises(ValueError, match="running, not over"):
        g.forget(done)  # one subtask still runs
    g.subtask_finished(done, 1)
    held = dict(g.committed)
    g.forget(done)
    g.forget(cancelled)
    assert done not in g.jobs and cancelled not in g.jobs and running in g.jobs
    assert g.committed == held  # what is over held nothing
    with pytest.raises(ValueError, match="running, not over"):
        g.forget(running)


@given(
    speeds=st.lists(st.integers(100, 600), min_size=2, max_size=8),
    gangs=st.lists(st.lists(st.sampled_from([0.5, 1.0, 2.0]), min_size=2, max_size=4),
                   min_size=1, max_size=12),
)
@settings(max_examples=60, deadline=None)
def test_gangs_of_one_placement_cycle_start_at_a_pace_every_node_can_give_them_all(
    speeds: list[int], gangs: list[list[float]]
) -> None:
    """The gangs one cycle places start on one boundary: each one's start caps are a
    pace its members are sure to get with every gang of the cycle booked on their nodes
    (the QoS share split by strict rates), not the pace its nodes had before the later
    gangs of the cycle came (a gang placed first on idle nodes drifted apart from its
    siblings sharing a node in its first period)."""
    nodes = [Node(f"n{i}", float(s)) for i, s in enumerate(speeds)]
    g = GlobalManagerCore(nodes, get_policy("sq"), GlobalConfig(25.0, 0.5, queue="wait"),
                          random.Random(0))
    for k, weights in enumerate(gangs):
        g.submit(strict(*weights, name=f"g{k}", work=100.0), now=0.0)
    placed = g.place_pending(0.0).placed
    speed = {n.name: n for n in nodes}
    for adm in placed:
        subs = adm.subtasks
        assert subs == g.jobs[adm.job_id].subtasks  # what is dispatched is what is kept
        paces = {s.rate_cap / s.expected_rate for s in subs}
        assert max(paces) - min(paces) <= 1e-9 * max(paces)  # one pace for the gang
        for s in subs:
            node = speed[s.node]
            share = 0.5 * node.cpu_rate * s.expected_rate / g.committed[s.node]
            full = min(1.0, node.cores) * node.speed_mhz
            assert s.rate_cap <= max(s.expected_rate, min(share, full)) * (1 + 1e-9)


def test_a_gang_alone_on_its_nodes_keeps_its_pace_when_others_share_other_nodes() -> None:
    nodes = (Node("a", 600.0), Node("b", 600.0), Node("c", 300.0), Node("d", 300.0))
    g = GlobalManagerCore(nodes, get_policy("sq"), GlobalConfig(25.0, 0.5, queue="wait"),
                          random.Random(0))
    g.submit(strict(1.0, 1.0, name="x", work=100.0), now=0.0)
    alone = g.place_pending(0.0).placed[0]
    h = GlobalManagerCore(nodes, get_policy("sq"), GlobalConfig(25.0, 0.5, queue="wait"),
                          random.Random(0))
    for name in ("x", "y", "z"):
        h.submit(strict(1.0, 1.0, name=name, work=100.0), now=0.0)
    batch = {a.job_id: a for a in h.place_pending(0.0).placed}
    first = batch[alone.job_id]
    shared = {s.node for a in batch.values() if a.job_id != first.job_id for s in a.subtasks}
    if not shared & {s.node for s in first.subtasks}:
        assert first.subtasks == alone.subtasks
    else:  # it shares a node: its pace can only have gone down
        assert all(f.rate_cap <= a.rate_cap for f, a in zip(first.subtasks, alone.subtasks))
