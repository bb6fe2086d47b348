"""Errors that the command line reports as one clear line (no traceback).

They live in :mod:`workloads.errors` (the bottom layer, so that every layer can raise
them); this module re-exports them under the name the command line has always used."""

from __future__ import annotations

from workloads.errors import (
    UNPRINTABLE_CATEGORIES,
    NoAnswer,
    UserError,
    escape_controls,
    is_unprintable,
)

__all__ = ["UNPRINTABLE_CATEGORIES", "NoAnswer", "UserError", "escape_controls", "is_unprintable"]
