"""Job-spec files (YAML and JSON) and in-memory job mappings -> :class:`JobSpec`.

The keys are the user-facing contract (more may be added; these keep their meaning)::

    name: coupled-sim
    qos: strict              # strict | loose | best_effort
    overall_deviation: 300   # s, strict only: the overall error window E_t
    asynchrony: 120          # s, strict only: the asynchrony window A_t
    duration: 1800           # optional target duration D_t, s
    user: alice              # optional; default: the submitting OS user (CLI)
    priority: 0              # optional integer; higher is placed first
    max_wait: 3600           # optional, s: pending longer than this -> expired
    on_node_loss: requeue    # optional: requeue | fail (default: requeue if no commands)
    on_failure: fail         # optional: fail | requeue, when a subtask's process fails
    max_attempts: 3          # optional: runs at most, requeues included
    env: {OMP_NUM_THREADS: 1} # optional: every command's environment (docs/coupled.md)
    progress: cpu            # optional: cpu | reported (what moves a command's clock)
    progress_end: 1000       # optional, reported only: the application's total
    stall_after: 60          # optional, reported only, s: no report this long -> stalled
    subtasks:                # never more subtasks than nodes (checked at submission)
      - {work: 1800, weight: 1}
      - {work: 3600, weight: 2, demand: {cpu: 1, memory_mb: 512, io_mbps: 5}}
      - {work: 3600, weight: 2, command: [python3, -c, "..."]}
      - {work: 3600, labels: [fast]}   # only on nodes labelled fast
      - {work: 60, command: [./solver], env: {I_MPI_WAIT_MODE: 0}}  # over the job's env

or, instead of ``subtasks``, the job's total ``work``, total ``weight`` and
``parallelism: N`` (the global manager splits it into N subtasks).

Units: ``work`` in files is reference CPU-seconds at the 1 GHz grid standard; the
records hold Mcycles (``work * STANDARD_MHZ``). Windows, duration and ``arrival`` are
seconds of model time. ``arrival`` (optional, default 0) is when a simulation submits
the job; the live runtime submits at once. ``job_id`` is never in a file: the global
manager assigns it.

Every validation failure raises :class:`SpecError`, whose message is
``FILE: FIELD: REASON`` with FIELD a path such as ``jobs[2].subtasks[0].work``.
The keys and types are checked by pydantic models in strict mode (``work: "100"`` is
text, not a number; ``max_attempts: true`` is not an integer) with unknown keys refused
(with a did-you-mean); :func:`parse_job` adds the rules between keys and builds the
frozen records of :mod:`workloads.model` (``workloads.validation``).

Bounded work on hostile input: a file larger than :data:`MAX_DOCUMENT_BYTES` (1 MiB) is
refused before it is read; a job with more subtasks than the grid's nodes (when the grid
is known, else more than :data:`MAX_SUBTASKS`) is refused before any of its subtasks is
parsed; names (job names, node names) holding control characters are refused (they
would be printed raw in tables and logs: an ANSI escape, a NUL, a newline).
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, Field, ValidationError

from workloads.errors import UserError, escape_controls, is_unprintable
from workloads.model import (
    STANDARD_MHZ,
    Demand,
    EndPolicy,
    JobSpec,
    ProgressMode,
    ProgressSpec,
    QosClass,
    SubtaskSpec,
)
from workloads.validation import (
    STRICT,
    Reason,
    Wording,
    as_list,
    explain,
    fail,
    join,
    one_of,
    type_name,
)

#: The job's owner when a mapping names none (the CLI passes the OS user instead).
DEFAULT_USER = "default"

#: The QoS classes a user may submit; ``local`` is node-local work, generated per node.
SUBMITTABLE_QOS: tuple[QosClass, ...] = (QosClass.STRICT, QosClass.LOOSE, QosClass.BEST_EFFORT)

#: Largest job or allocation file read, bytes (1 MiB: about 20 000 subtasks in YAML).
MAX_DOCUMENT_BYTES = 1 << 20

#: Most subtasks a job may declare when the grid's node count is not known yet (a job's
#: subtasks run on distinct nodes; no coalloc grid has more nodes than this).
MAX_SUBTASKS = 10_000

_YAML_SUFFIXES = (".yaml", ".yml")
_JSON_SUFFIXES = (".json",)


class SpecError(UserError):
    """A job spec is invalid: names the file (or source), the field and the reason.

    ``field`` is a path such as ``jobs[2].subtasks[0].work`` or ``line 4``; it is empty
    for problems with the file as a whole (not found, empty), and the message is then
    ``FILE: REASON``.
    """

    def __init__(self, file: str, field: str, reason: str) -> None:
        self.file = file
        self.field = field
        self.reason = reason
        message = f"{file}: {field}: {reason}" if field else f"{file}: {reason}"
        super().__init__(escape_controls(message))


# ---------------------------------------------------------------------------------------
# Unit conversion (reference seconds at 1 GHz <-> Mcycles)


def seconds_to_mcycles(seconds: float) -> float:
    """Reference CPU-seconds at the 1 GHz standard -> Mcycles."""
    return seconds * STANDARD_MHZ


def mcycles_to_seconds(mcycles: float) -> float:
    """Mcycles -> reference CPU-seconds, chosen so that the round trip is exact.

    ``w / 1000 * 1000`` is not always ``w`` in binary floating point; when a neighbour of
    the quotient converts back exactly, that neighbour is returned, so that
    ``seconds_to_mcycles(mcycles_to_seconds(w)) == w`` for every ``w`` that came from a
    number of seconds (all files, traces and generators).
    """
    s = mcycles / STANDARD_MHZ
    if seconds_to_mcycles(s) == mcycles or not math.isfinite(s):
        return s
    lo = hi = s
    for _ in range(4):
        lo = math.nextafter(lo, -math.inf)
        hi = math.nextafter(hi, math.inf)
        for candidate in (lo, hi):
            if seconds_to_mcycles(candidate) == mcycles:
                return candidate
    return s


# ---------------------------------------------------------------------------------------
# The edge models (pydantic, strict, unknown keys refused) and their wording


def unprintable(text: str) -> str | None:
    """The first character of ``text`` that must not appear in a name (a control or
    format character), escaped for a message (``'\\x1b'``); None when there is none."""
    for ch in text:
        if is_unprintable(ch):
            return ascii(ch)
    return None


def _printable_reason(value: str) -> str | None:
    bad = unprintable(value)
    if bad is None:
        return None
    return f"must not contain control characters (found {bad} in {ascii(value)})"


def check_name(value: str, src: str, path: str) -> str:
    """``value`` unchanged, or :class:`SpecError` if it holds a control character."""
    reason = _printable_reason(value)
    if reason is not None:
        raise SpecError(src, path, reason)
    return value


def _name(value: str) -> str:
    """A job or user name: non-empty, printable."""
    if not value.strip():
        raise fail(f"must be a non-empty string, got {ascii(value)}")
    reason = _printable_reason(value)
    if reason is not None:
        raise fail(reason)
    return value


def _label(value: str) -> str:
    if not value.strip():
        raise fail(f"a label must be a non-empty string, got {ascii(value)}")
    reason = _printable_reason(value)
    if reason is not None:
        raise fail(reason)
    if "," in value or ":" in value:
        raise fail(f"a label must not contain ',' or ':', got {value!r}")
    return value


def _argv(value: list[str]) -> list[str]:
    if not value[0]:
        raise fail("the program name must be a non-empty string", at=0)
    return value


#: A variable name a job file's ``env`` may set (POSIX's portable names).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: Most variables in one ``env`` mapping, and characters in one value.
MAX_ENV_VARS = 256
MAX_ENV_VALUE = 32768


def _env(value: object) -> object:
    """An ``env`` mapping: variable names to text (numbers are written as text);
    anything but a mapping is left to the type check."""
    if not isinstance(value, Mapping):
        return value
    if len(value) > MAX_ENV_VARS:
        raise fail(f"{len(value)} variables, more than the {MAX_ENV_VARS} allowed")
    out: dict[str, str] = {}
    for name, v in value.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise fail(f"{name!r} is not a variable name (letters, digits and _, not "
                       "starting with a digit)", at=name)
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise fail(f"must be a string or a number, got {type_name(v)} {v!r}", at=name)
        if isinstance(v, float) and not math.isfinite(v):
            raise fail(f"must be a finite number, got {v!r}", at=name)
        text = v if isinstance(v, str) else str(v)
        if "\0" in text:
            raise fail("must not contain a NUL character", at=name)
        if len(text) > MAX_ENV_VALUE:
            raise fail(f"{len(text)} characters, more than the {MAX_ENV_VALUE} allowed",
                       at=name)
        out[name] = text
    return out


_Env = Annotated[dict[str, str], BeforeValidator(_env)]
_Positive = Annotated[float, Field(gt=0)]
_NonNegative = Annotated[float, Field(ge=0)]
_Name = Annotated[str, AfterValidator(_name)]
_Label = Annotated[str, AfterValidator(_label)]
_Policy = Literal["requeue", "fail"]


class _Demand(BaseModel):
    model_config = STRICT
    cpu: _Positive = 1.0
    memory_mb: _NonNegative = 0.0
    io_mbps: _NonNegative = 0.0


class _Subtask(BaseModel):
    model_config = STRICT
    work: _Positive
    weight: _Positive = 1.0
    demand: _Demand | None = None
    #: Present or not (``model_fields_set``); null is refused.
    command: Annotated[
        list[str], BeforeValidator(as_list), Field(min_length=1), AfterValidator(_argv)
    ] = []
    labels: Annotated[list[_Label], BeforeValidator(as_list)] | None = None
    env: _Env | None = None


class _Job(BaseModel):
    """A job mapping. Keys whose null is refused (``work``, ``subtasks``, ``user``...)
    have a default that is never validated; whether they were given is
    ``model_fields_set``. The rules between keys (windows of strict jobs, subtasks or
    the split form, local jobs) are :func:`parse_job`'s."""

    model_config = STRICT
    name: _Name
    qos: Literal["strict", "loose", "best_effort", "local"]
    overall_deviation: _Positive | None = None
    asynchrony: _Positive | None = None
    duration: _Positive | None = None
    arrival: _NonNegative | None = None
    subtasks: Annotated[list[_Subtask], BeforeValidator(as_list), Field(min_length=1)] = []
    work: _Positive = 0.0
    weight: _Positive = 0.0
    parallelism: Annotated[int, Field(ge=1)] = 0
    node: str | None = None
    user: _Name = ""
    priority: int | None = None
    max_wait: _Positive | None = None
    on_node_loss: _Policy | None = None
    on_failure: _Policy | None = None
    max_attempts: Annotated[int, Field(ge=1)] | None = None
    env: _Env | None = None
    progress: Literal["cpu", "reported"] | None = None
    progress_end: _Positive | None = None
    stall_after: _Positive | None = None


