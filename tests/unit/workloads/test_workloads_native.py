"""The compiled modules (``workloads/native.py``): the same bytes as pure Python, the switch
back to source, the stale-source guard and pickling of their frozen records."""

from __future__ import annotations

import copy
import dataclasses
import json
import os
import pickle
import shutil
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


def _write(out: Path, pure: bool) -> dict[str, bool]:
    env = dict(os.environ)
    env.pop(native.PURE_PYTHON_ENV, None)
    if pure:
        env[native.PURE_PYTHON_ENV] = "1"
    subprocess.run([sys.executable, "-c", _WRITER, str(out)], check=True, env=env,
                   cwd=native._ROOT)
    compiled: dict[str, bool] = json.loads((out / "compiled.json").read_text())
    (out / "compiled.json").unlink()
    return compiled


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_the_compiled_modules_write_the_pure_python_bytes(tmp_path: Path) -> None:
    compiled = _write(tmp_path / "installed", pure=False)
    pure = _write(tmp_path / "pure", pure=True)
    assert not any(pure.values()), pure  # the switch took every listed module to source
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
def test_the_switch_reads_its_variable(value: str, asked: bool) -> None:
    assert native.pure_python_asked({native.PURE_PYTHON_ENV: value}) is asked
    assert native.pure_python_asked({}) is False


def _tree(root: Path) -> Path:
    """A copy of the listed modules' sources under ``root``, with an in-place build's
    record of them."""
    for name in native.NATIVE_MODULES:
        target = Path(native.source_path(name, str(root)))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(native.source_path(name), target)
    (root / "workloads").mkdir(exist_ok=True)
    (root / "workloads" / native.BUILD_RECORD).write_text(
        json.dumps(native.source_digests(str(root))))
    return root


def test_an_edited_source_is_stale_and_a_missing_record_is_not(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    assert native.stale_modules(str(root)) == []
    edited = Path(native.source_path("local_manager.scheduler", str(root)))
    edited.write_text(edited.read_text() + "\n# edited\n")
    assert native.stale_modules(str(root)) == ["local_manager.scheduler"]
    (root / "workloads" / native.BUILD_RECORD).write_text("not json")
    assert native.stale_modules(str(root)) == []
    (root / "workloads" / native.BUILD_RECORD).unlink()
    assert native.stale_modules(str(root)) == []


def test_a_stale_build_imports_every_listed_module_from_source(tmp_path: Path) -> None:
    # A process whose record says another source was compiled: every listed module comes
    # from its .py (never a mix), with a warning that says how to rebuild.
    script = textwrap.dedent("""
        import json, warnings
        from workloads import native
        native._switch_decided = False
        native.stale_modules = lambda root=None: ["clocks.virtual"]
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            native.install_pure_python_switch()
        print(json.dumps([native.compiled_modules(), [str(w.message) for w in seen]]))
    """)
    env = {k: v for k, v in os.environ.items() if k != native.PURE_PYTHON_ENV}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True, env=env, cwd=tmp_path)
    compiled, warned = json.loads(done.stdout)
    assert not any(compiled.values()), compiled
    assert len(warned) == 1 and "pip install -e ." in warned[0], warned


_RECORDS = [
    LocalSchedulerConfig(work_conserving=False),
    ControllerConfig(gain=0.02, pace_lead=0.5),
    GlobalConfig(rate_per_weight=12.5, queue="wait"),
    JobResult("j1", "coupled", "strict", 2, 0.0, True, "", True, 0.5, 1.5, 3.0, 120.0,
              nodes=("n0", "n1"), control_periods=4, wait=30.0, state="completed"),
]
_STATE = SubtaskState(1, "n1", 12.5, 4.0, 3.5, 0.5, 0.9, 3.0, 1.25)
_CHANGE = WeightChange(1, "n1", -0.5, 3.5, 0.5, 0.0, 3.0)
#: The final records (workloads.native.is_final_record): hot values with written-out
#: constructors.
_FINAL_RECORDS = [
    _STATE,
    JobState("j1", 30.0, 10.0, (_STATE, SubtaskState(0, "n0", 10.0, 2.0, 2.0, 0.0))),
    _CHANGE,
    JobDecision("j1", 11.0, 2.5, Window.PACE, (_CHANGE,)),
    PeriodRecord("j1", 3, 30.0, 11.0, 2.5, "pace", {"1": -0.5}, {"1": 3.5}, {"1": 0.5},
                 estimated={"0": 1.5}),
]


@pytest.mark.parametrize("record", _RECORDS + _FINAL_RECORDS, ids=lambda r: type(r).__name__)
def test_frozen_records_of_compiled_modules_survive_pickle_and_deepcopy(record: object) -> None:
    for copied in (pickle.loads(pickle.dumps(record)), copy.deepcopy(record)):
        assert copied == record and type(copied) is type(record)
    assert dataclasses.replace(record) == record  # type: ignore[type-var]


@pytest.mark.parametrize("record", _FINAL_RECORDS, ids=lambda r: type(r).__name__)
def test_a_final_record_is_a_value(record: object) -> None:
    """Equal field by field, hashable as a frozen record is (the flat ones), and, where
    its module runs compiled, no field can be set once it is built."""
    kind = type(record)
    assert native.is_final_record(kind)
    fields = dataclasses.fields(record)  # type: ignore[arg-type]
    values = [getattr(record, f.name) for f in fields]
    assert kind(*values) == record
    assert [getattr(kind(*values), f.name) for f in fields] == values
    if not isinstance(record, PeriodRecord):  # its dicts make it unhashable, as before
        assert hash(kind(*values)) == hash(record)
    if native.is_compiled(sys.modules[kind.__module__]):
        for f in fields:
            with pytest.raises(AttributeError):
                setattr(record, f.name, getattr(record, f.name))


def test_frozen_and_plain_dataclasses_are_not_final_records() -> None:
    assert not native.is_final_record(ControllerConfig)  # frozen, generated constructor
    assert not native.is_final_record(JobResult)
    assert not native.is_final_record(int)


@settings(max_examples=25, deadline=None)
@given(rate=st.floats(0.1, 1e4), share=st.floats(0.01, 1.0),
       queue=st.sampled_from(["wait", "reject", QueueMode.WAIT, QueueMode.REJECT]))
def test_a_global_config_comes_back_the_same(rate: float, share: float,
                                            queue: str | QueueMode) -> None:
    config = GlobalConfig(rate, share, queue)
    assert config.queue_mode is QueueMode(queue)
    assert pickle.loads(pickle.dumps(config)) == config
