"""Messages between local managers and the co-allocation controller.

They live in :mod:`workloads.messages` (the bottom layer, so that the local scheduler
and the controller both import them downwards); this module re-exports them."""

from __future__ import annotations

from workloads.messages import ProgressReport, ReweightCommand

__all__ = ["ProgressReport", "ReweightCommand"]
