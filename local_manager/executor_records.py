"""The process executor's records and argument checks: limit modes, containment, life-cycle
states, what a cycle gave (:class:`CycleUsage`), what a new owner needs to adopt a running
subtask (:class:`ExecutorRecord`), and the validation of commands and environments.

Units: CPU time in CPU-seconds, shares in cores, work in Mcycles (``cpu_s * speed_mhz``),
create times in s since the epoch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from local_manager.cgroups import CGROUP_PARENT_ENV
from local_manager.pacer import positive

E = TypeVar("E", bound=Enum)

#: Version of the :class:`ExecutorRecord` layout written by :meth:`ExecutorRecord.to_dict`
#: (2 added ``status_file``; a version 1 record is still read, without one).
RECORD_VERSION = 2


class LimitMode(str, Enum):
    """How the executor holds a subtask to its CPU share."""

    DUTY_CYCLE = "duty_cycle"
    CGROUP_V2 = "cgroup_v2"


class Containment(str, Enum):
    """How the executor knows (and reaches) every process of a subtask."""

    CGROUP = "cgroup"
    PROCESS_TREE = "process_tree"


class ExecutorState(str, Enum):
    """Life cycle of one executor: created -> running -> finished | cancelled."""

    CREATED = "created"
    RUNNING = "running"
    FINISHED = "finished"
    CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class CycleUsage:
    """What one subtask really got in one local scheduling cycle.

    ``cpu_s`` is the CPU time (CPU-seconds) the subtask's processes consumed since the end
    of the previous cycle (x-bar of eq. 4 in CPU-seconds); ``mcycles`` is the same in
    Mcycles (``cpu_s * speed_mhz``). ``wall_s`` is the cycle's length on the executor clock
    (s), ``run_s`` the part of it during which the subtask was allowed to run (s).
    ``granted_share`` is the share asked for (cores). ``exit_code`` is set once the leader
    has exited (negative: killed by that signal; None when no one could read it: see
    :attr:`ProcessExecutor.exit_reason`).
    """

    granted_share: float
    wall_s: float
    run_s: float
    cpu_s: float
    mcycles: float
    mode: LimitMode
    state: ExecutorState
    exit_code: int | None


@dataclass(frozen=True, slots=True)
class ExecutorRecord:
    """Everything a new owner needs to adopt a running subtask (:meth:`ProcessExecutor.
    attach`); serialisable with :meth:`to_dict` / :meth:`from_dict` (JSON-safe).

    ``tag`` is the subtask's :data:`TAG_ENV` value; ``pid``/``pgid``/``create_time`` name the
    leader (create time in s since the epoch); ``members`` every known member as (pid,
    create time); ``cgroup`` the subtask cgroup's directory (None: process-tree
    containment). ``reported_cpu_s`` is the cumulative CPU (CPU-s) already reported in
    cycles (x-bar's baseline for the adopter), ``retired_cpu_s`` the part of the tree's CPU
    held by members already reaped, ``cgroup_offset_s`` the CPU members had used before
    they were moved into the cgroup. ``status_file`` is where the leader (the exit recorder,
    :mod:`local_manager.exit_recorder`) writes the command's exit status (None: a record
    of version 1, or a leader started without one).
    """

    tag: str
    argv: tuple[str, ...]
    pid: int
    pgid: int
    create_time: float
    mode: LimitMode
    containment: Containment
    cgroup: str | None
    members: tuple[tuple[int, float], ...]
    reported_cpu_s: float
    retired_cpu_s: float
    cgroup_offset_s: float
    status_file: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """A JSON-safe dict (with ``version``)."""
        return {
            "version": RECORD_VERSION,
            "tag": self.tag,
            "argv": list(self.argv),
            "pid": self.pid,
            "pgid": self.pgid,
            "create_time": self.create_time,
            "mode": self.mode.value,
            "containment": self.containment.value,
            "cgroup": self.cgroup,
            "members": [[pid, created] for pid, created in self.members],
            "reported_cpu_s": self.reported_cpu_s,
            "retired_cpu_s": self.retired_cpu_s,
            "cgroup_offset_s": self.cgroup_offset_s,
            "status_file": self.status_file,
        }

    @classmethod
    def from_dict(cls, data: object, source: str = "record") -> ExecutorRecord:
        """The record in ``data`` (as written by :meth:`to_dict`); ValueError naming
        ``source``, the field and the reason otherwise."""

        def bad(field: str, why: str) -> ValueError:
            return ValueError(f"{source}: {field}: {why}")

        if not isinstance(data, Mapping):
            raise ValueError(f"{source}: must be a mapping, got {type(data).__name__}")
        version = data.get("version")
        if isinstance(version, bool) or version not in (1, RECORD_VERSION):
            raise bad("version", f"must be 1 or {RECORD_VERSION}, got {version!r}")

        def get(field: str) -> object:
            if field not in data:
                raise bad(field, "missing")
            return data[field]

        def whole(field: str) -> int:
            v = get(field)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise bad(field, f"must be an integer > 0, got {v!r}")
            return v

        def number(field: str, value: object | None = None) -> float:
            v = get(field) if value is None else value
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise bad(field, f"must be a finite number, got {v!r}")
            if v < 0:
                raise bad(field, f"must be >= 0, got {v!r}")
            return float(v)

        tag = get("tag")
        if not isinstance(tag, str) or not tag or not tag.isalnum():
            raise bad("tag", f"must be a non-empty alphanumeric string, got {tag!r}")
        try:
            argv = validate_argv(get("argv"))
        except ValueError as exc:
            raise ValueError(f"{source}: {exc}") from None
        try:
            mode = LimitMode(get("mode"))
        except ValueError:
            raise bad("mode", f"unknown limit mode {data['mode']!r}") from None
        try:
            containment = Containment(get("containment"))
        except ValueError:
            raise bad("containment", f"unknown containment {data['containment']!r}") from None
        cgroup = get("cgroup")
        if cgroup is not None and (not isinstance(cgroup, str) or not cgroup.startswith("/")):
            raise bad("cgroup", f"must be null or an absolute path, got {cgroup!r}")
        status_file = data.get("status_file") if version != 1 else None
        if status_file is not None and (
            not isinstance(status_file, str) or not status_file.startswith("/")
        ):
            raise bad("status_file", f"must be null or an absolute path, got {status_file!r}")
        raw_members = get("members")
        if not isinstance(raw_members, (list, tuple)):
            raise bad("members", "must be a list of [pid, create_time] pairs")
        members = []
        for i, pair in enumerate(raw_members):
            if (
                not isinstance(pair, (list, tuple))
                or len(pair) != 2
                or isinstance(pair[0], bool)
                or not isinstance(pair[0], int)
                or pair[0] <= 0
            ):
                raise bad(f"members[{i}]", f"must be [pid, create_time], got {pair!r}")
            members.append((pair[0], number(f"members[{i}]", pair[1])))
        return cls(
            tag=tag,
            argv=argv,
            pid=whole("pid"),
            pgid=whole("pgid"),
            create_time=number("create_time"),
            mode=mode,
            containment=containment,
            cgroup=cgroup,
            members=tuple(members),
            reported_cpu_s=number("reported_cpu_s"),
            retired_cpu_s=number("retired_cpu_s"),
            cgroup_offset_s=number("cgroup_offset_s"),
            status_file=status_file,
        )


# --------------------------------------------------------------------------- validation


def validate_argv(argv: object) -> tuple[str, ...]:
    """Check that ``argv`` is a non-empty list (or tuple) of strings; return it as a tuple.

    A single string is refused on purpose: no shell ever parses the command.
    """
    if isinstance(argv, (str, bytes)):
        raise ValueError(
            "argv: must be a list of strings, not a single string (no shell is used; "
            "split the command into its arguments)"
        )
    if not isinstance(argv, (list, tuple)):
        raise ValueError(f"argv: must be a list of strings, got {type(argv).__name__}")
    if not argv:
        raise ValueError("argv: must not be empty (argv[0] is the executable)")
    for i, arg in enumerate(argv):
        if not isinstance(arg, str):
            raise ValueError(f"argv[{i}]: must be a string, got {type(arg).__name__}")
        if "\x00" in arg:
            raise ValueError(f"argv[{i}]: must not contain a NUL character")
    if not argv[0]:
        raise ValueError("argv[0]: must name an executable, got an empty string")
    return tuple(argv)


def validate_env(env: Mapping[str, str] | None) -> dict[str, str] | None:
    if env is None:
        return None
    out: dict[str, str] = {}
    for key, value in env.items():
        if not isinstance(key, str) or not key or "=" in key or "\x00" in key:
            raise ValueError(f"env[{key!r}]: name must be a non-empty string without '=' or NUL")
        if not isinstance(value, str) or "\x00" in value:
            raise ValueError(f"env[{key!r}]: value must be a string without NUL")
        out[key] = value
    return out


def share_for_grant(granted_mcycles: float, speed_mhz: float, cycle_s: float) -> float:
    """The CPU share (cores) that gives ``granted_mcycles`` in a cycle of ``cycle_s``
    seconds on a node of ``speed_mhz`` MHz: ``granted / (speed * cycle)``."""
    positive("speed_mhz", speed_mhz)
    positive("cycle_s", cycle_s)
    if not math.isfinite(granted_mcycles) or granted_mcycles < 0:
        raise ValueError(f"granted_mcycles: must be a finite number >= 0, got {granted_mcycles!r}")
    return granted_mcycles / (speed_mhz * cycle_s)


def _parse_choice(enum: type[E], value: E | str | None, field: str, noun: str) -> E | None:
    """``value`` (a member, its name, or None) as a member of ``enum``; ValueError
    ``FIELD: unknown NOUN ... (choose ...)`` if it is none of them."""
    if value is None or isinstance(value, enum):
        return value
    try:
        return enum(value)
    except ValueError:
        choices = ", ".join(m.value for m in enum)
        raise ValueError(f"{field}: unknown {noun} {value!r} (choose {choices})") from None


def parse_containment(containment: Containment | str | None) -> Containment | None:
    return _parse_choice(Containment, containment, "containment", "containment")


def parse_mode(mode: LimitMode | str | None) -> LimitMode | None:
    return _parse_choice(LimitMode, mode, "mode", "limit mode")


def select_limit_mode(
    requested: LimitMode | None, cgroup_parent: Path | None, reason: str = ""
) -> LimitMode:
    """The limit mode to use: ``requested`` if possible, else cgroup v2 when a usable
    cgroup parent was found, else duty cycling. Asking for cgroup v2 without one fails."""
    if requested is LimitMode.CGROUP_V2 and cgroup_parent is None:
        raise ValueError(
            f"mode: cgroup_v2 requested but not available ({reason}); set "
            f"{CGROUP_PARENT_ENV} to a delegated cgroup v2 directory with +cpu in "
            "cgroup.subtree_control"
        )
    if requested is not None:
        return requested
    return LimitMode.CGROUP_V2 if cgroup_parent is not None else LimitMode.DUTY_CYCLE
