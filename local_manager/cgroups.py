"""cgroup v2 for process subtasks: finding a writable cgroup v2 directory, one child cgroup
per subtask that holds every descendant (``setsid`` cannot leave a cgroup), its CPU usage,
``cpu.max`` limits and ``cgroup.kill``.

Two uses of the same per-subtask cgroup, detected separately:

* **Containment** needs only a writable cgroup v2 directory (a delegated subtree, or the
  process's own cgroup when it may create children there). Every process forked inside
  the cgroup stays in it whatever it does with sessions or process groups; its CPU usage
  (``cpu.stat`` ``usage_usec``) counts every process that ever ran in it, exited ones
  included; ``cgroup.kill`` (Linux >= 5.14) SIGKILLs all of them at once.
* **Limiting** (``cpu.max``) also needs the ``cpu`` controller enabled for the children
  (``+cpu`` in the parent's ``cgroup.subtree_control``).

Units: CPU time in CPU-seconds (``cpu.stat`` counts µs), ``cpu.max`` in µs per period.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterable
from pathlib import Path

#: cgroup v2 bandwidth period (µs) written to ``cpu.max``.
CGROUP_PERIOD_US = 100_000
#: Smallest quota (µs) the kernel accepts in ``cpu.max``.
CGROUP_MIN_QUOTA_US = 1_000
#: Environment variable naming a delegated cgroup v2 directory to create subtask cgroups in.
CGROUP_PARENT_ENV = "COALLOC_CGROUP_PARENT"
#: Name prefix of every subtask cgroup (``coalloc-<subtask tag>``).
CGROUP_NAME_PREFIX = "coalloc-"


def _unescape_mount_field(field: str) -> str:
    # mountinfo escapes space, tab, newline and backslash as \ooo (octal).
    out, i = [], 0
    while i < len(field):
        code = field[i + 1 : i + 4]
        if field[i] == "\\" and len(code) == 3 and code.isdigit():
            out.append(chr(int(code, 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def cgroup2_mounts(mountinfo: str) -> list[tuple[str, Path]]:
    """The cgroup v2 mounts in a ``/proc/self/mountinfo`` text: (cgroup root, mount point)."""
    mounts = []
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep or not right.split() or right.split()[0] != "cgroup2":
            continue
        fields = left.split()
        if len(fields) >= 5:
            root, point = _unescape_mount_field(fields[3]), _unescape_mount_field(fields[4])
            mounts.append((root, Path(point)))
    return mounts


def own_cgroup2_path(proc_cgroup: str) -> str | None:
    """This process's cgroup v2 path from a ``/proc/self/cgroup`` text (the ``0::`` line)."""
    for line in proc_cgroup.splitlines():
        if line.startswith("0::"):
            return line[3:].strip() or "/"
    return None


def cgroup_dir(own: str, mounts: Iterable[tuple[str, Path]]) -> Path | None:
    """The directory of cgroup v2 path ``own`` under one of ``mounts`` (None if none
    shows it)."""
    for root, mount_point in mounts:
        if own == root or own.startswith(root.rstrip("/") + "/"):
            return mount_point / own[len(root) :].lstrip("/")
    return None


def _candidate_parent(proc_root: Path, parent: Path | None) -> tuple[Path | None, str]:
    """``parent``, else ``$COALLOC_CGROUP_PARENT``, else this process's own cgroup v2
    directory; (None, why) when there is none."""
    if parent is None and os.environ.get(CGROUP_PARENT_ENV):
        parent = Path(os.environ[CGROUP_PARENT_ENV])
    if parent is not None:
        return Path(parent), ""
    try:
        mountinfo = (Path(proc_root) / "self" / "mountinfo").read_text()
        own = own_cgroup2_path((Path(proc_root) / "self" / "cgroup").read_text())
    except OSError as exc:
        return None, f"cannot read cgroup information: {exc.strerror}"
    mounts = cgroup2_mounts(mountinfo)
    if not mounts:
        return None, "no cgroup v2 file system is mounted"
    if own is None:
        return None, "this process is in no cgroup v2 hierarchy"
    found = cgroup_dir(own, mounts)
    if found is None:
        return None, "this process's cgroup v2 is not visible under any mount"
    return found, ""


def cgroup_parent_usable(parent: Path) -> bool:
    """True if child cgroups of ``parent`` get the cpu controller and we may create them."""
    try:
        enabled = (Path(parent) / "cgroup.subtree_control").read_text().split()
    except OSError:
        return False
    return "cpu" in enabled and os.access(parent, os.W_OK | os.X_OK)


def cgroup_parent_writable(parent: Path) -> bool:
    """True if ``parent`` is a cgroup v2 directory (it has ``cgroup.procs``) that we may
    create child cgroups in."""
    return (Path(parent) / "cgroup.procs").exists() and os.access(parent, os.W_OK | os.X_OK)


