"""The client side of the global manager's HTTP/JSON API (:mod:`runtime.api`): standard
library only, no Ray, so that ``coalloc status`` and friends answer without starting a
Ray driver.

:class:`HttpApi` turns the client's calls (the global manager actor's method names, as
:class:`coalloc.client.Client` makes them) into requests, and every way the API can fail
into one :class:`~coalloc.errors.UserError` line:

* the port refuses connections: the Ray cluster is gone (checked as ``connect_ray``
  does: one line naming the address), or the global manager is restarting (Ray builds it
  again and it binds the same port): retried for ``restart_wait`` real seconds, then
  "did not come back";
* the connection is accepted but nothing answers within ``timeout``: the global manager
  is not answering (its process stopped, or overloaded); ``coalloc up`` would refuse, so
  the line does not suggest it;
* 401: the credential (from the credentials file, ``$COALLOC_TOKEN`` or the state
  file: ``source``) is missing, unknown or revoked; 403: its user may not do this (the
  server's one line, naming the job); 400: the request was refused (the server's one
  line); 5xx: the global manager failed.

The cases in which the request may have been applied without an answer reaching us (not
answering, did not come back, unreachable, 5xx) raise :class:`~coalloc.errors.NoAnswer`,
so that ``submit`` can keep its idempotency token for a retry.
"""

from __future__ import annotations

import http.client
import json
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

from coalloc.errors import NoAnswer, UserError

#: Real seconds a request waits for its answer (``status`` asks every node, each at most
#: 5 s; a dispatch may wait for actors).
API_TIMEOUT_S = 30.0
#: Real seconds to connect (the head's own address: immediate unless it is gone).
CONNECT_TIMEOUT_S = 3.0
PREFIX = "/api/v1"