#: Keys of a job mapping. ``node`` is accepted only for ``local`` jobs (generators,
#: traces), never in user submissions.
JOB_KEYS: tuple[str, ...] = tuple(_Job.model_fields)
SUBTASK_KEYS: tuple[str, ...] = tuple(_Subtask.model_fields)
DEMAND_KEYS: tuple[str, ...] = tuple(_Demand.model_fields)


def _number_reason(value: object) -> str:
    """A value that is not a finite real number (bool and numeric strings included)."""
    if isinstance(value, str):
        hint = ""
        try:
            float(value)
            hint = " (write it as a bare number; note that YAML reads 1e3 as text, 1.0e3 not)"
        except ValueError:
            pass
        return f"must be a number, got string {value!r}{hint}"
    if isinstance(value, bool):
        return f"must be a number, got bool {value!r}"
    return f"must be a number, got {type_name(value)}"


def _when(kinds: tuple[str, ...], reason: Callable[[Any], str]) -> Reason:
    """A field's reason for the error types ``kinds`` (called with the bad value)."""
    return lambda err: reason(err["input"]) if err["type"] in kinds else None


_POLICIES = [p.value for p in EndPolicy]
_TYPE = ("int_type", "string_type", "list_type", "greater_than_equal", "too_short")

_WORDING = Wording(
    missing={
        "name": "missing (a non-empty job name)",
        "qos": "missing; one of strict, loose, best_effort",
        "subtasks[].work": "missing (reference CPU-seconds at 1 GHz)",
    },
    reasons={
        "name": _when(_TYPE, lambda v: f"must be a non-empty string, got {ascii(v)}"),
        "user": _when(_TYPE, lambda v: f"must be a non-empty string, got {ascii(v)}"),
        "qos": _when(("literal_error",), lambda v: one_of(v, [q.value for q in SUBMITTABLE_QOS])),
        "on_node_loss": _when(("literal_error",), lambda v: one_of(v, _POLICIES)),
        "on_failure": _when(("literal_error",), lambda v: one_of(v, _POLICIES)),
        "progress": _when(("literal_error",),
                          lambda v: one_of(v, [m.value for m in ProgressMode])),
        "node": _when(_TYPE, lambda v: f"a local job needs its node name, got {v!r}"),
        "priority": _when(_TYPE, lambda v: f"must be an integer (higher first), got "
                                           f"{type_name(v)} {v!r}"),
        "max_attempts": _when(_TYPE, lambda v: f"must be an integer >= 1 (runs at most), got "
                                               f"{v!r}"),
        "parallelism": lambda err: (
            f"must be an integer >= 1, got {err['input']!r}"
            if err["type"] == "greater_than_equal"
            else f"must be an integer >= 1, got {type_name(err['input'])} {err['input']!r}"
        ),
        "subtasks": lambda err: (
            "must hold at least one subtask" if err["type"] == "too_short"
            else f"must be a list of subtasks, got {type_name(err['input'])}"
            if err["type"] == "list_type" else None
        ),
        "subtasks[].command": _when(_TYPE, lambda v: (
            "must be an argv list, never a shell string (e.g. [python3, -c, '...'])"
            if isinstance(v, str) else f"must be a non-empty argv list, got {v!r}"
        )),
        "subtasks[].command[]": _when(_TYPE, lambda v: f"argv items must be strings, got "
                                                       f"{type_name(v)} {v!r}"),
        "subtasks[].labels": _when(_TYPE, lambda v: "must be a list of label names "
                                                    f"(e.g. [fast, gpu]), got {type_name(v)}"),
        "subtasks[].labels[]": _when(_TYPE, lambda v: f"a label must be a non-empty string, "
                                                      f"got {ascii(v)}"),
    },
    units={
        **{key: " s" for key in ("overall_deviation", "asynchrony", "duration", "arrival",
                                 "work", "max_wait", "subtasks[].work", "stall_after")},
        "subtasks[].demand.cpu": " cores",
        "subtasks[].demand.memory_mb": " MB",
        "subtasks[].demand.io_mbps": " MB/s",
    },
    mappings={
        "subtasks[]": "a subtask: work, weight, demand, command, labels, env",
        "env": "variable names to values, e.g. {OMP_NUM_THREADS: 4}",
        "subtasks[].env": "variable names to values, e.g. {OMP_NUM_THREADS: 4}",
        "subtasks[].demand": "cpu, memory_mb, io_mbps",
    },
    number=_number_reason,
)


