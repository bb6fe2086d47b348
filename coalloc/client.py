"""The Python API of the live runtime.

    import coalloc
    client = coalloc.connect()            # the cluster `coalloc up` started, or address=
    job_id = client.submit("examples/coupled-sim.yaml")
    final = client.wait(job_id, timeout=60)
    print(final.state, client.status(job_id).jobs[0].phase_difference)

Answers are the typed documents of :mod:`runtime.status` (pydantic models: a job record,
the status document, queue rows, submission answers, cancel results), parsed from the
global manager's JSON as the API serves it.

``connect`` finds the cluster from ``address`` (``host:port`` of the Ray GCS, or
``auto``), else from the user's credentials (``$COALLOC_API``/``$COALLOC_TOKEN`` or
``~/.coalloc/credentials``, :mod:`coalloc.credentials`: the API as that user), else from
the state file ``coalloc up`` wrote (``~/.coalloc/state.json``: its admin), else from
``$RAY_ADDRESS``. Errors a user can fix (no cluster, coalloc not running there, a
bad job spec, an unknown job id) are :class:`coalloc.errors.UserError` with a one-line
message.
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from coalloc.api_client import HttpApi
from coalloc.credentials import ApiCredentials, find_api
from coalloc.errors import NoAnswer, UserError
from runtime.status import (
    CancelResult,
    JobRecord,
    QueueRow,
    StatusDocument,
    SubmitAnswer,
    parse_answers,
    parse_cancels,
    parse_queue,
)


def submitting_user() -> str:
    """The job files' default ``user``: the OS user running the command (the spec's
    default, ``default``, where the OS cannot name one, e.g. a uid with no passwd entry)."""
    import getpass

    from workloads.spec import DEFAULT_USER

    try:
        return getpass.getuser() or DEFAULT_USER
    except (KeyError, OSError):
        return DEFAULT_USER

#: Bytes of a job file read to send to the API: more than the server takes (1 MiB), so
#: that a larger file is refused there by the job-file rules.
UPLOAD_LIMIT_BYTES = 1 << 20

#: Real seconds between two polls of ``wait``.
POLL_S = 0.2
#: Real seconds a call keeps retrying while the global manager is restarting (Ray
#: restarts it after a crash and it recovers its job table), before one clear line.
RESTART_WAIT_S = 20.0
#: Real seconds between two attempts while it is restarting.
RETRY_EVERY_S = 0.5


class JobRejected(UserError):
    """The global manager did not admit a job; ``job_id`` and ``reason`` say which and why."""

    def __init__(self, job_id: str, reason: str) -> None:
        self.job_id = job_id
        self.reason = reason
        super().__init__(f"{job_id}: rejected: {reason}", exit_code=1)


class Client:
    """A connection to the global manager of a running coalloc deployment."""

    def __init__(self, global_manager: Any, address: str, api: HttpApi | None = None) -> None:
        """``global_manager``: the actor's Ray handle; ``api``: its HTTP API instead
        (no Ray driver in this process; ``global_manager`` is then unused)."""
        self._gm = global_manager
        self.address = address
        self.api = api
        self._deployment: dict[str, Any] | None = None

    # ------------------------------------------------------------------ helpers
    def _call(self, method: str, *args: Any, timeout: float = 60.0) -> Any:
        """Call the global manager. While it is restarting (its process died and Ray
        builds it again) the call is repeated for up to :data:`RESTART_WAIT_S`; every
        method it is called with is idempotent (``submit`` carries a token). Through
        the HTTP API the same holds (see :mod:`coalloc.api_client`)."""
        if self.api is not None:
            return self.api.call(method, *args)
        import ray

        deadline = time.monotonic() + RESTART_WAIT_S
        while True:
            try:
                return ray.get(getattr(self._gm, method).remote(*args), timeout=timeout)
            except ray.exceptions.RayActorError as exc:
                if time.monotonic() >= deadline:
                    what = (
                        "did not come back"
                        if isinstance(exc, ray.exceptions.ActorUnavailableError)
                        else "is gone"
                    )
                    raise NoAnswer(
                        f"{self.address}: the coalloc global manager {what} "
                        f"(retried {RESTART_WAIT_S:g} s); run coalloc status, or coalloc up"
                    ) from None
                time.sleep(RETRY_EVERY_S)
            except ray.exceptions.GetTimeoutError:
                raise NoAnswer(
                    f"{self.address}: the coalloc global manager did not answer within "
                    f"{timeout:g} s"
                ) from None

    def deployment(self) -> dict[str, Any]:
        """Endpoints, phase-log path, actor names, node names and time scale."""
        if self._deployment is None:
            self._deployment = self._call("deployment")
        return dict(self._deployment)

    def specs(self, spec: Any) -> list[Any]:
        """Job specs from a mapping, a JobSpec, a list of those, or a YAML/JSON file path;
        checked against the number of nodes (SpecError names the source and field)."""
        from workloads.model import JobSpec
        from workloads.spec import (
            DEFAULT_USER,
            check_fits,
            check_name,
            load_jobs,
            parse_document,
            parse_job,
        )

        source = "<input>"
        # Through the API a job naming no user is the credential's (the server's
        # default); through Ray, the OS user's.
        default_user = DEFAULT_USER if self.api is not None else submitting_user()
        # The node count first: a job with more subtasks is refused before its subtasks
        # are parsed.
        n_nodes = int(self.deployment()["n_nodes"])
        if isinstance(spec, (str, Path)):
            source = str(spec)
            jobs = load_jobs(spec, n_nodes, default_user=default_user)
        elif isinstance(spec, JobSpec):
            jobs = [spec]
        elif isinstance(spec, Mapping):
            jobs = [parse_job(spec, source, n_nodes=n_nodes)]
        elif isinstance(spec, Iterable):
            items = list(spec)
            if all(isinstance(j, JobSpec) for j in items):
                jobs = items
            else:
                jobs = parse_document(items, source, n_nodes, default_user=default_user)
        else:
            raise UserError(
                f"spec: expected a job mapping, a JobSpec or a file path, got {type(spec).__name__}"
            )
        for i, job in enumerate(jobs):
            at = f"jobs[{i}]." if len(jobs) > 1 else ""
            check_name(str(job.name), source, f"{at}name")  # a JobSpec built in Python
            check_fits(job, n_nodes, source, i if len(jobs) > 1 else None)
        return jobs

    # ------------------------------------------------------------------ the API
    def submit_all(self, spec: Any, token: str | None = None) -> list[SubmitAnswer]:
        """Submit every job of ``spec`` in one batch (they start at the same cycle
        boundary); one answer per job: ``job_id``, ``name``, ``admitted``, ``reason``,
        ``nodes``, ``start_at`` (model s).

        ``token``: this submission's idempotency token (a fresh one if None). A retry with
        the token of a submission the global manager applied gets that submission's
        answers and makes no job, for :data:`runtime.global_service.TOKEN_KEEP_S` real
        seconds after it. Retry with the same token after a :class:`NoAnswer`."""
        return parse_answers(self._call("submit", self.specs(spec), token or new_token()))

    def submit_file(self, path: str | Path, token: str | None = None) -> list[SubmitAnswer]:
        """:meth:`submit_all` of a job file. Through the API its text is sent as it is
        and the global manager checks it (the same checks and messages as here, naming
        ``path``): this process needs no job parser. A file that cannot be read as
        UTF-8 text is parsed here, which names the problem."""
        if self.api is None:
            return self.submit_all(path, token)
        try:
            with open(path, "rb") as f:
                raw = f.read(UPLOAD_LIMIT_BYTES + 1)
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError):
            return self.submit_all(path, token)
        return parse_answers(
            self._call("submit_file", text, str(path), token or new_token()))

    def submit(self, spec: Any, token: str | None = None) -> str:
        """Submit one job; return its id (it runs, or waits in the pending queue).
        Raises :class:`JobRejected` if it was rejected. ``token``: as :meth:`submit_all`'s."""
        jobs = self.specs(spec)
        if len(jobs) != 1:
            raise UserError(
                f"{spec if isinstance(spec, (str, Path)) else '<input>'}: holds {len(jobs)} "
                "jobs; use submit_all for several"
            )
        (answer,) = parse_answers(self._call("submit", jobs, token or new_token()))
        if not answer.admitted and not answer.pending:
            raise JobRejected(answer.job_id, answer.reason)
        return answer.job_id

    def job(self, job_id: str) -> JobRecord:
        """The global manager's record of one job; UserError for an unknown id."""
        rec = self._call("job", job_id)
        if rec is None:
            raise UserError(f"{job_id}: unknown job id")
        return JobRecord.model_validate(rec)

    def wait(self, job_id: str, timeout: float | None = None) -> JobRecord:
        """Block until the job is completed, failed, cancelled, expired or rejected (not
        pending or running); return its record. Raises TimeoutError after ``timeout`` real
        seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            rec = self.job(job_id)
            if rec.state.final:
                return rec
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"{job_id}: still {rec.state.value} after {timeout:g} s")
            time.sleep(POLL_S)

    def job_states(self, job_ids: Iterable[str] | None = None) -> dict[str, str]:
        return dict(self._call("job_states", list(job_ids) if job_ids is not None else None))

    def status(self, job_id: str | None = None, all_jobs: bool = False) -> StatusDocument:
        """The deployment's status (jobs, subtasks, nodes, clocks, phase differences,
        counters); with ``job_id`` only that job (UserError if unknown; an archived job
        too); ``all_jobs``: the archived jobs (finished more than ``--keep-finished``
        ago) too."""
        st = StatusDocument.model_validate(self._call("status", job_id, all_jobs))
        if job_id is not None and not st.jobs:
            raise UserError(f"{job_id}: unknown job id")
        return st

    def queue(self) -> list[QueueRow]:
        """Pending and running jobs, pending first in placement order: ``job_id``,
        ``name``, ``qos``, ``user``, ``priority``, ``state``, ``wait`` (model s),
        ``reason``, ``nodes``, ``attempt``, ``pending_reasons`` and, for a pending job,
        ``estimated_start`` (model s; None: cannot be estimated) and
        ``estimated_start_time`` (ISO 8601, UTC)."""
        return parse_queue(self._call("queue"))

    def cancel(self, job_id: str) -> JobRecord:
        """Cancel a running job (its processes are killed); return its record."""
        rec = self._call("cancel", job_id)
        if rec is None:
            raise UserError(f"{job_id}: unknown job id")
        return JobRecord.model_validate(rec)

    # ------------------------------------------------------------- credentials
    def whoami(self) -> dict[str, str]:
        """The user and role this client's credential acts as (``name``, ``role``)."""
        return dict(self._api_only("whoami"))

    def users(self) -> list[dict[str, Any]]:
        """Admins: every credential (``name``, ``role``, ``created``, ``revoked``: wall
        s since the Unix epoch, None while in force)."""
        return list(self._api_only("list_users"))

    def add_user(self, name: str, role: str = "user") -> dict[str, Any]:
        """Admins: a new credential for ``name`` (``role``: ``user``, ``admin`` or
        ``read-only``); the answer's ``token`` is the only copy."""
        return dict(self._api_only("add_user", name, role))

    def revoke_user(self, name: str) -> dict[str, Any]:
        """Admins: revoke ``name``'s credential; UserError for an unknown user."""
        rec = self._api_only("revoke_user", name)
        if rec is None:
            raise UserError(f"{name}: no such user")
        return dict(rec)

    def _api_only(self, method: str, *args: Any) -> Any:
        if self.api is None:
            raise UserError(f"{method}: credentials live in the HTTP API; reach it with a "
                            "credentials file or up's state file (not COALLOC_TRANSPORT=ray)")
        return self.api.call(method, *args)

    def cancel_jobs(
        self, job_ids: Iterable[str] | None = None, user: str | None = None,
        state: str | None = None,
    ) -> list[CancelResult]:
        """Cancel several jobs at once, as ``scancel``: those named (None: every job not
        over yet) that belong to ``user`` and are in ``state`` (``pending`` or
        ``running``). One result per job: ``job_id``, ``was``, ``state`` and ``result``
        (``cancelled``, ``already <state>``, ``skipped: ...``, ``unknown job id``)."""
        ids = list(job_ids) if job_ids is not None else None
        if ids is None and user is None and state is None:
            raise UserError("cancel: give job ids, a user or a state")
        if state is not None and state not in ("pending", "running"):
            raise UserError(f"state: expected pending or running, got {state!r}")
        return parse_cancels(self._call("cancel_jobs", ids, user, state))


