"""Input validation at the edge: pydantic v2 models, one-line messages.

Files and mappings from users (job files, allocation files) are checked by pydantic
models in strict mode with unknown keys forbidden (:data:`STRICT`); the checked data is
then turned into the project's frozen dataclasses (``workloads.model``), which stay the
core's records (``docs/decisions.md``, "Pydantic at the edge").

A :class:`pydantic.ValidationError` lists every problem with pydantic's own wording;
users get one line ``FILE: FIELD: REASON`` in the project's words. :func:`explain` picks
the error to report (an unknown key first, as a typo usually explains the rest) and
words it: ``FIELD`` is the path of the value (``jobs[2].subtasks[0].work``), ``REASON``
comes from the format's :class:`Wording` (per-field reasons and units) or from the
defaults here, and an unknown key gets a did-you-mean suggestion.

Validators inside a model raise :func:`fail` for reasons pydantic has no type for
(a control character in a name); ``at`` extends the field path (``command[0]``).

Records built in code (the generator's parameters, the runtime's configuration) keep
their dataclass and declare their bounds in its annotations (``Annotated[int,
Field(ge=1)]``); :func:`fields_model` builds a strict model of those fields and
:func:`check_fields`, called from ``__post_init__``, raises ``ValueError("FIELD:
REASON")`` in the same words.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, create_model
from pydantic_core import ErrorDetails, PydanticCustomError

#: The configuration of every edge model: no coercion (``"100"`` is not a number, ``true``
#: not an integer), unknown keys are errors, NaN and infinities are refused.
STRICT = ConfigDict(strict=True, extra="forbid", allow_inf_nan=False)

#: The error type of :func:`fail`.
CUSTOM = "coalloc"

#: A field's own reason for an error: called with the error, returns the reason or None
#: (then the defaults apply).
Reason = Callable[[ErrorDetails], "str | None"]


def did_you_mean(key: object, known: Sequence[str], noun: str = "key") -> str:
    """The reason for an unknown key: the closest known one, or the list of them."""
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    if close:
        return f"unknown {noun}; did you mean '{close[0]}'?"
    return f"unknown {noun}; known {noun}s: " + ", ".join(known)


def one_of(value: object, allowed: Sequence[str]) -> str:
    """The reason for a value outside ``allowed``, with a suggestion when one is close."""
    reason = f"must be one of {', '.join(allowed)}, got {value!r}"
    close = difflib.get_close_matches(str(value), allowed, n=1, cutoff=0.6)
    if close:
        reason += f"; did you mean '{close[0]}'?"
    return reason


def fail(reason: str, at: str | int | None = None) -> PydanticCustomError:
    """An error for a model validator to raise: ``reason`` verbatim, at the validated
    value or at its item or key ``at``."""
    return PydanticCustomError(CUSTOM, "{reason}", {"reason": reason, "at": at})


def type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def as_list(value: object) -> object:
    """A tuple as a list (the Python client may pass tuples), anything else unchanged:
    for ``BeforeValidator`` on strict list fields."""
    return list(value) if isinstance(value, tuple) else value


def as_tuple(value: object) -> object:
    """A list as a tuple, anything else unchanged: for ``BeforeValidator`` on strict
    tuple fields of records built in code."""
    return tuple(value) if isinstance(value, list) else value


def join(prefix: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{prefix}[{key}]"
    return f"{prefix}.{key}" if prefix else key


def path_of(loc: Sequence[str | int], prefix: str = "") -> str:
    """``("subtasks", 0, "work")`` -> ``subtasks[0].work`` (after ``prefix``)."""
    out = prefix
    for step in loc:
        out = join(out, step)
    return out


def pattern_of(loc: Sequence[str | int]) -> str:
    """The path with indices left out: ``subtasks[].work``, the key of :class:`Wording`."""
    return path_of(["[]" if isinstance(step, int) else step for step in loc]).replace(
        ".[]", "[]"
    )


def _number(value: object) -> str:
    return f"must be a number, got {type_name(value)} {value!r}"


def _got(value: object) -> str:
    return "null" if value is None else f"{type_name(value)} {value!r}"


def _bound(value: object) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


@dataclass(frozen=True)
class Wording:
    """How a file format words its errors; keys are patterns (:func:`pattern_of`, ``""``
    for the top-level mapping)."""

    #: Reason for a missing required key.
    missing: Mapping[str, str] = field(default_factory=dict)
    #: A field's own reason for any of its errors (None: the defaults).
    reasons: Mapping[str, Reason] = field(default_factory=dict)
    #: Unit after a bound (``must be > 0 s``).
    units: Mapping[str, str] = field(default_factory=dict)
    #: What a mapping holds, for ``must be a mapping (WHAT)``.
    mappings: Mapping[str, str] = field(default_factory=dict)
    #: The reason for a value that is not a number.
    number: Callable[[object], str] = _number
    #: The word for an unknown key (``unknown key; did you mean ...``).
    key_noun: str = "key"
    #: Tags of discriminated unions (``Tag("list")``): pydantic puts them in an error's
    #: location; they are not keys, and the field path leaves them out.
    tags: frozenset[str] = frozenset()


def known_keys(model: type[BaseModel], loc: Sequence[str | int]) -> tuple[str, ...]:
    """The keys of the model reached from ``model`` by ``loc`` (indices skipped)."""
    current: type[BaseModel] = model
    for step in loc:
        if isinstance(step, int):
            continue
        info = current.model_fields.get(step)
        nested = _model_in(info.annotation) if info is not None else None
        if nested is None:
            break
        current = nested
    return tuple(current.model_fields)


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The model class inside an annotation (``_Demand | None``, ``list[_Subtask]``)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _model_in(arg)
        if found is not None:
            return found
    return None


def _default_reason(err: ErrorDetails, pattern: str, wording: Wording) -> str:
    kind = err["type"]
    value = err["input"]
    ctx = err.get("ctx") or {}
    unit = wording.units.get(pattern, "")
    if kind == "missing":
        return wording.missing.get(pattern, "missing")
    if kind in ("float_type", "float_parsing"):
        return wording.number(value)
    if kind == "finite_number":
        return f"must be a finite number, got {value!r}"
    if kind == "greater_than":
        return f"must be > {_bound(ctx['gt'])}{unit}, got {value!r}"
    if kind == "greater_than_equal":
        return f"must be >= {_bound(ctx['ge'])}{unit}, got {value!r}"
    if kind in ("model_type", "dict_type", "model_attributes_type"):
        what = wording.mappings.get(pattern)
        return f"must be a mapping{f' ({what})' if what else ''}, got {type_name(value)}"
    if kind in ("list_type", "tuple_type"):
        return f"must be a list, got {type_name(value)}"
    if kind == "too_short":
        return "must not be empty"
    if kind in ("int_type", "int_parsing", "int_from_float"):
        return f"must be an integer, got {_got(value)}"
    if kind == "bool_type":
        return f"must be true or false, got {value!r}"
    if kind == "string_type":
        return f"must be a string, got {_got(value)}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected', 'one of the allowed values')}, got {value!r}"
    return str(err["msg"]).lower()


def explain(
    exc: ValidationError, model: type[BaseModel], wording: Wording, prefix: str = ""
) -> tuple[str, str]:
    """``(FIELD, REASON)`` for the error of ``exc`` that the user should see first.

    ``model`` is the validated model (for the keys of an unknown-key suggestion);
    ``prefix`` starts the field path (``jobs[2]``).
    """
    errors = exc.errors(include_url=False)
    err = next((e for e in errors if e["type"] in ("extra_forbidden", "invalid_key")), errors[0])
    kind = err["type"]
    last = len(err["loc"]) - 1 if kind in ("extra_forbidden", "invalid_key") else -1
    loc = [s for k, s in enumerate(err["loc"]) if s not in wording.tags or k == last]
    if kind == CUSTOM:
        ctx = err.get("ctx") or {}
        if ctx.get("at") is not None:
            loc.append(ctx["at"])
        return path_of(loc, prefix), str(ctx["reason"])
    if kind == "missing" and loc and isinstance(loc[-1], int):
        # A fixed-length tuple given too few items: the tuple is too short.
        loc, kind = loc[:-1], "too_short"
        err = ErrorDetails(type=kind, loc=tuple(loc), msg="too short", input=err["input"])
    if kind == "invalid_key":
        return path_of([*loc[:-1], str(loc[-1])], prefix), "keys must be strings"
    if kind == "extra_forbidden":
        known = known_keys(model, loc[:-1])
        return path_of(loc, prefix), did_you_mean(loc[-1], known, wording.key_noun)
    pattern = pattern_of(loc)
    own = wording.reasons.get(pattern)
    reason = own(err) if own is not None else None
    return path_of(loc, prefix), reason or _default_reason(err, pattern, wording)


def fields_model(cls: type, exclude: Sequence[str] = ()) -> type[BaseModel]:
    """A strict pydantic model of a dataclass's fields, from their annotations
    (``Annotated[int, Field(ge=1)]``: the dataclass ignores the metadata, the model
    checks it), ``exclude``-d fields left out (a nested record that checks itself). For
    records built in code that check themselves in ``__post_init__`` with
    :func:`check_fields`."""
    hints = typing.get_type_hints(cls, include_extras=True)
    names = [f.name for f in dataclasses.fields(cls) if f.name not in exclude]
    spec: dict[str, Any] = {name: (hints[name], ...) for name in names}
    return create_model(f"{cls.__name__}Fields", __config__=STRICT, **spec)


def check_fields(
    record: object, model: type[BaseModel], wording: Wording, prefix: str = ""
) -> dict[str, Any]:
    """Validate a dataclass's field values with ``model`` (:func:`fields_model`); the
    first problem as ``ValueError("PREFIX FIELD: REASON")``. Returns the validated values
    (an enum field given as its value comes back as the enum)."""
    values = {name: getattr(record, name) for name in model.model_fields}
    try:
        return dict(model.model_validate(values))
    except ValidationError as exc:
        field, reason = explain(exc, model, wording)
        raise ValueError(f"{prefix}{field}: {reason}") from None