def detect_cgroup_v2(
    proc_root: Path = Path("/proc"), parent: Path | None = None
) -> tuple[Path | None, str]:
    """Find a cgroup v2 directory whose children get the ``cpu`` controller, to *limit*
    subtasks with ``cpu.max``; (path or None, reason).

    Candidates: ``parent`` if given, else ``$COALLOC_CGROUP_PARENT``, else this process's
    own cgroup v2 directory. It is usable when its ``cgroup.subtree_control`` enables
    ``cpu`` and it is writable (a delegated subtree). Nothing is written here.
    """
    parent, why = _candidate_parent(proc_root, parent)
    if parent is None:
        return None, why
    if not cgroup_parent_usable(parent):
        return None, f"{parent}: cpu controller not enabled for children, or not writable"
    return parent, f"{parent}: writable cgroup v2 with the cpu controller"


def detect_cgroup_containment(
    proc_root: Path = Path("/proc"), parent: Path | None = None
) -> tuple[Path | None, str]:
    """Find a cgroup v2 directory to *contain* subtasks in (one child cgroup each, no
    controller needed); (path or None, reason). Same candidates as
    :func:`detect_cgroup_v2`; usable when it is a cgroup v2 directory we may write.
    Nothing is written here."""
    parent, why = _candidate_parent(proc_root, parent)
    if parent is None:
        return None, why
    if not cgroup_parent_writable(parent):
        return None, f"{parent}: not a writable cgroup v2 directory"
    return parent, f"{parent}: writable cgroup v2"


def cpu_max_value(share: float, period_us: int = CGROUP_PERIOD_US) -> str:
    """The ``cpu.max`` line for ``share`` cores: ``"<quota_us> <period_us>"``.

    The quota may exceed the period (several cores); it never goes below the kernel's
    minimum of 1000 µs (a share of 0 is enforced with SIGSTOP instead).
    """
    quota = max(CGROUP_MIN_QUOTA_US, round(share * period_us))
    return f"{quota} {period_us}"


class SubtaskCgroup:
    """One subtask's cgroup v2 directory ``path``: membership, CPU usage, limit, kill.

    :meth:`create` makes it under a parent; :meth:`open` takes an existing one (an
    executor re-attaching after a restart). Every method raises OSError when the kernel
    refuses; processes that exit meanwhile are skipped.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        if not (self.path / "cgroup.procs").exists():
            raise OSError(f"{self.path}: not a cgroup v2 directory (no cgroup.procs)")

    @classmethod
    def create(cls, parent: Path, name: str) -> SubtaskCgroup:
        """Create ``parent/name`` (it may exist already) and open it; a directory that
        does not turn into a cgroup (no ``cgroup.procs``) is removed again."""
        path = Path(parent) / name
        path.mkdir(exist_ok=True)
        try:
            return cls(path)
        except OSError:
            _rmdir(path)
            raise

    @classmethod
    def open(cls, path: Path) -> SubtaskCgroup:
        """An existing subtask cgroup."""
        return cls(path)

    @property
    def has_cpu_max(self) -> bool:
        """True if the ``cpu`` controller is enabled here (``cpu.max`` exists)."""
        return (self.path / "cpu.max").exists()

    def set_share(self, share: float) -> None:
        """Write ``cpu.max`` for ``share`` cores."""
        (self.path / "cpu.max").write_text(cpu_max_value(share))

    def add(self, pids: Iterable[int]) -> list[int]:
        """Move processes into the cgroup; return those moved (exited ones are skipped)."""
        moved = []
        for pid in pids:
            try:
                (self.path / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:
                continue
            moved.append(pid)
        return moved

    def procs(self) -> list[int]:
        """Pids of the live processes in the cgroup (zombies are not listed); [] once the
        cgroup is gone."""
        try:
            return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]
        except FileNotFoundError:
            return []

    def usage_s(self) -> float:
        """CPU-seconds used by every process that ever ran in the cgroup while it was in
        it (``cpu.stat`` ``usage_usec``, present without any controller)."""
        for line in (self.path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise OSError(f"{self.path}/cpu.stat: no usage_usec line")

    def signal(self, sig: int) -> None:
        """Send ``sig`` to every process in the cgroup."""
        for pid in self.procs():
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass

    def kill(self) -> bool:
        """SIGKILL every process in the cgroup: ``cgroup.kill`` where the kernel has it
        (atomic, forks in flight included); else SIGKILL to each listed process, passes
        repeated until the list is empty (a killed process forks no more). True if the
        cgroup had ``cgroup.kill``."""
        kill_file = self.path / "cgroup.kill"
        if kill_file.exists():
            try:
                kill_file.write_text("1")
                return True
            except FileNotFoundError:
                return True  # removed meanwhile: nothing left to kill
        for _ in range(100):
            if not self.procs():
                break
            self.signal(signal.SIGKILL)
        return False

    def remove(self) -> bool:
        """Remove the cgroup; only possible once it is empty (False otherwise)."""
        return _rmdir(self.path)


def _rmdir(path: Path) -> bool:
    try:
        path.rmdir()
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True



def process_cgroup_dir(pid: int, proc_root: Path = Path("/proc")) -> Path | None:
    """The directory of ``pid``'s cgroup v2 (from ``/proc/<pid>/cgroup`` and this
    process's mount table); None if it has none, is gone, or the cgroup is not mounted."""
    try:
        own = own_cgroup2_path((Path(proc_root) / str(pid) / "cgroup").read_text())
        mountinfo = (Path(proc_root) / "self" / "mountinfo").read_text()
    except OSError:
        return None
    return cgroup_dir(own, cgroup2_mounts(mountinfo)) if own is not None else None
