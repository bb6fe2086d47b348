"""mypy over every package the project ships and every benchmark script, as part of the
test run (so CI runs it, and a benchmark's stale call into the packages fails it).

The packages are read from ``[tool.setuptools] packages`` in pyproject.toml, so a new
package is type-checked as soon as it is shipped; the benchmarks are every ``bench/*.py``,
so a new one is checked as soon as it is added. One mypy run checks both, as files (mypy
takes files or ``-p`` packages in one run, not both; a package's folder is checked as the
package). The options come from ``[tool.mypy]``, whose ``files`` list the same folders (a
bare ``mypy`` at the repository root checks the same). mypy's incremental cache is the
default ``.mypy_cache`` at the repository root (git-ignored): about 14 s on a cold cache
(12 s without the benchmarks), under 1 s when nothing changed (measured on two shared
cores). Not asserted.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - mypy itself depends on tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def pyproject() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)


def shipped_packages() -> list[str]:
    """The packages in pyproject's ``[tool.setuptools] packages`` whose parent is not
    listed too (``mypy -p`` checks a package's subpackages; naming both is an error)."""
    listed = pyproject()["tool"]["setuptools"]["packages"]
    return [p for p in listed if p.rpartition(".")[0] not in listed]


def package_folders() -> list[str]:
    """The shipped packages' folders, relative to the repository root."""
    return [pkg.replace(".", "/") for pkg in shipped_packages()]


def bench_scripts() -> list[str]:
    """Every benchmark script, ``bench/*.py``, relative to the repository root."""
    return sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "bench").glob("*.py"))


def test_bare_mypy_checks_the_shipped_packages_and_the_benchmarks() -> None:
    config = pyproject()["tool"]["mypy"]
    assert "packages" not in config  # mypy refuses files and packages together
    assert sorted(config["files"]) == sorted([*package_folders(), "bench"])


def test_mypy_reports_no_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    api = pytest.importorskip("mypy.api")
    monkeypatch.chdir(ROOT)
    scripts = bench_scripts()
    assert scripts, f"no benchmark scripts under {ROOT / 'bench'}"
    args = ["--config-file", str(ROOT / "pyproject.toml"), *package_folders(), *scripts]
    out, err, status = api.run(args)
    assert status == 0, f"mypy {' '.join(args)}\n{out}{err}"
    # Every module was checked (none left out by an exclude, say): mypy counts them.
    modules = sum(1 for d in package_folders() for _ in (ROOT / d).rglob("*.py"))
    assert f"no issues found in {modules + len(scripts)} source files" in out, out
