"""The per-node scheduler core: queue split with and without work conservation, weighted
max-min and weighted DRF inside a queue, virtual subtasks (idle and lent to best effort),
virtual clocks and reports, and properties (capacity never exceeded, nothing idle while
demand is unmet when work conservation is on)."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairness.drf import drf
from local_manager.scheduler import (
    LocalScheduler,
    LocalSchedulerConfig,
    VirtualSubtaskMode,
)
from workloads.model import Demand, Node, QosClass, QueueName, Subtask

BIG = 1e12  # Mcycles: work that never finishes within a test


def sub(
    job: str,
    qos: QosClass,
    *,
    node: str = "n",
    index: int = 0,
    work: float = BIG,
    rate: float = 100.0,
    weight: float | None = None,
    virtual: float = 0.0,
    demand: Demand | None = None,
) -> Subtask:
    """A placed subtask; ``rate`` is its expected rate x_i (Mcycles/s)."""
    return Subtask(
        job_id=job,
        index=index,
        node=node,
        qos=qos,
        work=work,
        relative_weight=1.0,
        expected_rate=rate,
        weight=rate if weight is None else weight,
        virtual_weight=virtual,
        demand=demand if demand is not None else Demand(),
    )


def sched(
    node: Node | None = None,
    wc: bool = True,
    mode: VirtualSubtaskMode = VirtualSubtaskMode.IDLE,
    *subtasks: Subtask,
) -> LocalScheduler:
    s = LocalScheduler(
        node or Node("n", 1000.0),
        LocalSchedulerConfig(work_conserving=wc, virtual_mode=mode),
    )
    for t in subtasks:
        s.add(t, 0.0)
    return s


def granted(result, job: str, index: int = 0) -> float:
    (g,) = [g.granted_work for g in result.grants if (g.job_id, g.subtask) == (job, index)]
    return g


# ------------------------------------------------------------------- queue split


def test_work_conserving_split_gives_an_idle_queues_share_to_the_busy_ones() -> None:
    # 1000 MHz, q = 1 s; local queue empty: QoS gets 0.5/0.7 and BE 0.2/0.7 of 1000.
    s = sched(
        None,
        True,
        VirtualSubtaskMode.IDLE,
        sub("q", QosClass.STRICT),
        sub("b", QosClass.BEST_EFFORT),
    )
    r = s.step(1.0, 1.0)
    assert r.capacity == 1000.0
    assert r.queue_cpu[QueueName.QOS] == pytest.approx(5000.0 / 7.0)
    assert r.queue_cpu[QueueName.BEST_EFFORT] == pytest.approx(2000.0 / 7.0)
    assert r.queue_cpu[QueueName.LOCAL] == 0.0
    assert granted(r, "q") == pytest.approx(5000.0 / 7.0)
    assert granted(r, "b") == pytest.approx(2000.0 / 7.0)
    assert r.used == pytest.approx(1000.0)
    assert r.virtual_idle == 0.0


def test_non_work_conserving_split_leaves_the_idle_queues_share_idle() -> None:
    s = sched(
        None,
        False,
        VirtualSubtaskMode.IDLE,
        sub("q", QosClass.STRICT),
        sub("b", QosClass.BEST_EFFORT),
    )
    r = s.step(1.0, 1.0)
    assert granted(r, "q") == pytest.approx(500.0)
    assert granted(r, "b") == pytest.approx(200.0)
    assert r.used == pytest.approx(700.0)  # 300 Mcycles of the local share stay idle


def test_work_conserving_split_passes_on_what_a_small_queue_cannot_use() -> None:
    # The QoS queue wants only 100 Mcycles; the other 900 go to local : BE = 0.3 : 0.2.
    s = sched(
        None,
        True,
        VirtualSubtaskMode.IDLE,
        sub("l", QosClass.LOCAL),
        sub("q", QosClass.STRICT, work=100.0),
        sub("b", QosClass.BEST_EFFORT),
    )
    r = s.step(1.0, 1.0)
    assert granted(r, "q") == pytest.approx(100.0)
    assert granted(r, "l") == pytest.approx(540.0)
    assert granted(r, "b") == pytest.approx(360.0)


def test_all_three_queues_busy_get_their_weights() -> None:
    s = sched(
        Node("n", 500.0, cores=2.0),
        True,
        VirtualSubtaskMode.IDLE,
        sub("l", QosClass.LOCAL),
        sub("q", QosClass.LOOSE),
        sub("b", QosClass.BEST_EFFORT),
    )
    r = s.step(2.0, 2.0)  # capacity 500 * 2 * 2 = 2000; each entry can use 1 core = 1000
    assert [granted(r, j) for j in ("l", "q", "b")] == pytest.approx([600.0, 1000.0, 400.0])


def test_configurable_queue_weights() -> None:
    weights = {QueueName.LOCAL: 1.0, QueueName.QOS: 1.0, QueueName.BEST_EFFORT: 2.0}
    cfg = LocalSchedulerConfig(queue_weights=weights, work_conserving=False)
    assert cfg.share(QueueName.BEST_EFFORT) == 0.5
    s = LocalScheduler(Node("n", 1000.0), cfg)
    s.add(sub("q", QosClass.STRICT), 0.0)
    s.add(sub("b", QosClass.BEST_EFFORT), 0.0)
    r = s.step(1.0, 1.0)
    assert (granted(r, "q"), granted(r, "b")) == pytest.approx((250.0, 500.0))


# --------------------------------------------------------------- inside a queue


def test_weighted_max_min_inside_the_qos_queue() -> None:
    s = sched(
        None,
        True,
        VirtualSubtaskMode.IDLE,
        sub("a", QosClass.STRICT, weight=75.0),
        sub("b", QosClass.STRICT, weight=25.0),
    )
    r = s.step(1.0, 1.0)
    assert (granted(r, "a"), granted(r, "b")) == pytest.approx((750.0, 250.0))


def test_an_entry_is_capped_by_the_work_it_has_left() -> None:
    s = sched(
        None,
        False,
        VirtualSubtaskMode.IDLE,
        sub("a", QosClass.STRICT, weight=75.0, work=100.0),
        sub("b", QosClass.STRICT, weight=25.0),
    )
    r = s.step(1.0, 1.0)
    # Non-work-conserving: the QoS queue has 500; a needs only 100, b takes the rest.
    assert (granted(r, "a"), granted(r, "b")) == pytest.approx((100.0, 400.0))


def test_an_entry_is_capped_by_one_core_at_full_speed() -> None:
    s = sched(Node("n", 400.0, cores=4.0), True, VirtualSubtaskMode.IDLE, sub("a", QosClass.STRICT))
    r = s.step(1.0, 1.0)
    assert granted(r, "a") == pytest.approx(400.0)
    two = sched(
        Node("n", 400.0, cores=4.0),
        True,
        VirtualSubtaskMode.IDLE,
        sub("a", QosClass.STRICT, demand=Demand(cpu=2.0)),
    )
    assert granted(two.step(1.0, 1.0), "a") == pytest.approx(800.0)


def _drf_pair(weights: tuple[float, float], memory: tuple[float, float]):
    node = Node("n", 1000.0, memory_mb=500.0, io_mbps=1000.0)
    s = sched(
        node,
        True,
        VirtualSubtaskMode.IDLE,
        sub("a", QosClass.STRICT, weight=weights[0], demand=Demand(1.0, memory[0])),
        sub("b", QosClass.STRICT, weight=weights[1], demand=Demand(1.0, memory[1])),
    )
    r = s.step(1.0, 1.0)
    return granted(r, "a"), granted(r, "b"), r


def test_drf_inside_a_queue_cpu_binds() -> None:
    # Pool: 1000 Mcycles, 500 MB. a = <1000, 800 MB> (dominant: memory, 1.6 per unit),
    # b = <1000, 100 MB> (dominant: CPU, 1.0). Equal weights: 1.6 t_a = t_b and
    # t_a + t_b = 1 (CPU) give t_a = 5/13, t_b = 8/13; memory 800*5/13 + 100*8/13 < 500.
    a, b, r = _drf_pair((50.0, 50.0), (800.0, 100.0))
    assert (a, b) == pytest.approx((5000.0 / 13.0, 8000.0 / 13.0))
    assert r.used == pytest.approx(1000.0)
    ref = drf(
        [1000.0, 500.0, 1000.0],
        [[1000.0, 800.0, 0.0], [1000.0, 100.0, 0.0]],
        weights=[50.0, 50.0],
        max_tasks=[1.0, 1.0],
        divisible=True,
    )
    assert (a, b) == pytest.approx(tuple(1000.0 * t for t in ref.tasks))


def test_weighted_drf_inside_a_queue() -> None:
    # Weights 100 : 50: s_a = 1.6 t_a / 100, s_b = t_b / 50 -> t_b = 0.8 t_a; t_a + t_b = 1.
    a, b, _ = _drf_pair((100.0, 50.0), (800.0, 100.0))
    assert (a, b) == pytest.approx((5000.0 / 9.0, 4000.0 / 9.0))


def test_drf_inside_a_queue_memory_binds_and_cpu_stays_idle() -> None:
    # Both need 800 MB at full speed; 500 MB in the pool: t = 500 / 1600 each.
    a, b, r = _drf_pair((50.0, 50.0), (800.0, 800.0))
    assert (a, b) == pytest.approx((312.5, 312.5))
    assert r.used == pytest.approx(625.0)


def test_drf_queue_pool_is_the_queues_fraction_of_the_node() -> None:
    # Non-work-conserving QoS queue: 500 Mcycles and 50 % of 1000 MB = 500 MB.
    node = Node("n", 1000.0, memory_mb=1000.0)
    s = sched(
        node,
        False,
        VirtualSubtaskMode.IDLE,
        sub("a", QosClass.STRICT, demand=Demand(1.0, 1000.0)),
    )
    # a alone: CPU allows t = 0.5, memory 1000 t <= 500 allows t = 0.5.
    assert granted(s.step(1.0, 1.0), "a") == pytest.approx(500.0)


def test_drf_memory_of_a_multi_core_subtask_is_not_scaled_by_its_cores() -> None:
    # 2 cores x 500 MHz; the subtask uses 2 cores and 400 MB at full speed (Demand's
    # contract). 400 MB fit in 500 MB, so it should run at full speed: 1000 Mcycles.
    node = Node("n", 500.0, cores=2.0, memory_mb=500.0)
    s = sched(
        node, True, VirtualSubtaskMode.IDLE, sub("a", QosClass.STRICT, demand=Demand(2.0, 400.0))
    )
    assert granted(s.step(1.0, 1.0), "a") == pytest.approx(1000.0)


# ------------------------------------------------------------- virtual subtasks


def _virtual_setup(mode: VirtualSubtaskMode, be_work: float = BIG) -> LocalScheduler:
    return sched(
        None,
        True,
        mode,
        sub("s", QosClass.STRICT, weight=50.0, virtual=50.0),
        sub("b", QosClass.BEST_EFFORT, work=be_work, weight=10.0),
    )


def test_virtual_subtask_in_idle_mode_holds_its_share_idle() -> None:
    # QoS queue: 1000 * 5/7, split 50 : 50 between s and its virtual subtask.
    r = _virtual_setup(VirtualSubtaskMode.IDLE).step(1.0, 1.0)
    assert granted(r, "s") == pytest.approx(2500.0 / 7.0)
    assert r.virtual_idle == pytest.approx(2500.0 / 7.0)
    assert granted(r, "b") == pytest.approx(2000.0 / 7.0)
    assert r.lent_to_best_effort == 0.0
    assert r.used + r.virtual_idle == pytest.approx(1000.0)


def test_virtual_subtask_slows_only_its_own_subtask() -> None:
    s = sched(
        None,
        False,
        VirtualSubtaskMode.IDLE,
        sub("s", QosClass.STRICT, weight=50.0, virtual=50.0),
        sub("o", QosClass.STRICT, weight=50.0),
    )
    r = s.step(1.0, 1.0)
    # 500 in the queue, three weights of 50: the neighbour does not get the slowed share.
    assert (granted(r, "s"), granted(r, "o"), r.virtual_idle) == pytest.approx(
        (500.0 / 3.0, 500.0 / 3.0, 500.0 / 3.0)
    )


def test_work_conserving_virtual_subtask_lends_to_best_effort_and_takes_it_back() -> None:
    s = _virtual_setup(VirtualSubtaskMode.WORK_CONSERVING)
    r1 = s.step(1.0, 1.0)
    assert granted(r1, "s") == pytest.approx(2500.0 / 7.0)  # the subtask is still slowed
    assert r1.lent_to_best_effort == pytest.approx(2500.0 / 7.0)
    assert granted(r1, "b") == pytest.approx(4500.0 / 7.0)
    assert r1.virtual_idle == pytest.approx(0.0)
    assert r1.used == pytest.approx(1000.0)
    # Next cycle best effort has no demand: nothing is lent, the share is held idle again.
    s.remove(("b", 0))
    r2 = s.step(2.0, 1.0)
    assert r2.lent_to_best_effort == 0.0
    assert granted(r2, "s") == pytest.approx(500.0)
    assert r2.virtual_idle == pytest.approx(500.0)
    # The controller drops the virtual weight: the subtask gets its whole core back.
    s.set_weights(("s", 0), 100.0, 0.0)
    r3 = s.step(3.0, 1.0)
    assert granted(r3, "s") == pytest.approx(1000.0)
    assert (r3.virtual_idle, r3.lent_to_best_effort) == (0.0, 0.0)


def test_lending_is_capped_by_best_effort_unmet_demand() -> None:
    # BE wants 400 in all: 2000/7 from its queue share, 400 - 2000/7 lent; the rest idle.
    r = _virtual_setup(VirtualSubtaskMode.WORK_CONSERVING, be_work=400.0).step(1.0, 1.0)
    assert granted(r, "b") == pytest.approx(400.0)
    assert r.lent_to_best_effort == pytest.approx(400.0 - 2000.0 / 7.0)
    assert r.virtual_idle == pytest.approx(2500.0 / 7.0 - (400.0 - 2000.0 / 7.0))


def test_virtual_weight_drop_returns_the_share_to_best_effort_queue_split() -> None:
    s = _virtual_setup(VirtualSubtaskMode.WORK_CONSERVING)
    s.step(1.0, 1.0)
    s.set_weights(("s", 0), 100.0, 0.0)
    r = s.step(2.0, 1.0)
    assert (granted(r, "s"), granted(r, "b")) == pytest.approx((5000.0 / 7.0, 2000.0 / 7.0))
    assert r.lent_to_best_effort == 0.0


# ---------------------------------------------------------- clocks and reports


def test_step_advances_virtual_clocks_by_eq_4_and_reports_qos_subtasks() -> None:
    # Expected 100 Mcycles/s over 10 s = 1000; QoS queue alone gets min(10000, cap) = all.
    s = LocalScheduler(Node("n", 100.0), LocalSchedulerConfig(work_conserving=False), incarnation=7)
    s.add(sub("s", QosClass.STRICT, rate=100.0), 0.0)
    s.add(sub("l", QosClass.LOOSE, rate=100.0), 0.0)
    s.add(sub("x", QosClass.LOCAL, rate=100.0), 0.0)
    r = s.step(10.0, 10.0)
    # QoS share 0.5 * 1000 = 500 split equally: 250 each of an expected 1000 -> 2.5 s.
    assert granted(r, "s") == pytest.approx(250.0)
    assert s.virtual_time(("s", 0)) == pytest.approx(2.5)
    # Local: 0.3 * 1000 = 300 of 1000 expected -> 3 s.
    assert s.virtual_time(("x", 0)) == pytest.approx(3.0)
    assert [(p.job_id, p.seq, p.incarnation) for p in r.reports] == [("s", 1, 7), ("l", 2, 7)]
    rep = r.reports[0]
    assert (rep.real_time, rep.expected_work, rep.granted_work, rep.done) == pytest.approx(
        (10.0, 1000.0, 250.0, False)
    )
    assert rep.virtual_time == pytest.approx(2.5)
    r2 = s.step(20.0, 10.0)
    assert [p.seq for p in r2.reports] == [3, 4]


def test_subtask_finishing_mid_cycle_is_not_late_and_is_reported_done() -> None:
    s = sched(None, True, VirtualSubtaskMode.IDLE, sub("s", QosClass.STRICT, rate=50.0, work=200.0))
    s.add(sub("t", QosClass.STRICT, node="n", index=1, rate=50.0, work=BIG), 0.0)
    r = s.step(10.0, 10.0)
    # x = min(50 * 10, 200) = 200 = what it got: T_V = T_R.
    (g,) = [g for g in r.grants if g.subtask == 0]
    assert (g.expected_work, g.granted_work, g.virtual_time) == pytest.approx((200.0, 200.0, 10.0))
    assert r.finished == (("s", 0),)
    assert s.get(("s", 0)).finish_time == 10.0
    assert s.get(("s", 0)).done_work == 200.0
    assert [p.done for p in r.reports] == [True, False]
    # A finished subtask stays until removed, but gets nothing more.
    r2 = s.step(20.0, 10.0)
    assert [(g.job_id, g.subtask) for g in r2.grants] == [("t", 1)]
    assert s.remove(("s", 0)) is not None
    assert len(s) == 1


def test_membership_and_weights_api() -> None:
    s = sched(None, True, VirtualSubtaskMode.IDLE, sub("a", QosClass.STRICT, index=0))
    s.add(sub("a", QosClass.STRICT, index=1), 5.0)
    s.add(sub("b", QosClass.LOOSE, weight=30.0, virtual=10.0), 5.0)
    assert s.get(("a", 1)).start_time == 5.0
    assert s.virtual_time(("a", 1)) == 5.0
    assert s.set_weights(("a", 0), 20.0, 80.0)
    assert s.set_weights(("zz", 0), 1.0, 1.0) is False
    assert s.qos_weight_total() == pytest.approx(100.0 + 100.0)
    assert s.qos_weight_total(strict_only=False) == pytest.approx(240.0)
    assert [t.key for t in s.remove_job("a")] == [("a", 0), ("a", 1)]
    assert [t.key for t in s.subtasks()] == [("b", 0)]
    assert s.remove(("a", 0)) is None


def test_bad_input_is_rejected_with_a_clear_error() -> None:
    s = sched(None, True, VirtualSubtaskMode.IDLE, sub("a", QosClass.STRICT))
    with pytest.raises(ValueError, match="not 'n'"):
        s.add(sub("b", QosClass.STRICT, node="elsewhere"), 0.0)
    with pytest.raises(ValueError, match="already on node"):
        s.add(sub("a", QosClass.STRICT), 0.0)
    with pytest.raises(ValueError, match="weights for"):
        s.set_weights(("a", 0), -1.0, 0.0)
    with pytest.raises(ValueError, match="weights for"):
        s.set_weights(("a", 0), 1.0, math.nan)
    with pytest.raises(ValueError, match="cycle"):
        s.step(1.0, 0.0)
    with pytest.raises(ValueError, match="queue_weights\\[qos\\]"):
        LocalSchedulerConfig(queue_weights={QueueName.LOCAL: 1.0, QueueName.BEST_EFFORT: 1.0})
    with pytest.raises(ValueError, match="at least one"):
        LocalSchedulerConfig(queue_weights={q: 0.0 for q in QueueName})


# -------------------------------------------------------------------- properties

QOS_CLASSES = [QosClass.LOCAL, QosClass.STRICT, QosClass.LOOSE, QosClass.BEST_EFFORT]

entry_rows = st.lists(
    st.tuples(
        st.sampled_from(QOS_CLASSES),
        st.floats(1.0, 20000.0),  # work, Mcycles (some finish within a few cycles)
        st.one_of(st.just(0.0), st.floats(0.01, 200.0)),  # weight, Mcycles/s
        st.one_of(st.just(0.0), st.floats(0.01, 200.0)),  # virtual weight
        st.sampled_from([1.0, 2.0]),  # cores used at full speed
    ),
    min_size=1,
    max_size=7,
)


@settings(deadline=None, max_examples=120)
@given(
    speed=st.integers(100, 1000),
    cores=st.sampled_from([1.0, 2.0]),
    rows=entry_rows,
    wc=st.booleans(),
    mode=st.sampled_from(list(VirtualSubtaskMode)),
    cycle=st.sampled_from([1.0, 2.5, 10.0]),
    reweights=st.lists(
        st.tuples(st.integers(0, 6), st.floats(0.0, 200.0), st.floats(0.0, 200.0)), max_size=6
    ),
)
def test_cpu_never_above_capacity_and_work_conserved_when_on(
    speed: int,
    cores: float,
    rows: list[tuple[QosClass, float, float, float, float]],
    wc: bool,
    mode: VirtualSubtaskMode,
    cycle: float,
    reweights: list[tuple[int, float, float]],
) -> None:
    node = Node("n", float(speed), cores=cores)
    # Uncapped queues: this property is about the CPU split among running entries.
    s = LocalScheduler(
        node, LocalSchedulerConfig(work_conserving=wc, virtual_mode=mode, max_running={})
    )
    for i, (qos, work, w, vw, cpu) in enumerate(rows):
        s.add(
            sub(
                f"j{i}",
                qos,
                work=work,
                rate=50.0,
                weight=w,
                virtual=vw if qos in (QosClass.STRICT, QosClass.LOOSE) else 0.0,
                demand=Demand(cpu=cpu),
            ),
            0.0,
        )
    t = 0.0
    steps = max(3, len(reweights))
    eps = 1e-6 * node.cpu_rate * cycle
    for k in range(steps):
        if k < len(reweights):
            idx, w, vw = reweights[k]
            if idx < len(rows) and rows[idx][0] in (QosClass.STRICT, QosClass.LOOSE):
                s.set_weights((f"j{idx}", 0), w, vw)
        running = [x for x in s.subtasks() if not x.finished]
        caps = {x.key: min(x.remaining, min(x.demand.cpu, cores) * speed * cycle) for x in running}
        full_cpu = speed * min(1.0, cores) * cycle
        virtual_demand = full_cpu * sum(
            1 for x in running if x.virtual_weight > 0 and x.qos is not QosClass.LOCAL
        )
        before = {x.key: x.done_work for x in running}
        t += cycle
        r = s.step(t, cycle)
        capacity = node.cpu_rate * cycle
        assert r.capacity == pytest.approx(capacity)
        grants = {(g.job_id, g.subtask): g.granted_work for g in r.grants}
        assert set(grants) == set(caps)
        for key, g in grants.items():
            assert -1e-9 <= g <= caps[key] + 1e-6 * caps[key] + 1e-9
            assert s.get(key).done_work - before[key] == pytest.approx(g, abs=1e-6) or (
                s.get(key).finished
            )
        assert sum(grants.values()) == pytest.approx(r.used, abs=eps)
        assert r.virtual_idle >= -eps and r.lent_to_best_effort >= -eps
        # Never more CPU handed out (to subtasks or held idle) than the node has.
        assert r.used + r.virtual_idle <= capacity + eps
        if not wc:
            for q in QueueName:
                assert r.queue_cpu[q] <= LocalSchedulerConfig().share(q) * capacity + eps
        if wc and mode is VirtualSubtaskMode.WORK_CONSERVING:
            # Every Mcycle is used, unless the demand (virtual subtasks included) is smaller.
            total = sum(caps.values()) + virtual_demand
            assert r.used + r.virtual_idle >= min(capacity, total) - eps
            if virtual_demand == 0:
                assert r.used >= min(capacity, sum(caps.values())) - eps
            if r.virtual_idle > eps:
                # Held idle only because best effort wants no more.
                for x in running:
                    if x.qos is QosClass.BEST_EFFORT:
                        assert grants[x.key] >= caps[x.key] - eps
        for x in s.subtasks():
            assert x.weight >= 0 and x.virtual_weight >= 0
        for key in r.finished:
            s.remove(key)


# ------------------------------------------------------------------ running slots


def test_capped_queue_runs_the_first_entries_and_starts_waiting_ones_as_they_finish() -> None:
    # Local queue capped at 2 on a 1000 MHz node, q = 1 s, only local work: the two
    # running entries share 1000 Mcycles (500 each); the third waits with no CPU.
    cfg = LocalSchedulerConfig(max_running={QueueName.LOCAL: 2})
    s = LocalScheduler(Node("n", 1000.0), cfg)
    for name, work in (("a", 500.0), ("b", 5000.0), ("c", 5000.0)):
        s.add(sub(name, QosClass.LOCAL, work=work, rate=10.0, weight=1.0), 0.0)
    assert len(s) == 3 and s.waiting == 1
    r = s.step(1.0, 1.0)
    assert granted(r, "a") == pytest.approx(500.0)
    assert granted(r, "b") == pytest.approx(500.0)
    assert ("c", 0) not in {(g.job_id, g.subtask) for g in r.grants}
    assert r.finished == (("a", 0),)
    s.remove(("a", 0))
    # c starts at the beginning of the next cycle, its virtual clock from there.
    r = s.step(2.0, 1.0)
    assert s.waiting == 0
    assert granted(r, "b") == pytest.approx(500.0)
    assert granted(r, "c") == pytest.approx(500.0)
    assert s.virtual_time(("c", 0)) == pytest.approx(1.0 + 500.0 / 10.0)


def test_waiting_entries_can_be_cancelled_and_qos_queue_cannot_be_capped() -> None:
    cfg = LocalSchedulerConfig(max_running={QueueName.BEST_EFFORT: 1})
    s = LocalScheduler(Node("n", 1000.0), cfg)
    s.add(sub("a", QosClass.BEST_EFFORT, work=100.0, rate=10.0), 0.0)
    s.add(sub("b", QosClass.BEST_EFFORT, work=100.0, rate=10.0), 0.0)
    assert [x.job_id for x in s.remove_job("b")] == ["b"]
    assert len(s) == 1 and s.waiting == 0
    with pytest.raises(ValueError, match=r"max_running\[qos\]"):
        LocalSchedulerConfig(max_running={QueueName.QOS: 4})
    with pytest.raises(ValueError, match=r"max_running\[local\]"):
        LocalSchedulerConfig(max_running={QueueName.LOCAL: 0})


def test_virtual_subtask_holds_more_than_a_core_on_a_multi_core_node() -> None:
    # 3 cores of 400 MHz, queues not work-conserving: the QoS share is 600 Mcycles/s,
    # more than one core (400). A subtask slowed to 1 % must get about 1 % of it, not the
    # 200 a one-core virtual subtask would leave it (the live multi-raylet bug).
    s = sched(
        Node("n", 400.0, cores=3.0),
        False,
        VirtualSubtaskMode.IDLE,
        sub("s", QosClass.STRICT, rate=300.0, weight=3.0, virtual=297.0),
    )
    r = s.step(1.0, 1.0)
    assert granted(r, "s") == pytest.approx(600.0 * 3.0 / 300.0)
    assert r.virtual_idle == pytest.approx(600.0 * 297.0 / 300.0)


# ----------------------------------------------------------------- paced mode


def _paced(*subtasks: Subtask, lend: bool = True, borrow: bool = True) -> LocalScheduler:
    s = LocalScheduler(
        Node("n", 1000.0),
        LocalSchedulerConfig(
            work_conserving=False,
            virtual_mode=VirtualSubtaskMode.PACED,
            lend_paced=lend,
            borrow_idle=borrow,
        ),
    )
    for t in subtasks:
        s.add(t, 0.0)
    return s


def test_a_rate_cap_holds_a_subtask_and_its_neighbour_gets_the_rest() -> None:
    s = _paced(sub("s", QosClass.STRICT), sub("o", QosClass.STRICT), borrow=False)
    assert s.set_weights(("s", 0), 100.0, 0.0, rate_cap=50.0)
    r = s.step(1.0, 1.0)
    # QoS share 500: s is held to 50, its neighbour takes the other 450 (one core is 1000)
    assert (granted(r, "s"), granted(r, "o")) == pytest.approx((50.0, 450.0))
    assert r.virtual_idle == 0.0
    (rep,) = [x for x in r.reports if x.job_id == "s"]
    # Its capability is its fair share of the queue were every cap lifted (both weigh
    # 100: half of the 500), not what its neighbour happens to leave it this cycle.
    assert rep.available_work == pytest.approx(250.0)


def _useful(on: bool, mode: VirtualSubtaskMode = VirtualSubtaskMode.PACED) -> LocalScheduler:
    """A work-conserving node (the live default) with a strict member and a best-effort
    burner."""
    s = LocalScheduler(
        Node("n", 1000.0),
        LocalSchedulerConfig(virtual_mode=mode, useful_caps=on),
    )
    s.add(sub("s", QosClass.STRICT), 0.0)
    s.add(sub("b", QosClass.BEST_EFFORT), 0.0)
    return s


def test_a_useful_cap_holds_a_member_and_best_effort_work_gets_the_rest() -> None:
    s = _useful(True)
    s.set_useful_caps({("s", 0): 120.0})
    r = s.step(1.0, 1.0)
    assert (granted(r, "s"), granted(r, "b")) == pytest.approx((120.0, 880.0))
    (rep,) = [x for x in r.reports if x.job_id == "s"]
    assert rep.available_work == pytest.approx(1000 * 0.5 / 0.7)  # every cap lifted
    # The lower of the useful cap and the controller's rate cap holds.
    s.set_weights(("s", 0), 100.0, 0.0, rate_cap=80.0)
    assert granted(s.step(2.0, 1.0), "s") == pytest.approx(80.0)
    s.set_useful_caps(None)
    assert granted(s.step(3.0, 1.0), "s") == pytest.approx(80.0)
    for bad in (0.0, -1.0, math.nan, math.inf):
        with pytest.raises(ValueError, match="useful cap"):
            s.set_useful_caps({("s", 0): bad})


@pytest.mark.parametrize(
    ("on", "mode"), [(False, VirtualSubtaskMode.PACED), (True, VirtualSubtaskMode.IDLE)]
)
def test_useful_caps_apply_only_under_pace_control_when_asked(
    on: bool, mode: VirtualSubtaskMode
) -> None:
    s = _useful(on, mode)
    s.set_useful_caps({("s", 0): 120.0})
    assert not s.applies_useful_caps
    assert granted(s.step(1.0, 1.0), "s") == pytest.approx(1000 * 0.5 / 0.7)


def test_what_a_cap_leaves_is_lent_to_best_effort_and_local_work() -> None:
    s = _paced(
        sub("s", QosClass.STRICT),
        sub("b", QosClass.BEST_EFFORT, weight=10.0),
        sub("l", QosClass.LOCAL, weight=10.0),
        borrow=False,
    )
    s.set_weights(("s", 0), 100.0, 0.0, rate_cap=100.0)
    r = s.step(1.0, 1.0)
    # QoS 500 of which s takes 100; the 400 left goes to best effort and local by their
    # queue weights (0.2 : 0.3) on top of their own shares (200 and 300)
    assert granted(r, "s") == pytest.approx(100.0)
    assert granted(r, "b") == pytest.approx(200.0 + 400.0 * 0.4)
    assert granted(r, "l") == pytest.approx(300.0 + 400.0 * 0.6)
    assert r.used == pytest.approx(1000.0)
    (rep,) = [x for x in r.reports if x.job_id == "s"]
    assert rep.available_work == pytest.approx(500.0)  # all the QoS share was its


def test_without_lending_a_cap_leaves_the_cpu_idle() -> None:
    s = _paced(sub("s", QosClass.STRICT), sub("b", QosClass.BEST_EFFORT), lend=False,
               borrow=False)
    s.set_weights(("s", 0), 100.0, 0.0, rate_cap=100.0)
    r = s.step(1.0, 1.0)
    assert (granted(r, "s"), granted(r, "b")) == pytest.approx((100.0, 200.0))


def test_idle_cpu_goes_to_qos_work_that_wants_more() -> None:
    s = _paced(sub("s", QosClass.STRICT, rate=10.0))
    r = s.step(1.0, 1.0)
    # an otherwise idle node: the uncapped QoS subtask may use a whole core (1000)
    assert granted(r, "s") == pytest.approx(1000.0)
    s.set_weights(("s", 0), 10.0, 0.0, rate_cap=700.0)
    r = s.step(2.0, 1.0)
    assert granted(r, "s") == pytest.approx(700.0)
    (rep,) = r.reports
    assert rep.available_work == pytest.approx(1000.0)


def test_a_subnormal_virtual_weight_holds_no_more_than_the_node() -> None:
    """Found by the property above: a virtual weight of 5e-324 beside zero weights made
    the split overflow (virtual CPU held: inf)."""
    from local_manager.scheduler import VirtualSubtaskMode

    node = Node("n", 100.0, cores=1.0)
    s = LocalScheduler(node, LocalSchedulerConfig(
        work_conserving=False, virtual_mode=VirtualSubtaskMode.IDLE, max_running={}))
    s.add(sub("j0", QosClass.STRICT, work=1.0, rate=50.0, weight=0.0), 0.0)
    for i in range(1, 7):
        s.add(sub(f"j{i}", QosClass.LOCAL, work=1.0, rate=50.0, weight=0.0), 0.0)
    s.set_weights(("j0", 0), 0.0, 5e-324)
    r = s.step(1.0, 1.0)
    assert 0.0 <= r.virtual_idle and r.used + r.virtual_idle <= node.cpu_rate * 1.0 + 1e-6


# --------------------------------------------------- measured QoS capacity


@settings(max_examples=60, deadline=None)
@given(
    local=st.lists(st.floats(1.0, 3000.0), max_size=4),
    best_effort=st.lists(st.floats(1.0, 3000.0), max_size=4),
    wc=st.booleans(),
)
def test_the_qos_capacity_is_what_a_qos_queue_wanting_the_whole_node_gets(
    local: list[float], best_effort: list[float], wc: bool
) -> None:
    """Measured before a cycle, the capacity is the QoS queue's CPU in that cycle when its
    subtasks want the whole node (one core at 1000 MHz: one strict subtask does), whatever
    work the other queues have left; adding strict work does not change it."""
    s = sched(Node("n", 1000.0), wc)
    for i, w in enumerate(local):
        s.add(sub(f"l{i}", QosClass.LOCAL, work=w), 0.0)
    for i, w in enumerate(best_effort):
        s.add(sub(f"b{i}", QosClass.BEST_EFFORT, work=w), 0.0)
    without_qos = s.qos_capacity(1.0)
    s.add(sub("q", QosClass.STRICT), 0.0)
    capacity = s.qos_capacity(1.0)
    assert capacity == without_qos
    r = s.step(1.0, 1.0)
    assert capacity == pytest.approx(r.queue_cpu[QueueName.QOS], rel=1e-9, abs=1e-9)
    if not wc:
        assert capacity == pytest.approx(500.0)
    elif not local and not best_effort:
        assert capacity == pytest.approx(1000.0)


def test_the_qos_capacity_is_a_rate_and_needs_a_real_cycle() -> None:
    s = sched(Node("n", 1000.0), True)
    s.add(sub("l", QosClass.LOCAL), 0.0)
    # Local work alone against a QoS queue that wants the node: 0.3 / (0.3 + 0.5).
    assert s.qos_capacity(30.0) == pytest.approx(1000.0 * 0.5 / 0.8)
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="cycle"):
            s.qos_capacity(bad)
