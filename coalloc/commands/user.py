"""``coalloc user add NAME [--admin | --read-only] --out FILE``, ``coalloc user list``,
``coalloc user revoke NAME``, ``coalloc user whoami``: the API's users (admins only, but
``whoami``).

``add`` asks the global manager (through its API, with an admin's credential: the one
``coalloc up`` recorded, or an admin's credentials file) for a new credential and writes
it to FILE (created 0600; an existing FILE is left alone): the API's URL and the
token. Give it to the user, who keeps it as ``~/.coalloc/credentials``; every command
that talks to the API then works as that user, from any host that reaches the API and
without ``up``'s state file. The global manager keeps only the token's hash: a lost
file is revoked and replaced, never read back. ``--url`` writes another URL than the one
this command used (the head's address as other hosts reach it).

Roles: a user submits as itself and cancels its own jobs; ``--read-only`` sees what
``status`` shows and changes nothing; ``--admin`` does everything. ``revoke`` refuses
the credential at once (a running job's key-value credential is not touched).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path
from typing import Any

from coalloc.errors import UserError


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "user", help="add, list and revoke the API's users (admins)", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    add = verbs.add_parser("add", help="a new user's credentials file")
    add.add_argument("name", metavar="NAME")
    role = add.add_mutually_exclusive_group()
    role.add_argument("--admin", action="store_const", const="admin", dest="role",
                      default="user", help="may do everything, for every user")
    role.add_argument("--read-only", action="store_const", const="read-only", dest="role",
                      help="sees what status shows, changes nothing")
    add.add_argument("--out", required=True, metavar="FILE",
                     help="the credentials file to write (0600; must not exist)")
    add.add_argument("--url", default=None, metavar="URL",
                     help="the API URL to write (default: the one this command used)")
    add.set_defaults(handler=run_add)
    lst = verbs.add_parser("list", help="every user, its role and whether it is revoked")
    lst.set_defaults(handler=run_list)
    rev = verbs.add_parser("revoke", help="refuse NAME's credential from now on")
    rev.add_argument("name", metavar="NAME")
    rev.set_defaults(handler=run_revoke)
    who = verbs.add_parser("whoami", help="the user and role of this credential")
    who.set_defaults(handler=run_whoami)
    for p in (add, lst, rev, who):
        p.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address")


def _write_new(path: Path, data: bytes) -> None:
    """Create ``path`` 0600 with ``data``; UserError if it exists or cannot be made."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise UserError(f"{path}: exists; choose another --out (or remove it)") from None
    except OSError as exc:
        raise UserError(f"{path}: cannot create ({exc.strerror})") from None
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def run_add(args: argparse.Namespace) -> int:
    from coalloc.client import connect_api as connect
    from coalloc.credentials import credentials_document

    out = Path(args.out).expanduser()
    if out.exists():
        raise UserError(f"{out}: exists; choose another --out (or remove it)")
    client = connect(args.address)
    assert client.api is not None
    url = args.url or client.api.url
    rec = client.add_user(args.name, args.role)
    _write_new(out, credentials_document(url, str(rec["token"]), args.name))
    print(f"{args.name} ({rec['role']}): credentials written to {out} (0600); the user "
          "keeps it as ~/.coalloc/credentials")
    return 0


def _when(t: object) -> str:
    if not isinstance(t, (int, float)):
        return "-"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def run_list(args: argparse.Namespace) -> int:
    from coalloc.client import connect_api as connect
    from coalloc.tables import render

    rows = connect(args.address).users()
    print(render(("USER", "ROLE", "CREATED", "STATE"),
                 [(r["name"], r["role"], _when(r.get("created")),
                   "in force" if r.get("revoked") is None else f"revoked {_when(r['revoked'])}")
                  for r in rows]))
    return 0


def run_revoke(args: argparse.Namespace) -> int:
    from coalloc.client import connect_api as connect

    rec = connect(args.address).revoke_user(args.name)
    print(f"{rec['name']}: revoked ({_when(rec.get('revoked'))})")
    return 0


def run_whoami(args: argparse.Namespace) -> int:
    from coalloc.client import connect_api as connect

    me = connect(args.address).whoami()
    print(f"{me['name']} ({me['role']})")
    return 0
