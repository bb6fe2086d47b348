"""The compiled modules (``workloads/native.py``): the same bytes as pure Python, the pure
Python copy a comparison runs against, the opt-in variable, and pickling of their frozen
records."""

from __future__ import annotations

import copy
import dataclasses
import importlib.machinery
import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coallocator.controller import (
    ControllerConfig,
    JobDecision,
    JobState,
    SubtaskState,
    WeightChange,
    Window,
)
from coallocator.phase_log import PeriodRecord
from global_manager.core import GlobalConfig, QueueMode
from global_manager.policies import policies
from global_manager.simulator import JobResult
from local_manager.scheduler import LocalSchedulerConfig
from workloads import native

#: Writes, under argv[1], the paper experiment's CSV and phase logs for every registered
#: policy and both calibrations, and the placement experiment's rows under the live
#: defaults (pending queue, each default placement): the paths the compiled modules take.
_WRITER = textwrap.dedent("""
    import dataclasses, json, sys
    from pathlib import Path
    from coalloc.experiments import paper, placement
    from global_manager.policies import policies
    from workloads.native import compiled_modules

    out = Path(sys.argv[1])
    for calibration, jobs in (("expected", 8), ("literal", 3)):
        logs = out / calibration / "logs"
        logs.mkdir(parents=True)
        cells = paper.make_cells((2, 3), (40.0,), sorted(policies.names()), 5, jobs,
                                 log_every=1, log_dir=logs, calibration=calibration)
        paper.write_csv(out / calibration / "results.csv", paper.run_matrix(cells, 1))
    cells = placement.make_cells((4,), (60.0,), placement.DEFAULT_PLACEMENTS, 2, 40, 7,
                                 policies=placement.DEFAULT_POLICIES)
    rows = [dataclasses.asdict(r) for r in placement.run_matrix(cells, 1)]
    for r in rows:
        r.pop("solver_ms_per_cycle")  # wall time, not a result
    (out / "placement.json").write_text(json.dumps(rows, sort_keys=True))
    (out / "compiled.json").write_text(json.dumps(compiled_modules()))
""")


def _write(out: Path, pure_tree: Path | None) -> dict[str, bool]:
    """Run the writer as installed, or (``pure_tree``) from that :func:`native.source_tree`."""
    env = dict(os.environ) if pure_tree is None else native.pure_python_env(pure_tree)
    subprocess.run([sys.executable, "-c", _WRITER, str(out)], check=True, env=env,
                   cwd=pure_tree or native.ROOT)
    compiled: dict[str, bool] = json.loads((out / "compiled.json").read_text())
    (out / "compiled.json").unlink()
    return compiled


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_the_compiled_modules_write_the_pure_python_bytes(tmp_path: Path) -> None:
    if not any(native.compiled_modules().values()):
        # Pure Python against itself proves nothing; CI (.ci/run) builds with
        # COALLOC_COMPILE=1 and runs this test there.
        assert not _expect_native(), "COALLOC_EXPECT_NATIVE is set but nothing is compiled"
        pytest.skip("this installation is pure Python (COALLOC_COMPILE=1 compiles)")
    compiled = _write(tmp_path / "installed", None)
    pure = _write(tmp_path / "pure", native.source_tree(tmp_path / "sources"))
    assert not any(pure.values()), pure  # the copy took every listed module to source
    ours, theirs = _files(tmp_path / "installed"), _files(tmp_path / "pure")
    assert sorted(ours) == sorted(theirs)
    # Per calibration its CSV and a log per policy and node count; the placement rows.
    assert len(ours) == 2 * (1 + 2 * len(policies.names())) + 1
    for name, data in ours.items():
        assert data == theirs[name], name
    # Where the build compiled them, all of them run compiled (they are built together);
    # in CI (.ci/run) they must be, or this test would compare pure Python with itself.
    assert len(set(compiled.values())) == 1, compiled
    if _expect_native():
        assert all(compiled.values()), compiled


def _expect_native() -> bool:
    return os.environ.get("COALLOC_EXPECT_NATIVE", "") not in ("", "0")


def test_an_installation_runs_all_or_none_of_the_modules_compiled() -> None:
    compiled = native.compiled_modules()
    assert sorted(compiled) == sorted(native.NATIVE_MODULES)
    if _expect_native():
        # CI (.ci/run) builds with mypyc: there, every listed module must be compiled.
        assert all(compiled.values()), compiled
    else:
        assert len(set(compiled.values())) == 1, compiled


@pytest.mark.parametrize(("value", "asked"), [("", False), ("0", False), (" 0 ", False),
                                              ("1", True), ("yes", True)])
