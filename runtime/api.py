"""The global manager's HTTP/JSON API: a thin adapter at the edge, standard library only.

The global manager serves it from a thread of its actor (:class:`ApiServer`), bound to its
node's address on the port ``coalloc up`` chose and recorded in the state file. The CLI's
``submit``, ``status``, ``queue``, ``cancel`` and ``user`` and :func:`coalloc.connect`
use it instead of starting a Ray driver per call.

Identity (:mod:`runtime.identity`). Every request carries a user's credential,
``Authorization: Bearer TOKEN`` (or ``?token=TOKEN`` for a browser), and acts as that
user: ``up``'s admin (the token in its state file) or one an admin added
(``POST /users``). The backend says who a token is (:meth:`ApiBackend.authenticate`);
a missing, unknown or revoked one is 401 (counted by the backend), a request its role
does not allow 403 with one line. Every credential reads every job; a job's ``private``
part (commands, environments) is served only to its user and the admins. Routes (all
JSON):

========  =====================  ==============================================================
GET       /api/v1/deployment     endpoints, phase log, actor and node names, time scale, cycle
GET       /api/v1/status         the ``status --json`` document (``?job=ID``: only that job;
                                 ``?all=1``: the archived finished jobs too)
GET       /api/v1/queue          pending then running jobs (``coalloc queue --json``)
GET       /api/v1/jobs           ``{job id: state}`` (``?id=ID`` repeatable: only those)
GET       /api/v1/jobs/ID        one job's record; 404 for an unknown id
GET       /api/v1/schema         ``{"documents": [NAME, ...]}``: the documents with a schema
GET       /api/v1/schema/NAME    the JSON Schema of document NAME (``status``, ``job``,
                                 ``queue``, ``submit``, ``cancel``; :mod:`runtime.status`)
POST      /api/v1/jobs           ``{"jobs": [job mapping, ...], "token": "..."}``: submit one
                                 batch; the answers (a retried token gets the first answers).
                                 Or ``{"file": TEXT, "source": NAME, "default_user": U,
                                 "token": ...}``: a job file's text, checked here as
                                 ``load_jobs`` checks the file NAME (YAML or JSON by
                                 suffix). A job names no ``user``: the credential's; one
                                 naming another user is 403 unless the credential is an
                                 admin's; a read-only credential's is 403.
                                 (``default_user`` is ignored.)
POST      /api/v1/cancel         ``{"job_ids": [...] | null, "user": U | null, "state":
                                 "pending" | "running" | null}``: one result per job (a
                                 non-admin: only its own jobs; another's is 403 naming it)
GET       /api/v1/whoami         ``{"name": U, "role": R}``: the credential's user
GET       /api/v1/users          admins: every credential (``name``, ``role``,
                                 ``created``, ``revoked``; never a token or hash)
POST      /api/v1/users          admins: ``{"name": U, "role": "admin" | "user" |
                                 "read-only"}``: a new credential; the answer holds its
                                 ``token``, the only time it is sent
DELETE    /api/v1/users/NAME     admins: revoke NAME's credential (at once, for every
                                 request after this one)
PUT       /api/v1/kv/RUN/KEY     ``{"value": TEXT}``: set KEY in run RUN's key-value store
GET       /api/v1/kv/RUN/KEY     ``{"value": TEXT}``; ``?wait=S``: wait up to S s (at most
                                 :data:`KV_WAIT_MAX_S`) for it; 404 if not set by then
========  =====================  ==============================================================

The key-value routes (:mod:`runtime.kv_store`, served when the server is given a
:class:`KvBackend`) take the run's own credential and no user's (not even an admin's: a
run's store is its members' alone): the bearer token :func:`runtime.rendezvous.kv_token`
derives from RUN and the deployment's key-value secret (drawn by ``up``, held by the
global manager; no user's credential, so adding, revoking or replacing one never
touches a running job's), which the run's members find in ``COALLOC_KV_TOKEN`` (never
in a URL). A limit answers 400, a run that is not running 410.

The web dashboard (:mod:`runtime.dashboard`, what ``coalloc dashboard`` prints the URL
of) is ``GET /`` (its page, the request's token written into its asset links) and ``GET
/dashboard/NAME`` (its script and style sheet); they need a credential too, and are sent with
a Content-Security-Policy that lets the page load nothing but this server's own files.

Errors are ``{"error": "one line"}``: 401 without a credential in force, 403 for what
the credential's role does not allow, 400 for a malformed
request or body (and a job mapping the job-file rules refuse), 404 for an unknown route
or job, 413 for a body over :data:`MAX_BODY_BYTES`, 500 if the backend failed (logged;
the server keeps serving). No token is ever logged: the request lines the server logs
(at debug level) have every ``token=`` query value blanked. Documents are strict JSON:
a NaN or infinity is ``null``.

The documents are the models of :mod:`runtime.status`, served as :func:`~runtime.status.
to_json` writes them (a field a situation does not have is absent); their JSON Schema is
generated from the same models.

No Ray here: the backend is any object with the methods of :class:`ApiBackend`.
"""

