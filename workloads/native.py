"""The scheduling core's compiled modules: which they are, whether they are in use, and the
switch back to pure Python (``docs/decisions.md``, "Issue 17, sixth pass").

The modules in :data:`NATIVE_MODULES` are the simulator's hot path (the node cycle, the
controller's period, the placement cycle and their records). ``setup.py`` compiles them with
mypyc when it can (a C compiler and mypy at build time): the same source, the same IEEE
double arithmetic in the same order, so every result and log is byte for byte the pure
Python one (``tests/unit/workloads/test_workloads_native.py`` compares them). Where the
build cannot compile, the package installs as pure Python and works the same, slower.

``COALLOC_PURE_PYTHON=1`` in the environment makes this process import the ``.py`` source of
every listed module even where its compiled twin is installed: for debuggers, Python-level
profilers and to compare the two. It must be set before the first of them is imported
(each package that holds one installs the switch when it is imported).

In an editable install (``pip install -e .``) the compiled twins sit beside the sources, and
an edited source would otherwise be shadowed by its stale twin. ``setup.py`` records each
source's SHA-256 when it compiles in place (:data:`BUILD_RECORD`); when any source differs
from the record, every listed module is imported from source (they are compiled together
and must not be mixed) and a warning says to rebuild.

This module imports nothing but the standard library: ``setup.py`` reads the list from it
before the package is installed.
"""

from __future__ import annotations

import copyreg
import dataclasses
import hashlib
import importlib.machinery
import importlib.util
import json
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
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

#: Set to anything but "" or "0" to import the listed modules from their ``.py`` source.
PURE_PYTHON_ENV = "COALLOC_PURE_PYTHON"

#: The file, beside this module, in which an in-place build records its sources' hashes.
BUILD_RECORD = "native_build.json"

#: The folder that holds the project's top-level packages (this module's package's parent).
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def source_path(name: str, root: str = _ROOT) -> str:
    """The ``.py`` file of the listed module ``name`` under ``root``."""
    return os.path.join(root, *name.split(".")) + ".py"


def source_digests(root: str = _ROOT) -> dict[str, str]:
    """SHA-256 (hex) of every listed module's source under ``root``."""
    digests = {}
    for name in NATIVE_MODULES:
        with open(source_path(name, root), "rb") as f:
            digests[name] = hashlib.sha256(f.read()).hexdigest()
    return digests


def stale_modules(root: str = _ROOT) -> list[str]:
    """The listed modules whose source changed since the in-place build recorded it (none
    when there is no record: a wheel install, a pure-Python one, a fresh checkout)."""
    try:
        with open(os.path.join(root, "workloads", BUILD_RECORD), encoding="utf-8") as f:
            recorded = json.load(f)
    except (OSError, ValueError):
        return []
    if not isinstance(recorded, dict):
        return []
    now = source_digests(root)
    return [name for name in NATIVE_MODULES if recorded.get(name) != now[name]]


def pure_python_asked(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``environ`` (default: this process's) asks for the pure-Python modules."""
    value = (os.environ if environ is None else environ).get(PURE_PYTHON_ENV, "")
    return value.strip() not in ("", "0")


class _SourceFirst:
    """A meta-path finder that loads the listed modules from their ``.py`` file, so that an
    installed compiled twin (found first by the default path finder) is passed over."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.names or not path:
            return None
        leaf = fullname.rpartition(".")[2]
        for folder in path:
            source = os.path.join(folder, leaf + ".py")
            if os.path.isfile(source):
                return importlib.util.spec_from_file_location(fullname, source)
        return None


_switch_decided = False


def install_pure_python_switch() -> None:
    """When :func:`pure_python_asked` or a listed source is stale (:func:`stale_modules`),
    put the source-first finder at the front of ``sys.meta_path``. Decided once per
    process, by the ``__init__`` of the first package imported that holds a listed module,
    so before any of them is imported."""
    global _switch_decided
    if _switch_decided:
        return
    _switch_decided = True
    if not pure_python_asked():
        stale = stale_modules()
        if not stale:
            return
        warnings.warn(
            f"coalloc: {', '.join(stale)} changed since the compiled modules were built; "
            "importing all of them from source (slower) until `pip install -e .` rebuilds them",
            RuntimeWarning, stacklevel=2)
    sys.meta_path.insert(0, _SourceFirst(NATIVE_MODULES))


def is_compiled(module: ModuleType) -> bool:
    """Whether ``module`` was loaded from a compiled extension (not from Python source)."""
    return isinstance(getattr(module, "__loader__", None),
                      importlib.machinery.ExtensionFileLoader)


def compiled_modules() -> dict[str, bool]:
    """Every listed module (imported if need be) and whether it runs compiled here."""
    import importlib

    return {name: is_compiled(importlib.import_module(name)) for name in NATIVE_MODULES}


def _reduce_frozen(obj: Any) -> tuple[type, tuple[Any, ...]]:
    # pickle and copy call type(obj)(*values): the constructor, field by field.
    return type(obj), tuple(getattr(obj, f.name) for f in dataclasses.fields(obj))


def is_final_record(kind: type) -> bool:
    """Whether ``kind`` is a *final record*: a dataclass declared
    ``@dataclass(slots=True, init=False, unsafe_hash=True)`` whose fields are all
    ``Final`` and set once by its own ``__init__``, which takes every field in declaration
    order (``docs/decisions.md``, "Issue 17, seventh pass"). The hot records are written
    so: compiled, their constructor is native and their fields read-only; a frozen
    dataclass's generated constructor stays interpreted. (Compiled, the annotations no
    longer say ``Final``: the declaration is what is read.)"""
    if not dataclasses.is_dataclass(kind):
        return False
    params = kind.__dataclass_params__  # type: ignore[attr-defined]
    return (not params.init and not params.frozen and params.eq and params.unsafe_hash
            and all(f.init for f in dataclasses.fields(kind)))


def picklable_frozen_records(namespace: Mapping[str, Any]) -> None:
    """Let pickle and ``copy`` rebuild the frozen dataclasses and final records
    (:func:`is_final_record`) defined in ``namespace`` (a module's ``globals()``) through
    their constructor.

    A compiled frozen dataclass cannot be unpickled the default way (its state is set
    attribute by attribute, which ``frozen`` refuses; a compiled final record's fields are
    read-only too); Ray, the worker pools and ``copy.deepcopy`` all pickle such records.
    Every field of these records is an ``__init__`` argument in declaration order, so the
    constructor rebuilds them; the pure Python classes are rebuilt the same way, so both
    behave alike."""
    module = namespace.get("__name__")
    for obj in list(namespace.values()):
        if not (isinstance(obj, type) and obj.__module__ == module
                and dataclasses.is_dataclass(obj)):
            continue
        frozen = (obj.__dataclass_params__.frozen  # type: ignore[attr-defined]
                  and all(f.init for f in dataclasses.fields(obj)))
        if frozen or is_final_record(obj):
            copyreg.pickle(obj, _reduce_frozen)
