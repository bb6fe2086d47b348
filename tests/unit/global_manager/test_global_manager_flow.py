"""FlowGraph (pylmcf wrapper) against networkx's min-cost flow, change after change."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from global_manager.flow import MAX_CAPACITY, MAX_COST, FlowGraph, FlowSolution, FlowStatus


def oracle(g: FlowGraph) -> int | None:
    """networkx's optimal cost for ``g``, None when it finds no feasible flow."""
    h = nx.MultiDiGraph()
    for v in range(g.node_count):
        h.add_node(v, demand=-g.supply(v))
    for a in range(g.arc_count):
        t, u = g.arc_ends(a)
        h.add_edge(t, u, capacity=g.capacity(a), weight=g.cost(a))
    try:
        return int(nx.min_cost_flow_cost(h))
    except nx.NetworkXUnfeasible:
        return None


def check(g: FlowGraph) -> FlowSolution:
    """Solve ``g`` and check it against networkx: same status, same optimal cost, a flow
    within the capacities that conserves every node's supply and costs what it says."""
    sol = g.solve()
    expected = oracle(g)
    if expected is None:
        assert sol.status is FlowStatus.INFEASIBLE
        assert sol.cost == 0 and len(sol.flow) == 0
        return sol
    assert sol.status is FlowStatus.OPTIMAL
    assert sol.cost == expected
    assert len(sol.flow) == g.arc_count
    net = [0] * g.node_count
    total = 0
    for a in range(g.arc_count):
        f = int(sol.flow[a])
        assert 0 <= f <= g.capacity(a)
        t, u = g.arc_ends(a)
        net[t] += f
        net[u] -= f
        total += f * g.cost(a)
    assert net == [g.supply(v) for v in range(g.node_count)]
    assert total == sol.cost
    return sol


@st.composite
def graphs(draw: st.DrawFn) -> FlowGraph:
    """Up to 7 nodes and 16 arcs (parallel arcs and self-loops included), costs of both
    signs. Supplies are either the net of a planted flow (feasible) or random but
    balanced (often infeasible)."""
    n = draw(st.integers(1, 7))
    g = FlowGraph()
    for _ in range(n):
        g.add_node()
    arcs = draw(
        st.lists(
            st.tuples(
                st.integers(0, n - 1), st.integers(0, n - 1), st.integers(0, 8),
                st.integers(-6, 9),
            ),
            max_size=16,
        )
    )
    for t, u, k, c in arcs:
        g.add_arc(t, u, k, c)
    net = [0] * n
    if draw(st.booleans()):
        for t, u, k, _ in arcs:
            f = draw(st.integers(0, k))
            net[t] += f
            net[u] -= f
    else:
        net = draw(st.lists(st.integers(-5, 5), min_size=n, max_size=n))
        net[-1] -= sum(net)
    for v, s in enumerate(net):
        g.set_supply(v, s)
    return g


changes = st.one_of(
    st.tuples(st.just("move_supply"), st.integers(0, 99), st.integers(0, 99), st.integers(1, 4)),
    st.tuples(st.just("set_supply"), st.integers(0, 99), st.integers(-5, 5)),
    st.tuples(st.just("capacity"), st.integers(0, 99), st.integers(0, 8)),
    st.tuples(st.just("cost"), st.integers(0, 99), st.integers(-6, 9)),
    st.tuples(st.just("both"), st.integers(0, 99), st.integers(0, 8), st.integers(-6, 9)),
    st.tuples(st.just("add_node"), st.integers(-3, 3)),
    st.tuples(
        st.just("add_arc"), st.integers(0, 99), st.integers(0, 99), st.integers(0, 8),
        st.integers(-6, 9),
    ),
)


def apply(g: FlowGraph, change: tuple) -> None:
    kind, *args = change
    n, m = g.node_count, g.arc_count
    if kind == "move_supply":  # keeps the supplies balanced
        u, v, d = args[0] % n, args[1] % n, args[2]
        g.set_supply(u, g.supply(u) + d)
        g.set_supply(v, g.supply(v) - d)
    elif kind == "set_supply":  # may unbalance them: infeasible until balanced again
        g.set_supply(args[0] % n, args[1])
    elif kind == "add_node":
        g.add_node(args[0])
    elif kind == "add_arc":
        g.add_arc(args[0] % n, args[1] % n, args[2], args[3])
    elif m:
        a = args[0] % m
        if kind == "capacity":
            g.set_arc(a, capacity=args[1])
        elif kind == "cost":
            g.set_arc(a, cost=args[1])
        else:
            g.set_arc(a, capacity=args[1], cost=args[2])


@settings(max_examples=300, deadline=None)
@given(graphs(), st.lists(changes, max_size=12))
def test_same_optimum_as_networkx_after_every_change(g: FlowGraph, seq: list[tuple]) -> None:
    check(g)
    for change in seq:
        apply(g, change)
        check(g)


