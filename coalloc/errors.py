"""Errors that the command line reports as one clear line (no traceback)."""

from __future__ import annotations


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