from __future__ import annotations

import json
import logging
import math
import re
import threading
from collections.abc import Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

from pydantic import BaseModel

from runtime import dashboard
from runtime.identity import (
    Action,
    Forbidden,
    Identity,
    Refusal,
    Role,
    allowed,
    check_cancel,
)
from runtime.kv_store import KvError, RunGone
from runtime.rendezvous import kv_token_ok
from runtime.status import (
    DOCUMENTS,
    CancelResult,
    Document,
    JobRecord,
    QueueRow,
    StatusDocument,
    SubmitAnswer,
    document_schema,
    to_json,
)
from workloads.errors import UserError

log = logging.getLogger("coalloc.runtime.api")

#: Path prefix of every route.
PREFIX = "/api/v1"
#: Largest request body accepted (bytes): a job file is at most 1 MiB, plus JSON's quoting.
MAX_BODY_BYTES = 4 * 2**20
#: Real seconds a connection may stay silent before the server drops it.
SOCKET_TIMEOUT_S = 30.0
#: Longest wait of one ``GET /kv/...`` (s): under :data:`SOCKET_TIMEOUT_S`; a client
#: that waits longer asks again.
KV_WAIT_MAX_S = 20.0
#: The job states ``POST /cancel`` can select by.
CANCEL_STATES = ("pending", "running")


#: The one line a refused credential is answered with (401), by why.
REFUSALS: Mapping[Refusal, str] = {
    Refusal.MISSING: "no credential: send Authorization: Bearer TOKEN (coalloc reads it "
    "from ~/.coalloc/credentials, $COALLOC_TOKEN or up's state file)",
    Refusal.UNKNOWN: "unknown credential: not one of this deployment's",
    Refusal.REVOKED: "revoked credential: ask an admin for a new one",
}

_TOKEN_QUERY = re.compile(r"(token=)[^&\s\"']*", re.IGNORECASE)


def scrub(text: str) -> str:
    """``text`` with every ``token=VALUE`` blanked (a request line, before it is logged)."""
    return _TOKEN_QUERY.sub(r"\1***", text)


class BadRequest(Exception):
    """The request cannot be served as sent: answered 400 with this one-line message."""


class ApiBackend(Protocol):
    """What the API serves (the global manager actor): the documents of
    :mod:`runtime.status` (plain JSON data is served as it is). A :class:`BadRequest`
    or :class:`~workloads.errors.UserError` it raises is a 400 with its message, a
    :class:`~runtime.identity.Forbidden` a 403."""

    def authenticate(self, token: str | None) -> Identity | Refusal: ...

    def job_owners(self, job_ids: list[str]) -> dict[str, str]: ...

    def list_users(self) -> list[dict[str, object]]: ...

    def add_user(self, name: str, role: Role) -> dict[str, object]: ...

    def revoke_user(self, name: str) -> dict[str, object] | None: ...

    def deployment(self) -> Mapping[str, object]: ...

    def status(self, job_id: str | None = None, all_jobs: bool = False) -> StatusDocument: ...

    def queue(self) -> list[QueueRow]: ...

    def job(self, job_id: str) -> JobRecord | None: ...

    def job_states(self, job_ids: list[str] | None = None) -> dict[str, str]: ...

    def submit_documents(
        self, jobs: list[Mapping[str, object]], token: str | None, who: Identity
    ) -> list[SubmitAnswer]: ...

    def submit_file(
        self, text: str, source: str, token: str | None, who: Identity
    ) -> list[SubmitAnswer]: ...

    def cancel_jobs(
        self, job_ids: list[str] | None, user: str | None, state: str | None
    ) -> list[CancelResult]: ...