def resolve_address(address: str | None) -> str:
    """The Ray address to use: ``address``, else the state file's, else ``$RAY_ADDRESS``."""
    if address:
        return address
    from runtime.state import load_state, state_path

    state = load_state()
    if state is not None:
        return state.address
    env = os.environ.get("RAY_ADDRESS")
    if env:
        return env
    from coalloc.credentials import credentials_path

    raise UserError(
        f"no coalloc cluster: neither {credentials_path()} (from coalloc user add) nor "
        f"{state_path()} exists; run coalloc up (or give --address host:port of a Ray "
        "cluster where coalloc up ran)"
    )


def recorded_node_count(address: str | None) -> int | None:
    """The node count ``coalloc up`` recorded in the state file for the deployment
    ``address`` names (None: no such record; an unreadable state file counts as none
    here, the command that needs the cluster reports it)."""
    from runtime.state import load_state

    try:
        state = load_state()
    except UserError:
        return None
    if state is None or (address and address not in (state.address,
                                                     state.extra.get("connect_address"))):
        return None
    n = state.extra.get("n_nodes")
    return n if type(n) is int and n > 0 else None


def api_timeout() -> float | None:
    """``$COALLOC_API_TIMEOUT``: real seconds a request through the API waits for its
    answer (None: unset, the default :data:`coalloc.api_client.API_TIMEOUT_S`)."""
    raw = os.environ.get("COALLOC_API_TIMEOUT", "").strip()
    if not raw:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise UserError(f"COALLOC_API_TIMEOUT={raw!r}: must be a number of seconds > 0")
    return value


