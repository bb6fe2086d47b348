"""The state file ``~/.coalloc/state.json``: what ``coalloc up`` started, so that a later
``coalloc`` process (status, submit, down) finds the cluster and ``down`` removes exactly
what ``up`` started.

Fields: ``version`` (1), ``address`` (the Ray GCS address ``host:port``), ``embedded``
(``up`` started the Ray head itself), ``head_pid`` (the ``ray start --block`` process, the
leader of its own session, when embedded), ``temp_dir`` (the embedded head's Ray temp
dir), ``actors`` (names of the actors ``up`` created, namespace ``coalloc``),
``phase_log``, ``report_endpoint``, ``started_at`` (s since the Unix epoch); ``extra``:
``n_nodes``, ``transport_security``, the global manager's HTTP API (``api_url``,
``api_token``: the bearer token of its first admin, the user who ran ``up``), and for an
embedded head its auth mode and address.

Writes are atomic (temporary file, fsync, rename) and the file is readable by its owner
only (0600): it holds the API token. It holds no CURVE keys: those live only in the
actors.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from workloads.atomic import atomic_write_bytes
from workloads.errors import UserError

STATE_VERSION = 1
#: The environment variable that moves ``~/.coalloc``.
HOME_ENV = "COALLOC_HOME"


def coalloc_home() -> Path:
    """Where coalloc keeps its state file and logs: ``$COALLOC_HOME`` or ``~/.coalloc``.
    (Here, not in :mod:`runtime.config`, so that reading the state file imports nothing
    heavy: the CLI's fast path starts with it.)"""
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else Path.home() / ".coalloc"


@dataclass(frozen=True, slots=True)
class DeploymentState:
    """What one ``coalloc up`` started (see the module docstring)."""

    address: str
    embedded: bool
    actors: tuple[str, ...] = ()
    head_pid: int | None = None
    temp_dir: str | None = None
    phase_log: str = ""
    report_endpoint: str = ""
    started_at: float = 0.0
    version: int = STATE_VERSION
    extra: dict[str, Any] = field(default_factory=dict)


def state_path() -> Path:
    return coalloc_home() / "state.json"


def load_state(path: Path | None = None) -> DeploymentState | None:
    """The recorded deployment, or None when there is none. A corrupt file is a UserError."""
    p = path or state_path()
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{p}: unreadable state file ({exc}); remove it and run coalloc up"
        ) from None
    if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
        raise UserError(f"{p}: version: unknown state file version; remove it and run coalloc up")
    try:
        return DeploymentState(
            address=str(data["address"]),
            embedded=bool(data["embedded"]),
            actors=tuple(str(a) for a in data.get("actors", ())),
            head_pid=int(data["head_pid"]) if data.get("head_pid") is not None else None,
            temp_dir=data.get("temp_dir"),
            phase_log=str(data.get("phase_log", "")),
            report_endpoint=str(data.get("report_endpoint", "")),
            started_at=float(data.get("started_at", 0.0)),
            extra=dict(data.get("extra", {})),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UserError(
            f"{p}: malformed state file ({exc}); remove it and run coalloc up"
        ) from None


def save_state(state: DeploymentState, path: Path | None = None) -> Path:
    """Write the state file atomically, readable by its owner only (0600): a temporary
    file created 0600 in the same directory, written, fsynced, renamed over the file,
    and the directory fsynced, so a crash leaves the old file or the new one, never a
    torn one. The directory is created 0700 if missing."""
    p = path or state_path()
    p.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    d = asdict(state)
    d["actors"] = list(state.actors)
    data = (json.dumps(d, indent=2, sort_keys=True) + "\n").encode("utf-8")
    return atomic_write_bytes(p, data, mode=0o600)


def clear_state(path: Path | None = None) -> None:
    p = path or state_path()
    try:
        p.unlink()
    except FileNotFoundError:
        pass