class KvBackend(Protocol):
    """The members' key-value store (the global manager's service): raises
    :class:`~runtime.kv_store.KvError` for what it refuses."""

    def kv_put(self, run: str, key: str, value: str) -> None: ...

    def kv_get(self, run: str, key: str, timeout_s: float) -> str | None: ...


def kv_route(
    kv: KvBackend, method: str, run: str, key: str, query: Mapping[str, list[str]],
    body: object,
) -> tuple[int, object]:
    """Serve one key-value request of run ``run`` (authenticated by its credential)."""
    try:
        if method in ("PUT", "POST"):
            value = body.get("value") if isinstance(body, Mapping) else None
            if not isinstance(value, str):
                raise BadRequest("value: expected a string")
            kv.kv_put(run, key, value)
            return HTTPStatus.OK, {"key": key}
        if method == "GET":
            text = (query.get("wait") or ["0"])[-1]
            try:
                wait = float(text)
            except ValueError:
                raise BadRequest(f"wait: expected seconds, got {text!r}") from None
            if not math.isfinite(wait) or wait < 0:
                raise BadRequest(f"wait: expected seconds >= 0, got {text!r}")
            value = kv.kv_get(run, key, min(wait, KV_WAIT_MAX_S))
            if value is None:
                return HTTPStatus.NOT_FOUND, {"error": f"{key}: not set", "key": key}
            return HTTPStatus.OK, {"key": key, "value": value}
    except RunGone as exc:
        return HTTPStatus.GONE, {"error": _one_line(str(exc))}
    except KvError as exc:
        raise BadRequest(str(exc)) from None
    return HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{method}: method not allowed"}


def strict_json(value: object) -> object:
    """``value`` with every NaN or infinity replaced by None (JSON has neither); a
    document model as :func:`~runtime.status.to_json` writes it."""
    if isinstance(value, Document):
        value = to_json(value)
    elif isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    return value


def _one_line(text: str) -> str:
    return " ".join(str(text).split()) or "error"


def _string_list(body: Mapping[str, object], key: str) -> list[str] | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise BadRequest(f"{key}: expected a list of strings or null")
    return list(value)


def _optional_string(body: Mapping[str, object], key: str) -> str | None:
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        raise BadRequest(f"{key}: expected a string or null")
    return value


def hide_private(doc: object, who: Identity) -> object:
    """``doc`` (a status document, a job record or a list of them, as JSON) without the
    ``private`` part of every job ``who`` may not see it of (:data:`Action.READ_PRIVATE`:
    not its own, and ``who`` not an admin)."""
    if who.admin:
        return doc
    if isinstance(doc, list):
        return [hide_private(d, who) for d in doc]
    if not isinstance(doc, dict):
        return doc
    if "job_id" in doc and "private" in doc and not allowed(
            who.role, Action.READ_PRIVATE, who.name, str(doc.get("user"))):
        return {k: v for k, v in doc.items() if k != "private"}
    if isinstance(doc.get("jobs"), list):
        return dict(doc, jobs=[hide_private(j, who) for j in doc["jobs"]])
    return doc


def _must(who: Identity, action: Action) -> None:
    if not allowed(who.role, action, who.name, None):
        raise Forbidden(f"{who.name}: a {who.role.value} credential cannot "
                        f"{action.value.replace('_', ' ')}")


