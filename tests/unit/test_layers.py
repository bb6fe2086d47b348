"""Layers only point down: a package imports only packages in lower layers.

The layers, bottom to top (``docs/decisions.md``, "Layers"):

1. ``workloads``: records, errors (``workloads.errors``), messages (``workloads.messages``)
2. ``fairness``, ``clocks``: allocation policies; clocks
3. ``local_manager``, ``coallocator``: the per-node scheduler; the SQ controller
4. ``global_manager``: admission, placement, the simulator
5. ``runtime``: the live runtime on Ray
6. ``coalloc``: the command line and the Python client

Packages in the same layer do not import each other either. On top of the order,
``runtime`` must not import ``global_manager.simulator``: the runtime drives the core
itself, and takes the core's configuration from ``global_manager.config``.

Every import counts: ``import x``, ``from x import y`` (relative ones resolved), at any
depth (inside functions, under ``if TYPE_CHECKING:``, in ``try``), and
``importlib.import_module`` with a literal name. A ``TYPE_CHECKING``-only import is still
a dependency of the code's meaning, so the simple rule holds: it counts. Imports of
anything outside the project's packages (the standard library, third parties) are ignored.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - mypy (a test dependency) installs tomli before 3.11
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]

#: Bottom to top; the packages of one layer are peers.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("workloads",),
    ("fairness", "clocks"),
    ("local_manager", "coallocator"),
    ("global_manager",),
    ("runtime",),
    ("coalloc",),
)

#: Modules a package must not import even though their package is below it.
FORBIDDEN: Mapping[str, tuple[str, ...]] = {"runtime": ("global_manager.simulator",)}


@dataclass(frozen=True)
class Import:
    """One imported module: ``module`` is imported by ``path`` (line ``line``), which
    belongs to the top-level package ``package``. For ``from module import a, b``,
    ``names`` holds ``module.a`` and ``module.b`` (each may be a module itself)."""

    path: str
    line: int
    package: str
    module: str
    names: tuple[str, ...] = ()


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(node: ast.AST, here: str, is_package: bool) -> Iterator[tuple[str, tuple[str, ...]]]:
    """The modules ``node`` imports, in full, each with the names taken from it."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, ()
    elif isinstance(node, ast.ImportFrom):
        if node.level:
            base = here.split(".") if is_package else here.split(".")[:-1]
            base = base[: len(base) - (node.level - 1)]
            module = ".".join(base + ([node.module] if node.module else []))
        else:
            module = node.module or ""
        yield module, tuple(f"{module}.{a.name}" for a in node.names if a.name != "*")
    elif (
        isinstance(node, ast.Call)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and (
            (isinstance(node.func, ast.Attribute) and node.func.attr == "import_module")
            or (isinstance(node.func, ast.Name)
                and node.func.id in ("import_module", "__import__"))
        )
    ):
        yield node.args[0].value, ()


def imports(root: Path, packages: Iterable[str]) -> list[Import]:
    """Every import of a project package made by a module under ``root/<package>/``."""
    known = set(packages)
    found: list[Import] = []
    for package in sorted(known):
        for path in sorted((root / package).rglob("*.py")):
            here = _module_name(root, path)
            rel = path.relative_to(root).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for node in ast.walk(tree):
                for module, names in _imported(node, here, path.name == "__init__.py"):
                    if module.split(".")[0] in known:
                        line = getattr(node, "lineno", 0)
                        found.append(Import(rel, line, package, module, names))
    return found


def violations(
    found: Iterable[Import],
    layers: Sequence[Sequence[str]] = LAYERS,
    forbidden: Mapping[str, Sequence[str]] = FORBIDDEN,
) -> list[str]:
    """One line per import that points up or sideways, or reaches a forbidden module."""
    rank = {p: i for i, layer in enumerate(layers) for p in layer}
    out: set[str] = set()
    for imp in found:
        where = f"{imp.path}:{imp.line}: {imp.package} imports"
        target = imp.module.split(".")[0]
        if target == imp.package:
            pass
        elif target not in rank or imp.package not in rank:
            out.add(f"{imp.path}:{imp.line}: {imp.module}: a package with no layer")
        elif rank[target] > rank[imp.package]:
            out.add(f"{where} {imp.module}, a higher layer")
        elif rank[target] == rank[imp.package]:
            out.add(f"{where} {imp.module}, a peer in the same layer")
        for bad in forbidden.get(imp.package, ()):
            for name in (imp.module, *imp.names):
                if name == bad or name.startswith(bad + "."):
                    out.add(f"{where} {bad}, which it must not")
    return sorted(out)


def top_level_packages() -> list[str]:
    with open(ROOT / "pyproject.toml", "rb") as f:
        listed = tomllib.load(f)["tool"]["setuptools"]["packages"]
    return sorted({p.split(".")[0] for p in listed})


