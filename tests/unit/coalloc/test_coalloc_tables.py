"""The one table renderer: cells, alignment, escapes, missing values, widths."""

from __future__ import annotations

import math

import pytest

from coalloc.commands._runtime_args import fmt, table
from coalloc.tables import MISSING, cell, render


def test_cells_numbers_missing_and_text() -> None:
    assert cell(1.25, 3) == "1.250"
    assert cell(2.0) == "2.0"
    assert cell(7) == "7"  # counts stay integers whatever the digits
    assert cell(7, 3) == "7"
    assert cell(True) == "True"  # a bool is not a number
    for missing in (None, math.nan, math.inf, -math.inf):
        assert cell(missing, 2) == MISSING == "-"
    assert cell("plain text") == "plain text"
    assert cell("a\x1b[31mb\nc") == "a\\x1b[31mb\\nc"
    assert cell("\u202eevil") == "\\u202eevil"


def test_compact_and_scientific_cells() -> None:
    assert cell(3.0, 4, compact=True) == "3"
    assert cell(3.0000000000001, 4, compact=True) == "3"
    assert cell(2.5, 4, compact=True) == "2.5"
    assert cell(1 / 3, 4, compact=True) == "0.3333"
    assert cell(1.5e-5, 4, sci_below=1e-3) == "1.50e-05"
    assert cell(0.0, 4, sci_below=1e-3) == "0.0000"
    assert cell(0.5, 4, sci_below=1e-3) == "0.5000"


def test_numeric_columns_right_text_columns_left() -> None:
    out = render(("name", "n", "x"), [("a", 1, 2.5), ("longer", 100, None)])
    assert out.splitlines() == [
        "name      n    x",
        "a         1  2.5",
        "longer  100    -",
    ]


def test_widths_fit_the_widest_cell_or_header_and_lines_have_no_trailing_blanks() -> None:
    out = render(("a_long_header", "b"), [("x", "y"), ("xyz", "")])
    lines = out.splitlines()
    assert lines == ["a_long_header  b", "x              y", "xyz"]
    assert all(line == line.rstrip() for line in lines)


def test_digits_per_column_and_explicit_alignment() -> None:
    out = render(("p", "q", "r"), [(1.23456, 1.23456, "7%")], digits=(0, 3, 1), align="<>>")
    assert out.splitlines() == ["p      q   r", "1  1.235  7%"]


def test_a_column_of_only_missing_values_or_mixed_text_is_left_aligned() -> None:
    out = render(("a", "bb"), [(None, "x"), (math.nan, 3)])
    assert out.splitlines() == ["a  bb", "-  x", "-  3"]


def test_headers_and_cells_are_escaped() -> None:
    out = render(("h\x07",), [("\x1b[2J",)])
    assert "\x1b" not in out and "\x07" not in out
    assert out.splitlines() == ["h\\x07", "\\x1b[2J"]


def test_bad_shapes_are_refused() -> None:
    with pytest.raises(ValueError, match="row 0 has 1 cells for 2 columns"):
        render(("a", "b"), [("x",)])
    with pytest.raises(ValueError, match="digits"):
        render(("a", "b"), [], digits=(1,))
    with pytest.raises(ValueError, match="align"):
        render(("a", "b"), [], align="<^")


def test_empty_table_is_the_header_line() -> None:
    assert render(("a", "b"), []) == "a  b"


def test_the_runtime_args_names_are_the_renderer() -> None:
    assert fmt is cell and table is render
    assert fmt(0.123456, 4) == "0.1235" and fmt(None) == "-"