def _validate_job(mapping: Mapping[Any, Any], src: str, base: str) -> _Job:
    """The pydantic check of one job mapping; its first error as :class:`SpecError`."""
    try:
        return _Job.model_validate(dict(mapping))
    except ValidationError as exc:
        field, reason = explain(exc, _Job, _WORDING, base)
        raise SpecError(src, field, reason) from None


def _subtask_spec(s: _Subtask) -> SubtaskSpec:
    demand = None
    if s.demand is not None:
        demand = Demand(cpu=s.demand.cpu, memory_mb=s.demand.memory_mb, io_mbps=s.demand.io_mbps)
    return SubtaskSpec(
        work=seconds_to_mcycles(s.work),
        weight=s.weight,
        demand=demand,
        command=tuple(s.command) if "command" in s.model_fields_set else None,
        labels=frozenset(s.labels or ()),
        env=tuple((s.env or {}).items()),
    )


def _check_count(
    count: int, n_nodes: int | None, src: str, path: str, at_least: bool = False
) -> None:
    """Refuse ``count`` subtasks for a grid of ``n_nodes`` (None: not known yet; then
    :data:`MAX_SUBTASKS` bounds it). ``at_least``: the count is where a scan stopped."""
    many = f"at least {count}" if at_least else str(count)
    if n_nodes is not None and count > n_nodes:
        raise SpecError(
            src, path,
            f"more subtasks than nodes: {many} subtasks, {n_nodes} nodes "
            "(a job's subtasks run on distinct nodes)",
        )
    if count > MAX_SUBTASKS:
        raise SpecError(
            src, path,
            f"more subtasks than nodes: {many} subtasks, more than any grid coalloc runs "
            f"({MAX_SUBTASKS} nodes at most)",
        )


