"""The web dashboard's files, served by the global manager's API (:mod:`runtime.api`).

``GET /`` is the page (``index.html``) and ``GET /dashboard/NAME`` its script and style
sheet, all behind the API's token like every route. The page's links to its assets carry
the token (written into the HTML here, URL- and HTML-escaped), so the browser that opened
``http://HOST:PORT/?token=...`` (what ``coalloc dashboard`` prints) fetches them; its
script then polls the JSON routes (``/api/v1/status``, the document ``coalloc status
--json`` prints) with ``Authorization: Bearer``. Nothing is loaded from anywhere else
(:data:`CONTENT_SECURITY_POLICY`). Standard library only; the files ship as package data.
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from functools import cache
from importlib import resources
from urllib.parse import quote

#: Where the page's assets are served (``/dashboard/dashboard.js``, ...).
ASSET_PREFIX = "/dashboard/"
#: The page's files other than the page itself, with their content types.
ASSETS: dict[str, str] = {
    "dashboard.js": "text/javascript; charset=utf-8",
    "dashboard.css": "text/css; charset=utf-8",
}
#: The page loads scripts, styles, images and data from this server only, runs no inline
#: script, and cannot be framed.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
#: Where ``index.html`` has the token's query string written in.
TOKEN_PLACEHOLDER = "{{token_query}}"


@dataclass(frozen=True, slots=True)
class Page:
    """One file as sent: its content type and bytes."""

    content_type: str
    body: bytes


@cache
def _file(name: str) -> str:
    return resources.files(__name__).joinpath(name).read_text(encoding="utf-8")


def page(path: str, token: str) -> Page | None:
    """The file ``path`` names (``/`` or ``/index.html``: the page, with ``token``'s query
    string in its asset links; :data:`ASSET_PREFIX` + a name in :data:`ASSETS`), or None
    for any other path."""
    if path in ("/", "/index.html"):
        query = html.escape("token=" + quote(token, safe=""), quote=True)
        text = _file("index.html").replace(TOKEN_PLACEHOLDER, query)
        return Page("text/html; charset=utf-8", text.encode("utf-8"))
    if path.startswith(ASSET_PREFIX):
        name = path[len(ASSET_PREFIX):]
        kind = ASSETS.get(name)
        if kind is not None:
            return Page(kind, _file(name).encode("utf-8"))
    return None
