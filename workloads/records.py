"""One serializer for the records the runtime writes to disk: the global manager's
journal (its job table and the core's jobs) and the local managers' checkpoints.

A record is a dataclass of the model (frozen where it is a value: :class:`JobSpec`,
:class:`~runtime.jobs.PlacedSubtask`, ...); :func:`to_record` turns it into
JSON-able data (enums as their values, tuples and frozensets as lists, nested records as
mappings, numbers in the record's own units, e.g. Mcycles: no unit conversion, so a
float comes back bit for bit; a field at its default is left out, so a ``-0.0`` where
the default is ``0.0`` comes back as ``0.0``) and
:func:`from_record` reads it back, checking every field against the record's type hints.
Both are pydantic's :class:`pydantic.TypeAdapter` over the record's class, built once
per class. A record that does not fit raises
:class:`pydantic.ValidationError` (a ``ValueError``) naming the field.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import TypeAdapter

T = TypeVar("T")


_ADAPTERS: dict[type[Any], TypeAdapter[Any]] = {}


def _adapter(kind: type[Any]) -> TypeAdapter[Any]:
    adapter = _ADAPTERS.get(kind)
    if adapter is None:  # built once per class (a race builds two, both right)
        adapter = _ADAPTERS[kind] = TypeAdapter(kind)
    return adapter


def to_record(value: object) -> Any:
    """``value``, a record, as JSON-able data (see the module docstring)."""
    return _adapter(type(value)).dump_python(value, mode="json", exclude_defaults=True)


def from_record(kind: type[T], data: object) -> T:
    """The record of class ``kind`` that :func:`to_record` wrote as ``data``."""
    value: T = _adapter(kind).validate_python(data)
    return value
