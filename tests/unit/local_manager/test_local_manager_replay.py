"""The simulator's replay of a node's split (:mod:`local_manager.replay`): every replayed
cycle books, to the bit, what the model computing its split afresh books."""

from __future__ import annotations

from hypothesis import example, given, settings
from hypothesis import strategies as st

from local_manager.replay import ReplayingScheduler
from local_manager.scheduler import LocalScheduler, LocalSchedulerConfig, VirtualSubtaskMode
from tests.unit.local_manager.test_local_manager_scheduler import sub
from workloads.model import Demand, Node, QosClass, QueueName

# ------------------------------------------- replaying a split: the same bits as afresh


@settings(max_examples=80, deadline=None)
@given(
    cores=st.sampled_from([1.0, 2.0]),
    wc=st.booleans(),
    works=st.lists(
        st.tuples(st.sampled_from(list(QosClass)), st.floats(5e3, 4e5)),
        min_size=1, max_size=7,
    ),
    caps=st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 12),
                  st.sampled_from([0.0, 300.0, 700.0, 1500.0, 2500.0, 4000.0])),
        max_size=12,
    ),
    cycles=st.integers(4, 14),
)
# A grid-local subtask alone on the node ends within a cycle after its last replay: the
# capacity measured then is not the one measured while it had a full cycle's work left.
@example(cores=1.0, wc=True, works=[(QosClass.LOCAL, 65000.0)], caps=[], cycles=4)
# Rate caps that bind (300, 700 Mcycles/s) and one that does not (1500): only the last
# change keeps the split.
@example(cores=1.0, wc=False, works=[(QosClass.STRICT, 3e5), (QosClass.LOCAL, 3e5)],
         caps=[(0, 2, 300.0), (0, 4, 700.0), (0, 6, 1500.0), (0, 8, 2500.0)], cycles=9)
def test_a_replayed_split_and_the_qos_capacity_are_those_computed_afresh(
    cores: float,
    wc: bool,
    works: list[tuple[QosClass, float]],
    caps: list[tuple[int, int, float]],
    cycles: int,
) -> None:
    """A node that replays its last split (quiet countdown, rate caps that leave every
    CPU cap as it was, a cached QoS capacity) books, to the bit, what a node that
    computes every cycle afresh books: the second node's split is dropped before every
    cycle (a clock restored to where it is changes nothing else)."""
    node = Node("n", 1000.0, cores=cores)

    def make() -> ReplayingScheduler:
        s = ReplayingScheduler(node, LocalSchedulerConfig(
            work_conserving=wc, virtual_mode=VirtualSubtaskMode.PACED))
        for i, (qos, work) in enumerate(works):
            s.add(sub(f"j{i}", qos, work=work, rate=200.0), 0.0)
        return s

    replaying, fresh = make(), make()
    for c in range(1, cycles + 1):
        for i, at, rate_cap in caps:
            if at == c and i < len(works):
                key = (f"j{i}", 0)
                for s in (replaying, fresh):
                    t = s.get(key)
                    if t is not None and t.finish_time is None:
                        s.set_weights(key, t.weight, t.virtual_weight, rate_cap)
        # Every running clock is at the last cycle's end: this only drops the split.
        fresh.skip_to(30.0 * (c - 1))
        assert replaying.qos_capacity(30.0) == fresh.qos_capacity(30.0)
        a, b = replaying.step_lean(30.0 * c, 30.0), fresh.step_lean(30.0 * c, 30.0)
        assert a.rows == b.rows and a.used == b.used and a.virtual_idle == b.virtual_idle
        for key in a.finished:
            replaying.remove(key)
            fresh.remove(key)


# ----------------------------- replaying a split near an entry's end: shown, not assumed


