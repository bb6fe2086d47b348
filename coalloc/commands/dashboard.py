"""``coalloc dashboard``: print the URL of the running coalloc's web dashboard, with its
access token in it (``http://HOST:PORT/?token=...``, as Jupyter prints its URL), and
return. Open it in a browser that can reach the head node. The global manager's HTTP API
serves the page (read-only: nodes, the queue, each running job's virtual times against
real time with its phase difference and windows, finished jobs' summaries) from the same
routes ``coalloc status --json`` uses; docs/observability.md describes it. The token is
this user's (its credentials file's, or the state file's for ``up``'s admin): whoever
has the URL acts as that user, so share it as you would that file. The page shows what
that user's ``status`` shows (other users' commands and environments hidden)."""

from __future__ import annotations

import argparse
from typing import Any
from urllib.parse import quote

from coalloc.errors import UserError

#: Real seconds the check that the API answers may take.
PROBE_TIMEOUT_S = 5.0


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "dashboard", help="print the web dashboard's URL (with its access token)",
        description=__doc__,
    )
    parser.add_argument("--address", default=None, metavar="ADDR", help="Ray cluster address")
    parser.set_defaults(handler=run_dashboard)


def dashboard_url(api_url: str, token: str) -> str:
    """The page's URL: the API's root with the token as its query."""
    return f"{api_url.rstrip('/')}/?token={quote(token, safe='')}"


def run_dashboard(args: argparse.Namespace) -> int:
    from coalloc.api_client import HttpApi
    from coalloc.client import recorded_api
    from coalloc.credentials import credentials_path
    from runtime.state import state_path

    api = recorded_api(args.address)
    if api is None:
        raise UserError(f"coalloc is not up: no {credentials_path()} and {state_path()} "
                        "records no running deployment with an HTTP API; run coalloc up")
    # One request, no waiting for a restart: the page is useless if nothing answers.
    HttpApi(api.url, api.token, api.address, timeout=PROBE_TIMEOUT_S, restart_wait=0.0,
            source=api.source).call("deployment")
    print(dashboard_url(api.url, api.token))
    return 0
