"""The greedy fit of one gang on ranked nodes (:func:`first_fit`): the kernel every greedy
placement policy runs for every job it tries, kept apart from the registered policies so
that it is compiled with the scheduling core (``workloads/native.py``; the policies'
registry decorators keep :mod:`global_manager.placer` interpreted).

Rates and budgets in Mcycles/s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from global_manager.flow_placement import FIT_SLACK

#: Absolute slack in "fits the free budget" of the greedy first fit (Mcycles/s).
FIT_EPS = 1e-9


class RankedNode(Protocol):
    """What the fit reads of a node (:class:`~global_manager.placer.NodeLoad`): its name,
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
    (``labels`` empty: none asked) and, if ``checked``, has free budget for it (its
    ``budget - committed``, with :data:`FIT_EPS` of slack). The nodes by subtask, or the
    index of the first subtask that found none."""
    n = len(ranked)
    names = [node.name for node in ranked]
    used: set[str] = set()  # by name, as a node is named once
    chosen = [""] * len(rates)
    room: list[float] = []
    if checked:
        room = [node.budget - node.committed for node in ranked]
    node_labels: list[frozenset[str]] = []
    if labels:
        node_labels = [node.labels for node in ranked]
    for i in sorted(range(len(rates)), key=lambda i: (-rates[i], i)):
        rate = rates[i]
        for k in range(n):
            if names[k] in used or (labels and not labels[i] <= node_labels[k]):
                continue
            if checked and rate > room[k] + FIT_EPS:
                continue
            chosen[i] = names[k]
            used.add(names[k])
            break
        else:
            return i
    return tuple(chosen)


def gang_misfit(rates: Sequence[float], limits: Sequence[float]) -> int:
    """The subtask :func:`first_fit` stops at on checked nodes whose free budgets, with
    :data:`FIT_EPS` added, are ``limits`` (largest first), whatever their ranking; -1 when
    it places the whole gang.

    Greedy largest-first on distinct nodes places a gang iff its k-th largest rate fits
    the k-th largest free budget for every k; and it stops at the first k that does not:
    the nodes that fit that subtask are among the k-1 largest, and each larger subtask
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


def slack_limits(rooms: Sequence[float]) -> list[float]:
    """The largest rate each of these free budgets takes under the flow solver's fit rule
    (:func:`~global_manager.flow_placement._fits`: a slack relative to the budget), in
    the order given (Mcycles/s): the start estimates' and ``never_placeable``'s
    :func:`gang_misfit` limits when ``rooms`` come largest first."""
    return [r + FIT_SLACK * max(1.0, abs(r)) for r in rooms]


def fit_limits(rooms: Sequence[float]) -> list[float]:
    """:func:`gang_misfit`'s ``limits`` of nodes with these free budgets (Mcycles/s):
    largest first, each with :data:`FIT_EPS` added as :func:`first_fit` adds it."""
    return [r + FIT_EPS for r in sorted(rooms, reverse=True)]