def _user_route(
    backend: ApiBackend, who: Identity, method: str, parts: list[str], body: object,
) -> tuple[int, object]:
    """The credential routes (``/whoami``, ``/users``)."""
    if parts == ["whoami"] and method == "GET":
        return HTTPStatus.OK, {"name": who.name, "role": who.role.value}
    _must(who, Action.MANAGE_USERS)
    if parts == ["users"] and method == "GET":
        return HTTPStatus.OK, backend.list_users()
    if parts == ["users"] and method == "POST":
        if not isinstance(body, Mapping):
            raise BadRequest("body: expected a JSON object")
        name, role = body.get("name"), body.get("role", Role.USER.value)
        if not isinstance(name, str) or not name:
            raise BadRequest("name: expected a user name")
        try:
            role = Role(role)
        except ValueError:
            raise BadRequest(f"role: expected one of {', '.join(r.value for r in Role)}, "
                             f"got {role!r}") from None
        try:
            return HTTPStatus.OK, backend.add_user(name, role)
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
    if len(parts) == 2 and parts[0] == "users" and method == "DELETE":
        try:
            rec = backend.revoke_user(parts[1])
        except ValueError as exc:
            raise BadRequest(str(exc)) from None
        if rec is None:
            return HTTPStatus.NOT_FOUND, {"error": f"{parts[1]}: no such user"}
        return HTTPStatus.OK, rec
    return HTTPStatus.NOT_FOUND, {"error": f"{method} /{'/'.join(parts)}: no such route"}


def route(
    backend: ApiBackend, who: Identity, method: str, path: str,
    query: Mapping[str, list[str]], body: object,
) -> tuple[int, object]:
    """Serve one request of user ``who``: (HTTP status, JSON-able document). ``body``:
    the parsed JSON body of a POST (None for a GET). Raises :class:`BadRequest` or
    :class:`~runtime.identity.Forbidden`."""
    if not path.startswith(PREFIX + "/"):
        return HTTPStatus.NOT_FOUND, {"error": f"{path}: no such route"}
    parts = [unquote(p) for p in path[len(PREFIX) + 1:].split("/") if p]

    def one(name: str) -> str | None:
        values = query.get(name)
        return values[-1] if values else None

    if parts[:1] in (["whoami"], ["users"]):
        return _user_route(backend, who, method, parts, body)
    if method == "GET":
        if parts == ["deployment"]:
            return HTTPStatus.OK, backend.deployment()
        if parts == ["status"]:
            doc = backend.status(one("job"), one("all") in ("1", "true"))
            return HTTPStatus.OK, hide_private(strict_json(doc), who)
        if parts == ["queue"]:
            return HTTPStatus.OK, backend.queue()
        if parts == ["jobs"]:
            return HTTPStatus.OK, backend.job_states(query.get("id"))
        if len(parts) == 2 and parts[0] == "jobs":
            rec = backend.job(parts[1])
            if rec is None:
                return HTTPStatus.NOT_FOUND, {"error": f"{parts[1]}: unknown job id"}
            return HTTPStatus.OK, hide_private(strict_json(rec), who)
        if parts == ["schema"]:
            return HTTPStatus.OK, {"documents": list(DOCUMENTS)}
        if len(parts) == 2 and parts[0] == "schema":
            schema = document_schema(parts[1])
            if schema is None:
                return HTTPStatus.NOT_FOUND, {
                    "error": f"{parts[1]}: no such document (one of {', '.join(DOCUMENTS)})"}
            return HTTPStatus.OK, schema
    elif method == "POST":
        if not isinstance(body, Mapping):
            raise BadRequest("body: expected a JSON object")
        if parts == ["jobs"] and who.role is Role.READ_ONLY:
            raise Forbidden(f"{who.name}: a read-only credential cannot submit jobs")
        if parts == ["jobs"] and "file" in body:
            text = body.get("file")
            source = body.get("source")
            if not isinstance(text, str) or not isinstance(source, str) or not source:
                raise BadRequest("file, source: expected the job file's text and its name")
            return HTTPStatus.OK, backend.submit_file(
                text, source, _optional_string(body, "token"), who)
        if parts == ["jobs"]:
            jobs = body.get("jobs")
            if not isinstance(jobs, list) or not jobs \
                    or not all(isinstance(j, Mapping) for j in jobs):
                raise BadRequest("jobs: expected a non-empty list of job objects")
            return HTTPStatus.OK, backend.submit_documents(
                jobs, _optional_string(body, "token"), who)
        if parts == ["cancel"]:
            ids = _string_list(body, "job_ids")
            user = _optional_string(body, "user")
            state = _optional_string(body, "state")
            if state is not None and state not in CANCEL_STATES:
                raise BadRequest(f"state: expected one of {', '.join(CANCEL_STATES)} or null")
            if ids is None and user is None and state is None:
                raise BadRequest("give job_ids, user or state (cancelling every job takes "
                                 "an explicit filter)")
            owners = backend.job_owners(ids) if ids is not None and not who.admin else {}
            user = check_cancel(who, owners, user)
            return HTTPStatus.OK, backend.cancel_jobs(ids, user, state)
    else:
        return HTTPStatus.METHOD_NOT_ALLOWED, {"error": f"{method}: method not allowed"}
    return HTTPStatus.NOT_FOUND, {"error": f"{method} {path}: no such route"}


