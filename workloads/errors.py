"""Errors that the command line reports as one clear line (no traceback).

They sit in the bottom layer so that every package can raise them; :mod:`coalloc.errors`
re-exports them for the command line."""

from __future__ import annotations

import unicodedata

#: Unicode categories never printed raw: controls (C0, DEL, C1: ESC, NUL, newline, tab),
#: format characters (bidirectional overrides, zero-width), line/paragraph separators,
#: surrogates.
UNPRINTABLE_CATEGORIES = frozenset(("Cc", "Cf", "Zl", "Zp", "Cs"))


def is_unprintable(ch: str) -> bool:
    """Whether the character ``ch`` must not reach a terminal raw."""
    return unicodedata.category(ch) in UNPRINTABLE_CATEGORIES


def escape_controls(text: str) -> str:
    """``text`` with every unprintable character written as its Python escape
    (``\\x1b``, ``\\n``, ``\\u202e``), so that user-supplied strings can neither drive
    the terminal nor break a one-line message. Printable text is unchanged."""
    if text.isprintable():
        return text
    return "".join(ascii(ch)[1:-1] if is_unprintable(ch) else ch for ch in text)


class UserError(Exception):
    """An error caused by user input or the environment, shown as one line.

    The message must name what was wrong (file, field, reason) so that the user can fix it
    without reading a traceback. The command line exits with ``exit_code``.
    """

    exit_code: int = 2

    def __init__(self, message: str, exit_code: int | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class NoAnswer(UserError):
    """A request to a service that went out but got no answer: it may or may not have been
    applied (the service stopped, was cut off, or failed while answering). A caller that
    must not apply a request twice retries it with the same idempotency token."""
