"""Per-user identity through real components: ``coalloc up`` on the session's Ray
cluster, the global manager's real API over HTTP, real credentials made by ``coalloc
user add``.

The permission matrix: every command (status, a job's status and record, queue, the
dashboard, submit, cancel, the user routes, the key-value store) by every role (admin,
user, other user, read-only, no credential, revoked, unknown) on every kind of job
(the user's own and the other user's, each pending, running and finished). Only the
cells :func:`expected` allows succeed; every other gets its status (401 or 403, one
line) and changes nothing. Then: the commands from a HOME holding only a credentials
file (no state file, no Ray), refusals counted and absent from every log, and the
credentials surviving a restart of the global manager.

Jobs. A strict ``blocker`` takes most of the fastest node's budget for the whole test;
a strict job that needs that much budget waits behind it (pending); best-effort jobs run
beside it (running); a tiny best-effort job completes (finished).
"""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import pytest
from support import deployed, wait_for

pytestmark = [pytest.mark.ray, pytest.mark.integration]

TIME_SCALE = 100.0
ROOT = Path(__file__).resolve().parents[2]

#: Needs 600 Mcycles/s for 100000 model s: only the 600 MHz node's budget (630) holds it.
BLOCKER = {"name": "blocker", "qos": "strict", "overall_deviation": 1000, "asynchrony": 500,
           "duration": 100000, "subtasks": [{"work": 60000, "weight": 1}]}
#: The same need: waits behind the blocker.
PENDING = dict(BLOCKER, name="waits", duration=10000, subtasks=[{"work": 6000, "weight": 1}])
RUNNING = {"name": "runs", "qos": "best_effort", "subtasks": [{"work": 50000}]}
FINISHED = {"name": "ends", "qos": "best_effort", "subtasks": [{"work": 0.5}]}
KINDS = {"pending": PENDING, "running": RUNNING, "finished": FINISHED}

#: The roles and the user each acts as (None: no user).
ROLES = ("admin", "user", "other", "reader", "none", "revoked", "unknown")