def _precheck_count(m: Mapping[Any, Any], n_nodes: int | None, src: str, base: str) -> None:
    """The subtask count a job mapping declares (its ``subtasks`` list's length or its
    ``parallelism``), checked before anything else of the job is parsed."""
    raw = m.get("subtasks")
    if isinstance(raw, (list, tuple)):
        _check_count(len(raw), n_nodes, src, join(base, "subtasks"))
    par = m.get("parallelism")
    if type(par) is int:
        _check_count(par, n_nodes, src, join(base, "parallelism"))


def parse_job(
    mapping: object,
    source: str = "<input>",
    index: int | None = None,
    *,
    allow_local: bool = False,
    n_nodes: int | None = None,
    default_user: str = DEFAULT_USER,
) -> JobSpec:
    """Validate one job mapping (from a file, the Python client or the live runtime).

    ``source`` names where it came from (a file name) for the error message; ``index``
    is its position in a list of jobs (field paths then start with ``jobs[index].``).
    ``allow_local`` admits ``qos: local`` with a ``node`` (generators and traces only).
    ``n_nodes``: the grid's node count when known; a job with more subtasks (or
    ``parallelism``) is refused before its subtasks are parsed (unknown: at most
    :data:`MAX_SUBTASKS`). ``default_user``: the owner when the mapping names no ``user``
    (the CLI passes the submitting OS user). Work is converted from reference seconds to
    Mcycles. Raises :class:`SpecError`.
    """
    base = f"jobs[{index}]" if index is not None else ""
    src = source
    if not isinstance(mapping, Mapping):
        raise SpecError(src, base, f"must be a mapping (a job), got {type_name(mapping)}")
    # Bounded work first: the subtask count, before pydantic sees any subtask.
    _precheck_count(mapping, n_nodes, src, base)
    m = _validate_job(mapping, src, base)
    given = m.model_fields_set

    def f(key: str) -> str:
        return join(base, key)

    qos = QosClass(m.qos)
    if qos is QosClass.LOCAL and not allow_local:
        raise SpecError(
            src,
            f("qos"),
            "'local' jobs are generated per node and never submitted; "
            "use one of " + ", ".join(q.value for q in SUBMITTABLE_QOS),
        )
    for key, what in (("overall_deviation", "E_t"), ("asynchrony", "A_t")):
        if qos is QosClass.STRICT and getattr(m, key) is None:
            raise SpecError(src, f(key), f"required for a strict job (the window {what}, s)")
        if qos is not QosClass.STRICT and key in given:
            raise SpecError(
                src,
                f(key),
                f"only strict jobs have QoS windows (this job is {qos.value}); "
                "remove it or set qos: strict",
            )
    if qos is QosClass.LOCAL:
        if not m.node:
            raise SpecError(src, f("node"), f"a local job needs its node name, got {m.node!r}")
        check_name(m.node, src, f("node"))
    elif "node" in given:
        raise SpecError(
            src,
            f("node"),
            "only local jobs are pinned to a node; the global manager places grid jobs",
        )

    split_keys = [k for k in ("work", "weight", "parallelism") if k in given]
    subtasks: tuple[SubtaskSpec, ...] = ()
    parallelism = total_work = total_weight = None
    if "subtasks" in given:
        if split_keys:
            raise SpecError(
                src, f(split_keys[0]), "give either subtasks or work/weight/parallelism, not both"
            )
        subtasks = tuple(_subtask_spec(s) for s in m.subtasks)
    elif split_keys:
        if "parallelism" not in given:
            raise SpecError(
                src, f("parallelism"), "required with a total work (the number N of subtasks)"
            )
        if "work" not in given:
            raise SpecError(
                src, f("work"), "required with parallelism (the job's total work, s at 1 GHz)"
            )
        parallelism = m.parallelism
        total_work = seconds_to_mcycles(m.work)
        # A missing total weight means weight 1 per subtask.
        total_weight = m.weight if "weight" in given else float(m.parallelism)
    else:
        raise SpecError(
            src, f("subtasks"), "missing: give subtasks, or work, weight and parallelism"
        )
    if qos is QosClass.LOCAL and (len(subtasks) != 1 or parallelism is not None):
        raise SpecError(src, f("subtasks"), "a local job runs on one node: exactly one subtask")
    progress = _progress_spec(m, subtasks, src, f)

    return JobSpec(
        name=m.name,
        qos=qos,
        subtasks=subtasks,
        overall_deviation=m.overall_deviation,
        asynchrony=m.asynchrony,
        duration=m.duration,
        parallelism=parallelism,
        total_work=total_work,
        total_weight=total_weight,
        arrival=m.arrival or 0.0,
        node=m.node if qos is QosClass.LOCAL else None,
        user=m.user if "user" in given else default_user,
        priority=m.priority or 0,
        max_wait=m.max_wait,
        on_node_loss=EndPolicy(m.on_node_loss) if m.on_node_loss is not None else None,
        on_failure=EndPolicy(m.on_failure) if m.on_failure is not None else EndPolicy.FAIL,
        max_attempts=m.max_attempts if m.max_attempts is not None else 3,
        env=tuple((m.env or {}).items()),
        progress=progress,
    )


