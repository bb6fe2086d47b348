"""Job and node model, job-spec files and workload generators; the errors every layer
raises and the messages between local managers and the controller. The bottom layer: it
imports no other package of the project (``docs/decisions.md``, "Layers")."""
