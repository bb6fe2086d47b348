"""The greedy fit kernel (global_manager.fit): first_fit's answers, and gang_misfit's
claim that whether (and where) a gang fails does not depend on the node ranking."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.fit import FIT_EPS, first_fit, fit_limits, gang_misfit
from global_manager.placer import NodeLoad

# Rates and budgets from a small set, so that ties and exact fits (room == rate, and
# rate == room + FIT_EPS) come up often.
_AMOUNT = st.sampled_from([0.0, 10.0, 20.0, 25.0, 40.0, 50.0, 50.0 + FIT_EPS, 100.0])


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
            assert all(r <= room[name] + FIT_EPS for r, name in zip(rates, got))


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
