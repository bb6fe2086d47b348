"""The global grid resource manager (GGRMS): admission control (strict or
overbooking), all-or-nothing placement on distinct nodes, the policy registry and
the deterministic simulator that drives the scheduling core."""
