"""``coalloc kv put KEY VALUE`` / ``coalloc kv get KEY [--timeout S]``: the run's
key-value store from a shell wrapper, inside a coalloc subtask (docs/coupled.md).

``put`` sets KEY (``-`` as VALUE reads the value from stdin); ``get`` prints KEY's value,
waiting up to ``--timeout`` seconds (default 60) for a member of the run to set it, and
exits 1 if none did. Outside a coalloc subtask, or over a limit, one error line, exit 2.

    # member 0                                # the others
    coalloc kv put addr "$(hostname):5000"    addr=$(coalloc kv get addr --timeout 120)
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "kv", help="the run's key-value store, from inside a subtask (put, get)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    put = verbs.add_parser("put", help="set KEY to VALUE ('-': read it from stdin)")
    put.add_argument("key", metavar="KEY")
    put.add_argument("value", metavar="VALUE")
    put.set_defaults(handler=run_put)
    get = verbs.add_parser("get", help="print KEY's value, waiting for it to be set")
    get.add_argument("key", metavar="KEY")
    get.add_argument("--timeout", type=float, default=60.0, metavar="S",
                     help="seconds to wait for the key (default 60)")
    get.set_defaults(handler=run_get)


def run_put(args: argparse.Namespace) -> int:
    from coalloc import job

    value = sys.stdin.read() if args.value == "-" else args.value
    job.put(args.key, value)
    return 0


def run_get(args: argparse.Namespace) -> int:
    from coalloc import job
    from coalloc.errors import escape_controls

    try:
        value = job.get(args.key, timeout=args.timeout)
    except job.KeyNotSet as exc:
        print(f"coalloc: {escape_controls(str(exc))}", file=sys.stderr)
        return 1
    sys.stdout.write(value if value.endswith("\n") else value + "\n")
    return 0
