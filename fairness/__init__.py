"""Pure allocation policies from the source papers (no I/O, no clocks).

Weighted max-min (FMMF), proportional fairness, utility max-min, DRF and weighted DRF
(indivisible progressive filling and the divisible fluid form), the online
``DrfAllocator``, asset fairness, CEEI and the dynamic DMFA-SRQ allocator.
"""

# Note: the function ``drf`` shadows the submodule attribute ``fairness.drf``; import from
# the submodule with ``from fairness.drf import ...`` (``import fairness.drf as m`` would
# give the function).
from fairness.alternatives import asset_fairness, ceei
from fairness.drf import DrfAllocator, DrfResult, drf
from fairness.registry import POLICIES, PolicyName, allocate, get_policy, policy_names
from fairness.single import max_min_fair, proportional_fair, utility_max_min

__all__ = [
    "POLICIES",
    "DrfAllocator",
    "DrfResult",
    "PolicyName",
    "allocate",
    "asset_fairness",
    "ceei",
    "drf",
    "get_policy",
    "max_min_fair",
    "policy_names",
    "proportional_fair",
    "utility_max_min",
]
