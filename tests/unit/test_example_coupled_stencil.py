"""examples/coupled-stencil/stencil.py: the field does not depend on how many members
share it (the checksum member 0 prints is the one-process field's), its settings refuse
bad values with one line, and run alone it is one member that prints that checksum."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

SCRIPT = Path(__file__).parents[2] / "examples" / "coupled-stencil" / "stencil.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("coupled_stencil", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look the module up
    spec.loader.exec_module(module)
    return module


stencil = _load()


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 300), st.integers(0, 40), st.data())
def test_the_field_does_not_depend_on_the_split(cells: int, steps: int,
                                                data: st.DataObject) -> None:
    members = data.draw(st.integers(1, min(cells, 9)))
    one = stencil.solve(cells, steps)
    split = stencil.solve(cells, steps, members)
    assert split.shape == (cells,)
    assert stencil.checksum(split) == stencil.checksum(one)


def test_blocks_cover_the_cells_once() -> None:
    for members in range(1, 8):
        spans = [stencil.bounds(20, members, r) for r in range(members)]
        assert spans[0][0] == 0 and spans[-1][1] == 20
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))


@pytest.mark.parametrize(("name", "value", "says"), [
    ("STENCIL_WAIT", "sometimes", "expected spin or block"),
    ("STENCIL_STEPS", "many", "not a number"),
    ("STENCIL_COST", "-1", "expected a number >= 0"),
])
def test_bad_settings_exit_with_one_line(name: str, value: str, says: str) -> None:
    with pytest.raises(SystemExit) as info:
        stencil.settings({name: value})
    assert f"{name}={value!r}" in str(info.value) and says in str(info.value)


def test_alone_it_is_one_member_with_the_same_checksum() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COALLOC_")}
    env.update(STENCIL_CELLS="50", STENCIL_STEPS="7", STENCIL_UNIT_MS="0")
    out = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True,
                         text=True, timeout=120, check=True).stdout
    want = stencil.checksum(stencil.solve(50, 7))
    assert f"stencil checksum {want} cells 50 steps 7 members 1" in out