class _Handler(BaseHTTPRequestHandler):
    """One request: authenticate, parse, :func:`route`, answer JSON."""

    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = SOCKET_TIMEOUT_S
    server_version = "coalloc"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
        # The request line may hold a browser's ?token=: blanked, so no log holds one.
        log.debug("api %s: %s", self.address_string(), scrub(format % args))

    def _send(self, status: int, doc: object) -> None:
        data = json.dumps(strict_json(doc), allow_nan=False, default=str).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", 'Bearer realm="coalloc"')
        self.end_headers()
        self.wfile.write(data)

    def _credential(self, query: Mapping[str, list[str]]) -> str | None:
        """The request's token: its bearer token, else its ``token`` query (a browser)."""
        header = self.headers.get("Authorization", "")
        given = header[7:].strip() if header[:7].lower() == "bearer " else None
        if not given and query.get("token"):
            given = query["token"][-1]
        return given or None

    def _send_page(self, page: dashboard.Page) -> None:
        """One of the dashboard's files (not JSON): no caching, no referrer (the page's
        URL holds the token), nothing loaded from anywhere but this server."""
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", page.content_type)
        self.send_header("Content-Length", str(len(page.body)))
        self.send_header("Cache-Control", "no-store")
        self.send_header("Referrer-Policy", "no-referrer")
        self.send_header("X-Content-Type-Options", "nosniff")
        self.send_header("Content-Security-Policy", dashboard.CONTENT_SECURITY_POLICY)
        self.end_headers()
        self.wfile.write(page.body)

    def _kv_target(self, path: str) -> tuple[str, str] | None:
        """(run, key) of a key-value route's path; None for any other path."""
        head = PREFIX + "/kv/"
        if not path.startswith(head):
            return None
        parts = [unquote(p) for p in path[len(head):].split("/")]
        return (parts[0], parts[1]) if len(parts) == 2 and all(parts) else ("", "")

    def _serve_kv(self, method: str, run: str, key: str,
                  query: Mapping[str, list[str]]) -> None:
        """A key-value request: the run's own credential, never the API token."""
        header = self.headers.get("Authorization", "")
        given = header[7:].strip() if header[:7].lower() == "bearer " else ""
        kv = self.server.kv
        if kv is None or not run or not given or not kv_token_ok(
                self.server.kv_secret, run, given):
            self._drain()
            if kv is None:
                self._send(HTTPStatus.NOT_FOUND, {"error": "no key-value store here"})
            elif not run:
                self._send(HTTPStatus.NOT_FOUND, {"error": "expected /kv/RUN/KEY"})
            else:
                self._send(HTTPStatus.UNAUTHORIZED,
                           {"error": "missing or wrong key-value credential for this run"})
            return
        try:
            body = self._body() if method in ("PUT", "POST") else None
            status, doc = kv_route(kv, method, run, key, query, body)
        except _TooLarge as exc:
            self.close_connection = True
            status, doc = HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": str(exc)}
        except BadRequest as exc:
            status, doc = HTTPStatus.BAD_REQUEST, {"error": _one_line(str(exc))}
        except Exception as exc:  # noqa: BLE001 - answered and logged; the server goes on
            log.exception("api %s key-value request failed", method)
            status, doc = HTTPStatus.INTERNAL_SERVER_ERROR, {
                "error": f"internal error in the global manager: {type(exc).__name__}"}
        self._send(status, doc)

    def _serve(self, method: str) -> None:
        url = urlsplit(self.path)
        query = parse_qs(url.query)
        target = self._kv_target(url.path)
        if target is not None:
            self._serve_kv(method, target[0], target[1], query)
            return
        token = self._credential(query)
        try:
            who = self.server.backend.authenticate(token)
        except Exception as exc:  # noqa: BLE001 - answered and logged; the server goes on
            log.error("api: authentication failed: %s", type(exc).__name__)
            self._drain()
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {
                "error": f"internal error in the global manager: {type(exc).__name__}"})
            return
        if not isinstance(who, Identity):
            self._drain()
            self._send(HTTPStatus.UNAUTHORIZED, {"error": REFUSALS[who]})
            return
        if method == "GET" and not url.path.startswith(PREFIX + "/"):
            assert token is not None
            page = dashboard.page(url.path, token)
            if page is not None:
                self._send_page(page)
                return
        try:
            body = self._body() if method == "POST" else None
            status, doc = route(self.server.backend, who, method, url.path, query, body)
        except _TooLarge as exc:
            self.close_connection = True
            status, doc = HTTPStatus.REQUEST_ENTITY_TOO_LARGE, {"error": str(exc)}
        except Forbidden as exc:
            status, doc = HTTPStatus.FORBIDDEN, {"error": _one_line(str(exc))}
        except (BadRequest, UserError) as exc:
            status, doc = HTTPStatus.BAD_REQUEST, {"error": _one_line(str(exc))}
        except Exception as exc:  # noqa: BLE001 - answered and logged; the server goes on
            log.exception("api %s %s failed", method, url.path)
            status, doc = HTTPStatus.INTERNAL_SERVER_ERROR, {
                "error": f"internal error in the global manager: {type(exc).__name__}"}
        self._send(status, doc)

    def _length(self) -> int:
        text = self.headers.get("Content-Length")
        if text is None:
            return 0
        try:
            n = int(text)
        except ValueError:
            raise BadRequest("Content-Length: not a number") from None
        if n < 0:
            raise BadRequest("Content-Length: negative")
        return n

    def _drain(self) -> None:
        """Read (and drop) a refused request's body, so the connection stays usable."""
        try:
            n = self._length()
        except BadRequest:
            self.close_connection = True
            return
        if n > MAX_BODY_BYTES:
            self.close_connection = True
        elif n:
            self.rfile.read(n)

    def _body(self) -> object:
        n = self._length()
        if n > MAX_BODY_BYTES:
            raise _TooLarge(f"body: {n} bytes, more than the {MAX_BODY_BYTES} byte limit")
        raw = self.rfile.read(n) if n else b""
        if not raw:
            raise BadRequest("body: empty (expected a JSON object)")
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise BadRequest(f"body: not JSON ({_one_line(str(exc))})") from None

    def do_GET(self) -> None:  # noqa: N802 - the base class's naming
        self._serve("GET")

    def do_POST(self) -> None:  # noqa: N802
        self._serve("POST")

    def do_PUT(self) -> None:  # noqa: N802
        self._serve("PUT")

    def do_DELETE(self) -> None:  # noqa: N802
        self._serve("DELETE")


class _TooLarge(Exception):
    pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    #: Connections waiting to be accepted: the members of a large job ask the key-value
    #: store at once (socketserver's default of 5 drops the others' SYNs, retried by the
    #: kernel only after 1 s, then 3 s, ...).
    request_queue_size = 256
    backend: ApiBackend
    kv: KvBackend | None
    kv_secret: str


class ApiServer:
    """The API on ``host:port`` in a daemon thread, serving ``backend`` to requests that
    carry a credential it knows (and ``kv``, the members' key-value store, to those that
    carry their run's credential, derived from ``kv_secret``). ``port`` 0 binds an
    ephemeral port (:attr:`port` says which). Raises OSError when the address cannot be
    bound."""

    def __init__(
        self, backend: ApiBackend, host: str, port: int,
        kv: KvBackend | None = None, kv_secret: str = "",
    ) -> None:
        if kv is not None and not kv_secret:
            raise ValueError("kv_secret: must not be empty")
        self._server = _Server((host, port), _Handler)
        self._server.backend = backend
        self._server.kv = kv
        self._server.kv_secret = kv_secret
        self.host = host
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.1},
            name="coalloc-api", daemon=True,
        )
        self._thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def close(self) -> None:
        """Stop serving and close the listening socket."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5.0)