def _near_end_pair(
    cores: float, mode: VirtualSubtaskMode, slots: int,
    works: list[tuple[QosClass, float, float, float, float]],
) -> tuple[ReplayingScheduler, ReplayingScheduler]:
    node = Node("n", 1000.0, cores=cores)
    cfg = LocalSchedulerConfig(
        work_conserving=False, virtual_mode=mode,
        max_running={QueueName.LOCAL: slots, QueueName.QOS: None,
                     QueueName.BEST_EFFORT: slots},
    )
    pair = ReplayingScheduler(node, cfg), ReplayingScheduler(node, cfg)
    pair[1].replay_near_end = False
    for s in pair:
        for i, (qos, work, weight, virtual, cpu) in enumerate(works):
            s.add(sub(f"j{i}", qos, work=work, rate=200.0, weight=weight,
                      virtual=virtual if qos is not QosClass.LOCAL else 0.0,
                      demand=Demand(cpu=min(cpu, cores))), 0.0)
    return pair


@settings(max_examples=120, deadline=None)
@given(
    cores=st.sampled_from([1.0, 2.0, 4.0]),
    mode=st.sampled_from(list(VirtualSubtaskMode)),
    slots=st.sampled_from([1, 2, 8]),
    works=st.lists(
        st.tuples(st.sampled_from(list(QosClass)), st.floats(2e3, 2e5),
                  st.sampled_from([1e-12, 0.3, 3.3, 77.7, 200.0]),
                  st.sampled_from([0.0, 0.5, 40.0]), st.sampled_from([1.0, 2.0])),
        min_size=1, max_size=9,
    ),
    changes=st.lists(
        st.tuples(st.integers(0, 8), st.integers(0, 40),
                  st.sampled_from([0.0, 300.0, 700.0, 1500.0]),
                  st.sampled_from([0.3, 77.7, 200.0])),
        max_size=10,
    ),
    cycles=st.integers(4, 40),
)
@example(cores=1.0, mode=VirtualSubtaskMode.IDLE, slots=8,
         works=[(QosClass.STRICT, 4e4, 200.0, 0.0, 1.0), (QosClass.STRICT, 9e4, 77.7, 0.0, 1.0),
                (QosClass.BEST_EFFORT, 3e4, 3.3, 0.0, 1.0),
                (QosClass.BEST_EFFORT, 2e5, 0.3, 0.0, 1.0)],
         changes=[], cycles=40)
# A binding rate cap lends QoS share to the best-effort queue, whose entry near its end
# then gets what it lacks: lending reads its cap, so its split is computed afresh.
@example(cores=1.0, mode=VirtualSubtaskMode.PACED, slots=8,
         works=[(QosClass.STRICT, 1e6, 200.0, 0.0, 1.0),
                (QosClass.BEST_EFFORT, 1.65e4, 1.0, 0.0, 1.0),
                (QosClass.BEST_EFFORT, 1e6, 1.0, 0.0, 1.0)],
         changes=[(0, 1, 300.0, 200.0)], cycles=12)
# Idle CPU borrowed by a QoS entry near its end (pace control, the other queues empty).
@example(cores=1.0, mode=VirtualSubtaskMode.PACED, slots=8,
         works=[(QosClass.STRICT, 5e4, 200.0, 0.0, 1.0), (QosClass.STRICT, 1e6, 200.0, 0.0, 1.0)],
         changes=[(1, 1, 100.0, 200.0)], cycles=12)
def test_a_split_replayed_near_an_entry_end_is_the_one_computed_afresh(
    cores: float, mode: VirtualSubtaskMode, slots: int,
    works: list[tuple[QosClass, float, float, float, float]],
    changes: list[tuple[int, int, float, float]], cycles: int,
) -> None:
    """A node that replays its last split through cycles in which entries near their
    end move their caps (``replay_near_end``, the simulator's lean path) books, to the
    bit, what the same node books with every such split computed afresh: every class,
    weights from tiny to large, virtual subtasks in every mode, rate caps and weights
    set between cycles, several cores, few slots."""
    replaying, fresh = _near_end_pair(cores, mode, slots, works)
    for c in range(1, cycles + 1):
        for i, at, rate_cap, weight in changes:
            if at == c and i < len(works):
                key = (f"j{i}", 0)
                for s in (replaying, fresh):
                    t = s.get(key)
                    if t is not None and t.finish_time is None:
                        s.set_weights(key, weight, t.virtual_weight, rate_cap)
        a, b = replaying.step_lean(30.0 * c, 30.0), fresh.step_lean(30.0 * c, 30.0)
        assert a.rows == b.rows and a.used == b.used and a.virtual_idle == b.virtual_idle
        assert a.qos_granted == b.qos_granted and a.finished == b.finished
        for key in a.finished:
            replaying.remove(key)
            fresh.remove(key)