def new_token() -> str:
    """A fresh submission idempotency token (128 random bits, hex)."""
    return uuid.uuid4().hex


def recorded_api(address: str | None, any_transport: bool = False) -> ApiCredentials | None:
    """The API and the token to reach the deployment ``address`` names (None: the one
    this user has credentials for): with no ``address``, ``$COALLOC_API`` and
    ``$COALLOC_TOKEN`` or the credentials file (:mod:`coalloc.credentials`) first; else
    what ``coalloc up`` recorded in the state file (its admin's token). None when there
    is no such record or ``$COALLOC_TRANSPORT`` is ``ray`` (the Ray-driver path, for
    debugging and as the benchmark's reference; ``any_transport``: whatever it says)."""
    from runtime.state import load_state, state_path

    if not any_transport and os.environ.get("COALLOC_TRANSPORT", "").lower() == "ray":
        return None
    if not address:
        found = find_api()
        if found is not None:
            return found
    state = load_state()
    if state is None or (address and address not in (state.address,
                                                     state.extra.get("connect_address"))):
        return None
    url, token = state.extra.get("api_url"), state.extra.get("api_token")
    if not url or not token:
        return None
    return ApiCredentials(str(url), str(token), str(state_path()), state.address)


def _api_client(api: ApiCredentials, timeout: float | None) -> Client:
    kwargs = {} if timeout is None else {"timeout": timeout}
    return Client(None, api.address or api.url,
                  HttpApi(api.url, api.token, api.address, restart_wait=RESTART_WAIT_S,
                          source=api.source, **kwargs))


