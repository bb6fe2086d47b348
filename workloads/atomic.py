"""Crash-safe file writes: a reader sees the old content or the new, never a torn file.

The new content goes to a temporary file in the target's own directory (same file system,
so the rename is atomic), which is flushed and ``fsync``-ed, renamed over the target with
``os.replace``, and then the directory itself is ``fsync``-ed so that the rename survives a
power loss. A failure at any step leaves the target untouched and removes the temporary
file. Permissions: the new file gets ``mode`` (default ``0o600``: records such as executor
checkpoints and the runtime state may name keys and pids, so they are private unless the
caller says otherwise).

This module is a bottom layer: it imports nothing from the project.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

#: Permissions of a file written by this module unless the caller asks for others.
DEFAULT_MODE = 0o600


def _fsync_dir(directory: Path) -> None:
    """Make a rename in ``directory`` durable (no-op where directories cannot be opened)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:  # pragma: no cover - e.g. a platform without O_DIRECTORY semantics
        return
    try:
        os.fsync(fd)
    except OSError:  # pragma: no cover - some file systems refuse fsync on directories
        pass
    finally:
        os.close(fd)


def atomic_write_bytes(
    path: str | os.PathLike[str], data: bytes, *, mode: int = DEFAULT_MODE
) -> Path:
    """Replace ``path`` with ``data`` atomically and durably; return the path.

    The parent directory must exist (ValueError naming the path otherwise); OSError from
    the file system (full disk, permissions) propagates after the temporary file is removed.
    """
    target = Path(path)
    directory = target.parent
    if not directory.is_dir():
        raise ValueError(f"{target}: parent directory does not exist")
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _fsync_dir(directory)
    return target


def atomic_write_text(
    path: str | os.PathLike[str], text: str, *, mode: int = DEFAULT_MODE
) -> Path:
    """:func:`atomic_write_bytes` of ``text`` encoded as UTF-8."""
    return atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(
    path: str | os.PathLike[str], obj: Any, *, mode: int = DEFAULT_MODE
) -> Path:
    """:func:`atomic_write_bytes` of ``obj`` as JSON (sorted keys, one trailing newline).

    ``obj`` must be JSON-serialisable (TypeError before anything is written otherwise);
    NaN and infinities are refused (ValueError) since strict JSON readers reject them.
    """
    text = json.dumps(obj, sort_keys=True, allow_nan=False) + "\n"
    return atomic_write_text(path, text, mode=mode)
