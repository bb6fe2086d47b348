"""The policy registry: every name resolves, the uniform signature works, errors are clear."""

from __future__ import annotations

import pytest

from fairness import registry
from fairness.registry import POLICIES, PolicyName, allocate, get_policy, policy_names

PAPER_CAPACITY = [9, 18]
PAPER_DEMANDS = [[1, 4], [3, 1]]


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("drf", (3, 2)),
        ("drf_divisible", (3, 2)),
        ("asset_fairness", (2.52, 2.16)),
        ("ceei", (45 / 11, 18 / 11)),
    ],
)
def test_multi_resource_policies_on_the_paper_example(name: str, expected) -> None:
    assert allocate(name, PAPER_CAPACITY, PAPER_DEMANDS).tasks == pytest.approx(expected)


@pytest.mark.parametrize("name", ["max_min", "proportional"])
def test_single_resource_policies_use_demand_times_max_tasks(name: str) -> None:
    # 10 units; users want 1 x 2, 1 x unbounded, 2 x 1 -> demands 2, 10 (capped), 2:
    # max-min gives 2, 6, 2 units, i.e. 2, 6, 1 tasks.
    r = allocate(name, [10], [[1], [1], [2]], weights=None, max_tasks=[2, None, 1])
    assert r.tasks == pytest.approx((2, 6, 1))


def test_single_resource_policy_refuses_several_resources() -> None:
    with pytest.raises(ValueError, match=r"^capacity: this policy shares one resource"):
        allocate("max_min", PAPER_CAPACITY, PAPER_DEMANDS)


def test_ceei_refuses_caps() -> None:
    with pytest.raises(ValueError, match=r"^max_tasks\[1\]: the policy ceei does not support"):
        allocate("ceei", PAPER_CAPACITY, PAPER_DEMANDS, max_tasks=[None, 2])
    assert allocate("ceei", PAPER_CAPACITY, PAPER_DEMANDS, max_tasks=[None, None]).tasks


def test_unknown_name_lists_the_known_ones() -> None:
    with pytest.raises(ValueError, match=r"^policy: unknown 'fifo' \(known: drf, "):
        get_policy("fifo")


def test_every_name_is_registered_or_deferred() -> None:
    assert set(policy_names()) == {p.value for p in PolicyName}
    for name in PolicyName:
        assert name in POLICIES or name in registry._DEFERRED
    assert get_policy(PolicyName.DRF) is get_policy("drf")


def test_deferred_policy_reports_a_missing_module(monkeypatch) -> None:
    monkeypatch.setitem(registry._DEFERRED, PolicyName.DMFA_SRQ,
                        ("fairness.no_such_module", "dmfa_srq_policy"))
    monkeypatch.delitem(POLICIES, PolicyName.DMFA_SRQ, raising=False)
    with pytest.raises(ValueError, match=r"^policy: 'dmfa_srq' is not available"):
        get_policy("dmfa_srq")
