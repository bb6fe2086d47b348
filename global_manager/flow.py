"""A min-cost flow network with warm re-solves: a small wrapper over pylmcf
(``docs/model.md`` §4, "Min-cost max-flow scheduler").

The graph API of the min-cost max-flow scheduler (add node, add arc, set capacity, set
cost) over pylmcf's LEMON network simplex, which keeps its spanning-tree basis between
solves::

    g = FlowGraph()
    s, t = g.add_node(supply=2), g.add_node(supply=-2)
    a = g.add_arc(s, t, capacity=3, cost=4)
    g.solve()            # FlowSolution(status=optimal, cost=8, flow[a] == 2)
    g.set_arc(a, cost=1)
    g.solve()            # warm: starts from the previous basis

Contract:

- Nodes and arcs are numbered ``0, 1, 2, ...`` in the order they are added; arcs may be
  parallel or self-loops. A node's *supply* is what it must send out net (negative: what
  it must take in). The flow minimises ``sum cost * flow`` subject to
  ``0 <= flow[a] <= capacity[a]`` and, at every node, out minus in equal to its supply.
- Capacities, costs and supplies are Python or NumPy integers (never floats, never bools);
  anything else is refused with a ``ValueError`` naming the argument. Capacities are
  ``0 .. MAX_CAPACITY``; costs ``-MAX_COST .. MAX_COST`` (negative costs are allowed);
  supplies ``-MAX_CAPACITY .. MAX_CAPACITY``. ``solve`` also refuses (``ValueError``) a
  graph whose worst-case total cost ``sum |cost| * capacity`` could overflow int64.
- ``solve()`` returns ``status`` ``optimal`` or ``infeasible`` (supplies that do not sum
  to zero, or that the capacities cannot carry), the optimal ``cost`` and ``flow``
  indexed by arc id. An infeasible solution has ``cost == 0`` and an empty ``flow``.

What a re-solve reuses (warm restart). pylmcf's network simplex keeps the optimal
spanning-tree basis of the last solve of a fixed topology. After ``set_supply`` and
capacity changes the next ``solve`` starts from that basis (repairing it if the old
flows no longer fit, with its "dual_greedy" repair; a repair that runs longer than four
times the last cold solve is abandoned for a cold solve); after cost changes it starts
from the same basis with the node potentials recomputed, and since the old flows still
fit, only pivots towards the new optimum remain. Adding a node or an arc, or changing
the sign of an arc's cost (negative-cost arcs are stored reversed, see below), changes
the solver's topology: the next ``solve`` rebuilds the solver and starts cold. The
solve after an infeasible one starts cold too (pylmcf drops the basis).
``reused_basis`` and ``rebuilds`` count the two kinds.

Negative costs: LEMON's solver takes costs >= 0 only, so an arc ``u -> v`` with cost
``c < 0`` and capacity ``k`` is handed to it saturated and reversed: an arc ``v -> u``
with cost ``-c`` and capacity ``k``, ``k`` units of supply moved from ``u`` to ``v``,
and ``c * k`` added to the cost. Flow ``g`` on the reversed arc is flow ``k - g`` on the
original; the optimum is the same.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from pylmcf import Graph as _LemonGraph

__all__ = ["MAX_CAPACITY", "MAX_COST", "FlowGraph", "FlowSolution", "FlowStatus"]

MAX_CAPACITY = 2**40
"""Largest capacity (and supply magnitude) a ``FlowGraph`` accepts."""
MAX_COST = 2**40
"""Largest cost magnitude a ``FlowGraph`` accepts."""
_COST_BOUND = 2**62  # the worst-case total cost must stay below this (int64 headroom)
# pylmcf's basis repair when the old flows no longer fit (docs/decisions.md, "flow"):
# "dual_greedy" keeps capacity changes on scheduler graphs warm where the default "dual"
# stalls and goes cold; a repair running longer than 4 x the last cold solve gives up
# and solves cold, which bounds the worst case at about 5 x a cold solve.
_WARM_REPAIR = "dual_greedy"
_WARM_REPAIR_BUDGET = 4.0

IntArray = npt.NDArray[np.int64]


class FlowStatus(str, enum.Enum):
    OPTIMAL = "optimal"
    INFEASIBLE = "infeasible"


@dataclass(frozen=True, slots=True)
class FlowSolution:
    """``flow[a]``: units on arc ``a`` (a read-only int64 array, empty when infeasible);
    ``cost``: ``sum cost[a] * flow[a]`` (0 when infeasible)."""

    status: FlowStatus
    cost: int
    flow: IntArray

    @property
    def optimal(self) -> bool:
        return self.status is FlowStatus.OPTIMAL


def _integer(value: object, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise ValueError(f"{name}: must be an integer, got {value!r}")
    v = int(value)
    if not low <= v <= high:
        raise ValueError(f"{name}: must be within {low}..{high}, got {v}")
    return v


class _Column:
    """A growable int64 array (amortised O(1) append)."""

    __slots__ = ("data", "size")

    def __init__(self) -> None:
        self.data: IntArray = np.zeros(16, dtype=np.int64)
        self.size = 0

    def append(self, value: int) -> None:
        if self.size == len(self.data):
            self.data = np.concatenate([self.data, np.zeros(len(self.data), dtype=np.int64)])
        self.data[self.size] = value
        self.size += 1

    def view(self) -> IntArray:
        return self.data[: self.size]


class FlowGraph:
    """A min-cost flow network; see the module docstring for the contract. Not
    thread-safe: one graph is driven by one thread at a time."""

    def __init__(self) -> None:
        self._supply = _Column()
        self._tail = _Column()
        self._head = _Column()
        self._cap = _Column()
        self._cost = _Column()
        # Solver state: built lazily by solve(), dropped when the topology changes.
        self._solver: _LemonGraph | None = None
        self._pos: IntArray = np.zeros(0, dtype=np.int64)  # arc id -> solver edge
        self._rev: npt.NDArray[np.bool_] = np.zeros(0, dtype=bool)  # arc stored reversed
        self._s_cap: IntArray = np.zeros(0, dtype=np.int64)  # solver order
        self._s_cost: IntArray = np.zeros(0, dtype=np.int64)
        self._dirty_cap = self._dirty_cost = self._dirty_supply = False
        self.rebuilds = 0
        """Solves that built the solver afresh (first solve, or a topology change)."""
        self._reused_before = 0  # reused_basis of solvers dropped by a rebuild

    # ------------------------------------------------------------------ building
    @property
    def node_count(self) -> int:
        return self._supply.size

    @property
    def arc_count(self) -> int:
        return self._tail.size

    def add_node(self, supply: int = 0) -> int:
        """A new node with ``supply`` (units it sends out net); returns its id."""
        v = _integer(supply, "supply", -MAX_CAPACITY, MAX_CAPACITY)
        self._supply.append(v)
        self._drop_solver()
        return self._supply.size - 1

    def add_arc(self, tail: int, head: int, capacity: int, cost: int) -> int:
        """A new arc ``tail -> head`` carrying ``0 .. capacity`` units at ``cost`` each;
        returns its id."""
        t = self._node(tail, "tail")
        h = self._node(head, "head")
        k = _integer(capacity, "capacity", 0, MAX_CAPACITY)
        c = _integer(cost, "cost", -MAX_COST, MAX_COST)
        self._tail.append(t)
        self._head.append(h)
        self._cap.append(k)
        self._cost.append(c)
        self._drop_solver()
        return self._tail.size - 1

    def set_supply(self, node: int, supply: int) -> None:
        """Set ``node``'s supply (units it sends out net; negative: takes in)."""
        n = self._node(node, "node")
        v = _integer(supply, "supply", -MAX_CAPACITY, MAX_CAPACITY)
        self._supply.data[n] = v
        self._dirty_supply = True

    def set_arc(self, arc: int, capacity: int | None = None, cost: int | None = None) -> None:
        """Change ``arc``'s capacity and/or cost (``None``: unchanged)."""
        a = self._arc(arc)
        k = None if capacity is None else _integer(capacity, "capacity", 0, MAX_CAPACITY)
        c = None if cost is None else _integer(cost, "cost", -MAX_COST, MAX_COST)
        if c is not None:
            if self._solver is not None and (c < 0) != bool(self._rev[a]):
                self._drop_solver()  # the arc changes orientation in the solver
            self._cost.data[a] = c
            if self._solver is not None:
                self._s_cost[self._pos[a]] = abs(c)
                self._dirty_cost = True
        if k is not None:
            self._cap.data[a] = k
            if self._solver is not None:
                self._s_cap[self._pos[a]] = k
                self._dirty_cap = True
                # A reversed arc's capacity is also supply moved from its tail to its head.
                self._dirty_supply |= bool(self._rev[a])

    def capacity(self, arc: int) -> int:
        return int(self._cap.data[self._arc(arc)])

    def cost(self, arc: int) -> int:
        return int(self._cost.data[self._arc(arc)])

    def supply(self, node: int) -> int:
        return int(self._supply.data[self._node(node, "node")])

    def arc_ends(self, arc: int) -> tuple[int, int]:
        a = self._arc(arc)
        return int(self._tail.data[a]), int(self._head.data[a])

    @property
    def reused_basis(self) -> int:
        """Re-solves that started from the previous basis (pylmcf's warm starts and
        dual/primal repairs), over the graph's life."""
        return self._reused_before + self._solver_reused()

    # ------------------------------------------------------------------- solving
    def solve(self) -> FlowSolution:
        """Min-cost flow for the current supplies, capacities and costs."""
        supply = self._supply.view()
        if int(supply.sum()) != 0:
            return _infeasible()
        cap, cost = self._cap.view(), self._cost.view()
        worst = float(np.dot(np.abs(cost).astype(np.float64), cap.astype(np.float64)))
        if worst >= _COST_BOUND:
            raise ValueError(
                f"costs and capacities: the worst-case total cost {worst:.3g} could overflow "
                "int64; scale the costs down"
            )
        if self._solver is None:
            self._build()
        solver = self._solver
        assert solver is not None
        rev = self._rev
        if self._dirty_supply:
            solver.set_node_supply(self._solver_supply())
        if self._dirty_cap:
            solver.set_edge_capacities(self._s_cap)
        if self._dirty_cost:
            solver.set_edge_costs(self._s_cost)
        self._dirty_cap = self._dirty_cost = self._dirty_supply = False
        try:
            solver.solve()
        except RuntimeError as err:
            if "INFEASIBLE" not in str(err):
                raise
            return _infeasible()  # pylmcf starts the next solve cold
        flow = solver.result()[self._pos]
        if rev.any():
            flow[rev] = cap[rev] - flow[rev]
        flow.setflags(write=False)
        total = int(solver.total_cost()) + int(np.dot(cost[rev], cap[rev]))
        return FlowSolution(FlowStatus.OPTIMAL, total, flow)

    # ----------------------------------------------------------------- internals
    def _node(self, node: object, name: str) -> int:
        if isinstance(node, bool) or not isinstance(node, (int, np.integer)):
            raise ValueError(f"{name}: must be a node id (int), got {node!r}")
        if not 0 <= int(node) < self._supply.size:
            raise ValueError(f"{name}: no node {node!r} (the graph has {self._supply.size})")
        return int(node)

    def _arc(self, arc: object) -> int:
        if isinstance(arc, bool) or not isinstance(arc, (int, np.integer)):
            raise ValueError(f"arc: must be an arc id (int), got {arc!r}")
        if not 0 <= int(arc) < self._tail.size:
            raise ValueError(f"arc: no arc {arc!r} (the graph has {self._tail.size})")
        return int(arc)

    def _solver_reused(self) -> int:
        s = self._solver
        if s is None:
            return 0
        return int(s.warm_start_count() + s.dual_repair_count() + s.primal_repair_count())

    def _drop_solver(self) -> None:
        if self._solver is not None:
            self._reused_before += self._solver_reused()
            self._solver = None

    def _solver_supply(self) -> IntArray:
        supply = self._supply.view().copy()
        rev = self._rev
        if rev.any():
            k = self._cap.view()[rev]
            np.subtract.at(supply, self._tail.view()[rev], k)
            np.add.at(supply, self._head.view()[rev], k)
        return supply

    def _build(self) -> None:
        self._drop_solver()
        tail, head = self._tail.view(), self._head.view()
        cost = self._cost.view()
        rev = cost < 0
        starts = np.where(rev, head, tail)
        ends = np.where(rev, tail, head)
        order = np.lexsort((ends, starts))  # pylmcf wants edges sorted by (start, end)
        pos = np.empty_like(order)
        pos[order] = np.arange(len(order))
        self._rev, self._pos = rev, pos
        self._s_cap = self._cap.view()[order].copy()
        self._s_cost = np.abs(cost)[order]
        solver = _LemonGraph(
            self._supply.size,
            np.ascontiguousarray(starts[order]),
            np.ascontiguousarray(ends[order]),
        )
        solver.set_node_supply(self._solver_supply())
        solver.set_edge_capacities(self._s_cap)
        solver.set_edge_costs(self._s_cost)
        solver.set_warm_repair(_WARM_REPAIR)
        solver.set_warm_repair_budget(_WARM_REPAIR_BUDGET)
        self._solver = solver
        self._dirty_cap = self._dirty_cost = self._dirty_supply = False
        self.rebuilds += 1


def _infeasible() -> FlowSolution:
    empty = np.zeros(0, dtype=np.int64)
    empty.setflags(write=False)
    return FlowSolution(FlowStatus.INFEASIBLE, 0, empty)
