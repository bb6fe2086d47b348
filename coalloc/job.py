"""The rendezvous from inside a subtask: who this member is, and its run's key-value store.

A process subtask of coalloc starts with its rendezvous in its environment
(:mod:`runtime.rendezvous`, docs/coupled.md); this module reads it. Standard library
only (no Ray), so that any member can import it cheaply::

    import coalloc.job
    if coalloc.job.rank() == 0:
        coalloc.job.put("addr", f"{host}:{port}")
    else:
        host, port = coalloc.job.get("addr", timeout=60).rsplit(":", 1)

:func:`put` and :func:`get` reach the store the global manager serves for the run (the
members of one run share it; a requeued gang is a new run with an empty store), with
the run's own credential (``COALLOC_KV_TOKEN``). A connection refused or reset, or a
global manager restarting, is retried until the call's timeout. Errors are
:class:`KvError` (a :class:`~coalloc.errors.UserError`: the CLI prints its one line):
outside a coalloc subtask, a limit, a run that ended; :class:`KeyNotSet` when ``get``'s
timeout passes first.
"""

from __future__ import annotations

import http.client
import json
import os
import time
from collections.abc import Mapping
from urllib.parse import quote, urlsplit

from coalloc.errors import UserError

#: The environment variables (the names :mod:`runtime.rendezvous` sets).
KV_URL_ENV = "COALLOC_KV_URL"
KV_TOKEN_ENV = "COALLOC_KV_TOKEN"
RUN_ENV = "COALLOC_RUN"
#: Longest single wait the client asks the server for (s); it asks again until its timeout.
POLL_S = 15.0
#: Seconds a put retries a global manager that does not answer.
PUT_TIMEOUT_S = 30.0
#: Pause between retries of a failed connection (s).
RETRY_EVERY_S = 0.25


class KvError(UserError):
    """A key-value request that cannot be served (one line)."""


class KeyNotSet(KvError, TimeoutError):
    """``get``'s timeout passed before the key was set."""


def _env(environ: Mapping[str, str] | None) -> Mapping[str, str]:
    return os.environ if environ is None else environ


def inside(environ: Mapping[str, str] | None = None) -> bool:
    """Whether this process runs as a coalloc subtask (its rendezvous is set)."""
    return "COALLOC_JOB_ID" in _env(environ)


def _int(name: str, environ: Mapping[str, str] | None) -> int:
    env = _env(environ)
    text = env.get(name)
    if text is None:
        raise KvError(f"{name} is not set: not inside a coalloc subtask")
    try:
        return int(text)
    except ValueError:
        raise KvError(f"{name}={text!r}: not an integer") from None


def rank(environ: Mapping[str, str] | None = None) -> int:
    """This member's index in its job (``COALLOC_SUBTASK``)."""
    return _int("COALLOC_SUBTASK", environ)


def size(environ: Mapping[str, str] | None = None) -> int:
    """How many members the job has (``COALLOC_SUBTASKS``)."""
    return _int("COALLOC_SUBTASKS", environ)


def attempt(environ: Mapping[str, str] | None = None) -> int:
    """Which attempt of the job this run is (1, then 2 after a requeue, ...)."""
    return _int("COALLOC_ATTEMPT", environ)


class _Store:
    """The store of this process's run, as its environment names it."""

    def __init__(self, environ: Mapping[str, str]) -> None:
        url, token, run = (environ.get(k) for k in (KV_URL_ENV, KV_TOKEN_ENV, RUN_ENV))
        if not url or not token or not run:
            missing = [k for k, v in ((KV_URL_ENV, url), (KV_TOKEN_ENV, token),
                                      (RUN_ENV, run)) if not v]
            raise KvError(f"not inside a coalloc subtask with a key-value store "
                          f"({', '.join(missing)} not set)")
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise KvError(f"{KV_URL_ENV}={url!r}: expected http://host:port")
        self.host, self.port = parts.hostname, parts.port
        self.token, self.run = token, run

    def request(
        self, method: str, key: str, body: dict[str, str] | None, wait: float,
        deadline: float,
    ) -> tuple[int, dict[str, object]]:
        """One request, retried while the global manager cannot be reached and
        ``deadline`` (monotonic s) has not passed."""
        path = f"/api/v1/kv/{quote(self.run, safe='')}/{quote(key, safe='')}"
        if method == "GET":
            path += f"?wait={wait:.3f}"
        data = json.dumps(body).encode("utf-8") if body is not None else None
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        while True:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=wait + 10.0)
            try:
                conn.request(method, path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                status = resp.status
            except (OSError, http.client.HTTPException) as exc:
                if time.monotonic() >= deadline:
                    raise KvError(f"the key-value store at {self.host}:{self.port} does "
                                  f"not answer ({type(exc).__name__})") from None
                time.sleep(RETRY_EVERY_S)
                continue
            finally:
                conn.close()
            try:
                doc = json.loads(raw.decode("utf-8")) if raw else {}
            except ValueError:
                doc = {}
            if not isinstance(doc, dict):
                doc = {}
            if status >= 500 and time.monotonic() < deadline:
                time.sleep(RETRY_EVERY_S)
                continue
            return status, doc


def _fail(status: int, doc: Mapping[str, object], key: str) -> KvError:
    error = str(doc.get("error") or f"HTTP {status}")
    if status == 401:
        return KvError(f"{key}: the key-value store refused this subtask's credential "
                       f"({KV_TOKEN_ENV})")
    return KvError(f"{key}: {error}")


def put(key: str, value: str, *, environ: Mapping[str, str] | None = None) -> None:
    """Set ``key`` to ``value`` (text) in this run's store; members waiting in
    :func:`get` for it return. Raises :class:`KvError`."""
    if not isinstance(value, str):
        raise KvError(f"{key}: the value must be text (str), got {type(value).__name__}")
    store = _Store(_env(environ))
    deadline = time.monotonic() + PUT_TIMEOUT_S
    status, doc = store.request("PUT", key, {"value": value}, 0.0, deadline)
    if status != 200:
        raise _fail(status, doc, key)


def get(key: str, timeout: float = 60.0, *, environ: Mapping[str, str] | None = None) -> str:
    """The value of ``key`` in this run's store, waiting up to ``timeout`` seconds for a
    member to set it. Raises :class:`KeyNotSet` when it was not set in time,
    :class:`KvError` for anything else."""
    if not timeout >= 0:
        raise KvError(f"timeout: expected seconds >= 0, got {timeout!r}")
    store = _Store(_env(environ))
    deadline = time.monotonic() + timeout
    while True:
        left = max(deadline - time.monotonic(), 0.0)
        status, doc = store.request("GET", key, None, min(left, POLL_S), deadline)
        if status == 200 and isinstance(doc.get("value"), str):
            return str(doc["value"])
        if status != 404 or "key" not in doc:  # a 404 naming the key: not set yet
            raise _fail(status, doc, key)
        if time.monotonic() >= deadline:
            raise KeyNotSet(f"{key}: not set within {timeout:g} s")
