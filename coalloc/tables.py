"""The command line's one table renderer: a cell formatter and aligned columns.

Every command and experiment printout builds its tables here, so that numbers, missing
values and user-supplied text look the same everywhere:

- ``None``, NaN and infinities print as ``-``;
- integers (counts) print as integers; other real numbers with ``digits`` decimals
  (optionally ``compact``: whole numbers without decimals and trailing zeros dropped, or in
  scientific notation below ``sci_below``);
- anything else prints as ``str(value)`` with control characters escaped
  (:func:`coalloc.errors.escape_controls`), so a job name cannot drive the terminal.

:func:`render` pads columns to their widest cell, two spaces apart, right-aligns columns
of numbers (and their headers) and left-aligns text, and strips trailing blanks.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from typing import Any

from coalloc.errors import escape_controls

#: How a missing value (None, NaN, an infinity) prints.
MISSING = "-"
#: Spaces between two columns.
GAP = "  "


def is_missing(value: Any) -> bool:
    """None, NaN or an infinity: a cell printed as :data:`MISSING`."""
    if value is None:
        return True
    return is_number(value) and not math.isfinite(float(value))


def is_number(value: Any) -> bool:
    """A real number (int, float, numpy scalar), but not a bool."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def cell(value: Any, digits: int = 1, *, compact: bool = False, sci_below: float = 0.0) -> str:
    """``value`` as the text of one table cell.

    ``digits``: decimals of a non-integer number. ``compact``: a whole number (to within
    1e-9 relative) without decimals, otherwise at most ``digits`` decimals with trailing
    zeros dropped. ``sci_below``: a non-zero number whose magnitude is below this prints in
    scientific notation with two decimals (``1.50e-05``).
    """
    if is_missing(value):
        return MISSING
    if is_number(value):
        if isinstance(value, numbers.Integral):
            return str(int(value))
        v = float(value)
        if v != 0.0 and abs(v) < sci_below:
            return f"{v:.2e}"
        if compact:
            if abs(v - round(v)) < 1e-9 * max(1.0, abs(v)):
                return str(int(round(v)))
            return f"{v:.{digits}f}".rstrip("0").rstrip(".")
        return f"{v:.{digits}f}"
    return escape_controls(str(value))


def render(
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    *,
    digits: int | Sequence[int] = 1,
    align: str | None = None,
) -> str:
    """``rows`` under ``headers`` as an aligned text table (no trailing newline).

    ``digits``: decimals for every column, or one entry per column. ``align``: one
    character per column, ``<`` (left) or ``>`` (right); by default a column is
    right-aligned when every cell that is not missing is a number (and at least one is),
    and left-aligned otherwise. Cells are formatted by :func:`cell`; a string that is
    already formatted passes through unchanged (apart from escaping).
    """
    n = len(headers)
    for i, row in enumerate(rows):
        if len(row) != n:
            raise ValueError(f"row {i} has {len(row)} cells for {n} columns")
    places = [digits] * n if isinstance(digits, int) else list(digits)
    if len(places) != n:
        raise ValueError(f"digits has {len(places)} entries for {n} columns")
    if align is None:
        align = "".join(">" if _numeric([r[k] for r in rows]) else "<" for k in range(n))
    elif len(align) != n or set(align) - {"<", ">"}:
        raise ValueError(f"align must be {n} characters, each '<' or '>': {align!r}")
    cells = [[escape_controls(str(h)) for h in headers]]
    cells += [[cell(c, places[k]) for k, c in enumerate(r)] for r in rows]
    widths = [max(len(row[k]) for row in cells) for k in range(n)]
    lines = [
        GAP.join(c.rjust(w) if a == ">" else c.ljust(w) for c, w, a in zip(row, widths, align))
        .rstrip()
        for row in cells
    ]
    return "\n".join(lines)


def _numeric(column: Sequence[Any]) -> bool:
    present = [v for v in column if not is_missing(v) and v != MISSING]
    return bool(present) and all(is_number(v) for v in present)
