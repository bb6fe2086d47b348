"""The exit recorder: a tiny supervisor that outlives its manager's knowledge of a command.

A local manager started with ``kill -9`` and restarted by Ray re-attaches to the running
process group of a process subtask, but it is not the command's parent and cannot
``wait`` for it. So :class:`~local_manager.process_executor.ProcessExecutor` starts every
command through this module, run as a script (``python3 -I -S exit_recorder.py
STATUS_FILE -- argv...``; standard library only, so it needs neither this project on
``sys.path`` nor ``site``):

* it is the session and process-group leader (the executor starts it with
  ``start_new_session``) and forks the real command as its only child in the same group
  and session, so the pacer's SIGSTOP/SIGCONT of the group, a cancel's kill of the group
  and the subtask's cgroup reach both;
* it forwards termination signals (SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2)
  sent to it alone to the command. A signal sent by a member of the group, by the owner
  named in :data:`OWNER_ENV` (the manager that started it) or by the owner in
  ``STATUS_FILE.owner`` (a manager that re-attached; :func:`write_owner`) is not
  forwarded: those signal the whole group, and a second SIGTERM means "force" to some
  programs;
* it waits for the command (``waitpid`` without ``WUNTRACED``: the pacer's stops do not
  wake it) and writes its exit status atomically (temporary file, ``fsync``, rename,
  directory ``fsync``) to ``STATUS_FILE`` as JSON ``{"version": 1, "pid": <command
  pid>, "status": <int>}``; ``status`` follows :func:`os.waitstatus_to_exitcode`
  (negative: killed by that signal);
* then it ends the same way: ``exit(status)``, or the same signal raised on itself (core
  dumps disabled), so its own parent reads what the command did.

The command's ``exec`` failing is exit status 127 (not found) or 126 (cannot execute),
with the reason on stderr, as a shell does. The executor checks ``argv[0]`` before it
starts the recorder, so this is only a race (the file removed in between).
"""

from __future__ import annotations

import errno
import json
import os
import resource
import signal
import sys
import tempfile
import threading
from pathlib import Path

#: Version of the status file's layout.
STATUS_VERSION = 1
#: The environment variable naming the subtask's owner ("pid:create time"); the same as
#: :data:`local_manager.proc_tree.OWNER_ENV` (this module imports nothing of the project).
OWNER_ENV = "COALLOC_EXECUTOR_OWNER"
#: Where status files go unless the executor is given a directory.
STATUS_DIR_ENV = "COALLOC_EXIT_DIR"
#: Suffix of a status file; the owner file adds ``.owner``.
STATUS_SUFFIX = ".exit"
OWNER_SUFFIX = ".owner"
#: The signals forwarded to the command when sent to the recorder alone.
FORWARDED = (
    signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
    signal.SIGUSR2,
)
#: This file, to run as a script.
SCRIPT = str(Path(__file__).resolve())


# --------------------------------------------------------------------------- files


def default_status_dir() -> Path:
    """``$COALLOC_EXIT_DIR``, else ``<tmp>/coalloc-exit-<uid>``: created 0700 if missing
    and refused (OSError) unless it is a directory owned by this user that no one else
    can write to (a status file there decides whether a job failed)."""
    raw = os.environ.get(STATUS_DIR_ENV)
    default = Path(tempfile.gettempdir()) / f"coalloc-exit-{os.getuid()}"
    path = (Path(raw) if raw else default).absolute()
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    st = path.lstat()
    if not path.is_dir() or path.is_symlink():
        raise OSError(errno.ENOTDIR, "exit-status directory is not a directory", str(path))
    if st.st_uid != os.getuid() or st.st_mode & 0o022:
        raise OSError(
            errno.EPERM, "exit-status directory is not this user's own (or writable by "
            "others)", str(path),
        )
    return path


def status_path(directory: Path, tag: str) -> Path:
    """The status file of the subtask tagged ``tag`` in ``directory``."""
    return directory / f"{tag}{STATUS_SUFFIX}"


