"""``coalloc fair``: one allocation by a fairness policy, from a file or from flags.

File form (YAML or JSON)::

    policy: drf                   # optional (default drf); see --help for the names
    resources: [cpu, memory_gb]   # optional names, one per capacity entry
    capacity: [9, 18]             # C_j, resource units
    users:
      - {name: A, demand: [1, 4]}              # per-task demand, resource units
      - {name: B, demand: [3, 1], weight: 2, max_tasks: 5}

``weight`` is a number (> 0) or a list with one weight per resource; ``max_tasks`` caps
the user's tasks (omit or null for no cap). Flags form::

    coalloc fair --capacity 9,18 --user A:1,4 --user B:3,1:2 --policy drf

with ``--user NAME:DEMAND[:WEIGHT[:MAX_TASKS]]`` (DEMAND and a per-resource WEIGHT are
comma lists). The allocation is printed as a table, or as JSON with ``--json``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationError,
)

from coalloc.errors import UserError
from coalloc.tables import cell
from coalloc.tables import render as render_table
from workloads.validation import STRICT, Wording, explain, fail, type_name

DEFAULT_POLICY = "drf"


def register(subparsers: Any) -> None:
    from fairness.registry import policy_names

    parser = subparsers.add_parser(
        "fair",
        help="allocate a resource pool among users with a fairness policy (DRF, ...)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("file", nargs="?", metavar="FILE",
                        help="allocation problem (.yaml, .yml or .json)")
    parser.add_argument("--capacity", metavar="C1,C2,...",
                        help="capacity per resource (flags form)")
    parser.add_argument("--user", action="append", default=[], metavar="NAME:DEMAND[:W[:MAX]]",
                        help="a user (flags form; repeat for each user)")
    parser.add_argument("--resources", metavar="R1,R2,...", help="resource names (flags form)")
    parser.add_argument("--policy", default=None, choices=policy_names(),
                        help=f"policy (overrides the file's; default {DEFAULT_POLICY})")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.set_defaults(handler=run_fair)


# ---------------------------------------------------------------------------------------
# The problem


class Problem:
    """A validated allocation problem (capacity in resource units, demands per task)."""

    __slots__ = ("source", "policy", "resources", "capacity", "names", "demands", "weights",
                 "max_tasks")

    def __init__(self, source: str, policy: str, resources: list[str], capacity: list[float],
                 names: list[str], demands: list[list[float]],
                 weights: list[float | list[float]], max_tasks: list[float | None]) -> None:
        self.source = source
        self.policy = policy
        self.resources = resources
        self.capacity = capacity
        self.names = names
        self.demands = demands
        self.weights = weights
        self.max_tasks = max_tasks


def _fail(source: str, field: str, reason: str) -> UserError:
    return UserError(f"{source}: {field}: {reason}" if field else f"{source}: {reason}")


# ---------------------------------------------------------------------------------------
# The file's models (pydantic, strict, unknown keys refused) and their wording


def _printable(name: str) -> str:
    """Names are printed in tables: a control character (ESC, NUL, newline) is refused."""
    from workloads.spec import unprintable

    bad = unprintable(name)
    if bad is not None:
        raise fail(f"must not contain control characters (found {bad} in {ascii(name)})")
    return name


def _non_empty(name: str) -> str:
    if not name:
        raise fail("must be a non-empty name")
    return _printable(name)


def _int_as_name(value: object) -> object:
    """A user may be named by a number (``name: 1``); bool is not a number here."""
    return str(value) if type(value) is int else value


def _weight_kind(value: object) -> str:
    return "list" if isinstance(value, list) else "number"


_Positive = Annotated[float, Field(gt=0)]
_NonNegative = Annotated[float, Field(ge=0)]
#: A number, or a list with one weight per resource (the tag names the form; the
#: translator leaves it out of field paths).
_Weight = Annotated[
    Annotated[_Positive, Tag("number")] | Annotated[list[_Positive], Tag("list")],
    Discriminator(_weight_kind),
]


class _User(BaseModel):
    model_config = STRICT
    name: Annotated[str, BeforeValidator(_int_as_name), AfterValidator(_non_empty)]
    demand: list[_NonNegative]
    weight: _Weight | None = None
    max_tasks: _NonNegative | None = None


class _File(BaseModel):
    model_config = STRICT
    policy: str = DEFAULT_POLICY
    resources: list[Annotated[str, AfterValidator(_non_empty)]] | None = None
    capacity: Annotated[list[_Positive], Field(min_length=1)]
    users: Annotated[list[_User], Field(min_length=1)]


FILE_KEYS: tuple[str, ...] = tuple(_File.model_fields)
USER_KEYS: tuple[str, ...] = tuple(_User.model_fields)


def _list_of_numbers(err: Any) -> str | None:
    if err["type"] == "list_type":
        return f"must be a list of numbers, got {type_name(err['input'])}"
    return None


_WORDING = Wording(
    missing={
        "capacity": "missing (one number per resource)",
        "users": "missing (a list of users with name and demand)",
    },
    reasons={
        "policy": lambda err: f"must be a name, got {type_name(err['input'])}",
        "resources": lambda err: "must be a list of names",
        "resources[]": lambda err: (
            "must be a non-empty name" if err["type"] == "string_type" else None
        ),
        "capacity": _list_of_numbers,
        "users": lambda err: (
            "must be a non-empty list of users" if err["type"] in ("list_type", "too_short")
            else None
        ),
        "users[]": lambda err: (
            f"must be a mapping with name and demand, got {type_name(err['input'])}"
            if err["type"] == "model_type" else None
        ),
        "users[].name": lambda err: (
            "must be a non-empty name" if err["type"] == "string_type" else None
        ),
        "users[].demand": _list_of_numbers,
        "users[].weight": _list_of_numbers,
    },
    key_noun="field",
    tags=frozenset({"number", "list"}),
)


def parse_problem(data: object, source: str, policy_override: str | None = None) -> Problem:
    """Check a parsed document (keys and types by the file's pydantic model, then the
    rules between fields); every problem is a :class:`UserError` ``SOURCE: FIELD:
    REASON``."""
    from fairness.registry import policy_names

    if not isinstance(data, Mapping):
        raise _fail(source, "", f"expected a mapping with capacity and users, got "
                                f"{type_name(data)}")
    try:
        doc = _File.model_validate(dict(data))
    except ValidationError as exc:
        field, reason = explain(exc, _File, _WORDING)
        raise _fail(source, field, reason) from None
    policy = policy_override if policy_override is not None else doc.policy
    if policy not in policy_names():
        raise _fail(source, "policy", f"unknown policy {policy!r}; known: "
                                      + ", ".join(policy_names()))
    m = len(doc.capacity)
    resources = doc.resources if doc.resources is not None else [f"r{j}" for j in range(m)]
    if len(resources) != m:
        raise _fail(source, "resources",
                    f"has {len(resources)} entries, expected {m} (one per capacity entry)")
    if len(set(resources)) != m:
        raise _fail(source, "resources", "names must be distinct")
    names: list[str] = []
    for i, user in enumerate(doc.users):
        at = f"users[{i}]"
        if user.name in names:
            raise _fail(source, f"{at}.name", f"{user.name!r} is used twice")
        names.append(user.name)
        for key, value in (("demand", user.demand), ("weight", user.weight)):
            if isinstance(value, list) and len(value) != m:
                raise _fail(source, f"{at}.{key}", f"has {len(value)} entries, expected {m} "
                                                   "(one per capacity entry)")
        if not any(user.demand):
            raise _fail(source, f"{at}.demand", "is zero on every resource")
    weights: list[float | list[float]] = [
        1.0 if u.weight is None else u.weight for u in doc.users
    ]
    return Problem(source, policy, list(resources), list(doc.capacity), names,
                   [list(u.demand) for u in doc.users], weights,
                   [u.max_tasks for u in doc.users])


def load_problem(path: str, policy_override: str | None = None) -> Problem:
    """Read and check a problem file (.yaml, .yml or .json)."""
    from workloads.spec import read_document

    data = read_document(path, "capacity and users")
    return parse_problem(data, path, policy_override)


def _split_numbers(flag: str, text: str, positive: bool) -> list[float]:
    out = []
    for k, part in enumerate(text.split(",")):
        try:
            v = float(part)
        except ValueError:
            raise UserError(f"{flag}: entry {k + 1} {part!r} is not a number") from None
        if not math.isfinite(v) or v < 0 or (positive and v == 0):
            raise UserError(f"{flag}: entry {k + 1} {part!r} must be a finite number "
                            f"{'> 0' if positive else '>= 0'}")
        out.append(v)
    return out


def problem_from_flags(args: argparse.Namespace) -> Problem:
    """The problem given by ``--capacity``, ``--user`` and ``--resources``."""
    if args.capacity is None:
        raise UserError("--capacity: missing (give a FILE or --capacity and --user)")
    if not args.user:
        raise UserError("--user: missing (at least one NAME:DEMAND)")
    data: dict[str, Any] = {
        "policy": args.policy or DEFAULT_POLICY,
        "capacity": _split_numbers("--capacity", args.capacity, positive=True),
        "users": [],
    }
    if args.resources:
        data["resources"] = args.resources.split(",")
    for text in args.user:
        parts = text.split(":")
        if len(parts) < 2 or len(parts) > 4 or not parts[0]:
            raise UserError(f"--user: {text!r}: expected NAME:DEMAND[:WEIGHT[:MAX_TASKS]]")
        flag = f"--user {parts[0]}"
        user: dict[str, Any] = {
            "name": parts[0], "demand": _split_numbers(f"{flag}: demand", parts[1], False)}
        if len(parts) > 2 and parts[2]:
            w = _split_numbers(f"{flag}: weight", parts[2], positive=True)
            user["weight"] = w[0] if len(w) == 1 else w
        if len(parts) > 3 and parts[3]:
            user["max_tasks"] = _split_numbers(f"{flag}: max_tasks", parts[3], False)[0]
        data["users"].append(user)
    return parse_problem(data, "command line")


# ---------------------------------------------------------------------------------------
# Running and printing


def solve(problem: Problem) -> dict[str, Any]:
    """Run the policy; the result as a JSON-ready document (units as in the input)."""
    from fairness.registry import allocate

    try:
        r = allocate(problem.policy, problem.capacity, problem.demands, problem.weights,
                     problem.max_tasks)
    except ValueError as exc:
        raise UserError(f"{problem.source}: {exc}") from None
    return {
        "policy": problem.policy,
        "resources": problem.resources,
        "capacity": dict(zip(problem.resources, problem.capacity)),
        "users": [
            {
                "name": name,
                "tasks": tasks,
                "dominant_share": share,
                "weighted_share": wshare,
                "allocation": dict(zip(problem.resources, alloc)),
            }
            for name, tasks, share, wshare, alloc in zip(
                problem.names, r.tasks, r.dominant_shares, r.weighted_shares, r.allocations)
        ],
        "usage": dict(zip(problem.resources, r.usage)),
        "utilization": dict(zip(problem.resources, r.utilization)),
    }


def render(doc: dict[str, Any]) -> str:
    """The result as a text table: one row per user, then totals and utilisation."""
    res = doc["resources"]

    def num(value: float) -> str:  # whole numbers without decimals, others up to 4
        return cell(value, 4, compact=True)

    headers = ["user", "tasks", "dominant share", *res]
    rows = [[u["name"], num(u["tasks"]), cell(u["dominant_share"], 4),
             *(num(u["allocation"][r]) for r in res)] for u in doc["users"]]
    rows.append(["total", "", "", *(num(doc["usage"][r]) for r in res)])
    rows.append(["capacity", "", "", *(num(doc["capacity"][r]) for r in res)])
    rows.append(["utilization", "", "",
                 *(cell(100 * doc["utilization"][r], 1) + "%" for r in res)])
    table = render_table(headers, rows, align="<" + ">" * (len(headers) - 1))
    return f"policy: {doc['policy']}\n{table}"


def run_fair(args: argparse.Namespace) -> int:
    if args.file is not None:
        if args.capacity is not None or args.user or args.resources:
            raise UserError("give a FILE or --capacity/--user/--resources, not both")
        problem = load_problem(args.file, args.policy)
    else:
        problem = problem_from_flags(args)
    doc = solve(problem)
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(render(doc))
    return 0
