"""A user's credentials file: how a command reaches the API as that user, from any host
and any account (no state file, no Ray).

``coalloc user add NAME --out FILE`` writes it (0600, JSON): ``{"api": URL, "token":
TOKEN, "user": NAME}``. Its user keeps it as ``~/.coalloc/credentials``
(:func:`credentials_path`; ``$COALLOC_HOME/credentials`` when that is set).
``$COALLOC_API`` and ``$COALLOC_TOKEN`` override its fields. A file others may read is
refused, as ssh refuses such a key.

Where a command finds its API (:func:`find_api`): ``$COALLOC_API``/``$COALLOC_TOKEN``
and the credentials file first, then the state file ``coalloc up`` wrote (its admin's
token).
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from coalloc.errors import UserError

API_ENV = "COALLOC_API"
TOKEN_ENV = "COALLOC_TOKEN"


@dataclass(frozen=True, slots=True)
class ApiCredentials:
    """An API URL, a token, where they came from (named in error messages) and the
    deployment's Ray address when known (a state file's; "" from a credentials file)."""

    url: str
    token: str
    source: str
    address: str = ""


def credentials_path() -> Path:
    from runtime.state import coalloc_home

    return coalloc_home() / "credentials"


def credentials_document(url: str, token: str, user: str) -> bytes:
    """The credentials file's text."""
    return (json.dumps({"api": url, "token": token, "user": user}, indent=2) + "\n").encode()


def load_credentials(path: Path) -> tuple[str, str] | None:
    """(API URL, token) of the credentials file ``path`` (None: no such file);
    UserError for a file others may read or that is not one."""
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise UserError(f"{path}: cannot read ({exc.strerror})") from None
    if stat.S_IMODE(mode) & 0o077:
        raise UserError(f"{path}: readable by others (mode {stat.S_IMODE(mode):o}); it holds "
                        f"your API token: chmod 600 {path}")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path}: not a coalloc credentials file ({exc})") from None
    url = doc.get("api") if isinstance(doc, dict) else None
    token = doc.get("token") if isinstance(doc, dict) else None
    if not isinstance(url, str) or not isinstance(token, str) or not url or not token:
        raise UserError(f"{path}: api, token: expected the API's URL and a token "
                        "(as coalloc user add writes them)")
    return url, token


def find_api() -> ApiCredentials | None:
    """The API and token from ``$COALLOC_API``/``$COALLOC_TOKEN`` and the credentials
    file (the variables win field by field); None when neither gives both."""
    path = credentials_path()
    env_url, env_token = os.environ.get(API_ENV), os.environ.get(TOKEN_ENV)
    found = None if env_url and env_token else load_credentials(path)
    url = env_url or (found[0] if found else None)
    token = env_token or (found[1] if found else None)
    if not url or not token:
        if url or token:
            missing = TOKEN_ENV if url else API_ENV
            raise UserError(f"{missing}: not set, and no {path} to take it from")
        return None
    source = "$" + TOKEN_ENV if env_token else str(path)
    return ApiCredentials(url.rstrip("/"), token, source)
