"""Build script beside ``pyproject.toml`` (which holds the metadata). Compiling is opt-in:
an install is pure Python and needs no C compiler; with ``COALLOC_COMPILE=1`` in the
environment (``COALLOC_COMPILE=1 pip install -e .``) the scheduling core's hot modules,
listed in ``workloads/native.py``, are compiled with mypyc.

Asked to compile, the build compiles or fails with the reason (mypyc refuses a module, no
C compiler), as mypy's own build does under ``MYPY_USE_MYPYC=1``: whoever asks for the
compiled modules learns that they did not get them. mypy (mypyc) and numpy (whose type
hints mypyc reads where the modules use it) are build requirements only then: the PEP 517
backend asks ``setup_requires`` for them before it builds.

An editable install built without the variable removes the compiled files an earlier
compiled one left beside the sources, so ``pip install -e .`` is the way back to pure
Python.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
_native = runpy.run_path(str(HERE / "workloads" / "native.py"))

#: setup.py commands that build code (metadata-only commands never run mypyc).
_BUILDING = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}
#: The commands that build an editable install (beside the sources).
_EDITABLE = {"editable_wheel", "develop"}


def _extensions() -> list[Extension]:
    if not _BUILDING.intersection(sys.argv[1:]):
        return []
    from mypyc.build import mypycify  # a build requirement when compiling (setup_requires)

    sources = [name.replace(".", "/") + ".py" for name in _native["NATIVE_MODULES"]]
    cwd = os.getcwd()
    os.chdir(HERE)  # mypyc reads the [tool.mypy] configuration of this project
    try:
        return list(mypycify(sources, opt_level="3"))
    finally:
        os.chdir(cwd)


compiling = _native["compile_asked"]()
if not compiling and _EDITABLE.intersection(sys.argv[1:]):
    for path in _native["compiled_files"](HERE):
        path.unlink()
setup(
    ext_modules=_extensions() if compiling else [],
    setup_requires=["mypy>=1.8", "numpy>=1.24"] if compiling else [],
)