def _progress_spec(
    m: _Job, subtasks: tuple[SubtaskSpec, ...], src: str, f: Callable[[str], str]
) -> ProgressSpec | None:
    """The job's progress settings (None: ``progress: cpu``, the default)."""
    reported = m.progress == ProgressMode.REPORTED.value
    for key in ("progress_end", "stall_after"):
        if getattr(m, key) is not None and not reported:
            raise SpecError(src, f(key), "only with progress: reported (the clock moves by "
                            "the progress the application reports)")
    if not reported:
        return None
    if not subtasks:
        raise SpecError(src, f("progress"), "reported needs subtasks with a command "
                        "(work/parallelism jobs run no program to report)")
    for i, s in enumerate(subtasks):
        if s.command is None:
            raise SpecError(src, f(f"subtasks[{i}].command"), "missing: progress: reported "
                            "needs every subtask to run a command that reports")
    return ProgressSpec(ProgressMode.REPORTED, m.progress_end, m.stall_after)


def job_to_dict(job: JobSpec) -> dict[str, Any]:
    """The inverse of :func:`parse_job`: a JSON-able mapping in the file's units.

    ``parse_job(job_to_dict(j), allow_local=True) == j`` for every job without a
    ``job_id`` (the id is the global manager's, never part of a spec). ``arrival`` is
    written only when non-zero, ``node`` only for local jobs; ``user`` only when not
    :data:`DEFAULT_USER`, ``priority`` when non-zero, ``max_wait`` and ``labels`` when set.
    """
    out: dict[str, Any] = {"name": job.name, "qos": job.qos.value}
    if job.overall_deviation is not None:
        out["overall_deviation"] = job.overall_deviation
    if job.asynchrony is not None:
        out["asynchrony"] = job.asynchrony
    if job.duration is not None:
        out["duration"] = job.duration
    if job.arrival:
        out["arrival"] = job.arrival
    if job.node is not None:
        out["node"] = job.node
    if job.user != DEFAULT_USER:
        out["user"] = job.user
    if job.priority:
        out["priority"] = job.priority
    if job.max_wait is not None:
        out["max_wait"] = job.max_wait
    if job.on_node_loss is not None:
        out["on_node_loss"] = job.on_node_loss.value
    if job.on_failure is not EndPolicy.FAIL:
        out["on_failure"] = job.on_failure.value
    if job.max_attempts != 3:
        out["max_attempts"] = job.max_attempts
    if job.env:
        out["env"] = dict(job.env)
    if job.progress is not None:
        out["progress"] = job.progress.mode.value
        if job.progress.end is not None:
            out["progress_end"] = job.progress.end
        if job.progress.stall_after is not None:
            out["stall_after"] = job.progress.stall_after
    if job.subtasks:
        subs: list[dict[str, Any]] = []
        for s in job.subtasks:
            d: dict[str, Any] = {"work": mcycles_to_seconds(s.work), "weight": s.weight}
            if s.demand is not None:
                d["demand"] = {
                    "cpu": s.demand.cpu,
                    "memory_mb": s.demand.memory_mb,
                    "io_mbps": s.demand.io_mbps,
                }
            if s.command is not None:
                d["command"] = list(s.command)
            if s.labels:
                d["labels"] = sorted(s.labels)
            if s.env:
                d["env"] = dict(s.env)
            subs.append(d)
        out["subtasks"] = subs
    else:
        if job.total_work is not None:
            out["work"] = mcycles_to_seconds(job.total_work)
        if job.total_weight is not None:
            out["weight"] = job.total_weight
        if job.parallelism is not None:
            out["parallelism"] = job.parallelism
    return out