def connect_api(address: str | None = None, timeout: float | None = None) -> Client:
    """A client of the deployment's HTTP API only (never through Ray, also in a process
    connected to Ray): what the credential commands use. UserError when no credentials
    file, ``$COALLOC_API``/``$COALLOC_TOKEN`` or state file names an API."""
    from coalloc.credentials import credentials_path
    from runtime.state import state_path

    api = recorded_api(address, any_transport=True)
    if timeout is None:
        timeout = api_timeout()
    if api is None:
        raise UserError(f"no coalloc API: neither {credentials_path()} (from coalloc user "
                        f"add) nor {state_path()} (from coalloc up) names one")
    return _api_client(api, timeout)


def connect(address: str | None = None, timeout: float | None = None) -> Client:
    """Connect to the coalloc deployment on the Ray cluster at ``address`` (see the module
    docstring). Raises :class:`UserError` when no cluster or no deployment is found.

    The deployment ``coalloc up`` recorded in the state file is reached through its HTTP
    API (no Ray driver is started; ``timeout``: real seconds a request may wait for its
    answer); any other through Ray."""
    import sys

    # Ray must not be imported before connect_ray has set its authentication mode.
    ray_mod = sys.modules.get("ray")
    in_ray = ray_mod is not None and ray_mod.is_initialized()
    if not (in_ray and not address):
        api = recorded_api(address)
        if api is not None:
            return _api_client(api, api_timeout() if timeout is None else timeout)
    from runtime.config import GLOBAL_NAME
    from runtime.deploy import connect_ray, find_actor

    if in_ray and not address:
        assert ray_mod is not None
        gcs = str(ray_mod.get_runtime_context().gcs_address)
    else:
        gcs = connect_ray(resolve_address(address))
    gm = find_actor(GLOBAL_NAME)
    if gm is None:
        raise UserError(f"{gcs}: coalloc is not running on this Ray cluster; run coalloc up")
    return Client(gm, gcs)