def test_the_build_reads_its_variable(value: str, asked: bool) -> None:
    assert native.compile_asked({native.COMPILE_ENV: value}) is asked
    assert native.compile_asked({}) is False


def test_a_source_tree_runs_every_listed_module_from_source(tmp_path: Path) -> None:
    # Whatever is installed, a process started on the copy imports the .py files.
    tree = native.source_tree(tmp_path / "sources")
    assert native.compiled_files(tree) == []
    for name in native.NATIVE_MODULES:
        assert Path(tree, *name.split(".")).with_suffix(".py").is_file(), name
    script = ("import json; from workloads import native; "
              "print(json.dumps(native.compiled_modules()))")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, env=native.pure_python_env(tree), cwd=tmp_path)
    compiled = json.loads(done.stdout)
    assert sorted(compiled) == sorted(native.NATIVE_MODULES)
    assert not any(compiled.values()), compiled


def test_the_compiled_files_of_an_in_place_build_are_found(tmp_path: Path) -> None:
    # What `pip install -e .` without COALLOC_COMPILE removes: each listed module's
    # extension and mypyc's shared library, never a source or another extension.
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    built = [tmp_path / ("ab12__mypyc" + suffix),
             tmp_path / "coallocator" / ("core" + suffix),
             tmp_path / "fairness" / ("single" + suffix)]
    kept = [tmp_path / "coallocator" / "core.py", tmp_path / "coallocator" / ("wire" + suffix)]
    for path in built + kept:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    assert native.compiled_files(tmp_path) == sorted(built)


_RECORDS = [
    LocalSchedulerConfig(work_conserving=False),
    ControllerConfig(gain=0.02, pace_lead=0.5),
    GlobalConfig(rate_per_weight=12.5, queue="wait"),
    JobResult("j1", "coupled", "strict", 2, 0.0, True, "", True, 0.5, 1.5, 3.0, 120.0,
              nodes=("n0", "n1"), control_periods=4, wait=30.0, state="completed"),
]
_STATE = SubtaskState(1, "n1", 12.5, 4.0, 3.5, 0.5, 0.9, 3.0, 1.25)
_CHANGE = WeightChange(1, "n1", -0.5, 3.5, 0.5, 0.0, 3.0)
#: The controller's and the phase log's hot records.
_HOT_RECORDS = [
    _STATE,
    JobState("j1", 30.0, 10.0, (_STATE, SubtaskState(0, "n0", 10.0, 2.0, 2.0, 0.0))),
    _CHANGE,
    JobDecision("j1", 11.0, 2.5, Window.PACE, (_CHANGE,)),
    PeriodRecord("j1", 3, 30.0, 11.0, 2.5, "pace", {"1": -0.5}, {"1": 3.5}, {"1": 0.5},
                 estimated={"0": 1.5}),
]


@pytest.mark.parametrize("record", _RECORDS + _HOT_RECORDS, ids=lambda r: type(r).__name__)
def test_frozen_records_of_compiled_modules_survive_pickle_and_deepcopy(record: object) -> None:
    for copied in (pickle.loads(pickle.dumps(record)), copy.deepcopy(record)):
        assert copied == record and type(copied) is type(record)
    assert dataclasses.replace(record) == record  # type: ignore[type-var]


@pytest.mark.parametrize("record", _HOT_RECORDS, ids=lambda r: type(r).__name__)
def test_a_hot_record_is_a_value(record: object) -> None:
    """Equal field by field, hashable as a frozen record is (the flat ones), and, in both
    modes, no field can be set once it is built."""
    kind = type(record)
    fields = dataclasses.fields(record)  # type: ignore[arg-type]
    values = [getattr(record, f.name) for f in fields]
    assert kind(*values) == record
    assert [getattr(kind(*values), f.name) for f in fields] == values
    if not isinstance(record, PeriodRecord):  # its dicts make it unhashable, as before
        assert hash(kind(*values)) == hash(record)
    for f in fields:
        with pytest.raises(AttributeError):
            setattr(record, f.name, getattr(record, f.name))


@settings(max_examples=25, deadline=None)
@given(rate=st.floats(0.1, 1e4), share=st.floats(0.01, 1.0),
       queue=st.sampled_from(["wait", "reject", QueueMode.WAIT, QueueMode.REJECT]))
def test_a_global_config_comes_back_the_same(rate: float, share: float,
                                            queue: str | QueueMode) -> None:
    config = GlobalConfig(rate, share, queue)
    assert config.queue_mode is QueueMode(queue)
    assert pickle.loads(pickle.dumps(config)) == config
