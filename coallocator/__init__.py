"""The co-allocation controller (SQ): overall error window, asynchrony window,
re-weighting through virtual subtasks, and the phase-difference log."""

from workloads.native import install_pure_python_switch

install_pure_python_switch()  # before any compiled module of this package is imported
