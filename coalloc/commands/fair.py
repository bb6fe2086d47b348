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
from typing import Any

from coalloc.errors import UserError
from coalloc.tables import cell
from coalloc.tables import render as render_table

FILE_KEYS: tuple[str, ...] = ("policy", "resources", "capacity", "users")
USER_KEYS: tuple[str, ...] = ("name", "demand", "weight", "max_tasks")
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


def _type_name(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _number(source: str, field: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(source, field, f"must be a number, got {_type_name(value)} {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise _fail(source, field, f"must be a finite number, got {value!r}")
    return v


def _numbers(source: str, field: str, value: object, length: int | None, what: str,
             positive: bool) -> list[float]:
    if not isinstance(value, list):
        raise _fail(source, field, f"must be a list of numbers, got {_type_name(value)}")
    if length is not None and len(value) != length:
        raise _fail(source, field, f"has {len(value)} entries, expected {length} ({what})")
    if not value:
        raise _fail(source, field, "must not be empty")
    out = []
    for i, item in enumerate(value):
        v = _number(source, f"{field}[{i}]", item)
        if positive and v <= 0:
            raise _fail(source, f"{field}[{i}]", f"must be > 0, got {item!r}")
        if v < 0:
            raise _fail(source, f"{field}[{i}]", f"must be >= 0, got {item!r}")
        out.append(v)
    return out


def _unknown_key(key: object, known: tuple[str, ...]) -> str:
    import difflib

    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else "known: " + ", ".join(known)
    return f"unknown field; {hint}"


def _printable(source: str, field: str, name: str) -> None:
    """Names are printed in tables: a control character (ESC, NUL, newline) is refused."""
    from workloads.spec import unprintable

    bad = unprintable(name)
    if bad is not None:
        raise _fail(source, field, f"must not contain control characters (found {bad} in "
                                   f"{ascii(name)})")


def parse_problem(data: object, source: str, policy_override: str | None = None) -> Problem:
    """Check a parsed document field by field; every problem is a :class:`UserError`
    ``SOURCE: FIELD: REASON``."""
    from fairness.registry import policy_names

    if not isinstance(data, Mapping):
        raise _fail(source, "", f"expected a mapping with capacity and users, got "
                                f"{_type_name(data)}")
    for key in data:
        if key not in FILE_KEYS:
            raise _fail(source, str(key), _unknown_key(key, FILE_KEYS))
    policy = data.get("policy", DEFAULT_POLICY)
    if not isinstance(policy, str):
        raise _fail(source, "policy", f"must be a name, got {_type_name(policy)}")
    if policy_override is not None:
        policy = policy_override
    if policy not in policy_names():
        raise _fail(source, "policy", f"unknown policy {policy!r}; known: "
                                      + ", ".join(policy_names()))
    if "capacity" not in data:
        raise _fail(source, "capacity", "missing (one number per resource)")
    capacity = _numbers(source, "capacity", data["capacity"], None, "", positive=True)
    m = len(capacity)
    resources = data.get("resources")
    if resources is None:
        resources = [f"r{j}" for j in range(m)]
    elif (not isinstance(resources, list)
          or not all(isinstance(r, str) and r for r in resources)):
        raise _fail(source, "resources", "must be a list of names")
    elif len(resources) != m:
        raise _fail(source, "resources",
                    f"has {len(resources)} entries, expected {m} (one per capacity entry)")
    elif len(set(resources)) != m:
        raise _fail(source, "resources", "names must be distinct")
    for j, resource in enumerate(resources):
        _printable(source, f"resources[{j}]", resource)
    if "users" not in data:
        raise _fail(source, "users", "missing (a list of users with name and demand)")
    users = data["users"]
    if not isinstance(users, list) or not users:
        raise _fail(source, "users", "must be a non-empty list of users")
    names: list[str] = []
    demands: list[list[float]] = []
    weights: list[float | list[float]] = []
    max_tasks: list[float | None] = []
    for i, user in enumerate(users):
        at = f"users[{i}]"
        if not isinstance(user, Mapping):
            raise _fail(source, at, f"must be a mapping with name and demand, got "
                                    f"{_type_name(user)}")
        for key in user:
            if key not in USER_KEYS:
                raise _fail(source, f"{at}.{key}", _unknown_key(key, USER_KEYS))
        for key in ("name", "demand"):
            if key not in user:
                raise _fail(source, f"{at}.{key}", "missing")
        name = user["name"]
        if not isinstance(name, (str, int)) or isinstance(name, bool) or str(name) == "":
            raise _fail(source, f"{at}.name", "must be a non-empty name")
        _printable(source, f"{at}.name", str(name))
        if str(name) in names:
            raise _fail(source, f"{at}.name", f"{name!r} is used twice")
        demand = _numbers(source, f"{at}.demand", user["demand"], m,
                          "one per capacity entry", positive=False)
        if not any(demand):
            raise _fail(source, f"{at}.demand", "is zero on every resource")
        weight: float | list[float] = 1.0
        if user.get("weight") is not None:
            raw = user["weight"]
            if isinstance(raw, list):
                weight = _numbers(source, f"{at}.weight", raw, m, "one per capacity entry",
                                  positive=True)
            else:
                weight = _number(source, f"{at}.weight", raw)
                if weight <= 0:
                    raise _fail(source, f"{at}.weight", f"must be > 0, got {raw!r}")
        cap: float | None = None
        if user.get("max_tasks") is not None:
            cap = _number(source, f"{at}.max_tasks", user["max_tasks"])
            if cap < 0:
                raise _fail(source, f"{at}.max_tasks", f"must be >= 0, got {cap!r}")
        names.append(str(name))
        demands.append(demand)
        weights.append(weight)
        max_tasks.append(cap)
    return Problem(source, policy, list(resources), capacity, names, demands, weights,
                   max_tasks)


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
