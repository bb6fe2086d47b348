"""The scheduling core's modules that mypyc can compile, and whether they run compiled.

Compiling is opt-in, as mypy and black have it: an install is pure Python unless
``COALLOC_COMPILE=1`` is set when it builds (``COALLOC_COMPILE=1 pip install -e .``), and
then ``setup.py`` compiles the modules of :data:`NATIVE_MODULES` (the simulator's hot path:
the node cycle, the controller's period, the placement cycle and their records) with mypyc,
which needs a C compiler. The compiled modules are the same source computing the same IEEE
double operations in the same order, so every result and log is byte for byte the pure
Python one (``tests/unit/workloads/test_workloads_native.py`` compares them; CI builds once
to run it).

An editable install compiles in place: the compiled twins sit beside the sources and
Python imports them first. So after editing a listed module, rebuild the same way, or run
``pip install -e .`` without the variable, which removes the twins (pure Python again).
Nothing checks at import time whether a twin is older than its source: whoever compiled
rebuilds, as with mypy's own compiled development builds.

The pure side of a comparison (the test above, ``bench/bench_sim.py``) is not a switch
inside the process: :func:`source_tree` copies the packages that hold a listed module,
sources only, and a process started with :func:`pure_python_env` imports them from there.

This module imports nothing but the standard library: ``setup.py`` reads the list from it
before the package is installed.
"""

from __future__ import annotations

import copyreg
import dataclasses
import importlib
import importlib.machinery
import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

#: The modules ``setup.py`` compiles with mypyc, by dotted name.
#: Not the records of ``workloads.model`` and ``workloads.messages``: pydantic (the job table's
#: serializer, ``workloads/records.py``) cannot validate compiled dataclasses.
NATIVE_MODULES: tuple[str, ...] = (
    "fairness._validate",
    "fairness.single",
    "clocks.virtual",
    "local_manager.scheduler",
    "local_manager.replay",
    "coallocator.controller",
    "coallocator.core",
    "coallocator.phase_log",
    "global_manager.core",
    "global_manager.engine",
    "global_manager.fit",
    "global_manager.pending_queue",
    "global_manager.start_estimate",
    "global_manager.simulator",
)

#: Set to anything but "" or "0" when building to compile :data:`NATIVE_MODULES`.
COMPILE_ENV = "COALLOC_COMPILE"

#: The folder that holds the project's top-level packages (this module's package's parent).
ROOT = Path(__file__).resolve().parent.parent


def compile_asked(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: this process's) asks the build to compile."""
    value = (os.environ if environ is None else environ).get(COMPILE_ENV, "")
    return value.strip() not in ("", "0")


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from a compiled extension (not from Python source)."""
    return isinstance(getattr(module, "__loader__", None),
                      importlib.machinery.ExtensionFileLoader)


def compiled_modules() -> dict[str, bool]:
    """Every listed module (imported if need be) and whether it runs compiled here."""
    return {name: is_compiled(importlib.import_module(name)) for name in NATIVE_MODULES}


def compiled_files(root: Path = ROOT) -> list[Path]:
    """The compiled files an in-place build left under ``root``: each listed module's
    extension and mypyc's shared library beside the packages."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    found = [p for p in root.glob("*__mypyc*") if p.name.endswith(suffixes)]
    for name in NATIVE_MODULES:
        package, _, leaf = name.rpartition(".")
        folder = root.joinpath(*package.split("."))
        found += [p for p in folder.glob(leaf + ".*") if p.name.endswith(suffixes)]
    return sorted(found)


def source_tree(dest: Path, root: Path = ROOT) -> Path:
    """Copy, under ``dest``, every top-level package under ``root`` that holds a listed
    module, Python sources only (no compiled twin); return ``dest``."""
    suffixes = tuple(importlib.machinery.EXTENSION_SUFFIXES)
    for package in sorted({name.partition(".")[0] for name in NATIVE_MODULES}):
        shutil.copytree(root / package, dest / package,
                        ignore=lambda _, names: [n for n in names if n.endswith(suffixes)
                                                 or n == "__pycache__"])
    return dest


def pure_python_env(tree: Path, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """``environ`` (default: this process's) with ``tree`` (:func:`source_tree`) first on
    ``PYTHONPATH``: a process started with it, and its workers, run every listed module
    as pure Python."""
    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(tree)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    return env


def _reduce_frozen(obj: Any) -> tuple[type, tuple[Any, ...]]:
    # pickle and copy call type(obj)(*values): the constructor, field by field.
    return type(obj), tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


def picklable_frozen_records(namespace: Mapping[str, object]) -> None:
    """Let pickle and ``copy`` rebuild the frozen dataclasses defined in ``namespace`` (a
    module's ``globals()``) through their constructor.

    A compiled frozen dataclass cannot be unpickled the default way (its state is set
    attribute by attribute, which ``frozen`` refuses); Ray, the worker pools and
    ``copy.deepcopy`` all pickle such records. Every field of these records is an
    ``__init__`` argument in declaration order, so the constructor rebuilds them; the pure
    Python classes are rebuilt the same way, so both modes behave alike."""
    module = namespace.get("__name__")
    for obj in list(namespace.values()):
        if (isinstance(obj, type) and obj.__module__ == module
                and dataclasses.is_dataclass(obj)
                and obj.__dataclass_params__.frozen  # type: ignore[attr-defined]
                and all(f.init for f in dataclasses.fields(obj))):
            copyreg.pickle(obj, _reduce_frozen)
