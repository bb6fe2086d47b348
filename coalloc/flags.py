"""Parsers of command-line values given as text; a bad value raises
:class:`~coalloc.errors.UserError` naming the flag, the value and the reason."""

from __future__ import annotations

import math

from coalloc.errors import UserError


def int_flag(flag: str, text: str, low: int | None, what: str = "an integer") -> int:
    """``text`` as an int, at least ``low`` (None: no bound). ``what`` names the expected
    form in the message for text that is not an integer."""
    try:
        value = int(text)
    except ValueError:
        raise UserError(f"{flag}: {text!r} is not {what}") from None
    if low is not None and value < low:
        raise UserError(f"{flag}: must be >= {low}, got {value}")
    return value


def seconds_flag(flag: str, text: str, what: str = "a number of seconds") -> float:
    """``text`` as a duration in seconds, finite and > 0. ``what`` names the expected form
    in the message for text that is not a number."""
    try:
        value = float(text)
    except ValueError:
        raise UserError(f"{flag}: {text!r} is not {what}") from None
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{flag}: must be a finite number of seconds > 0, got {text}")
    return value


#: Seconds per unit of a duration flag's suffix.
DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration_flag(flag: str, text: str) -> float:
    """``text`` as a duration in seconds, finite and > 0: a number with an optional unit,
    ``s``, ``m``, ``h`` or ``d`` (``1d``, ``6h``, ``30m``, ``90s``, ``3600``)."""
    raw = text.strip().lower()
    scale = DURATION_UNITS.get(raw[-1:], None) if raw else None
    number = raw[:-1] if scale is not None else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        raise UserError(f"{flag}: {text!r} is not a duration (expected e.g. 1d, 6h, 30m, "
                        "90s or a number of seconds)") from None
    if not math.isfinite(value) or value <= 0:
        raise UserError(f"{flag}: must be a duration > 0, got {text!r}")
    return value
