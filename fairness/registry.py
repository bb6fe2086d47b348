"""Allocation policies by name, so configuration files and the command line can pick one.

Every registered policy has the same signature::

    policy(capacity, demands, weights=None, max_tasks=None) -> DrfResult

with ``capacity`` ``C_j`` per resource (resource units), ``demands`` one per-task demand
vector per user (resource units per task), ``weights`` a scalar per user (or, where the
policy allows, a vector per user and resource), ``max_tasks`` a per-user cap on tasks
(``None`` entries unbounded). The result is a :class:`fairness.drf.DrfResult`.

The single-resource policies (``max_min``, ``proportional``) need exactly one resource;
user ``i`` then wants ``demands[i][0] * max_tasks[i]`` units (all of the capacity when
unbounded) and gets ``tasks[i] = a_i / demands[i][0]`` (real) tasks.

Adding a policy: add its name to :class:`PolicyName` and either an entry in
:data:`POLICIES` (for a function importable here without cycles) or in :data:`_DEFERRED`
(module and attribute, imported on first use). DMFA-SRQ (``fairness/dmfa.py``) hooks in
that way: its module provides ``dmfa_srq_policy`` with the signature above.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable, Sequence
from enum import Enum
from typing import Protocol

from fairness.alternatives import asset_fairness, ceei
from fairness.drf import DrfResult, Weights, _caps, _prepare, _result, _weight_matrix, drf
from fairness.single import max_min_fair, proportional_fair

__all__ = ["POLICIES", "Policy", "PolicyName", "allocate", "get_policy", "policy_names"]


class PolicyName(str, Enum):
    """Names of the allocation policies (the strings used in files and on the CLI)."""

    DRF = "drf"  #: indivisible DRF, progressive filling (Algorithm 1)
    DRF_DIVISIBLE = "drf_divisible"  #: fluid DRF (lexicographic max-min of dominant shares)
    ASSET_FAIRNESS = "asset_fairness"  #: max-min on aggregate shares (divisible)
    CEEI = "ceei"  #: Nash bargaining over dominant shares (divisible)
    MAX_MIN = "max_min"  #: weighted max-min on one resource (FMMF)
    PROPORTIONAL = "proportional"  #: weighted proportional fairness on one resource
    DMFA_SRQ = "dmfa_srq"  #: dynamic fair allocation (fairness/dmfa.py; deferred import)


class Policy(Protocol):
    """The uniform policy signature (see the module docstring)."""

    def __call__(
        self,
        capacity: Sequence[float],
        demands: Sequence[Sequence[float]],
        weights: Weights | None = None,
        max_tasks: Sequence[float | None] | None = None,
    ) -> DrfResult: ...


def _drf(capacity: Sequence[float], demands: Sequence[Sequence[float]],
         weights: Weights | None = None,
         max_tasks: Sequence[float | None] | None = None) -> DrfResult:
    return drf(capacity, demands, weights, max_tasks, divisible=False)


def _drf_divisible(capacity: Sequence[float], demands: Sequence[Sequence[float]],
                   weights: Weights | None = None,
                   max_tasks: Sequence[float | None] | None = None) -> DrfResult:
    return drf(capacity, demands, weights, max_tasks, divisible=True)


def _ceei(capacity: Sequence[float], demands: Sequence[Sequence[float]],
          weights: Weights | None = None,
          max_tasks: Sequence[float | None] | None = None) -> DrfResult:
    if max_tasks is not None:
        for i, cap in enumerate(_caps(max_tasks, len(demands))):
            if cap != math.inf:
                raise ValueError(f"max_tasks[{i}]: the policy ceei does not support caps")
    return ceei(capacity, demands, weights)  # type: ignore[arg-type]


def _single(
    share: Callable[[float, Sequence[float], Sequence[float] | None], tuple[float, ...]],
) -> Policy:
    def policy(capacity: Sequence[float], demands: Sequence[Sequence[float]],
               weights: Weights | None = None,
               max_tasks: Sequence[float | None] | None = None) -> DrfResult:
        cap, dem = _prepare(capacity, demands)
        if len(cap) != 1:
            raise ValueError(
                f"capacity: this policy shares one resource, got {len(cap)} resources")
        caps = _caps(max_tasks, len(dem))
        wanted = [min(row[0] * c, cap[0]) for row, c in zip(dem, caps)]
        amounts = share(cap[0], wanted, weights)  # type: ignore[arg-type]
        tasks = [a / row[0] for a, row in zip(amounts, dem)]
        return _result(cap, dem, tasks, _weight_matrix(weights, len(dem), 1))

    return policy


#: Name -> policy. Deferred policies (see :data:`_DEFERRED`) are added on first use.
POLICIES: dict[PolicyName, Policy] = {
    PolicyName.DRF: _drf,
    PolicyName.DRF_DIVISIBLE: _drf_divisible,
    PolicyName.ASSET_FAIRNESS: asset_fairness,  # type: ignore[dict-item]
    PolicyName.CEEI: _ceei,
    PolicyName.MAX_MIN: _single(max_min_fair),
    PolicyName.PROPORTIONAL: _single(proportional_fair),
}

#: Policies living in modules that import this one (or are heavy): (module, attribute),
#: imported by :func:`get_policy` on first use. This is the hook for DMFA-SRQ.
_DEFERRED: dict[PolicyName, tuple[str, str]] = {
    PolicyName.DMFA_SRQ: ("fairness.dmfa", "dmfa_srq_policy"),
}


def policy_names() -> tuple[str, ...]:
    """All policy names, in declaration order."""
    return tuple(p.value for p in PolicyName)


def get_policy(name: str | PolicyName) -> Policy:
    """The policy called ``name``.

    Raises:
        ValueError: ``policy: unknown 'x' (known: ...)``, or a deferred policy whose module
            is not there (yet).
    """
    try:
        key = PolicyName(name)
    except ValueError:
        raise ValueError(
            f"policy: unknown {name!r} (known: {', '.join(policy_names())})") from None
    if key not in POLICIES and key in _DEFERRED:
        module, attribute = _DEFERRED[key]
        try:
            POLICIES[key] = getattr(importlib.import_module(module), attribute)
        except ModuleNotFoundError as exc:
            if exc.name != module:
                raise  # a real import error inside the module: do not hide it
            raise ValueError(
                f"policy: {key.value!r} is not available (module {module} missing)") from None
        except AttributeError:
            raise ValueError(
                f"policy: {key.value!r} is not available ({module}.{attribute} missing)"
            ) from None
    return POLICIES[key]


def allocate(
    name: str | PolicyName,
    capacity: Sequence[float],
    demands: Sequence[Sequence[float]],
    weights: Weights | None = None,
    max_tasks: Sequence[float | None] | None = None,
) -> DrfResult:
    """Run the policy called ``name`` (see :func:`get_policy`)."""
    return get_policy(name)(capacity, demands, weights=weights, max_tasks=max_tasks)
