"""The per-node local resource manager (LRMS): three queues (grid-local 0.3, grid QoS
0.5, best effort 0.2), weighted DRF inside each queue, virtual subtasks, and the
executors that really run subtasks."""
