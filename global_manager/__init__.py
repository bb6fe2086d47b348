"""The global grid resource manager (GGRMS): admission control (strict or
overbooking), all-or-nothing placement on distinct nodes, the policy registry and
the deterministic simulator that drives the scheduling core."""

from workloads.native import install_pure_python_switch

install_pure_python_switch()  # before any compiled module of this package is imported