def _atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` atomically and durably (as ``workloads.atomic``)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dfd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def write_status(path: Path, pid: int, status: int) -> None:
    """Record ``status`` (:func:`os.waitstatus_to_exitcode` form) of command ``pid``."""
    doc = {"version": STATUS_VERSION, "pid": pid, "status": status}
    _atomic_write(path, json.dumps(doc).encode())


def read_status(path: Path) -> int | None:
    """The status recorded in ``path`` (negative: killed by that signal); None if there
    is no readable status file (the recorder did not get to write one)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("version") != STATUS_VERSION:
        return None
    status = doc.get("status")
    if isinstance(status, bool) or not isinstance(status, int):
        return None
    return status


def write_owner(path: Path, marker: str) -> None:
    """Tell the recorder of ``path`` (and the stale-subtask sweeps) that the process of
    owner ``marker`` ("pid:create time", as in :data:`OWNER_ENV`) now owns the subtask:
    its group signals are not to be forwarded, and while it lives the subtask is not
    stale."""
    _atomic_write(owner_path(path), marker.encode())


def owner_path(path: Path) -> Path:
    """The owner file of the status file ``path``."""
    return Path(f"{path}{OWNER_SUFFIX}")


def read_owner(path: Path) -> str | None:
    """The owner marker written by :func:`write_owner` for ``path`` (None: none)."""
    try:
        return owner_path(path).read_text(encoding="utf-8").strip() or None
    except (OSError, ValueError):
        return None


def remove_status(path: Path) -> None:
    """Remove the status file ``path`` and its owner file (missing ones are fine)."""
    for p in (path, owner_path(path)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass


def describe(status: int) -> str:
    """``exit status N`` or ``killed by signal S (SIGNAME)`` for a status as above."""
    if status >= 0:
        return f"exit status {status}"
    try:
        name = signal.Signals(-status).name
    except ValueError:
        return f"killed by signal {-status}"
    return f"killed by signal {-status} ({name})"


# --------------------------------------------------------------------------- supervisor


def _owners(path: Path) -> set[int]:
    owners: set[int] = set()
    pid_s = os.environ.get(OWNER_ENV, "").partition(":")[0]
    if pid_s.isdigit():
        owners.add(int(pid_s))
    marker = read_owner(path) or ""
    pid_s = marker.partition(":")[0]
    if pid_s.isdigit():
        owners.add(int(pid_s))
    return owners


def _forward(child: int, path: Path) -> None:
    """Forward the termination signals sent to the recorder alone (see the module doc)."""
    group = os.getpgrp()
    while True:
        info = signal.sigwaitinfo(FORWARDED)
        sender = info.si_pid
        try:
            in_group = sender > 0 and os.getpgid(sender) == group
        except OSError:
            in_group = False
        if in_group or sender in _owners(path):
            continue
        try:
            os.kill(child, info.si_signo)
        except ProcessLookupError:
            return


def _run_child(argv: list[str]) -> None:
    """In the forked child: default signal handling, then exec the command."""
    try:
        signal.pthread_sigmask(signal.SIG_SETMASK, [])
        for sig in (signal.SIGPIPE, signal.SIGXFSZ):
            signal.signal(sig, signal.SIG_DFL)
        os.execvp(argv[0], argv)
    except OSError as exc:
        print(f"{argv[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        os._exit(127 if exc.errno == errno.ENOENT else 126)
    finally:
        os._exit(127)  # pragma: no cover - exec does not return


def _end_like(status: int) -> None:
    """Exit with ``status``, or die of the same signal."""
    if status >= 0:
        os._exit(min(status, 255))
    sig = -status
    try:
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    except (OSError, ValueError):
        pass
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        try:
            signal.signal(sig, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_UNBLOCK, [sig])
        except (OSError, ValueError):
            pass
    try:
        os.kill(os.getpid(), sig)
    except OSError:
        pass
    os._exit(128 + sig)


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--" or not args[0]:
        print("usage: exit_recorder.py STATUS_FILE -- COMMAND [ARG...]", file=sys.stderr)
        return 2
    path, argv = Path(args[0]), args[2:]
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED)
    child = os.fork()
    if child == 0:
        _run_child(argv)
    threading.Thread(target=_forward, args=(child, path), daemon=True).start()
    while True:
        try:
            _, raw = os.waitpid(child, 0)
            break
        except ChildProcessError:  # pragma: no cover - only we wait for it
            raw = None
            break
    status = os.waitstatus_to_exitcode(raw) if raw is not None else 127
    try:
        write_status(path, child, status)
    except OSError as exc:
        print(f"exit_recorder: {path}: cannot record the exit status ({exc})", file=sys.stderr)
    _end_like(status)
    return status  # pragma: no cover - _end_like does not return


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