def test_supply_capacity_and_cost_changes_reuse_the_basis() -> None:
    # Two sources, three sinks, a grid of arcs between them.
    g = FlowGraph()
    src = [g.add_node(4), g.add_node(5)]
    dst = [g.add_node(-3), g.add_node(-3), g.add_node(-3)]
    arcs = [g.add_arc(s, d, 3, 1 + 2 * i + j) for i, s in enumerate(src) for j, d in enumerate(dst)]
    check(g)
    assert (g.rebuilds, g.reused_basis) == (1, 0)
    g.set_supply(src[0], 5)
    g.set_supply(src[1], 4)
    check(g)
    g.set_arc(arcs[0], capacity=1)
    check(g)
    g.set_arc(arcs[4], cost=0)
    check(g)
    assert g.rebuilds == 1  # no topology change: the same solver all along
    assert g.reused_basis >= 2  # pylmcf warm-started (or repaired) from the last basis


def test_topology_changes_and_cost_sign_flips_rebuild_and_stay_optimal() -> None:
    g = FlowGraph()
    s, t = g.add_node(2), g.add_node(-2)
    a = g.add_arc(s, t, 3, 4)
    assert check(g).cost == 8
    g.set_arc(a, cost=-1)  # stored reversed from now on
    assert check(g).cost == -2
    assert g.rebuilds == 2
    b = g.add_arc(t, s, 5, -3)  # a negative cycle s -> t -> s, bounded by a's capacity
    g.set_arc(a, capacity=6)
    sol = check(g)
    assert sol.cost == 6 * -1 + 4 * -3 and sol.flow[b] == 4
    assert g.rebuilds == 3


def test_infeasible_then_feasible_again() -> None:
    g = FlowGraph()
    s, t = g.add_node(5), g.add_node(-5)
    a = g.add_arc(s, t, 3, 1)
    assert check(g).status is FlowStatus.INFEASIBLE  # 5 units, room for 3
    g.set_arc(a, capacity=5)
    assert check(g).cost == 5
    g.set_supply(s, 6)  # unbalanced
    assert check(g).status is FlowStatus.INFEASIBLE
    g.set_supply(t, -6)
    g.set_arc(a, capacity=6)
    assert check(g).cost == 6


def test_empty_graph_and_isolated_nodes() -> None:
    g = FlowGraph()
    assert g.solve().status is FlowStatus.OPTIMAL and g.solve().cost == 0
    g.add_node()
    g.add_node()
    assert check(g).cost == 0


def test_solution_flow_is_read_only_and_indexed_by_arc_id() -> None:
    g = FlowGraph()
    v = [g.add_node() for _ in range(3)]
    g.set_supply(v[2], 1)
    g.set_supply(v[0], -1)
    cheap = g.add_arc(v[2], v[0], 1, 1)  # added first, sorts last in the solver
    dear = g.add_arc(v[2], v[1], 1, 5)
    g.add_arc(v[1], v[0], 1, 0)
    sol = check(g)
    assert (sol.flow[cheap], sol.flow[dear]) == (1, 0)
    with pytest.raises(ValueError):
        sol.flow[0] = 2


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda g: g.add_node(1.0), "supply: must be an integer, got 1.0"),
        (lambda g: g.add_node(True), "supply: must be an integer, got True"),
        (lambda g: g.add_arc(0, 1, 2.5, 1), "capacity: must be an integer, got 2.5"),
        (lambda g: g.add_arc(0, 1, 2, 0.5), "cost: must be an integer, got 0.5"),
        (lambda g: g.add_arc(0, 1, "3", 1), "capacity: must be an integer, got '3'"),
        (lambda g: g.add_arc(0, 1, -1, 1), "capacity: must be within 0.."),
        (lambda g: g.add_arc(0, 1, 1, MAX_COST + 1), "cost: must be within"),
        (lambda g: g.add_arc(0, 2, 1, 1), "head: no node 2"),
        (lambda g: g.add_arc(-1, 1, 1, 1), "tail: no node -1"),
        (lambda g: g.set_arc(1, capacity=1), "arc: no arc 1"),
        (lambda g: g.set_arc(0, cost=float("nan")), "cost: must be an integer"),
        (lambda g: g.set_supply(0, MAX_CAPACITY + 1), "supply: must be within"),
        (lambda g: g.set_supply(1.0, 1), "node: must be a node id"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(call, message: str) -> None:
    g = FlowGraph()
    g.add_node()
    g.add_node()
    g.add_arc(0, 1, 1, 1)
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("(", r"\(")):
        call(g)
    assert (g.node_count, g.arc_count, g.capacity(0), g.cost(0)) == (2, 1, 1, 1)


def test_numpy_integers_are_accepted() -> None:
    g = FlowGraph()
    s, t = g.add_node(np.int64(2)), g.add_node(np.int32(-2))
    g.add_arc(np.int64(s), t, np.int16(2), np.int64(-3))
    assert check(g).cost == -6


def test_worst_case_cost_overflow_is_refused() -> None:
    g = FlowGraph()
    s, t = g.add_node(), g.add_node()
    for _ in range(8):
        g.add_arc(s, t, MAX_CAPACITY, MAX_COST)
    with pytest.raises(ValueError, match="could overflow int64"):
        g.solve()
