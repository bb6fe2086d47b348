"""Admission budgets and all-or-nothing placement of one submitted job on distinct
nodes (pure solvers)."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

import pytest

from global_manager.admission import (
    NoAdmission,
    OverbookingAdmission,
    StrictAdmission,
    admission_policies,
)
from global_manager.cycle import CycleRequest, GridNode, NodeLoad
from global_manager.greedy import GreedyPlacement, LeastLoaded, RandomPlacement
from global_manager.pending_job import PendingJob
from global_manager.placer import PlacementPolicy, placement_policies
from global_manager.registry import Registry


def load(name: str, free: float, cpu: float = 1000.0, load_: float = 0.0) -> NodeLoad:
    return NodeLoad(name, cpu, committed=0.0, budget=free, load=load_)


def request(rates: tuple[float, ...], nodes: tuple[NodeLoad, ...], checked: bool = True
            ) -> CycleRequest:
    """The submission of one job ``j`` of these expected rates (strict if ``checked``)."""
    grid = tuple(GridNode(n.name, n.cpu_rate, n.budget, n.committed, n.load, n.labels)
                 for n in nodes)
    job = PendingJob("j", "u", rates, rates, rates, tuple(frozenset() for _ in rates),
                     checked)
    return CycleRequest(0.0, (job,), grid, queue=False)


@dataclass(frozen=True)
class Placed:
    """Where job ``j`` went (``None``: rejected, with the ``reason``)."""

    nodes: tuple[str, ...] | None
    reason: str = ""

    @property
    def admitted(self) -> bool:
        return self.nodes is not None


def place(req: CycleRequest, policy: PlacementPolicy, rng: random.Random) -> Placed:
    reply = policy.schedule(req, rng)
    got = reply.placed.get("j")
    return Placed(got.nodes) if got is not None else Placed(None, reply.messages["j"])


def test_budgets_strict_overbooking_and_none() -> None:
    # 400 MHz node, QoS share 0.5.
    assert StrictAdmission().budget(400.0, 0.5) == 200.0
    assert OverbookingAdmission().budget(400.0, 0.5) == pytest.approx(210.0)
    assert OverbookingAdmission(ratio=0.1).budget(400.0, 0.5) == pytest.approx(220.0)
    assert NoAdmission().budget(400.0, 0.5) == math.inf
    assert admission_policies.create("overbooking").ratio == 0.05
    assert admission_policies.names() == ["measured_capacity", "none", "overbooking", "strict"]


@pytest.mark.parametrize("ratio", [-0.01, math.nan, math.inf])
def test_overbooking_ratio_is_validated(ratio: float) -> None:
    with pytest.raises(ValueError, match="overbooking ratio"):
        OverbookingAdmission(ratio=ratio)


def test_job_that_fits_only_with_five_percent_overbooking() -> None:
    # 400 MHz, committed 190 of a strict budget of 200 (overbooked: 210); the job wants 15.
    def node(policy) -> NodeLoad:
        return NodeLoad("a", 400.0, 190.0, policy.budget(400.0, 0.5), 190.0)

    strict = place(request((15.0,), (node(StrictAdmission()),)), LeastLoaded(), random.Random(0))
    assert not strict.admitted
    assert "subtask 0" in strict.reason and "15" in strict.reason
    sq = place(request((15.0,), (node(OverbookingAdmission()),)), LeastLoaded(), random.Random(0))
    assert sq.nodes == ("a",)
    # Exactly at the limit still fits; just above does not.
    at_limit = node(OverbookingAdmission())
    assert place(request((20.0,), (at_limit,)), LeastLoaded(), random.Random(0)).admitted
    assert not place(request((20.001,), (at_limit,)), LeastLoaded(), random.Random(0)).admitted


def test_all_or_nothing_one_subtask_that_does_not_fit_rejects_the_job() -> None:
    nodes = (load("a", 100.0), load("b", 100.0), load("c", 10.0))
    reply = place(request((50.0, 50.0, 50.0), nodes), LeastLoaded(), random.Random(0))
    assert reply.nodes is None and not reply.admitted
    assert reply.reason == "no free node can take subtask 2 (expected rate 50 Mcycles/s)"


def test_subtasks_go_to_distinct_nodes_even_when_one_node_could_take_all() -> None:
    nodes = (load("big", 1e6), load("small1", 10.0), load("small2", 10.0))
    reply = place(request((5.0, 5.0, 5.0), nodes), LeastLoaded(), random.Random(0))
    assert reply.nodes is not None
    assert sorted(reply.nodes) == ["big", "small1", "small2"]


def test_more_subtasks_than_nodes_or_none_at_all_is_rejected() -> None:
    nodes = (load("a", 1e6), load("b", 1e6))
    reply = place(request((1.0, 1.0, 1.0), nodes), LeastLoaded(), random.Random(0))
    assert (reply.nodes, reply.reason) == (None, "3 subtasks but only 2 nodes")
    assert place(request((), nodes), LeastLoaded(), random.Random(0)).reason == (
        "job has no subtasks"
    )


def test_largest_subtask_goes_first_to_the_node_with_most_free_budget() -> None:
    nodes = (load("a", 30.0), load("b", 100.0), load("c", 60.0))
    reply = place(request((20.0, 90.0, 50.0), nodes), LeastLoaded(), random.Random(0))
    assert reply.nodes == ("a", "b", "c")


def test_unchecked_jobs_ignore_budgets_and_go_to_the_least_loaded_per_mhz() -> None:
    nodes = (
        NodeLoad("a", 100.0, 0.0, 0.0, load=50.0),  # 0.5 per MHz
        NodeLoad("b", 1000.0, 0.0, 0.0, load=100.0),  # 0.1
        NodeLoad("c", 400.0, 0.0, 0.0, load=80.0),  # 0.2
    )
    reply = place(request((500.0, 10.0), nodes, checked=False), LeastLoaded(), random.Random(0))
    assert reply.nodes == ("b", "c")


def test_least_loaded_ties_are_broken_by_name() -> None:
    nodes = (load("z", 50.0), load("m", 50.0), load("a", 50.0))
    assert [n.name for n in LeastLoaded().rank(nodes, True, random.Random(0))] == ["a", "m", "z"]


class _FixedOrder(GreedyPlacement):
    """A placement policy that tries the nodes in the order given."""

    name = "fixed"

    def rank(self, nodes: tuple[NodeLoad, ...], checked: bool, rng: random.Random):
        return list(nodes)


def test_first_fit_in_rank_order_finds_a_placement_whenever_one_exists() -> None:
    # The policy tries the big node first; the small subtask must not take it before the
    # big one does (subtasks are placed largest first).
    nodes = (load("big", 100.0), load("small", 20.0))
    reply = place(request((10.0, 90.0), nodes), _FixedOrder(), random.Random(0))
    assert reply.nodes == ("small", "big")
    # In rank order, not by free budget: both fit anywhere, so the first subtask placed
    # (the larger) takes the first node.
    nodes = (load("small", 50.0), load("big", 100.0))
    reply = place(request((10.0, 20.0), nodes), _FixedOrder(), random.Random(0))
    assert reply.nodes == ("big", "small")


def test_random_placement_is_deterministic_under_a_seed() -> None:
    nodes = tuple(load(f"n{i}", 1000.0) for i in range(8))

    def orders(seed: int) -> list[tuple[str, ...]]:
        rng = random.Random(seed)
        return [
            place(request((1.0, 1.0, 1.0), nodes), RandomPlacement(), rng).nodes or ()
            for _ in range(5)
        ]

    assert orders(11) == orders(11)
    assert orders(11) != orders(12)
    # The order does not depend on the order the nodes are listed in.
    rng_a, rng_b = random.Random(4), random.Random(4)
    shuffled = tuple(reversed(nodes))
    assert RandomPlacement().rank(nodes, True, rng_a) == RandomPlacement().rank(
        shuffled, True, rng_b
    )


def test_placement_registry() -> None:
    assert placement_policies.names() == ["backfill", "flow", "least_loaded", "random"]
    assert isinstance(placement_policies.create("random"), RandomPlacement)
    assert "least_loaded" in placement_policies
    assert list(placement_policies) == ["backfill", "flow", "least_loaded", "random"]
    with pytest.raises(ValueError, match=r"unknown placement policy 'best' \(known: backfill, "):
        placement_policies.create("best")


def test_registry_refuses_a_name_twice() -> None:
    reg: Registry[int] = Registry("thing")
    reg.register("one")(lambda: 1)
    with pytest.raises(ValueError, match="thing 'one' is already registered"):
        reg.register("one")(lambda: 2)
    assert reg.create("one") == 1


def test_free_is_budget_minus_committed() -> None:
    assert NodeLoad("a", 400.0, 150.0, 210.0, 0.0).free == 60.0


def test_measured_capacity_overbooks_what_the_qos_queue_really_gets() -> None:
    from global_manager.admission import MeasuredCapacityAdmission

    a = MeasuredCapacityAdmission()
    assert a.measures_capacity and not OverbookingAdmission().measures_capacity
    # Unknown or below the share: the QoS share, overbooked (OverbookingAdmission's).
    for capacity in (None, 0.0, 150.0, math.nan, -5.0):
        assert a.budget(400.0, 0.5, capacity) == pytest.approx(210.0)
    # Above the share: what the queue gets, overbooked; never more than the node.
    assert a.budget(400.0, 0.5, 250.0) == pytest.approx(262.5)
    assert a.budget(400.0, 0.5, 400.0) == pytest.approx(420.0)
    assert a.budget(400.0, 0.5, 9e9) == pytest.approx(420.0)
    assert MeasuredCapacityAdmission(ratio=0.0).budget(400.0, 0.5, 300.0) == 300.0
    with pytest.raises(ValueError, match="overbooking ratio"):
        MeasuredCapacityAdmission(ratio=-0.1)
    # The others ignore a measured capacity.
    assert OverbookingAdmission().budget(400.0, 0.5, 400.0) == pytest.approx(210.0)
    assert StrictAdmission().budget(400.0, 0.5, 400.0) == 200.0
