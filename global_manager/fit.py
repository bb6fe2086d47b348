"""The fit rule: when a rate fits a room, and when a gang fits distinct nodes.

One rule serves every placement policy (greedy, backfill, flow), the reasons, the drain
hold's shadow time and the start estimates: a rate ``x`` fits a room ``f`` (free budget,
Mcycles/s) iff ``x <= room_limit(f)``, ``room_limit(f) = f + FIT_SLACK * max(1, |f|)``.
The slack absorbs the rounding of float sums of rates (budgets less what is committed);
that rounding grows with the size of the numbers, so the slack is relative (an absolute
one would be less than one ulp for rooms above about 10^7 Mcycles/s), and for rooms up to
1 Mcycle/s it is an absolute ``FIT_SLACK``.

A gang fits when each subtask has a distinct node with its labels and room for it: the
greedy walk :func:`first_fit` decides it on ranked nodes, :func:`gang_misfit` without
ranking them (unlabelled gangs), :func:`max_matching` for any gang.

Kept apart from the registered policies so that it is compiled with the scheduling core
(``workloads/native.py``). Rates and budgets in Mcycles/s.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

from global_manager.flow import FlowGraph

__all__ = [
    "FIT_SLACK",
    "RankedNode",
    "first_fit",
    "fit_limits",
    "fits",
    "gang_misfit",
    "max_matching",
    "room_limit",
]

#: Relative slack of "a rate fits a room" (absolute below a room of 1 Mcycle/s).
FIT_SLACK = 1e-9


def room_limit(room: float) -> float:
    """The largest rate that fits ``room`` (Mcycles/s); an infinite room is its own
    limit (no slack is added to it, which would make ``-inf`` a NaN)."""
    if not math.isfinite(room):
        return room
    return room + FIT_SLACK * max(1.0, abs(room))


def fits(rate: float, room: float) -> bool:
    """Whether ``rate`` fits ``room`` (both Mcycles/s): the one fit rule."""
    return rate <= room_limit(room)


class RankedNode(Protocol):
    """What the fit reads of a node (:class:`~global_manager.cycle.NodeLoad`): its name,
    its strict ``budget`` and the rate ``committed`` against it (Mcycles/s), its labels."""

    @property
    def name(self) -> str: ...

    @property
    def budget(self) -> float: ...

    @property
    def committed(self) -> float: ...

    @property
    def labels(self) -> frozenset[str]: ...


def first_fit(
    rates: Sequence[float], labels: Sequence[frozenset[str]], ranked: Sequence[RankedNode],
    checked: bool,
) -> tuple[str, ...] | int:
    """The one all-or-nothing greedy loop: subtasks in decreasing rate (ties by index),
    each on the first node of ``ranked`` that is still unused, carries its labels
    (``labels`` empty: none asked) and, if ``checked``, has room for it (:func:`fits`
    its ``budget - committed``). The nodes by subtask, or the index of the first subtask
    that found none."""
    n = len(ranked)
    names = [node.name for node in ranked]
    used: set[str] = set()  # by name, as a node is named once
    chosen = [""] * len(rates)
    limit: list[float] = []
    if checked:
        limit = [room_limit(node.budget - node.committed) for node in ranked]
    node_labels: list[frozenset[str]] = []
    if labels:
        node_labels = [node.labels for node in ranked]
    for i in sorted(range(len(rates)), key=lambda i: (-rates[i], i)):
        rate = rates[i]
        for k in range(n):
            if names[k] in used or (labels and not labels[i] <= node_labels[k]):
                continue
            if checked and rate > limit[k]:
                continue
            chosen[i] = names[k]
            used.add(names[k])
            break
        else:
            return i
    return tuple(chosen)


def gang_misfit(rates: Sequence[float], limits: Sequence[float]) -> int:
    """The subtask :func:`first_fit` stops at on checked nodes whose rooms have the
    :func:`fit_limits` ``limits``, whatever their ranking; -1 when it places the whole
    gang.

    Greedy largest-first on distinct nodes places a gang iff its k-th largest rate fits
    the k-th largest room for every k; and it stops at the first k that does not: the
    nodes that fit that subtask are among the k-1 largest, and each larger subtask
    before it took one of them. So a gang that does not fit is found without ranking or
    walking the nodes (placement tries every pending job every cycle, and in a full grid
    almost none fits). Unlabelled gangs only (labels restrict the nodes)."""
    m = len(rates)
    n = len(limits)
    ordered = sorted(rates, reverse=True)  # first_fit's order, as values
    for k in range(m):
        v = ordered[k]
        if k < n and not v > limits[k]:
            continue
        # first_fit's k-th subtask: equal rates go by index, so it is the j-th lowest
        # index among the subtasks of rate v, j its place in their run of v.
        j = k
        while j > 0 and ordered[j - 1] == v:
            j -= 1
        j = k - j
        for i in range(m):
            if rates[i] == v:
                if j == 0:
                    return i
                j -= 1
    return -1


def fit_limits(rooms: Sequence[float]) -> list[float]:
    """:func:`gang_misfit`'s ``limits`` of nodes with these rooms (Mcycles/s): largest
    first, each its :func:`room_limit`."""
    return [room_limit(r) for r in sorted(rooms, reverse=True)]


def max_matching(eligible: Sequence[Sequence[int]]) -> int:
    """Most subtasks placed on distinct nodes, ``eligible[i]`` the nodes subtask ``i``
    may use (a bipartite matching, solved as a flow)."""
    n = len(eligible)
    if all(len(e) >= n for e in eligible):
        return n  # Hall: each subtask still has a node when the others have taken theirs
    g = FlowGraph()
    sink = g.add_node(0)
    subs = [g.add_node(1) for _ in eligible]
    nodes: dict[int, int] = {}
    for s, elig in zip(subs, eligible):
        g.add_arc(s, sink, 1, 1)  # unmatched
        for n in elig:
            if n not in nodes:
                nodes[n] = g.add_node(0)
                g.add_arc(nodes[n], sink, 1, 0)
            g.add_arc(s, nodes[n], 1, 0)
    g.set_supply(sink, -len(eligible))
    sol = g.solve()
    return len(eligible) - (sol.cost if sol.optimal else len(eligible))