def test_the_near_end_replay_does_happen_and_saves_splits() -> None:
    # Entries that end at different times, sharing the node unevenly: each spends cycles
    # with less than a full-speed cycle left while the others hold the split. Without
    # the replay each of those cycles is a fresh split; with it only the first (the one
    # after a finish) is.
    works = [(QosClass.STRICT, 4e4, 200.0, 0.0, 1.0), (QosClass.STRICT, 9e4, 77.7, 0.0, 1.0),
             (QosClass.BEST_EFFORT, 3e4, 3.3, 0.0, 1.0),
             (QosClass.BEST_EFFORT, 2e5, 0.3, 0.0, 1.0)]
    counts = []
    for on in (True, False):
        s, _ = _near_end_pair(1.0, VirtualSubtaskMode.IDLE, 8, works)
        s.replay_near_end = on
        for c in range(1, 120):
            for key in s.step_lean(30.0 * c, 30.0).finished:
                s.remove(key)
        counts.append(s.fresh_splits)
    assert counts[0] < counts[1], counts


# ------------------------------------------------- the lean path against the model itself


@settings(max_examples=80, deadline=None)
@given(
    cores=st.sampled_from([1.0, 2.0]),
    wc=st.booleans(),
    mode=st.sampled_from(list(VirtualSubtaskMode)),
    works=st.lists(
        st.tuples(st.sampled_from(list(QosClass)), st.floats(2e3, 2e5),
                  st.sampled_from([0.3, 77.7, 200.0]), st.sampled_from([0.0, 40.0])),
        min_size=1, max_size=7,
    ),
    changes=st.lists(
        st.tuples(st.integers(0, 6), st.integers(0, 30),
                  st.sampled_from([0.0, 300.0, 700.0, 1500.0])),
        max_size=8,
    ),
    cycles=st.integers(4, 30),
)
def test_the_lean_path_books_what_the_model_steps(
    cores: float, wc: bool, mode: VirtualSubtaskMode,
    works: list[tuple[QosClass, float, float, float]],
    changes: list[tuple[int, int, float]], cycles: int,
) -> None:
    """:meth:`ReplayingScheduler.step_lean` (replays, the near-end proof) books, to the
    bit, what the model's :meth:`LocalScheduler.step` (every split afresh) books: the
    same CPU used, idle virtual share, finishes, and per grid QoS subtask the same
    expected and granted work, virtual time and available work."""
    node = Node("n", 1000.0, cores=cores)
    cfg = LocalSchedulerConfig(work_conserving=wc, virtual_mode=mode)
    model, lean = LocalScheduler(node, cfg), ReplayingScheduler(node, cfg)
    for s in (model, lean):
        for i, (qos, work, weight, virtual) in enumerate(works):
            s.add(sub(f"j{i}", qos, work=work, rate=200.0, weight=weight,
                      virtual=virtual if qos is not QosClass.LOCAL else 0.0), 0.0)
    for c in range(1, cycles + 1):
        for i, at, rate_cap in changes:
            if at == c and i < len(works):
                key = (f"j{i}", 0)
                for s in (model, lean):
                    t = s.get(key)
                    if t is not None and t.finish_time is None:
                        s.set_weights(key, t.weight, t.virtual_weight, rate_cap)
        stepped, booked = model.step(30.0 * c, 30.0), lean.step_lean(30.0 * c, 30.0)
        assert booked.used == stepped.used and booked.virtual_idle == stepped.virtual_idle
        assert tuple(booked.finished) == stepped.finished
        assert [(r.job_id, r.subtask, r.expected_work, r.granted_work, r.virtual_time,
                 r.available_work) for r in stepped.reports] == [
            (job, index, x, g, tv, a) for _q, job, index, x, g, _w, tv, _d, a in booked.rows
        ]
        for key in booked.finished:
            model.remove(key)
            lean.remove(key)