def check_fits(
    job: JobSpec, n_nodes: int, source: str = "<input>", index: int | None = None
) -> None:
    """Raise :class:`SpecError` when ``job`` has more subtasks than the grid has nodes.

    A job's subtasks go to distinct nodes, so ``n_nodes`` bounds its subtask count. The
    global manager calls this at submission; the field named is ``subtasks`` or
    ``parallelism``, whichever the job used.
    """
    if job.n_subtasks > n_nodes:
        key = "subtasks" if job.subtasks else "parallelism"
        path = join(f"jobs[{index}]" if index is not None else "", key)
        raise SpecError(
            source,
            path,
            f"more subtasks than nodes: {job.n_subtasks} subtasks, {n_nodes} nodes "
            "(a job's subtasks run on distinct nodes)",
        )


# ---------------------------------------------------------------------------------------
# Files


def _yaml_safe_loader() -> Any:
    """PyYAML's safe loader on libyaml (CSafeLoader, about 4x faster) when PyYAML was
    built with it, else the pure-Python SafeLoader; both construct the same data."""
    import yaml

    return getattr(yaml, "CSafeLoader", yaml.SafeLoader)


#: ``count_subtasks(count, path)``: raises when ``count`` subtasks are too many.
CountCheck = Callable[[int, str], None]