class HttpApi:
    """The API at ``url`` (``http://host:port``) with bearer ``token`` (read from
    ``source``); ``address``: the deployment's Ray address ("" when not known: a user's
    credentials file), for messages and for telling a gone cluster from a restarting
    global manager."""

    def __init__(
        self, url: str, token: str, address: str, timeout: float = API_TIMEOUT_S,
        restart_wait: float = 20.0, retry_every: float = 0.5, source: str = "the state file",
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname or not parts.port:
            raise UserError(f"{url}: not an API address (expected http://host:port; "
                            f"from {source})")
        self.url = url
        self.source = source
        self.host = parts.hostname
        self.port = parts.port
        self.token = token
        self.address = address or url
        self.timeout = timeout
        self.restart_wait = restart_wait
        self.retry_every = retry_every

    # --------------------------------------------------------------- requests
    def request(
        self, method: str, path: str, body: Any = None,
        query: Mapping[str, Any] | list[tuple[str, str]] | None = None,
    ) -> tuple[int, Any]:
        """One request to ``PREFIX + path``: (HTTP status, decoded JSON). Retries while
        the port refuses connections (a restarting global manager); raises UserError
        for everything else that is not an answer."""
        target = PREFIX + path + (f"?{urlencode(query, doseq=True)}" if query else "")
        data = None if body is None else json.dumps(body).encode("utf-8")
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        deadline: float | None = None
        while True:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=CONNECT_TIMEOUT_S)
            try:
                conn.connect()
                assert conn.sock is not None
                conn.sock.settimeout(self.timeout)
                conn.request(method, target, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
                status = resp.status
            except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected,
                    BrokenPipeError) as exc:
                if deadline is None:
                    self._cluster_gone(exc)
                    deadline = time.monotonic() + self.restart_wait
                if time.monotonic() >= deadline:
                    raise NoAnswer(
                        f"{self.address}: the coalloc global manager did not come back "
                        f"(its API {self.url} refused connections for {self.restart_wait:g} s); "
                        "run coalloc status, or coalloc up"
                    ) from None
                time.sleep(self.retry_every)
                continue
            except TimeoutError:
                raise NoAnswer(
                    f"{self.address}: the coalloc global manager is not answering (its API "
                    f"{self.url} sent nothing within {self.timeout:g} s; is its process "
                    "stopped or overloaded?)"
                ) from None
            except OSError as exc:
                # No route, a connection that timed out or was reset after the request
                # went out: the request may have arrived.
                raise NoAnswer(
                    f"{self.address}: cannot reach the coalloc API {self.url} "
                    f"({(exc.strerror or str(exc) or type(exc).__name__).lower()})"
                ) from None
            finally:
                conn.close()
            return status, self._decode(status, raw)

    def _cluster_gone(self, exc: BaseException) -> None:
        """The API refused a connection: if no Ray GCS answers at the address either, the
        whole cluster is gone; say so as every other command does."""
        from runtime.deploy import gcs_problem

        if self.address == self.url:
            return  # no Ray address known: a restarting global manager is waited for
        problem = gcs_problem(self.address)
        if problem is not None:
            raise UserError(f"{self.address}: no Ray cluster reachable there ({problem}); "
                            "start one, or run coalloc up") from None

    def _decode(self, status: int, raw: bytes) -> Any:
        try:
            doc = json.loads(raw.decode("utf-8")) if raw else None
        except (UnicodeDecodeError, ValueError):
            raise UserError(f"{self.url}: the API answered {status} with something that is "
                            "not JSON: not a coalloc global manager?") from None
        if status == 401:
            raise UserError(f"{self.url}: the API refused the credential from {self.source}: "
                            f"{_error_of(doc, status)}")
        if status == 403:
            raise UserError(_error_of(doc, status))
        if status >= 500:
            raise NoAnswer(f"{self.address}: the coalloc global manager failed: "
                            f"{_error_of(doc, status)}")
        if status in (400, 405, 413):
            raise UserError(_error_of(doc, status))
        return doc

    def _get(self, path: str, query: Any = None) -> Any:
        status, doc = self.request("GET", path, query=query)
        if status == 404:
            return None
        return doc

    # --------------------------------------------------- the actor's methods
    def call(self, method: str, *args: Any) -> Any:
        """The global manager actor's ``method(*args)``, over HTTP."""
        if method == "deployment":
            return self._get("/deployment")
        if method == "status":
            job_id = args[0] if args else None
            query = {"job": job_id} if job_id is not None else {}
            if len(args) > 1 and args[1]:
                query["all"] = "1"
            return self._get("/status", query or None)
        if method == "queue":
            return self._get("/queue")
        if method == "job":
            return self._get(f"/jobs/{quote(str(args[0]), safe='')}")
        if method == "job_states":
            ids = args[0] if args else None
            return self._get("/jobs", [("id", str(j)) for j in ids] if ids is not None else None)
        if method == "submit":
            from workloads.spec import job_to_dict

            specs, token = args
            return self.request("POST", "/jobs", {
                "jobs": [job_to_dict(s) for s in specs], "token": token})[1]
        if method == "submit_file":
            text, source, token = args
            return self.request("POST", "/jobs", {"file": text, "source": source,
                                                  "token": token})[1]
        if method == "cancel_jobs":
            ids, user, state = args
            return self.request("POST", "/cancel",
                                {"job_ids": ids, "user": user, "state": state})[1]
        if method in ("whoami", "list_users"):
            return self._get("/whoami" if method == "whoami" else "/users")
        if method == "add_user":
            name, role = args
            return self.request("POST", "/users", {"name": name, "role": role})[1]
        if method == "revoke_user":
            status, doc = self.request("DELETE", f"/users/{quote(str(args[0]), safe='')}")
            return None if status == 404 else doc
        if method == "cancel":
            (result,) = self.call("cancel_jobs", [args[0]], None, None)
            if result.get("result") == "unknown job id":
                return None
            return self.call("job", args[0])
        raise ValueError(f"{method}: not an API call")


def _error_of(doc: Any, status: int) -> str:
    if isinstance(doc, Mapping) and isinstance(doc.get("error"), str):
        return " ".join(doc["error"].split())
    return f"HTTP {status}"
