"""The per-node local resource manager (LRMS): three queues (grid-local 0.3, grid QoS
0.5, best effort 0.2), weighted DRF inside each queue, virtual subtasks, and the
executors that really run subtasks."""

from workloads.native import install_pure_python_switch

install_pure_python_switch()  # before any compiled module of this package is imported