def _yaml_precheck(text: str, count_subtasks: CountCheck) -> None:
    """Count the items of every job's ``subtasks`` sequence from the YAML event stream,
    before anything is built, and call ``count_subtasks`` as each one starts, so that a
    job with too many subtasks is refused after reading just past the limit. Jobs are
    the top-level mapping or the mappings of a top-level sequence (``jobs[i]``). A YAML
    error is left for the full load to report."""
    import yaml

    # One frame per open container: [is_map, expecting_key, last_key, count, job, path]
    # ``job``: the field path prefix of a job mapping (None: not a job); ``path``: the
    # field path of a subtasks sequence (None: not one).
    stack: list[list[Any]] = []

    def child_starts() -> tuple[str | None, str | None]:
        """Account for a node starting under the innermost container; returns (job
        prefix if the node is a job mapping, subtasks path if it is a subtasks list)."""
        if not stack:
            return "", None
        top = stack[-1]
        if not top[0]:  # a sequence: one more item
            top[3] += 1
            if top[5] is not None:
                count_subtasks(top[3], top[5])
            return (f"jobs[{top[3] - 1}]" if len(stack) == 1 else None), None
        if top[1]:  # a key
            return None, None
        if top[4] is not None and top[2] == "subtasks":
            return None, join(top[4], "subtasks")
        return None, None

    def child_done() -> None:
        if stack and stack[-1][0]:
            top = stack[-1]
            if top[1]:
                top[1] = False
            else:
                top[1], top[2] = True, None

    try:
        for event in yaml.parse(text, Loader=_yaml_safe_loader()):
            if isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent)):
                child_starts()
                if stack and stack[-1][0] and stack[-1][1] and isinstance(
                    event, yaml.ScalarEvent
                ):
                    stack[-1][2] = event.value
                child_done()
            elif isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                job, subtasks = child_starts()
                is_map = isinstance(event, yaml.MappingStartEvent)
                stack.append([is_map, True, None, 0, job if is_map else None,
                              None if is_map else subtasks])
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                stack.pop()
                child_done()
    except yaml.YAMLError:
        return