class Api:
    """Raw HTTP to the API with one credential (None: none)."""

    def __init__(self, url: str, token: str | None) -> None:
        parts = urlsplit(url)
        self.host, self.port = str(parts.hostname), int(parts.port or 0)
        self.token = token

    def call(self, method: str, path: str, body: Any = None,
             query_token: bool = False) -> tuple[int, Any]:
        headers = {"Content-Type": "application/json"}
        if self.token is not None and not query_token:
            headers["Authorization"] = f"Bearer {self.token}"
        if query_token and self.token is not None:
            path += ("&" if "?" in path else "?") + "token=" + quote(self.token, safe="")
        conn = http.client.HTTPConnection(self.host, self.port, timeout=60)
        try:
            conn.request(method, path, body=None if body is None else json.dumps(body),
                         headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
        finally:
            conn.close()
        if resp.getheader("Content-Type", "").startswith("application/json"):
            return resp.status, json.loads(raw)
        return resp.status, raw


@pytest.fixture(scope="module")
def cluster(ray_cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    log = tmp_path_factory.mktemp("identity") / "phase.jsonl"
    with deployed(ray_cluster.address, log, "--time-scale", str(TIME_SCALE)):
        yield ray_cluster


@pytest.fixture(scope="module")
def world(cluster: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Credentials of every role (made with ``coalloc user add``) and the standing jobs
    of alice and bob, one of each kind."""
    import coalloc
    from coalloc import cli

    admin = coalloc.connect(cluster.address)
    assert admin.api is not None
    me = admin.whoami()
    assert me["role"] == "admin"
    files = tmp_path_factory.mktemp("creds")
    tokens: dict[str, str | None] = {"admin": admin.api.token, "none": None,
                                     "unknown": "not-a-credential-of-this-deployment"}
    for role, name, flag in (("user", "alice", []), ("other", "bob", []),
                             ("reader", "carol", ["--read-only"]), ("revoked", "dave", [])):
        out = files / name
        assert cli.main(["user", "add", name, *flag, "--out", str(out)]) == 0
        assert out.stat().st_mode & 0o777 == 0o600
        doc = json.loads(out.read_text())
        assert doc["api"] == admin.api.url and doc["user"] == name
        tokens[role] = doc["token"]
    assert cli.main(["user", "revoke", "dave"]) == 0
    names = {"admin": me["name"], "user": "alice", "other": "bob", "reader": "carol",
             "revoked": "dave"}
    blocker = admin.submit(dict(BLOCKER, user=me["name"]))
    jobs = {}
    for owner in ("alice", "bob"):
        for kind in KINDS:
            jobs[(owner, kind)] = fresh(admin, owner, kind)
    return {"admin": admin, "tokens": tokens, "names": names, "jobs": jobs,
            "blocker": blocker, "files": files, "url": admin.api.url}


def fresh(admin: Any, owner: str, kind: str) -> str:
    """A new job of ``owner`` in state ``kind`` (submitted by the admin for them)."""
    spec = dict(KINDS[kind], name=f"{owner}-{kind}", user=owner, env={"SECRET_OF": owner})
    job_id = admin.submit(spec)
    want = {"pending": "pending", "running": "running", "finished": "completed"}[kind]
    wait_for(lambda: admin.job(job_id).state.value == want, timeout=120)
    return str(job_id)


def expected(role: str, command: str, name: str | None, owner: str | None) -> int:
    """The HTTP status of ``command`` by ``role`` (acting as ``name``) on a job of
    ``owner``: the rule of docs/api.md, written out."""
    if role in ("none", "revoked", "unknown") or command == "kv":
        return 401
    if command in ("status", "status_job", "job", "queue", "dashboard", "whoami"):
        return 200
    if command in ("users", "user_add"):
        return 200 if role == "admin" else 403
    if command in ("submit", "cancel"):
        if role == "admin" or (role in ("user", "other") and owner == name):
            return 200
        return 403
    raise AssertionError(command)


def test_the_permission_matrix(world: dict[str, Any]) -> None:
    admin, tokens, names = world["admin"], world["tokens"], world["names"]
    url = world["url"]
    cells = 0
    for role in ROLES:
        api = Api(url, tokens[role])
        name = names.get(role)
        # Commands on no job.
        for command, method, path, body in (
            ("status", "GET", "/api/v1/status", None),
            ("queue", "GET", "/api/v1/queue", None),
            ("whoami", "GET", "/api/v1/whoami", None),
            ("dashboard", "GET", "/", None),
            ("users", "GET", "/api/v1/users", None),
            ("user_add", "POST", "/api/v1/users", {"name": f"new-{role}", "role": "user"}),
        ):
            code, doc = api.call(method, path, body, query_token=command == "dashboard")
            want = expected(role, command, name, None)
            assert code == want, (role, command, code, doc)
            if code != 200:
                assert "\n" not in doc["error"], doc
            cells += 1
            if command == "status" and code == 200:
                for job in doc["jobs"]:
                    sees = role == "admin" or job["user"] == name
                    assert ("private" in job) is sees, (role, job["job_id"])
                    if sees and job["job_id"] in world["jobs"].values():
                        assert job["private"]["env"] == {"SECRET_OF": job["user"]}
            if command == "whoami" and code == 200:
                assert doc["name"] == name
        # Commands on every kind of job.
        for (owner, kind), job_id in world["jobs"].items():
            run = admin.job(job_id).run_id
            for command, method, path, body in (
                ("status_job", "GET", f"/api/v1/status?job={job_id}", None),
                ("job", "GET", f"/api/v1/jobs/{job_id}", None),
                ("kv", "GET", f"/api/v1/kv/{run}/addr", None),
                ("submit", "POST", "/api/v1/jobs",
                 {"jobs": [dict(FINISHED, name=f"by-{role}", user=owner)]}),
                ("cancel", "POST", "/api/v1/cancel", {"job_ids": [job_id]}),
            ):
                want = expected(role, command, name, owner)
                if command == "cancel" and want == 200 and kind != "finished":
                    # Cancel a fresh job of the same kind: the standing one stays for the
                    # other roles.
                    target = fresh(admin, owner, kind)
                    body = {"job_ids": [target]}
                before = admin.job(job_id).state.value
                code, doc = api.call(method, path, body)
                assert code == want, (role, command, owner, kind, code, doc)
                cells += 1
                if code != 200:
                    assert "\n" not in doc["error"]
                    assert admin.job(job_id).state.value == before  # nothing changed
                if command == "cancel" and code == 403:
                    assert job_id in doc["error"]  # the one line names the job
                if command == "cancel" and code == 200:
                    (result,) = doc
                    assert result["result"] == (
                        "already completed" if kind == "finished" else "cancelled"), doc
                if command in ("job", "status_job") and code == 200:
                    rec = doc if command == "job" else doc["jobs"][0]
                    assert ("private" in rec) is (role == "admin" or owner == name)
                if command == "submit" and code == 200:
                    (answer,) = doc
                    assert admin.job(answer["job_id"]).user == owner
    assert cells == len(ROLES) * (6 + 6 * 5)


def test_a_job_without_user_is_the_credentials_and_revoking_is_immediate(
    world: dict[str, Any],
) -> None:
    admin, tokens = world["admin"], world["tokens"]
    alice = Api(world["url"], tokens["user"])
    code, doc = alice.call("POST", "/api/v1/jobs", {"jobs": [dict(FINISHED, name="mine")]})
    assert code == 200 and admin.job(doc[0]["job_id"]).user == "alice"
    # The job file's text: no user: alice's; another user's: refused, naming both.
    code, doc = alice.call("POST", "/api/v1/jobs", {
        "file": "name: f\nqos: best_effort\nuser: bob\nsubtasks: [{work: 1}]\n",
        "source": "f.yaml"})
    assert code == 403 and "alice" in doc["error"] and "bob" in doc["error"]
    # Bulk cancel by filter: a user's reaches its own jobs only.
    code, doc = alice.call("POST", "/api/v1/cancel", {"user": "bob", "state": "pending"})
    assert code == 403 and "\n" not in doc["error"]
    erin = admin.add_user("erin")
    assert Api(world["url"], erin["token"]).call("GET", "/api/v1/queue")[0] == 200
    admin.revoke_user("erin")
    code, doc = Api(world["url"], erin["token"]).call("GET", "/api/v1/queue")
    assert code == 401 and doc["error"].startswith("revoked credential")
    listed = {u["name"]: u for u in admin.users()}
    assert listed["erin"]["revoked"] is not None and listed["alice"]["revoked"] is None
    assert all("token" not in u and "digest" not in u for u in listed.values())


def _cli(home: Path, *argv: str, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess[str]:
    """``coalloc ARGV`` in a fresh process, as an account whose HOME is ``home``: no
    state file, no Ray address, only what ``home`` holds."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("COALLOC_", "RAY_"))}
    clean.update(HOME=str(home), PYTHONPATH=str(ROOT), **(env or {}))
    return subprocess.run([sys.executable, "-m", "coalloc.cli", *argv], env=clean,
                          capture_output=True, text=True, timeout=120, cwd=home)


def test_every_api_command_works_from_a_home_with_only_the_credentials_file(
    world: dict[str, Any], tmp_path: Path,
) -> None:
    home = tmp_path / "bob-home"
    (home / ".coalloc").mkdir(parents=True)
    creds = home / ".coalloc" / "credentials"
    creds.write_bytes((world["files"] / "bob").read_bytes())
    creds.chmod(0o600)
    assert sorted(p.name for p in (home / ".coalloc").iterdir()) == ["credentials"]
    job_file = home / "job.yaml"
    job_file.write_text("name: from-bob\nqos: best_effort\nsubtasks: [{work: 50000}]\n")

    r = _cli(home, "user", "whoami")
    assert r.returncode == 0 and r.stdout == "bob (user)\n", r.stderr
    r = _cli(home, "submit", str(job_file), "-q")
    assert r.returncode == 0, r.stderr
    mine = r.stdout.strip()
    assert world["admin"].job(mine).user == "bob"
    for argv in (("status",), ("status", mine), ("queue",), ("status", "--json"),
                 ("dashboard",)):
        r = _cli(home, *argv)
        assert r.returncode == 0 and r.stderr == "", (argv, r.stderr)
    assert world["jobs"][("alice", "running")] in _cli(home, "queue").stdout
    r = _cli(home, "cancel", mine)
    assert r.returncode == 0 and "cancelled" in r.stdout, r.stderr
    theirs = world["jobs"][("alice", "running")]
    r = _cli(home, "cancel", theirs)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and theirs in r.stderr
    assert "Traceback" not in r.stderr
    r = _cli(home, "user", "list")
    assert r.returncode == 2 and r.stderr.count("\n") == 1, r.stderr
    # The variables override the file: a revoked token is refused, in one line.
    r = _cli(home, "queue", env={"COALLOC_TOKEN": str(world["tokens"]["revoked"])})
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "revoked" in r.stderr
    # A file others may read is refused before anything is sent.
    creds.chmod(0o644)
    r = _cli(home, "queue")
    assert r.returncode == 2 and "chmod 600" in r.stderr


def test_refusals_are_counted_and_no_token_reaches_a_log(world: dict[str, Any]) -> None:
    import ray

    admin, tokens = world["admin"], world["tokens"]
    secret = "leaked-" + os.urandom(8).hex()
    for token in (secret, tokens["revoked"]):
        api = Api(world["url"], token)
        assert api.call("GET", "/api/v1/status")[0] == 401
        assert api.call("GET", "/api/v1/status", query_token=True)[0] == 401
        assert api.call("GET", "/", query_token=True)[0] == 401
    assert Api(world["url"], None).call("GET", "/api/v1/queue")[0] == 401
    counters = admin.status().global_counters
    assert counters["api_refused_unknown"] >= 2 and counters["api_refused_revoked"] >= 2
    assert counters["api_refused_missing"] >= 1
    session = Path(ray._private.worker._global_node.get_session_dir_path())
    home = Path(os.environ["COALLOC_HOME"])
    secrets_ = [secret, *(t for t in tokens.values() if t)]
    for root in (session / "logs", home / "logs"):
        for path in root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                for s in secrets_:
                    assert s.encode() not in data, (path, s[:8])


def test_credentials_survive_a_restart_of_the_global_manager(world: dict[str, Any]) -> None:
    import ray

    from runtime.config import GLOBAL_NAME, NAMESPACE

    admin, tokens = world["admin"], world["tokens"]
    gm = ray.get_actor(GLOBAL_NAME, namespace=NAMESPACE)
    old = int(ray.get(gm.ready.remote(), timeout=60)["pid"])
    os.kill(old, signal.SIGKILL)

    def back() -> bool:
        try:
            return int(ray.get(gm.ready.remote(), timeout=5)["pid"]) != old
        except (ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
            return False

    wait_for(back, timeout=120)
    alice = Api(world["url"], tokens["user"])
    code, doc = wait_for(lambda: (r := alice.call("GET", "/api/v1/whoami"))[0] == 200 and r,
                         timeout=60)
    assert doc == {"name": "alice", "role": "user"}
    assert Api(world["url"], tokens["revoked"]).call("GET", "/api/v1/queue")[0] == 401
    assert Api(world["url"], tokens["reader"]).call(
        "POST", "/api/v1/cancel", {"job_ids": [world["blocker"]]})[0] == 403
    assert admin.whoami()["role"] == "admin"
    for job_id in [world["blocker"], *world["jobs"].values()]:
        admin.cancel_jobs([job_id])
