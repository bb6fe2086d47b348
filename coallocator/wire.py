"""Wire format of the controller's messages: versioned msgpack frames (edge adapter).

One ZeroMQ message carries one frame; a frame is one msgpack array, the *envelope*::

    [version, kind, field_1, ..., field_n]

``version`` is :data:`WIRE_VERSION` (an int), ``kind`` a :class:`FrameKind` value (a str),
then the fields of the record in the order of its dataclass, no names (a flat array is
the cheapest shape to decode and the arity check catches missing or extra fields):

* ``progress`` (:class:`~coallocator.messages.ProgressReport`, 13 elements): job_id (str),
  subtask (int), node (str), incarnation (int), seq (int), real_time (float, s),
  virtual_time (float, s), expected_work (float, Mcycles), granted_work (float, Mcycles),
  done (bool), available_work (float, Mcycles).
* ``reweight`` (:class:`~coallocator.messages.ReweightCommand`, 9 elements): job_id (str),
  subtask (int), node (str), seq (int), weight (float, Mcycles/s), virtual_weight (float,
  Mcycles/s), rate_cap (float, Mcycles/s; 0 = no cap).

Version 2 added ``rate_cap`` to ``reweight`` and ``available_work`` to ``progress`` (pace
control); version 1 frames are dropped as ``bad_version``.

Every value is checked: names are non-empty str of at most ``max_name_bytes`` UTF-8
bytes; ints are msgpack ints (never bool or float) in ``[0, 2**63)``; floats are finite
and ``>= 0`` (a msgpack int is accepted for a float field when it is exact as a float, for
senders in languages without a separate float type; the encoder always writes float64);
``done`` is a msgpack bool. A frame that fails any check raises :class:`FrameError` whose
``reason`` (a :class:`DropReason`) says why; the transport counts drops by reason.
``docs/wire.md`` is the reference for other implementations.

Bounded work on hostile input: the frame length is checked before decoding, and msgpack
decodes with declared-length limits (arrays, maps, str, bin, ext), so a frame declaring a
2**31-element array or a 4 GiB string is rejected before anything is allocated; nesting
is bounded by msgpack's fixed parser stack, and all decoded objects by the frame length.

Decoding is the controller's hot path: a fast path checks a canonical frame (exact types)
in one expression and builds the record directly; anything else goes through a slow
path that either accepts it (ints in float fields) or names the first failing field.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypeVar

import msgpack

from coallocator.messages import ProgressReport, ReweightCommand

#: The envelope version this module writes and the only one it reads.
WIRE_VERSION = 2

#: Largest int on the wire (int64 maximum, so that any implementation can hold it).
MAX_WIRE_INT = 2**63 - 1

#: Largest int accepted in a float field: every int up to 2**53 is exact as a float64.
MAX_EXACT_FLOAT_INT = 2**53

_INF = math.inf

_REPORT_LEN = 13  # version, kind and the 11 fields of ProgressReport
_COMMAND_LEN = 9  # version, kind and the 7 fields of ReweightCommand
_HELLO_LEN = 3  # version, kind, node


class FrameKind(str, Enum):
    """What a frame carries (the envelope's second element)."""

    PROGRESS = "progress"  # ProgressReport, local manager -> controller
    REWEIGHT = "reweight"  # ReweightCommand, controller -> local manager
    HELLO = "hello"  # a local manager names its node on the command channel


class DropReason(str, Enum):
    """Why a frame or message was dropped; the transport counts drops by these names."""

    OVERSIZED = "oversized"  # frame longer than max_frame_bytes
    TRUNCATED = "truncated"  # input ends inside a msgpack object (includes an empty frame)
    UNDECODABLE = "undecodable"  # not msgpack: reserved byte, invalid UTF-8, ...
    TOO_DEEP = "too_deep"  # nesting deeper than the msgpack parser stack
    OVER_LIMIT = "over_limit"  # a declared array/map/str/bin/ext length above the limits
    TRAILING_BYTES = "trailing_bytes"  # bytes after the envelope
    BAD_VERSION = "bad_version"  # envelope version is not WIRE_VERSION
    BAD_KIND = "bad_kind"  # unknown kind, or the other direction's kind
    BAD_SCHEMA = "bad_schema"  # not an array envelope, wrong field count or field type
    BAD_VALUE = "bad_value"  # right type, wrong value: negative, non-finite, empty name...
    MULTIPART = "multipart"  # transport: a message of more than one frame
    WRONG_NODE = "wrong_node"  # a command for another node; a report not from its subtask's node
    SPOOFED_NODE = "spoofed_node"  # a report or hello naming a node its CURVE key is not
    OLD_INCARNATION = "old_incarnation"  # a report of a node's replaced incarnation


class FrameError(ValueError):
    """A frame was rejected; ``reason`` is what the transport counts, ``detail`` names the
    field and the problem for logs."""

    def __init__(self, reason: DropReason, detail: str = "") -> None:
        super().__init__(f"{reason.value}: {detail}" if detail else reason.value)
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class WireLimits:
    """Bounds on one frame. ``max_frame_bytes``: frame length, bytes. ``max_name_bytes``:
    longest str (job_id, node), UTF-8 bytes; 255 so that a node name is also a valid
    ZeroMQ routing id. ``max_array_len`` / ``max_map_len``: longest array / map msgpack
    may build; the envelopes have 13 and 9 elements, and a little room above that lets a
    near-miss envelope be reported as ``bad_schema`` rather than ``over_limit``."""

    max_frame_bytes: int = 64 * 1024
    max_name_bytes: int = 255
    max_array_len: int = 16
    max_map_len: int = 16

    def __post_init__(self) -> None:
        for name, low in (
            ("max_frame_bytes", 64),
            ("max_name_bytes", 1),
            ("max_array_len", _REPORT_LEN),
            ("max_map_len", 0),
        ):
            value = getattr(self, name)
            if type(value) is not int or value < low:
                raise ValueError(f"WireLimits.{name}: must be an int >= {low}, got {value!r}")


#: The defaults: 64 KiB frames, 255-byte names.
DEFAULT_LIMITS = WireLimits()


# ----------------------------------------------------------------------------- encoding


def _check_name(record: str, field: str, value: object, limits: WireLimits) -> str:
    if type(value) is not str or not value:
        raise ValueError(f"{record}.{field}: must be a non-empty str, got {value!r}")
    if len(value.encode("utf-8")) > limits.max_name_bytes:
        raise ValueError(
            f"{record}.{field}: longer than {limits.max_name_bytes} UTF-8 bytes"
        )
    return value


def _check_int(record: str, field: str, value: object) -> int:
    if type(value) is not int or not 0 <= value <= MAX_WIRE_INT:
        raise ValueError(f"{record}.{field}: must be an int in [0, 2**63), got {value!r}")
    return value


def _check_float(record: str, field: str, value: object) -> float:
    if type(value) is int:  # an int is a valid value of a float field in Python
        value = float(value)
    if type(value) is not float or not 0.0 <= value < _INF:
        raise ValueError(f"{record}.{field}: must be a finite float >= 0, got {value!r}")
    return value


def encode_report(report: ProgressReport, limits: WireLimits = DEFAULT_LIMITS) -> bytes:
    """Encode a progress report as one frame (bytes). Raises ValueError naming the field
    when the report cannot go on the wire (empty or too long name, negative or too large
    int, negative or non-finite float, non-bool ``done``)."""
    rec = "ProgressReport"
    if type(report) is not ProgressReport:
        raise ValueError(f"report: must be a ProgressReport, got {type(report).__name__}")
    if type(report.done) is not bool:
        raise ValueError(f"{rec}.done: must be a bool, got {report.done!r}")
    envelope = (
        WIRE_VERSION,
        FrameKind.PROGRESS.value,
        _check_name(rec, "job_id", report.job_id, limits),
        _check_int(rec, "subtask", report.subtask),
        _check_name(rec, "node", report.node, limits),
        _check_int(rec, "incarnation", report.incarnation),
        _check_int(rec, "seq", report.seq),
        _check_float(rec, "real_time", report.real_time),
        _check_float(rec, "virtual_time", report.virtual_time),
        _check_float(rec, "expected_work", report.expected_work),
        _check_float(rec, "granted_work", report.granted_work),
        report.done,
        _check_float(rec, "available_work", report.available_work),
    )
    return _pack(envelope, limits)


def encode_command(command: ReweightCommand, limits: WireLimits = DEFAULT_LIMITS) -> bytes:
    """Encode a re-weight command as one frame (bytes). Raises ValueError naming the
    field, as :func:`encode_report`."""
    rec = "ReweightCommand"
    if type(command) is not ReweightCommand:
        raise ValueError(f"command: must be a ReweightCommand, got {type(command).__name__}")
    envelope = (
        WIRE_VERSION,
        FrameKind.REWEIGHT.value,
        _check_name(rec, "job_id", command.job_id, limits),
        _check_int(rec, "subtask", command.subtask),
        _check_name(rec, "node", command.node, limits),
        _check_int(rec, "seq", command.seq),
        _check_float(rec, "weight", command.weight),
        _check_float(rec, "virtual_weight", command.virtual_weight),
        _check_float(rec, "rate_cap", command.rate_cap),
    )
    return _pack(envelope, limits)


def encode_hello(node: str, limits: WireLimits = DEFAULT_LIMITS) -> bytes:
    """Encode a ``hello`` frame: a local manager's DEALER names its node to the
    controller's ROUTER (``[version, "hello", node]``). ValueError for a bad name."""
    return _pack((WIRE_VERSION, FrameKind.HELLO.value, _check_name("hello", "node", node,
                                                                   limits)), limits)


def _pack(envelope: tuple[Any, ...], limits: WireLimits) -> bytes:
    frame: bytes = msgpack.packb(envelope, use_bin_type=True)
    if len(frame) > limits.max_frame_bytes:  # only with a tiny max_frame_bytes
        raise ValueError(
            f"frame: {len(frame)} bytes exceed max_frame_bytes={limits.max_frame_bytes}"
        )
    return frame


# ----------------------------------------------------------------------------- decoding


def _oversized(frame: Any, limits: WireLimits) -> FrameError:
    return FrameError(
        DropReason.OVERSIZED, f"{len(frame)} bytes > max_frame_bytes={limits.max_frame_bytes}"
    )


def _undecodable(exc: Exception) -> FrameError:
    """The FrameError for an exception raised by msgpack.unpackb."""
    if isinstance(exc, msgpack.ExtraData):
        return FrameError(DropReason.TRAILING_BYTES, "bytes after the envelope")
    if isinstance(exc, msgpack.StackError):
        return FrameError(DropReason.TOO_DEEP, "nesting deeper than the parser stack")
    if isinstance(exc, (msgpack.FormatError, UnicodeDecodeError)):
        return FrameError(DropReason.UNDECODABLE, type(exc).__name__)
    if type(exc) is ValueError:
        # msgpack signals these two with a plain ValueError; its message tells them apart
        msg = str(exc)
        if "incomplete" in msg:
            return FrameError(DropReason.TRUNCATED, "input ends inside an object")
        if "exceeds max_" in msg:
            return FrameError(DropReason.OVER_LIMIT, msg)
    # msgpack documents that other exceptions can occur
    return FrameError(DropReason.UNDECODABLE, f"{type(exc).__name__}: {exc}")


_unpackb = msgpack.unpackb


def _unpack(frame: Any, limits: WireLimits) -> Any:
    """msgpack-decode one frame under the limits; FrameError on anything malformed.
    (The decoders inline this: it is the hot path.) ``raw=False`` and
    ``strict_map_key=True`` are msgpack's defaults: str stays str, map keys str/bytes."""
    if len(frame) > limits.max_frame_bytes:
        raise _oversized(frame, limits)
    try:
        return _unpackb(
            frame,
            use_list=False,
            max_str_len=limits.max_name_bytes,
            max_bin_len=0,
            max_array_len=limits.max_array_len,
            max_map_len=limits.max_map_len,
            max_ext_len=0,
        )
    except Exception as exc:
        raise _undecodable(exc) from None


# Field checks of the slow path: (name, check) where check returns the value or raises.
_FieldCheck = Callable[[str, Any, WireLimits], Any]


def _wrong_type(field: str, expected: str, value: Any) -> FrameError:
    got = type(value).__name__
    return FrameError(DropReason.BAD_SCHEMA, f"{field}: {expected} expected, got {got}")


def _wire_name(field: str, value: Any, limits: WireLimits) -> str:
    if type(value) is not str:
        raise _wrong_type(field, "str", value)
    if not value:
        raise FrameError(DropReason.BAD_VALUE, f"{field}: empty")
    return value  # the length limit was enforced by msgpack (max_str_len)


def _wire_int(field: str, value: Any, limits: WireLimits) -> int:
    if type(value) is not int:
        raise _wrong_type(field, "int", value)
    if not 0 <= value <= MAX_WIRE_INT:
        raise FrameError(DropReason.BAD_VALUE, f"{field}: {value} outside [0, 2**63)")
    return value


def _wire_float(field: str, value: Any, limits: WireLimits) -> float:
    if type(value) is int:
        if not -MAX_EXACT_FLOAT_INT <= value <= MAX_EXACT_FLOAT_INT:
            raise FrameError(DropReason.BAD_VALUE, f"{field}: int {value} not exact as a float")
        value = float(value)
    elif type(value) is not float:
        raise _wrong_type(field, "float", value)
    if not math.isfinite(value):
        raise FrameError(DropReason.BAD_VALUE, f"{field}: not finite ({value})")
    if value < 0.0:
        raise FrameError(DropReason.BAD_VALUE, f"{field}: negative ({value})")
    return value


def _wire_bool(field: str, value: Any, limits: WireLimits) -> bool:
    if type(value) is not bool:
        raise _wrong_type(field, "bool", value)
    return value


_REPORT_FIELDS: tuple[tuple[str, _FieldCheck], ...] = (
    ("job_id", _wire_name),
    ("subtask", _wire_int),
    ("node", _wire_name),
    ("incarnation", _wire_int),
    ("seq", _wire_int),
    ("real_time", _wire_float),
    ("virtual_time", _wire_float),
    ("expected_work", _wire_float),
    ("granted_work", _wire_float),
    ("done", _wire_bool),
    ("available_work", _wire_float),
)

_COMMAND_FIELDS: tuple[tuple[str, _FieldCheck], ...] = (
    ("job_id", _wire_name),
    ("subtask", _wire_int),
    ("node", _wire_name),
    ("seq", _wire_int),
    ("weight", _wire_float),
    ("virtual_weight", _wire_float),
    ("rate_cap", _wire_float),
)


def _check_envelope(obj: Any, kind: FrameKind, length: int) -> None:
    if type(obj) is not tuple:
        raise FrameError(
            DropReason.BAD_SCHEMA, f"envelope: array expected, got {type(obj).__name__}"
        )
    if len(obj) < 2:
        raise FrameError(DropReason.BAD_SCHEMA, f"envelope: {len(obj)} elements, < 2")
    version, got_kind = obj[0], obj[1]
    if type(version) is not int or version != WIRE_VERSION:
        raise FrameError(
            DropReason.BAD_VERSION, f"version {version!r}, this end reads {WIRE_VERSION}"
        )
    if got_kind != kind.value:
        raise FrameError(DropReason.BAD_KIND, f"kind {got_kind!r}, expected {kind.value!r}")
    if len(obj) != length:
        raise FrameError(
            DropReason.BAD_SCHEMA,
            f"{kind.value} envelope: {length} elements expected, got {len(obj)}",
        )


def _slow_fields(
    obj: tuple[Any, ...], fields: tuple[tuple[str, _FieldCheck], ...], limits: WireLimits
) -> list[Any]:
    return [check(name, value, limits) for (name, check), value in zip(fields, obj[2:])]


# Building the records: a frozen dataclass __init__ assigns each field through
# object.__setattr__, which costs more than the rest of decoding. The decoder instead
# allocates the instance and sets the slots through their member descriptors, bound once
# as default arguments (unrolled: a loop costs half the gain). This is only equivalent
# while the class has exactly these slots in this order and no __post_init__; if
# workloads/messages.py changes, the plain constructor is used (checked once, at import).
def _slots_match(cls: type, names: tuple[str, ...]) -> bool:
    return (
        tuple(f.name for f in dataclasses.fields(cls)) == names
        and getattr(cls, "__slots__", None) == names
        and not hasattr(cls, "__post_init__")
    )


_R = TypeVar("_R")


def _setters(
    cls: type, fields: tuple[tuple[str, _FieldCheck], ...]
) -> tuple[Callable[[Any, Any], None], ...]:
    return tuple(getattr(cls, name).__set__ for name, _ in fields)


def _builder(
    cls: type[_R], fields: tuple[tuple[str, _FieldCheck], ...], fast: Callable[..., _R]
) -> Callable[..., _R]:
    """``fast`` while ``cls`` has exactly the slots ``fields`` names, else ``cls``."""
    return fast if _slots_match(cls, tuple(name for name, _ in fields)) else cls


_RS = _setters(ProgressReport, _REPORT_FIELDS)
_CS = _setters(ReweightCommand, _COMMAND_FIELDS)


def _fast_report(
    job_id: str, subtask: int, node: str, incarnation: int, seq: int,
    real_time: float, virtual_time: float, expected_work: float, granted_work: float,
    done: bool, available_work: float,
    _new: Any = object.__new__, _cls: type = ProgressReport,
    _s0: Any = _RS[0], _s1: Any = _RS[1], _s2: Any = _RS[2], _s3: Any = _RS[3],
    _s4: Any = _RS[4], _s5: Any = _RS[5], _s6: Any = _RS[6], _s7: Any = _RS[7],
    _s8: Any = _RS[8], _s9: Any = _RS[9], _s10: Any = _RS[10],
) -> ProgressReport:
    r: ProgressReport = _new(_cls)
    _s0(r, job_id)
    _s1(r, subtask)
    _s2(r, node)
    _s3(r, incarnation)
    _s4(r, seq)
    _s5(r, real_time)
    _s6(r, virtual_time)
    _s7(r, expected_work)
    _s8(r, granted_work)
    _s9(r, done)
    _s10(r, available_work)
    return r


def _fast_command(
    job_id: str, subtask: int, node: str, seq: int, weight: float, virtual_weight: float,
    rate_cap: float,
    _new: Any = object.__new__, _cls: type = ReweightCommand,
    _s0: Any = _CS[0], _s1: Any = _CS[1], _s2: Any = _CS[2], _s3: Any = _CS[3],
    _s4: Any = _CS[4], _s5: Any = _CS[5], _s6: Any = _CS[6],
) -> ReweightCommand:
    c: ReweightCommand = _new(_cls)
    _s0(c, job_id)
    _s1(c, subtask)
    _s2(c, node)
    _s3(c, seq)
    _s4(c, weight)
    _s5(c, virtual_weight)
    _s6(c, rate_cap)
    return c


_build_report = _builder(ProgressReport, _REPORT_FIELDS, _fast_report)
_build_command = _builder(ReweightCommand, _COMMAND_FIELDS, _fast_command)


def decode_report(frame: Any, limits: WireLimits = DEFAULT_LIMITS) -> ProgressReport:
    """Decode and validate one ``progress`` frame (bytes, or any object with the buffer
    protocol such as a ``zmq.Frame``).

    Raises :class:`FrameError` (never anything else) when the frame is oversized,
    malformed, of another version or kind, or out of schema; see the module docstring
    for the rules."""
    # _unpack inlined (one call less per report)
    if len(frame) > limits.max_frame_bytes:
        raise _oversized(frame, limits)
    try:
        obj = _unpackb(
            frame,
            use_list=False,
            max_str_len=limits.max_name_bytes,
            max_bin_len=0,
            max_array_len=limits.max_array_len,
            max_map_len=limits.max_map_len,
            max_ext_len=0,
        )
    except Exception as exc:
        raise _undecodable(exc) from None
    if type(obj) is tuple and len(obj) == _REPORT_LEN:
        v, k, job, sub, node, inc, seq, t_r, t_v, x, x_bar, done, avail = obj
        # Fast path: a canonical frame. It may refuse a valid frame (ints in float
        # fields); the slow path below is the authority. A bitwise OR of ints is in
        # [0, 2**63) exactly when each of them is; the chained float comparisons are
        # False for NaN and +/-inf.
        if (
            type(v) is int
            and v == WIRE_VERSION
            and k == "progress"
            and type(job) is str
            and type(sub) is int
            and type(node) is str
            and type(inc) is int
            and type(seq) is int
            and type(t_r) is float
            and type(t_v) is float
            and type(x) is float
            and type(x_bar) is float
            and type(done) is bool
            and type(avail) is float
            and job
            and node
            and 0 <= (sub | inc | seq) <= MAX_WIRE_INT
            and 0.0 <= t_r < _INF
            and 0.0 <= t_v < _INF
            and 0.0 <= x < _INF
            and 0.0 <= x_bar < _INF
            and 0.0 <= avail < _INF
        ):
            return _build_report(job, sub, node, inc, seq, t_r, t_v, x, x_bar, done, avail)
    _check_envelope(obj, FrameKind.PROGRESS, _REPORT_LEN)
    return _build_report(*_slow_fields(obj, _REPORT_FIELDS, limits))


def decode_command(frame: Any, limits: WireLimits = DEFAULT_LIMITS) -> ReweightCommand:
    """Decode and validate one ``reweight`` frame; raises :class:`FrameError` as
    :func:`decode_report`."""
    obj = _unpack(frame, limits)
    if type(obj) is tuple and len(obj) == _COMMAND_LEN:
        v, k, job, sub, node, seq, w, w_virtual, cap = obj
        if (
            type(v) is int
            and v == WIRE_VERSION
            and k == "reweight"
            and type(job) is str
            and type(sub) is int
            and type(node) is str
            and type(seq) is int
            and type(w) is float
            and type(w_virtual) is float
            and type(cap) is float
            and job
            and node
            and 0 <= (sub | seq) <= MAX_WIRE_INT
            and 0.0 <= w < _INF
            and 0.0 <= w_virtual < _INF
            and 0.0 <= cap < _INF
        ):
            return _build_command(job, sub, node, seq, w, w_virtual, cap)
    _check_envelope(obj, FrameKind.REWEIGHT, _COMMAND_LEN)
    return _build_command(*_slow_fields(obj, _COMMAND_FIELDS, limits))


def decode_hello(frame: Any, limits: WireLimits = DEFAULT_LIMITS) -> str:
    """Decode and validate one ``hello`` frame; returns the node it names. Raises
    :class:`FrameError` as :func:`decode_report`."""
    obj = _unpack(frame, limits)
    _check_envelope(obj, FrameKind.HELLO, _HELLO_LEN)
    return _wire_name("node", obj[2], limits)
