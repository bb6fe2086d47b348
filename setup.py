"""Build script beside ``pyproject.toml`` (which holds the metadata): it compiles the
scheduling core's hot modules with mypyc when it can (``docs/decisions.md``, "Issue 17,
sixth pass").

The modules are listed in ``workloads/native.py``. They are compiled when mypy (a build
requirement) and a C compiler are at hand, and ``COALLOC_PURE_PYTHON`` is not set; if
compiling fails, the package installs as pure Python, with a warning, and behaves the
same, only slower.
"""

from __future__ import annotations

import json
import os
import runpy
import sys
import warnings
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
_native = runpy.run_path(str(HERE / "workloads" / "native.py"))

#: setup.py commands that build code (metadata-only commands never run mypyc).
_BUILDING = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def _fallback(reason: object) -> None:
    warnings.warn(f"coalloc: installing the pure-Python modules only ({reason}); "
                  "the simulator runs about 1.5x slower", stacklevel=2)


def _extensions() -> list[Any]:
    if _native["pure_python_asked"]() or not _BUILDING.intersection(sys.argv[1:]):
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as exc:
        _fallback(f"mypyc is not importable: {exc}")
        return []
    sources = [name.replace(".", "/") + ".py" for name in _native["NATIVE_MODULES"]]
    cwd = os.getcwd()
    os.chdir(HERE)  # mypyc reads the [tool.mypy] configuration of this project
    try:
        return list(mypycify(sources, opt_level="3"))
    except (Exception, SystemExit) as exc:  # a type error mypyc refuses, mostly
        _fallback(f"mypyc could not compile them: {exc!r}")
        return []
    finally:
        os.chdir(cwd)


class OptionalBuildExt(build_ext):
    """Build the compiled modules, or none of them: the per-module shims need the shared
    library built with them, so a failure removes what was built and falls back."""

    def run(self) -> None:
        # Only an in-place build (an editable install) puts compiled files beside the
        # sources, so only it rewrites the record of what they were built from.
        record = HERE / "workloads" / _native["BUILD_RECORD"]
        if self.inplace:
            record.unlink(missing_ok=True)
        try:
            super().run()
        except Exception as exc:  # no C compiler, missing headers, ...
            for path in self.get_outputs():
                Path(path).unlink(missing_ok=True)
            if self.inplace:  # and an earlier build's, which no record vouches for now
                for ext in self.extensions:
                    (HERE / self.get_ext_filename(ext.name)).unlink(missing_ok=True)
            _fallback(f"the C build failed: {exc}")
            return
        if self.extensions and self.inplace:
            # The compiled twins sit beside the sources: record what they were built from,
            # so that an edited source is not shadowed by a stale twin.
            digests = _native["source_digests"](str(HERE))
            record.write_text(json.dumps(digests, indent=1, sort_keys=True) + "\n")


setup(ext_modules=_extensions(), cmdclass={"build_ext": OptionalBuildExt})
