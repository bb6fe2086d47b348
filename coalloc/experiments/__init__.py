"""Experiments run by ``coalloc experiment NAME``. Each module exposes
``register(subparsers)`` adding one parser with a ``handler`` default; the
``experiment`` command discovers them, so adding one never edits a shared list."""
