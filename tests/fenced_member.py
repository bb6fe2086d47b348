"""A gang member that keeps its own record of when it ran, for the fencing test and
``bench/bench_fencing.py``: both read its records to tell whether two attempts of a gang
overlapped. Imported by name (``tests/`` is on the path)."""

from __future__ import annotations

from pathlib import Path


def member(records: Path, go: Path) -> list[str]:
    """A command that notes its start, spins until ``go`` exists, and notes its stop
    (also on SIGTERM, which a fence or a cancel sends first), in
    ``records/<run>-<index>``: ``start|stop <wall s>`` lines."""
    code = (
        "import os, signal, sys, time\n"
        f"rec = os.path.join({str(records)!r}, "
        "os.environ['COALLOC_RUN'] + '-' + os.environ['COALLOC_SUBTASK'])\n"
        "def note(what):\n"
        "    with open(rec, 'a') as f:\n"
        "        f.write(f'{what} {time.time()!r}\\n')\n"
        "def stop(*_):\n"
        "    note('stop')\n"
        "    sys.exit(143)\n"
        "signal.signal(signal.SIGTERM, stop)\n"
        "note('start')\n"
        f"while not os.path.exists({str(go)!r}):\n"
        "    t = time.time()\n"
        "    while time.time() - t < 0.05: pass\n"
        "note('stop')\n"
    )
    return ["python3", "-c", code]


def records_of(records: Path, run: str) -> dict[int, dict[str, float]]:
    """Run ``run``'s members' records: index -> {"start": wall s, "stop": wall s}."""
    out: dict[int, dict[str, float]] = {}
    for path in records.glob(f"{run}-*"):
        index = int(path.name.rsplit("-", 1)[1])
        for line in path.read_text().splitlines():
            what, at = line.split()
            out.setdefault(index, {})[what] = float(at)
    return out
