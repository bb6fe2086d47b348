"""Unit tests do not sleep.

A fixed sleep used as synchronisation assumes how long something takes: slow when the
guess is generous, flaky when it is not. Unit tests wait for the condition itself (an
event or condition variable, a manual clock, or ``support.wait_until`` polling a predicate
with a deadline; ``tests/support.py`` is outside ``tests/unit``).

This test walks every ``tests/unit/**/*.py`` with ``ast`` and fails on a call to
``time.sleep`` or ``asyncio.sleep`` (also through ``from time import sleep``, an alias of
the module, or ``import time as t``), outside :data:`ALLOWED`.
"""

from __future__ import annotations

import ast
from pathlib import Path

UNIT = Path(__file__).resolve().parent

#: ``(path relative to tests/unit, enclosing function)`` pairs allowed to sleep, each with
#: its reason. Empty: no unit test sleeps.
ALLOWED: frozenset[tuple[str, str]] = frozenset()

SLEEPS = {("time", "sleep"), ("asyncio", "sleep")}


def sleep_calls(source: str) -> list[tuple[int, str, str]]:
    """``(line, call as written, enclosing function)`` of every sleep call in ``source``."""
    tree = ast.parse(source)
    modules: dict[str, str] = {}  # local name -> module (import time as t)
    functions: dict[str, str] = {}  # local name -> "module.sleep" (from time import sleep)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in {"time", "asyncio"}:
                    modules[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.ImportFrom) and node.module in {"time", "asyncio"}:
            for alias in node.names:
                if (node.module, alias.name) in SLEEPS:
                    functions[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    found: list[tuple[int, str, str]] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                inner = f"{scope}.{child.name}" if scope else child.name
            if isinstance(child, ast.Call):
                f = child.func
                if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                        and (modules.get(f.value.id), f.attr) in SLEEPS):
                    found.append((child.lineno, f"{modules[f.value.id]}.{f.attr}", scope))
                elif isinstance(f, ast.Name) and f.id in functions:
                    found.append((child.lineno, functions[f.id], scope))
            visit(child, inner)

    visit(tree, "")
    return found


def test_no_unit_test_sleeps() -> None:
    offenders = []
    for path in sorted(UNIT.rglob("*.py")):
        rel = path.relative_to(UNIT).as_posix()
        for line, call, scope in sleep_calls(path.read_text(encoding="utf-8")):
            if (rel, scope) not in ALLOWED:
                offenders.append(f"tests/unit/{rel}:{line}: {call}() in {scope or 'module'}")
    assert not offenders, (
        "unit tests must not sleep; wait for an event or use support.wait_until:\n"
        + "\n".join(offenders)
    )


def test_the_scanner_finds_every_spelling() -> None:
    source = (
        "import time\nimport time as t\nimport asyncio\nfrom time import sleep\n"
        "from asyncio import sleep as nap\n"
        "def f():\n    time.sleep(1)\n    t.sleep(1)\n"
        "async def g():\n    await asyncio.sleep(1)\n    sleep(1)\n    await nap(0)\n"
        "class C:\n    def poll(self):\n        time.sleep(0.1)\n"
        "time.monotonic()\nother.sleep(1)\n"
    )
    assert sleep_calls(source) == [
        (7, "time.sleep", "f"), (8, "time.sleep", "f"), (10, "asyncio.sleep", "g"),
        (11, "time.sleep", "g"), (12, "asyncio.sleep", "g"), (15, "time.sleep", "C.poll"),
    ]