# ----------------------------------------------------------------------------- the tree


def test_every_shipped_package_has_a_layer() -> None:
    layered = sorted(p for layer in LAYERS for p in layer)
    assert layered == top_level_packages()


def test_imports_only_point_down() -> None:
    found = imports(ROOT, top_level_packages())
    assert len(found) > 50  # the walk did find the project's imports
    bad = violations(found)
    assert not bad, "imports against the layer order:\n" + "\n".join(bad)


# ------------------------------------------------------------------- the checker itself


def _write(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def test_the_checker_finds_back_edges_hidden_anywhere(tmp_path: Path) -> None:
    _write(tmp_path, {
        "low/__init__.py": "",
        "low/a.py": (
            "from typing import TYPE_CHECKING\n"
            "import os\n"
            "if TYPE_CHECKING:\n"
            "    from high.b import B\n"
            "def f():\n"
            "    import high\n"
            "    import importlib\n"
            "    return importlib.import_module('high.b')\n"
        ),
        "low/c.py": "from . import a\nfrom .a import f\n",  # within the package: fine
        "mid/__init__.py": "from low import a\nfrom mid2 import x\n",
        "mid2/__init__.py": "x = 1\n",
        "high/__init__.py": "from low.a import f\nfrom mid import simulator\n",
        "high/b.py": "if True:\n    from mid.simulator import run\n",
        "mid/simulator.py": "run = 1\n",
    })
    layers = (("low",), ("mid", "mid2"), ("high",))
    found = imports(tmp_path, ["low", "mid", "mid2", "high"])
    bad = violations(found, layers, {"high": ("mid.simulator",)})
    assert bad == [
        "high/__init__.py:2: high imports mid.simulator, which it must not",
        "high/b.py:2: high imports mid.simulator, which it must not",
        "low/a.py:4: low imports high.b, a higher layer",
        "low/a.py:6: low imports high, a higher layer",
        "low/a.py:8: low imports high.b, a higher layer",
        "mid/__init__.py:2: mid imports mid2, a peer in the same layer",
    ]


def test_the_checker_passes_a_tree_that_points_down(tmp_path: Path) -> None:
    _write(tmp_path, {
        "low/__init__.py": "import json\n",
        "high/__init__.py": "import low\nfrom low import x\nfrom . import y\n",
        "high/y.py": "",
    })
    found = imports(tmp_path, ["low", "high"])
    assert {(i.module, i.names) for i in found} == {
        ("low", ()), ("low", ("low.x",)), ("high", ("high.y",))
    }
    assert violations(found, (("low",), ("high",)), {}) == []


def test_a_package_outside_every_layer_is_reported(tmp_path: Path) -> None:
    _write(tmp_path, {"low/__init__.py": "import stray\n", "stray/__init__.py": ""})
    found = imports(tmp_path, ["low", "stray"])
    assert violations(found, (("low",),), {}) == [
        "low/__init__.py:1: stray: a package with no layer"
    ]


# --------------------------------------------------------------- cycles between modules


def module_graph(root: Path, packages: Iterable[str]) -> dict[str, set[str]]:
    """Module -> the modules of its own top-level package it imports (any import the
    layer walk counts; ``from p import m`` counts ``p.m`` when that is a module)."""
    known = sorted(set(packages))
    modules = {_module_name(root, p) for pkg in known for p in (root / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports(root, known):
        here = _module_name(root, root / imp.path)
        for name in (imp.module, *imp.names):
            if name in modules and name != here and name.split(".")[0] == imp.package:
                graph[here].add(name)
    return graph


def cycles(graph: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """The import cycles of ``graph``: each strongly connected set of two or more
    modules, sorted (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next((w for w in edges if w not in index or w in on_stack), None)
            if nxt is not None:
                if nxt in index:
                    low[node] = min(low[node], index[nxt])
                else:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                part = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    part.append(w)
                    if w == node:
                        break
                if len(part) > 1:
                    found.append(sorted(part))
    return sorted(found)


def test_no_modules_import_each_other_in_a_cycle() -> None:
    graph = module_graph(ROOT, top_level_packages())
    assert sum(len(v) for v in graph.values()) > 50  # the walk did find the imports
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_the_cycle_check_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/a.py": "from pkg.b import f\n",
        "pkg/b.py": "def f():\n    from pkg import c\n",
        "pkg/c.py": "import pkg.a\n",
        "pkg/d.py": "from pkg import a\nimport json\n",  # into the cycle, not part of it
        "pkg/e.py": "from . import e\n",  # itself (and its package): no cycle
    })
    graph = module_graph(tmp_path, ["pkg"])
    assert graph["pkg.d"] == {"pkg", "pkg.a"} and graph["pkg.e"] == {"pkg"}
    assert cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert cycles({"x": {"y"}, "y": set()}) == []
