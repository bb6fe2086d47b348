"""The fit rule (global_manager.fit): a rate fits a room; first_fit's answers, and
gang_misfit's claim that whether (and where) a gang fails does not depend on the node
ranking."""

from __future__ import annotations

import math
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.cycle import GridNode, NodeLoad
from global_manager.fit import FIT_SLACK, first_fit, fit_limits, fits, gang_misfit, room_limit
from global_manager.flow_placement import (
    FlowPlacementRequest,
    NodeState,
    UserShare,
)
from global_manager.flow_placement import place_pending as flow_place_pending
from global_manager.flow_policy import never_placeable
from global_manager.pending_job import PendingJob

# Rates and budgets from a small set, so that ties and exact fits (room == rate, and
# rate == the room's limit) come up often.
_AMOUNT = st.sampled_from([0.0, 10.0, 20.0, 25.0, 40.0, 50.0, room_limit(50.0), 100.0])


@st.composite
def _grids(draw: st.DrawFn) -> tuple[list[float], list[NodeLoad], int]:
    n = draw(st.integers(0, 6))
    nodes = [NodeLoad(f"n{k}", 100.0, draw(_AMOUNT), draw(_AMOUNT) + draw(_AMOUNT), 0.0)
             for k in range(n)]
    rates = draw(st.lists(st.sampled_from([1.0, 10.0, 20.0, 25.0, 40.0, 50.0, 90.0]),
                          min_size=1, max_size=6))
    return rates, nodes, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=400, deadline=None)
@given(_grids())
def test_a_misfit_is_found_under_every_ranking_at_the_subtask_first_fit_stops_at(
    grid: tuple[list[float], list[NodeLoad], int],
) -> None:
    rates, nodes, seed = grid
    miss = gang_misfit(rates, fit_limits([nl.budget - nl.committed for nl in nodes]))
    rng = random.Random(seed)
    for _ in range(4):
        ranked = list(nodes)
        rng.shuffle(ranked)
        got = first_fit(rates, (), ranked, True)
        if isinstance(got, int):
            assert miss == got
        else:
            assert miss == -1
            assert len(set(got)) == len(rates)  # distinct nodes, each with room
            room = {nl.name: nl.budget - nl.committed for nl in nodes}
            assert all(fits(r, room[name]) for r, name in zip(rates, got))


def test_first_fit_places_the_largest_rate_first_on_the_first_ranked_node_with_room() -> None:
    a = NodeLoad("a", 100.0, 60.0, 100.0, 0.0)  # 40 free
    b = NodeLoad("b", 100.0, 0.0, 100.0, 0.0)  # 100 free
    c = NodeLoad("c", 100.0, 0.0, 30.0, 0.0, frozenset({"gpu"}))  # 30 free, a GPU
    # 50 first: a (40) has no room, b takes it; then 30 on a.
    assert first_fit((30.0, 50.0), (), [a, b, c], True) == ("a", "b")
    # The GPU subtask can only go to c; 35 exceeds c's room.
    assert first_fit((35.0, 10.0), (frozenset({"gpu"}), frozenset()), [a, b, c], True) == 0
    assert first_fit((25.0, 10.0), (frozenset({"gpu"}), frozenset()), [a, b, c], True) == (
        "c", "a")
    # Unchecked: no budget test, ranking order only.
    assert first_fit((500.0, 400.0), (), [a, b], False) == ("a", "b")
    # Three subtasks, two nodes: the third in rate order (index 0) finds none.
    assert first_fit((1.0, 2.0, 3.0), (), [a, b], True) == 0
    assert gang_misfit((1.0, 2.0, 3.0), fit_limits([40.0, 100.0])) == 0
    assert gang_misfit((30.0, 50.0), fit_limits([40.0, 100.0, 30.0])) == -1


def _solved(job: PendingJob, nodes: tuple[GridNode, ...], share: float) -> tuple[object, ...]:
    """never_placeable's answer for a strict job by the flow solve alone, without the
    matching test it puts in front of the solve."""
    empty = tuple(NodeState(n.name, n.speed, n.budget - 0.0, n.labels, 0.0) for n in nodes)
    reply = flow_place_pending(FlowPlacementRequest(
        0.0, (job,), empty, (UserShare(job.user, bound=math.inf),),
        qos_share=share, reserve_after=None,
    ))
    return reply.pending.get(job.job_id, ())


@settings(max_examples=300, deadline=None)
@given(budgets=st.lists(_AMOUNT, min_size=1, max_size=5),
       rates=st.lists(st.sampled_from([10.0, 20.0, 25.0, 40.0, 50.0, 50.0 * (1 + 1e-9), 90.0]),
                      min_size=1, max_size=6),
       share=st.sampled_from([0.3, 0.5, 1.0]))
def test_a_gang_that_fits_the_empty_grid_by_the_matching_test_has_no_reason(
    budgets: list[float], rates: list[float], share: float,
) -> None:
    """never_placeable answers an unlabelled strict gang that fits the k-th largest
    budgets without a flow solve: the solve agrees (no reason) whenever it does so, and
    a gang that fails the test still gets the solve's reasons."""
    nodes = tuple(GridNode(f"n{k}", 100.0, b, 0.0, 0.0) for k, b in enumerate(budgets))
    qj = PendingJob("j", "u", tuple(r * 10 for r in rates), tuple(rates), tuple(rates),
                   tuple(frozenset() for _ in rates))
    assert never_placeable(qj, nodes, share) == _solved(qj, nodes, share)


# ----------------------------------------------------------------------- the fit rule
_FINITE = st.floats(-1e7, 1e7, allow_nan=False)


@settings(max_examples=500, deadline=None)
@given(rate=_FINITE, room=_FINITE)
def test_the_fit_rule_is_the_absolute_slack_up_to_a_room_of_one_and_relative_above(
    rate: float, room: float,
) -> None:
    """One rule: below a room of 1 Mcycle/s the slack is ``FIT_SLACK`` itself (the same
    floating-point sum as an absolute slack); above it, ``FIT_SLACK`` times the room.
    Only a rate within that slack of the room fits without being at most the room."""
    assert fits(rate, room) == (rate <= room_limit(room))
    if abs(room) <= 1.0:
        assert fits(rate, room) == (rate <= room + FIT_SLACK)
    else:
        assert fits(rate, room) == (rate <= room + FIT_SLACK * abs(room))
    if rate <= room:
        assert fits(rate, room)
    if rate > room + 2 * FIT_SLACK * max(1.0, abs(room)):
        assert not fits(rate, room)


@settings(max_examples=300, deadline=None)
@given(rate=_FINITE, room=_FINITE, more=st.floats(0.0, 1e7, allow_nan=False))
def test_a_rate_that_fits_a_room_fits_any_larger_room(
    rate: float, room: float, more: float,
) -> None:
    if fits(rate, room):
        assert fits(rate, room + more)


def test_an_infinite_room_takes_every_rate_and_a_minus_infinite_one_none() -> None:
    assert fits(1e300, math.inf) and room_limit(math.inf) == math.inf
    assert not fits(-1e300, -math.inf) and room_limit(-math.inf) == -math.inf
    assert fit_limits([1.0, -math.inf, 2.0]) == [room_limit(2.0), room_limit(1.0), -math.inf]