def _yaml_load(text: str, src: str) -> Any:
    import yaml

    base: Any = _yaml_safe_loader()

    class _UniqueKeyLoader(base):  # type: ignore[misc, valid-type]
        """The safe loader, rejecting a key given twice in one mapping (silently lost
        else)."""

    def construct_mapping(loader: Any, node: yaml.MappingNode, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = loader.construct_object(key_node, deep=deep)
            if isinstance(key, str) and key in seen:
                mark = key_node.start_mark
                raise SpecError(
                    src, f"line {mark.line + 1}", f"key {key!r} given twice in one mapping"
                )
            seen.add(key)
        return yaml.constructor.SafeConstructor.construct_mapping(loader, node, deep=deep)

    _UniqueKeyLoader.add_constructor(
        yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, construct_mapping
    )
    try:
        return yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        problem = getattr(exc, "problem", None) or str(exc)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise SpecError(src, where, f"not valid YAML: {problem}") from None


def _json_load(text: str, src: str) -> Any:
    def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in pairs:
            if k in out:
                raise SpecError(src, "", f"key {k!r} given twice in one object")
            out[k] = v
        return out

    def no_constant(name: str) -> float:
        raise SpecError(src, "", f"{name} is not a number JSON allows")

    try:
        return json.loads(text, object_pairs_hook=no_duplicates, parse_constant=no_constant)
    except json.JSONDecodeError as exc:
        raise SpecError(
            src, f"line {exc.lineno}, column {exc.colno}", f"not valid JSON: {exc.msg}"
        ) from None


def parse_document(
    data: object, source: str, n_nodes: int | None = None, default_user: str = DEFAULT_USER
) -> list[JobSpec]:
    """Jobs from a parsed document: one job (a mapping) or a list of jobs. ``n_nodes``:
    the grid's node count when known; every job's subtask count is checked against it
    (or :data:`MAX_SUBTASKS`) before any job is parsed."""
    if data is None:
        raise SpecError(source, "", "empty file: expected a job (a mapping) or a list of jobs")
    if isinstance(data, Mapping):
        return [parse_job(data, source, None, n_nodes=n_nodes, default_user=default_user)]
    if isinstance(data, list):
        if not data:
            raise SpecError(source, "", "holds an empty list: expected at least one job")
        for i, item in enumerate(data):
            if isinstance(item, Mapping):
                _precheck_count(item, n_nodes, source, f"jobs[{i}]")
        return [
            parse_job(item, source, i, n_nodes=n_nodes, default_user=default_user)
            for i, item in enumerate(data)
        ]
    raise SpecError(
        source, "", f"expected a job (a mapping) or a list of jobs, got {type_name(data)}"
    )


def load_jobs(
    path: str | Path, n_nodes: int | None = None, default_user: str = DEFAULT_USER
) -> list[JobSpec]:
    """Read a YAML (``.yaml``/``.yml``) or JSON (``.json``) file of one job or a list.

    Raises :class:`SpecError` (a :class:`coalloc.errors.UserError`) naming the file, the
    field and the reason for every problem: missing file, a file above
    :data:`MAX_DOCUMENT_BYTES`, unparsable text (with its line), empty file, more
    subtasks than ``n_nodes`` (see :func:`parse_document`), and every invalid field.
    """
    src = str(path)
    data = read_document(
        path, "a job (a mapping) or a list of jobs",
        count_subtasks=lambda count, field: _check_count(count, n_nodes, src, field, True),
    )
    return parse_document(data, src, n_nodes, default_user)


def read_document(
    path: str | Path,
    expected: str,
    max_bytes: int = MAX_DOCUMENT_BYTES,
    count_subtasks: CountCheck | None = None,
) -> Any:
    """Parse a YAML or JSON file (chosen by its suffix) into plain data.

    Strict: a key given twice in one mapping, or JSON's NaN/Infinity, is an error.
    ``expected`` says what the file should hold, for the empty-file message. A file of
    more than ``max_bytes`` is refused before it is read (its size first; at most
    ``max_bytes + 1`` bytes are ever read, so a growing file or a device is refused
    too). Raises :class:`SpecError` naming the file, the place (line, column) and the
    reason.
    """
    p = Path(path)
    src = str(path)
    suffix = p.suffix.lower()
    if suffix not in _YAML_SUFFIXES + _JSON_SUFFIXES:
        raise SpecError(
            src, "", f"unknown file type {p.suffix or '(none)'!r}; use .yaml, .yml or .json"
        )
    # ``count_subtasks``: for job files, checks each job's subtask count while a YAML
    # file is still being scanned (see _yaml_precheck); JSON is parsed whole (fast) and
    # checked before any job is.
    too_big = (
        f"larger than the {max_bytes // 1024} KiB limit for this file; split it into "
        "several files"
    )
    try:
        with open(p, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size > max_bytes:
                raise SpecError(src, "", f"{size} bytes, {too_big}")
            raw = f.read(max_bytes + 1)
        if len(raw) > max_bytes:
            raise SpecError(src, "", too_big)
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise SpecError(src, "", "no such file") from None
    except IsADirectoryError:
        raise SpecError(src, "", "is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise SpecError(src, "", f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise SpecError(src, "", f"cannot read: {exc.strerror or exc}") from None
    return parse_text(text, src, expected, count_subtasks, max_bytes)


def parse_text(
    text: str, source: str, expected: str, count_subtasks: CountCheck | None = None,
    max_bytes: int = MAX_DOCUMENT_BYTES,
) -> Any:
    """:func:`read_document` of a file's text already read: ``source`` (the file's name)
    picks YAML or JSON by its suffix and is named in every error."""
    suffix = Path(source).suffix.lower()
    if suffix not in _YAML_SUFFIXES + _JSON_SUFFIXES:
        raise SpecError(
            source, "",
            f"unknown file type {Path(source).suffix or '(none)'!r}; use .yaml, .yml or .json",
        )
    if len(text) > max_bytes or len(text.encode("utf-8")) > max_bytes:
        raise SpecError(source, "", f"larger than the {max_bytes // 1024} KiB limit for this "
                        "file; split it into several files")
    if not text.strip():
        raise SpecError(source, "", f"empty file: expected {expected}")
    if suffix in _YAML_SUFFIXES:
        if count_subtasks is not None:
            _yaml_precheck(text, count_subtasks)
        return _yaml_load(text, source)
    return _json_load(text, source)


def load_jobs_text(
    text: str, source: str, n_nodes: int | None = None, default_user: str = DEFAULT_USER
) -> list[JobSpec]:
    """:func:`load_jobs` of the text of the file named ``source`` (a job file sent to the
    global manager's API): the same checks and the same messages."""
    data = parse_text(
        text, source, "a job (a mapping) or a list of jobs",
        count_subtasks=lambda count, field: _check_count(count, n_nodes, source, field, True),
    )
    return parse_document(data, source, n_nodes, default_user)
