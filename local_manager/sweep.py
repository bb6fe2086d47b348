"""The sweep for stale subtask processes: those whose owner (a local manager) is gone.

A SIGKILL of the owning process runs no cleanup (no code can), so its subtasks would keep
running, or stay stopped, forever. Every subtask process therefore carries its owner
(:data:`~local_manager.proc_tree.OWNER_ENV`) and its tag
(:data:`~local_manager.proc_tree.TAG_ENV`) in its environment, and
:func:`reap_stale_subtasks` kills those whose owner no longer exists, with their
descendants and their cgroup, and removes the exit status files nobody will read. A local
manager sweeps at start-up and when it closes (``runtime/node_runtime.py``,
``runtime/actors.py``), and ``coalloc down`` sweeps after removing the restart files
(``runtime/deploy.py``).

Left alone: the subtasks this process's executors hold
(:func:`local_manager.process_executor.live_tags`), those the caller keeps
(``keep_tags``: it is about to re-attach them), those another live owner re-attached
(:func:`adopted_elsewhere_removed`) and those whose crashed owner is being restarted and
will re-attach them (:func:`awaiting_reattach_removed`).
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

from local_manager import exit_recorder
from local_manager.cgroups import CGROUP_NAME_PREFIX, SubtaskCgroup, process_cgroup_dir
from local_manager.proc_tree import (
    PSUTIL,
    RESTART_FILE_ENV,
    TAG_ENV,
    ProcessTable,
    owner_alive,
    stale_subtasks,
)
from local_manager.process_executor import KILL_POLL_S, KILL_SETTLE_S, live_tags


def reap_stale_subtasks(
    proc_root: Path = Path("/proc"),
    keep_tags: Iterable[str] = (),
    status_dir: Path | None = None,
    own_restart_file: Path | None = None,
) -> list[int]:
    """SIGKILL every subtask process whose owner no longer exists, with its descendants
    and its cgroup; return the pids signalled, ascending.

    For the one exit no cleanup code survives: the owner SIGKILLed (``ray.kill`` on the
    local-manager actor). Its subtasks would keep running, or stay stopped, forever; a new
    local manager calls this at start-up. Subtasks whose tag is in ``keep_tags``, or held
    by a live executor of this process (re-attached), are left alone: attach first, then
    reap. See :func:`stale_subtasks`. Descendants are included even when they dropped the
    owner marker from their environment (exec with a clean environment), and a stale
    process's ``coalloc-*`` cgroup is killed whole (``cgroup.kill``) and removed once empty.
    Status files in ``status_dir`` (default: the default one) are removed for the subtasks
    killed here, and for those not kept, with no process left and older than
    :data:`STALE_STATUS_S` (a command that ended while its manager was down, whose
    manager never came back; a restarting manager reads its file within seconds).

    Subtasks whose owner is being restarted are not this sweep's to kill (see
    :func:`awaiting_reattach_removed`): any owner on the machine sweeps at its start and
    at its close, another deployment's too, and would otherwise kill a command while its
    own manager is down, before that manager re-attaches it ("ended while its manager was
    down; exit status lost"). ``own_restart_file``: the caller's own restart file (the
    subtasks naming it are the caller's to keep, by ``keep_tags``, or to kill).
    """
    keep = set(keep_tags) | live_tags()
    try:
        directory: Path | None = status_dir or exit_recorder.default_status_dir()
    except OSError:
        directory = None
    stale = adopted_elsewhere_removed(stale_subtasks(PSUTIL, keep), directory)
    stale = awaiting_reattach_removed(stale, own_restart_file, PSUTIL)
    tags = set()
    for pid in stale:
        env = PSUTIL.environ(pid)
        if env and env.get(TAG_ENV):
            tags.add(env[TAG_ENV])
    try:
        killed = _reap(stale, proc_root) if stale else []
    finally:
        _remove_stale_status_files(directory, keep, tags)
    return killed


def adopted_elsewhere_removed(
    stale: list[int], status_dir: Path | None, table: ProcessTable = PSUTIL
) -> list[int]:
    """``stale`` without the subtasks a live executor of another process re-attached:
    their environment still names the dead owner that started them, but the owner file
    next to their status file (written by :meth:`ProcessExecutor.attach`) names a live
    one. Another local manager on the host (another deployment's, or one starting up)
    must not kill them."""
    if status_dir is None or not stale:
        return stale
    alive: dict[str, bool] = {}
    out = []
    for pid in stale:
        env = table.environ(pid) or {}
        tag = env.get(TAG_ENV)
        if tag:
            if tag not in alive:
                marker = exit_recorder.read_owner(exit_recorder.status_path(status_dir, tag))
                alive[tag] = marker is not None and owner_alive(marker, table)
            if alive[tag]:
                continue
        out.append(pid)
    return out


#: How long (s) after its last write a restart file still holds its subtasks for the
#: owner's restart (:func:`awaiting_reattach_removed`). A live local manager rewrites its
#: checkpoint every cycle; the global manager gives a restarting one at most
#: ``max(node_timeout, MANAGER_RESTART_WAIT_S)`` (120 s real) before it declares the node
#: lost, so a manager it still waits for always finds its processes.
REATTACH_WAIT_S = 300.0


def awaiting_reattach_removed(
    stale: list[int],
    own_restart_file: Path | None = None,
    table: ProcessTable = PSUTIL,
    now: float | None = None,
) -> list[int]:
    """``stale`` without the subtasks whose own (crashed) owner will re-attach them:
    their environment names a restart file (:data:`RESTART_FILE_ENV`) other than
    ``own_restart_file`` that exists, names the subtask's tag, and was written less than
    :data:`REATTACH_WAIT_S` ago (``now``: s since the epoch, default the current time).
    A restart file that is gone (``coalloc down`` removed it), that no longer names the
    tag (its owner let the subtask go), or that has not been written for that long (its
    owner is not coming back) holds nothing: those subtasks stay stale."""
    if not stale:
        return stale
    when = time.time() if now is None else now
    own = own_restart_file.absolute() if own_restart_file is not None else None
    held: dict[str, str | None] = {}  # restart file -> its text while it holds, else None
    out = []
    for pid in stale:
        env = table.environ(pid) or {}
        path, tag = env.get(RESTART_FILE_ENV), env.get(TAG_ENV)
        if path and tag and Path(path) != own:
            if path not in held:
                held[path] = _holding_text(Path(path), when)
            text = held[path]
            if text is not None and tag in text:
                continue
        out.append(pid)
    return out


def _holding_text(path: Path, now: float) -> str | None:
    """The text of restart file ``path`` if it was written within REATTACH_WAIT_S of
    ``now``, else None (also when it is missing or unreadable)."""
    try:
        if now - path.stat().st_mtime > REATTACH_WAIT_S:
            return None
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


#: Age (s) after which the status file of a subtask with no process left, that no
#: checkpoint names, is removed by :func:`reap_stale_subtasks`.
STALE_STATUS_S = 3600.0


def _remove_stale_status_files(status_dir: Path | None, keep: set[str], killed: set[str]) -> None:
    """Remove the status files of the ``killed`` tags, and those of subtasks not in
    ``keep`` whose processes are all gone and that are older than STALE_STATUS_S."""
    if status_dir is None:
        return
    try:
        files = list(status_dir.glob(f"*{exit_recorder.STATUS_SUFFIX}"))
    except OSError:
        return
    if not files:
        return
    tags = live_tags()
    for pid in PSUTIL.pids():
        env = PSUTIL.environ(pid)
        if env and TAG_ENV in env:
            tags.add(env[TAG_ENV])
    now = time.time()
    for path in files:
        tag = path.name[: -len(exit_recorder.STATUS_SUFFIX)]
        try:
            old = now - path.stat().st_mtime > STALE_STATUS_S
            if tag in killed or (tag not in keep and tag not in tags and old):
                exit_recorder.remove_status(path)
        except OSError:
            pass


def _reap(stale: list[int], proc_root: Path) -> list[int]:
    targets = set(stale)
    for pid in stale:
        targets.update(PSUTIL.descendants(pid))
    cgroups: dict[Path, SubtaskCgroup] = {}
    for pid in stale:
        path = process_cgroup_dir(pid, proc_root)
        if path is not None and path.name.startswith(CGROUP_NAME_PREFIX) and path not in cgroups:
            try:
                cgroups[path] = SubtaskCgroup.open(path)
            except OSError:
                continue
    for cgroup in cgroups.values():
        targets.update(cgroup.procs())
        try:
            cgroup.kill()
        except OSError:
            pass
    killed = []
    for pid in sorted(targets):
        try:
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + KILL_SETTLE_S
    for cgroup in cgroups.values():
        while not cgroup.remove() and time.monotonic() < deadline:
            time.sleep(KILL_POLL_S)
    return killed
