"""The progress datagram: one UDP datagram per report, from a subtask's process to its
node's local manager (``docs/wire.md``, "Progress datagrams"). Encoding and parsing only;
no I/O (the socket is :mod:`runtime.progress_listener`'s, the sender
:mod:`coalloc.progress`'s).

One line of ASCII, fields separated by single spaces, at most :data:`MAX_DATAGRAM` bytes,
an optional trailing newline::

    CPR1 <key> <t> <t_end> <wait_s> <waiting>

``CPR1`` is the magic and version; ``key`` the subtask's progress key (32 lowercase hex
digits, ``COALLOC_PROGRESS_KEY`` in its environment); ``t`` the application's own time
(a step count, simulated seconds; a finite number >= 0); ``t_end`` its total when known,
else ``-`` (a finite number > 0); ``wait_s`` the seconds spent waiting at exchanges so far
(a finite number >= 0); ``waiting`` ``1`` while waiting, else ``0``. Numbers are decimal
(``%.17g`` in C: an integer, a fraction, an exponent), never ``nan`` or ``inf``.

Text, not a binary struct or msgpack: ``snprintf`` plus ``sendto`` in C, an internal
``write`` in Fortran, ``printf > /dev/udp/HOST/PORT`` in bash, no byte order or padding
to agree on, readable in ``tcpdump``; a double printed with 17 significant digits reads
back exactly.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from enum import Enum

#: The first field of every datagram: the format and its version.
MAGIC = "CPR1"
#: Largest datagram accepted, bytes; a longer one is dropped as ``oversize``.
MAX_DATAGRAM = 256
#: Length of a progress key, hex digits (128 bits).
KEY_HEX = 32

#: The environment variables a subtask's process finds its node's listener by.
ADDR_ENV = "COALLOC_PROGRESS_ADDR"
KEY_ENV = "COALLOC_PROGRESS_KEY"

_KEY = re.compile(f"[0-9a-f]{{{KEY_HEX}}}")
# A decimal number as C's %g or Python's repr print it; nothing else (no "1_000", no
# hex floats, no surrounding blanks).
_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_NOT_FINITE = re.compile(r"[-+]?(?:nan|inf|infinity)", re.IGNORECASE)


class DropReason(str, Enum):
    """Why a datagram was dropped (counted per reason; ``status`` shows the counts)."""

    OVERSIZE = "oversize"
    MALFORMED = "malformed"
    NOT_FINITE = "not_finite"
    OUT_OF_RANGE = "out_of_range"
    BAD_KEY = "bad_key"
    BACKWARDS = "backwards"
    NO_END = "no_end"


@dataclass(frozen=True, slots=True)
class ProgressDatagram:
    """One parsed report: ``t`` and ``t_end`` (None: not known) in the application's own
    unit, ``wait_s`` seconds spent waiting so far, ``waiting`` while at an exchange."""

    key: str
    t: float
    t_end: float | None
    wait_s: float
    waiting: bool


class DatagramError(ValueError):
    """A datagram that is not a valid report; ``reason`` says which rule it broke."""

    def __init__(self, reason: DropReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason


def _number(text: str, name: str) -> float:
    if _NUMBER.fullmatch(text) is None:
        if _NOT_FINITE.fullmatch(text) is not None:
            raise DatagramError(DropReason.NOT_FINITE, f"{name}: {text!r}")
        raise DatagramError(DropReason.MALFORMED, f"{name}: not a decimal number")
    value = float(text)
    if not math.isfinite(value):  # 1e999
        raise DatagramError(DropReason.NOT_FINITE, f"{name}: {text!r}")
    return value


def parse(data: bytes) -> ProgressDatagram:
    """The report ``data`` carries, or :class:`DatagramError` naming the reason."""
    if len(data) > MAX_DATAGRAM:
        raise DatagramError(DropReason.OVERSIZE, f"{len(data)} bytes > {MAX_DATAGRAM}")
    if data.endswith(b"\n"):
        data = data[:-1]
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError:
        raise DatagramError(DropReason.MALFORMED, "not ASCII") from None
    fields = text.split(" ")
    if len(fields) != 6 or fields[0] != MAGIC:
        raise DatagramError(DropReason.MALFORMED, f"expected '{MAGIC} key t t_end wait_s w'")
    _, key, t_text, end_text, wait_text, flag = fields
    if _KEY.fullmatch(key) is None:
        raise DatagramError(DropReason.MALFORMED, "key: not 32 lowercase hex digits")
    if flag not in ("0", "1"):
        raise DatagramError(DropReason.MALFORMED, "waiting: not 0 or 1")
    t = _number(t_text, "t")
    t_end = None if end_text == "-" else _number(end_text, "t_end")
    wait_s = _number(wait_text, "wait_s")
    if t < 0 or wait_s < 0 or (t_end is not None and t_end <= 0):
        raise DatagramError(DropReason.OUT_OF_RANGE, "t, wait_s must be >= 0, t_end > 0")
    return ProgressDatagram(key, t, t_end, wait_s, flag == "1")


def encode(key: str, t: float, t_end: float | None, wait_s: float, waiting: bool) -> bytes:
    """The datagram of one report (``repr`` of a float reads back exactly)."""
    end = "-" if t_end is None else repr(float(t_end))
    return (f"{MAGIC} {key} {float(t)!r} {end} {float(wait_s)!r} {int(waiting)}\n"
            .encode("ascii"))


def parse_addr(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (what :data:`ADDR_ENV` holds) as a socket address; ValueError if not."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{ADDR_ENV}: expected HOST:PORT, got {text!r}")
    return host, int(port)
