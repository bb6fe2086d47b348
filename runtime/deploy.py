"""Starting and stopping the live runtime on a Ray cluster (``coalloc up`` / ``down``).

``up`` on an existing cluster creates the actors there; with no cluster it starts an
embedded Ray head first: ``ray start --head --block`` in a new session (so it outlives
the CLI process), with its own Ray temp dir (so that other Ray users on the machine never
connect to it by accident), and records it in the state file. ``down`` removes exactly
the actors ``up`` created (local managers first, so that their subtask processes are
killed) and, if ``up`` started the head, that head's session and nothing else.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.config import (
    CONTROLLER_NAME,
    GLOBAL_NAME,
    GLOBAL_THREADS,
    LEASE_GROUP,
    LEASE_GROUP_THREADS,
    NAMESPACE,
    RuntimeConfig,
    coalloc_home,
    local_manager_name,
)
from runtime.identity import AdminSeed, check_user_name, seed
from runtime.nodes import NodePlacement, parse_nodes_spec, plan, ray_nodes_from
from runtime.timebase import TimeBase, make_real_clock
from workloads.errors import UserError

log = logging.getLogger("coalloc.runtime")

#: Real seconds to wait for every actor to report ready.
READY_TIMEOUT_S = 120.0
#: Real seconds to wait for an embedded head to accept connections.
HEAD_TIMEOUT_S = 90.0
#: Real seconds to let a graceful ``shutdown`` of an actor finish.
SHUTDOWN_TIMEOUT_S = 20.0
#: How often Ray restarts the global manager after its process dies (-1: always). It
#: recovers its job table from its journal, so a restart loses nothing recorded.
GLOBAL_MAX_RESTARTS = -1
#: How often Ray restarts the controller (-1: always); it rebinds its recorded ports.
CONTROLLER_MAX_RESTARTS = -1
#: How often Ray restarts a local manager; it resumes its node from its checkpoint.
LOCAL_MANAGER_MAX_RESTARTS = 20


# --------------------------------------------------------------------------- Ray


def connect_ray(address: str, auth_mode: str | None = None) -> str:
    """Connect this process to the Ray cluster at ``address`` (or reuse a connection);
    return the GCS address. Raises :class:`UserError` when no cluster is reachable.

    ``auth_mode`` (``token`` or ``disabled``) is Ray's ``RAY_AUTH_MODE`` for this cluster;
    by default the one recorded for an embedded head ``up`` started at that address (a
    driver given an explicit address never turns token authentication on by itself). An
    explicit ``RAY_AUTH_MODE`` in the environment always wins. Ray reads it when it is
    first imported, so this must run before anything in the process imports Ray."""
    ray_mod = sys.modules.get("ray")
    if ray_mod is not None and ray_mod.is_initialized():
        return str(ray_mod.get_runtime_context().gcs_address)
    if auth_mode is None:
        auth_mode = recorded_auth_mode(address)
    if auth_mode and "RAY_AUTH_MODE" not in os.environ:
        if ray_mod is not None:  # pragma: no cover - a caller imported Ray too early
            log.warning("Ray was imported before RAY_AUTH_MODE=%s could be set", auth_mode)
        os.environ["RAY_AUTH_MODE"] = auth_mode
    import ray

    if address == "auto":
        address = _resolve_auto()
    if address != "local":
        problem = gcs_problem(address)
        if problem is not None:
            raise UserError(f"{address}: no Ray cluster reachable there ({problem}); start "
                            "one, or run coalloc up")
    # The probe above found a GCS that answers, so a failure of ray.init now is most
    # often its own RPC deadline missed on a loaded machine ("Timed out while waiting for
    # GCS to become available"): ask again a few times before giving up.
    for attempt in range(1, CONNECT_ATTEMPTS + 1):
        try:
            ray.init(
                address=address,
                namespace=NAMESPACE,
                logging_level=logging.ERROR,
                log_to_driver=False,
            )
            break
        except (ConnectionError, RuntimeError, ValueError) as exc:
            ray.shutdown()
            if attempt < CONNECT_ATTEMPTS and address != "local" and _transient(exc):
                log.warning("%s: Ray connection attempt %d failed (%s); retrying", address,
                            attempt, _first_line(exc))
                continue
            raise UserError(f"{address}: cannot connect to a Ray cluster "
                            f"({_first_line(exc)})") from None
    _quiet_worker_pool_warning()
    return str(ray.get_runtime_context().gcs_address)


#: How many times ``connect_ray`` calls ``ray.init`` when the GCS answered the probe but
#: ray.init failed on a timeout (a loaded machine), before it reports the failure.
CONNECT_ATTEMPTS = 3


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _transient(exc: BaseException) -> bool:
    """True for a ray.init failure that a retry can cure: a timeout somewhere in the
    chain of causes (Ray wraps the GCS client's RpcError in a RuntimeError and that in a
    ConnectionError)."""
    seen: BaseException | None = exc
    while seen is not None:
        if "timed out" in str(seen).lower() or "timeout" in type(seen).__name__.lower():
            return True
        seen = seen.__cause__ or seen.__context__
    return False


#: The raylet's notice, pushed to the driver's stdout, that it started many worker
#: processes (every coalloc actor is one, by design: ``up --nodes 64`` starts 66).
WORKER_POOL_NOTICE = "worker processes have been started on node"


def _quiet_worker_pool_warning() -> None:
    """Keep the raylet's "N PYTHON worker processes have been started" notice off this
    driver's stdout (``coalloc up`` starts one actor per node on purpose; the notice
    suggests a problem the user does not have); it goes to the debug log instead. Ray
    prints the errors the raylet pushes to a driver through
    ``ray._private.worker.print_to_stdstream`` (looked up at each call); that function
    is wrapped to drop this notice only. Nothing happens if Ray changes that name."""
    try:
        from ray._private import worker as ray_worker
    except ImportError:  # pragma: no cover - Ray's layout changed
        return
    original = getattr(ray_worker, "print_to_stdstream", None)
    if original is None or getattr(original, "coalloc_filtered", False):
        return

    def filtered(data: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        lines = data.get("lines") if isinstance(data, dict) else None
        if isinstance(lines, list) and data.get("pid") == "raylet":
            kept = [ln for ln in lines if WORKER_POOL_NOTICE not in str(ln)]
            if len(kept) != len(lines):
                log.debug("raylet: %s", "; ".join(str(ln) for ln in lines if ln not in kept))
                if not kept:
                    return None
                data = dict(data, lines=kept)
        return original(data, *args, **kwargs)

    filtered.coalloc_filtered = True  # type: ignore[attr-defined]
    ray_worker.print_to_stdstream = filtered


def recorded_auth_mode(address: str) -> str | None:
    """The auth mode of the embedded head recorded at ``address`` in the state file."""
    from runtime.state import load_state

    state = load_state()
    if state is None or not state.embedded:
        return None
    if address not in (state.address, state.extra.get("connect_address")):
        return None
    mode = state.extra.get("auth_mode")
    return str(mode) if mode else None


def embedded_auth_mode() -> str:
    """``RAY_AUTH_MODE`` for an embedded head: the environment's if set, else ``token``
    when a Ray token exists (``ray start`` then turns token authentication on by itself,
    and every driver must send it), else ``disabled``."""
    mode = os.environ.get("RAY_AUTH_MODE")
    if mode:
        return mode
    has_token = bool(os.environ.get("RAY_AUTH_TOKEN")) or (
        Path.home() / ".ray" / "auth_token"
    ).exists()
    return "token" if has_token else "disabled"


def _resolve_auto() -> str:
    """``auto`` as Ray resolves it (``$RAY_ADDRESS``, else the latest ``ray start`` on this
    machine), so that the address is checked like any other before ``ray.init``."""
    from ray._private.services import canonicalize_bootstrap_address

    try:
        found = canonicalize_bootstrap_address("auto")
    except (ConnectionError, ValueError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"auto: no Ray cluster found ({first})") from None
    if not found:
        raise UserError("auto: no Ray cluster found on this machine; give --address host:port")
    return str(found)


#: Real seconds the TCP connect to the GCS port and its HTTP/2 answer may each take.
GCS_CONNECT_TIMEOUT_S = 3.0
GCS_ANSWER_TIMEOUT_S = 5.0

# The HTTP/2 client connection preface and an empty SETTINGS frame (RFC 9113 §3.4).
_H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


def gcs_problem(
    address: str,
    connect_timeout: float = GCS_CONNECT_TIMEOUT_S,
    answer_timeout: float = GCS_ANSWER_TIMEOUT_S,
) -> str | None:
    """Why no Ray GCS answers at ``host:port`` (None: one does), in a few words.

    ``ray.init`` against an address where something accepts TCP connections but no GCS
    answers (a stopped or wedged head, a reused port) retries for minutes and fills
    stderr with Ray's warnings; against a closed port it fails quickly. So before
    ``ray.init``: the port must accept a connection within ``connect_timeout`` and answer
    the HTTP/2 connection preface with a SETTINGS frame (every gRPC server does at once)
    within ``answer_timeout``. Skipped, for the answer, with ``RAY_USE_TLS`` (the GCS
    then speaks TLS first)."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"{address}: not a Ray address (expected host:port, auto or local)")
    try:
        conn = socket.create_connection((host.strip("[]"), int(port)), timeout=connect_timeout)
    except TimeoutError:
        return f"no TCP connection within {connect_timeout:g} s"
    except OSError as exc:
        return (exc.strerror or str(exc) or type(exc).__name__).lower()
    if os.environ.get("RAY_USE_TLS", "").lower() in ("1", "true"):
        conn.close()
        return None
    with conn:
        try:
            conn.settimeout(answer_timeout)
            conn.sendall(_H2_PREFACE)
            deadline = time.monotonic() + answer_timeout
            head = b""
            while len(head) < 9:
                conn.settimeout(max(0.01, deadline - time.monotonic()))
                chunk = conn.recv(9 - len(head))
                if not chunk:
                    return "the port closed the connection without an answer: not a Ray GCS"
                head += chunk
        except ConnectionResetError:
            return "the port closed the connection without an answer: not a Ray GCS"
        except TimeoutError:
            return (f"the port accepts connections but nothing answered within "
                    f"{answer_timeout:g} s: not a live Ray GCS")
        except OSError as exc:
            return f"the connection failed: {(exc.strerror or str(exc)).lower()}"
    if head[3] != 0x04:  # frame type SETTINGS
        return "the port answered, but not as a gRPC server: not a Ray GCS"
    return None


def _reachable(address: str, timeout: float = 3.0) -> bool:
    """Whether the GCS port ``host:port`` accepts TCP connections."""
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"{address}: not a Ray address (expected host:port, auto or local)")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout):
            return True
    except OSError:
        return False


def find_actor(name: str) -> Any | None:
    import ray

    try:
        return ray.get_actor(name, namespace=NAMESPACE)
    except ValueError:
        return None


# ---------------------------------------------------------------------- embedded head


@dataclass(frozen=True, slots=True)
class EmbeddedHead:
    address: str
    pid: int
    temp_dir: str
    log: str
    auth_mode: str


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port free on ``host`` now (the kernel's choice of an ephemeral port)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def start_embedded_head(num_cpus: int | None = None) -> EmbeddedHead:
    """Start ``ray start --head --block`` in its own session; wait until it answers."""
    home = coalloc_home()
    home.mkdir(parents=True, exist_ok=True)
    # A short temp dir: Ray's socket paths must stay under 107 characters.
    temp_dir = Path(f"/tmp/coalloc-{os.getuid()}/ray")
    temp_dir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    log_path = home / "ray-head.log"
    # Ports Ray would otherwise take at fixed defaults are chosen free here: with another
    # Ray instance on the machine (another user's, a test's) its dashboard agent retried
    # its HTTP port 52365 six times (3.5 s, holding the raylet's registration and so
    # this start) and its client server could not bind 10001. No log monitor: nothing
    # reads worker logs through a driver (log_to_driver=False), and it was one more
    # process importing Ray while the head starts.
    argv = [
        sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
        f"--port={port}", f"--temp-dir={temp_dir}", "--node-ip-address=127.0.0.1",
        "--include-dashboard=false",
        "--include-log-monitor=false",
        f"--dashboard-agent-listen-port={free_port()}",
        f"--ray-client-server-port={free_port()}",
        "--disable-usage-stats",
    ]
    if num_cpus is not None:
        argv.append(f"--num-cpus={num_cpus}")
    auth_mode = embedded_auth_mode()
    env = dict(os.environ, RAY_AUTH_MODE=auth_mode)
    with open(log_path, "ab") as out:
        proc = subprocess.Popen(
            argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            start_new_session=True, env=env,
        )
    address = f"127.0.0.1:{port}"
    deadline = time.monotonic() + HEAD_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise UserError(
                f"embedded Ray head exited with status {proc.returncode}; see {log_path}"
            )
        if _reachable(address, timeout=0.5):
            # The GCS answers; give the raylet a moment to register the node.
            return EmbeddedHead(address, proc.pid, str(temp_dir), str(log_path), auth_mode)
        time.sleep(0.25)
    stop_session(proc.pid)
    raise UserError(f"embedded Ray head did not start within {HEAD_TIMEOUT_S:g} s; see {log_path}")


def _session_members(sid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rfind(b")") + 2 :].split()
        # fields[0] = state, [3] = session id (proc(5) fields 3 and 6).
        if len(fields) > 3 and int(fields[3]) == sid and fields[0] not in (b"Z", b"X"):
            out.append(int(name))
    return out


def stop_session(leader: int, timeout: float = 20.0) -> int:
    """Stop the session led by ``leader`` (an embedded ``ray start --block``): SIGTERM to
    the leader (it stops its Ray processes), then SIGKILL to whatever is left in that
    session. Returns how many processes had to be killed. Touches no other session."""
    members = _session_members(leader)
    if not members:
        return 0
    try:
        os.kill(leader, signal.SIGTERM)
    except ProcessLookupError:
        pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and _session_members(leader):
        try:
            os.waitpid(leader, os.WNOHANG)
        except ChildProcessError:
            pass
        time.sleep(0.1)
    left = _session_members(leader)
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(left)


# --------------------------------------------------------------------------- actors


@dataclass(frozen=True, slots=True)
class Deployment:
    """What :func:`deploy` created. Times in real seconds."""

    address: str
    actors: tuple[str, ...]
    placements: tuple[NodePlacement, ...]
    report_endpoint: str
    command_endpoint: str
    phase_log: str
    ready_s: float
    #: The global manager's HTTP API (``http://host:port``) and its first admin's
    #: bearer token; empty when the deployment serves none (``coalloc run``).
    api_url: str = ""
    api_token: str = ""
    #: The user the admin credential ``api_token`` acts as.
    api_admin: str = ""


def admin_name() -> str:
    """The user ``up``'s admin credential acts as: the OS user running it (``admin``
    where the OS cannot name one, or names one a credential cannot take)."""
    import getpass

    try:
        return check_user_name(getpass.getuser())
    except (KeyError, OSError, ValueError):
        return "admin"


def default_log_path() -> Path:
    """A fresh ``~/.coalloc/logs/phase-<time>.jsonl``, with ``phase.jsonl`` linked to it."""
    logs = coalloc_home() / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = logs / f"phase-{stamp}.jsonl"
    n = 1
    while path.exists():
        path = logs / f"phase-{stamp}-{n}.jsonl"
        n += 1
    link = logs / "phase.jsonl"
    try:
        if link.is_symlink() or not link.exists():
            link.unlink(missing_ok=True)
            link.symlink_to(path.name)
    except OSError:
        pass  # the link is a convenience only
    return path


def runtime_file(kind: str, epoch: float) -> Path:
    """A restart file of the deployment whose model time 0 is ``epoch`` (real s):
    ``<COALLOC_HOME>/runtime/<kind>-<epoch in ms>.json`` (``ctl``: the controller's
    checkpoint, ``lm-<node>``: a local manager's), or ``gm-<epoch in ms>.sqlite`` (the
    global manager's journal, :mod:`runtime.journal`, with its ``-wal`` and ``-shm``
    files), a fresh name per ``up`` (the directory is created 0700). The global manager
    and the controller run on the node ``up`` ran on."""
    d = coalloc_home() / "runtime"
    d.mkdir(mode=0o700, parents=True, exist_ok=True)
    return d / f"{kind}-{int(epoch * 1000)}{'.sqlite' if kind == 'gm' else '.json'}"


def deploy(
    config: RuntimeConfig,
    nodes_spec: str | None = None,
    log_path: str | None = None,
    progress: Callable[[str], None] | None = None,
    api: bool = False,
    api_port: int = 0,
    nodes_per_process: int | None = None,
    admin: str | None = None,
) -> Deployment:
    """Create the controller, the local managers and the global manager on the connected
    Ray cluster and wait until all are ready. Raises :class:`UserError` if coalloc is
    already running there or the cluster cannot host it.

    ``api``: the global manager serves its HTTP API (:mod:`runtime.api`) on this Ray
    node's address, port ``api_port`` (0: a free one chosen here), with a fresh admin
    credential for user ``admin`` (None: :func:`admin_name`); the URL and the admin's
    token are in the returned :class:`Deployment` (``up`` records them in the state
    file; the global manager keeps only the token's hash). ``nodes_per_process``:
    emulated nodes per local-manager process (:mod:`runtime.node_host`; None:
    :func:`~runtime.node_host.default_nodes_per_process`);
    a node of its own Ray node always has its own."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from global_manager.core import GlobalManagerCore
    from runtime.actors import ControllerActor, GlobalManagerActor, LocalManagerActor
    from runtime.node_host import (
        HostedNode,
        ManagerFactory,
        NodeHostActor,
        default_nodes_per_process,
        host_name,
    )

    say = progress or (lambda msg: None)
    t0 = time.monotonic()
    if find_actor(GLOBAL_NAME) is not None:
        raise UserError("coalloc is already running on this Ray cluster; run coalloc down first")
    try:
        emulated = parse_nodes_spec(nodes_spec, config.seed) if nodes_spec else None
    except ValueError as exc:
        raise UserError(str(exc)) from None
    ray_nodes = ray_nodes_from(ray.nodes())
    try:
        placements = plan(ray_nodes, emulated, config.core_mhz)
    except ValueError as exc:  # no alive nodes; a bad coalloc_label_<name> resource
        raise UserError(str(exc)) from None
    nodes = [p.node for p in placements]
    policy = config.get_policy()
    budgets = GlobalManagerCore(nodes, policy, config.core.global_config()).node_budgets()
    here = str(ray.get_runtime_context().get_node_id())
    address = str(ray.get_runtime_context().gcs_address)
    log = str(Path(log_path).expanduser().resolve()) if log_path else str(default_log_path())
    output_dir = str(coalloc_home() / "logs" / "subtasks")

    # CURVE keys for both ZeroMQ channels: generated here, handed to the actors as
    # constructor arguments (through Ray), never written to disk.
    server_curve: Any = None
    node_curves: dict[str, Any] = {}
    if not config.insecure:
        from coallocator.security import generate_curve

        server_curve, node_curves = generate_curve([p.node.name for p in placements])

    # Model time 0 is now; every actor reads it through its own real clock.
    real = make_real_clock(config.ntp_servers)
    base = TimeBase(epoch=real.now(), scale=config.time_scale)
    real.close()

    def pinned(node_id: str) -> NodeAffinitySchedulingStrategy:
        return NodeAffinitySchedulingStrategy(node_id=node_id, soft=False)

    common = {"namespace": NAMESPACE, "lifetime": "detached", "num_cpus": 0}
    created: list[str] = []
    try:
        say("starting the controller")
        controller: Any = (
            ray.remote(ControllerActor)
            .options(
                name=CONTROLLER_NAME, scheduling_strategy=pinned(here), max_concurrency=8,
                max_restarts=CONTROLLER_MAX_RESTARTS, max_task_retries=0, **common,
            )
            .remote(config, base, budgets, log, server_curve,
                    str(runtime_file("ctl", base.epoch)))
        )
        created.append(CONTROLLER_NAME)
        ctl: dict[str, Any] = ray.get(controller.ready.remote(), timeout=READY_TIMEOUT_S)
        n_emulated = sum(1 for p in placements if p.emulated)
        per = nodes_per_process or default_nodes_per_process(n_emulated)
        groups = _host_groups(placements, per)
        hosted = sum(len(g) for g in groups if len(g) > 1)
        say(f"starting {len(placements)} local managers"
            + (f" ({hosted} of them {per} to a process)" if hosted else ""))
        handles: dict[str, Any] = {}  # node -> what its manager is called through
        node_hosts: dict[str, str] = {}
        for group in groups:
            ray_node = group[0].ray_node_id
            if len(group) == 1:
                (p,) = group
                name = local_manager_name(p.node.name)
                lm_class: Any = ray.remote(LocalManagerActor)
                handles[p.node.name] = (
                    lm_class
                    .options(
                        name=name, scheduling_strategy=pinned(ray_node), max_concurrency=8,
                        max_restarts=LOCAL_MANAGER_MAX_RESTARTS, max_task_retries=0,
                        **common,
                    )
                    .remote(
                        p.node, config, base, ctl["report_endpoint"], ctl["command_endpoint"],
                        output_dir, node_curves.get(p.node.name),
                        str(runtime_file(f"lm-{p.node.name}", base.epoch)),
                    )
                )
                created.append(name)
                continue
            name = host_name(len(set(node_hosts.values())))
            manager: ManagerFactory = LocalManagerActor
            members = [(p.node, node_curves.get(p.node.name),
                        str(runtime_file(f"lm-{p.node.name}", base.epoch))) for p in group]
            host: Any = (
                ray.remote(NodeHostActor)
                .options(
                    name=name, scheduling_strategy=pinned(ray_node),
                    max_concurrency=max(8, 4 * len(group)),
                    max_restarts=LOCAL_MANAGER_MAX_RESTARTS, max_task_retries=0, **common,
                )
                .remote(manager, members, config, base, ctl["report_endpoint"],
                        ctl["command_endpoint"], output_dir)
            )
            created.append(name)
            for p in group:
                node_hosts[p.node.name] = name
                handles[p.node.name] = HostedNode(host, p.node.name)
        lms = [handles[p.node.name] for p in placements]
        ready: list[dict[str, Any]] = ray.get(
            [lm.ready.remote() for lm in lms], timeout=READY_TIMEOUT_S
        )
        for p, r in zip(placements, ready):
            if r["ray_node_id"] != p.ray_node_id:  # pragma: no cover - Ray honours affinity
                raise UserError(f"local manager of {p.node.name} is not on its Ray node")
        # The controller knows each node's incarnation before any report arrives.
        ray.get(
            [controller.register_node.remote(r["node"], r["incarnation"]) for r in ready],
            timeout=READY_TIMEOUT_S,
        )
        info = {
            "address": address,
            "report_endpoint": ctl["report_endpoint"],
            "command_endpoint": ctl["command_endpoint"],
            "phase_log": log,
            "actors": [GLOBAL_NAME, *created],
            "epoch": base.epoch,
            "transport_security": "insecure" if config.insecure else "curve",
            "gm_journal": str(runtime_file("gm", base.epoch)),
            "node_hosts": node_hosts,
        }
        token: str | None = None
        auth: AdminSeed | None = None
        api_url = ""
        if api:
            host = next((str(n["NodeManagerAddress"]) for n in ray.nodes()
                         if n["NodeID"] == here), "127.0.0.1")
            port = api_port or free_port(host)
            # The admin's token stays here (up records it in its state file): the
            # global manager gets its hash only.
            auth, token = seed(admin or admin_name())
            info["api_port"] = port
            info["admin"] = auth.admin
            api_url = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        say("starting the global manager")
        # Ray's typing of remote() lists no concurrency_groups; it takes them.
        remote: Any = ray.remote
        gm: Any = (
            remote(concurrency_groups={LEASE_GROUP: LEASE_GROUP_THREADS})(GlobalManagerActor)
            .options(
                name=GLOBAL_NAME, scheduling_strategy=pinned(here), max_concurrency=GLOBAL_THREADS,
                max_restarts=GLOBAL_MAX_RESTARTS, max_task_retries=0, **common,
            )
            .remote([(p.node, p.ray_node_id, p.emulated) for p in placements], config, base,
                    info, auth)
        )
        created.insert(0, GLOBAL_NAME)
        gm_ready = ray.get(gm.ready.remote(), timeout=READY_TIMEOUT_S)
        if api and gm_ready.get("api_error"):
            raise UserError(f"the global manager cannot serve its API: {gm_ready['api_error']}"
                            " (choose another --api-port)")
    except BaseException:
        teardown(created)
        raise
    return Deployment(
        address=address,
        actors=tuple(created),
        placements=tuple(placements),
        report_endpoint=ctl["report_endpoint"],
        command_endpoint=ctl["command_endpoint"],
        phase_log=log,
        ready_s=time.monotonic() - t0,
        api_url=api_url,
        api_token=token or "",
        api_admin=auth.admin if auth is not None else "",
    )


def _host_groups(
    placements: Sequence[NodePlacement], per_process: int
) -> list[list[NodePlacement]]:
    """The local-manager processes to start: emulated nodes of the same Ray node in groups
    of ``per_process`` (in placement order), every other node alone."""
    groups: list[list[NodePlacement]] = []
    open_group: dict[str, list[NodePlacement]] = {}
    for p in placements:
        if not p.emulated or per_process <= 1:
            groups.append([p])
            continue
        group = open_group.get(p.ray_node_id)
        if group is None or len(group) >= per_process:
            group = open_group[p.ray_node_id] = []
            groups.append(group)
        group.append(p)
    return groups


def teardown(names: Sequence[str] | None = None) -> list[str]:
    """Remove coalloc's actors (``names``, or every one the global manager lists):
    graceful shutdown first (local managers kill their subtask processes), then
    ``ray.kill``; then the deployment's restart files on this machine that are left (an
    actor that did not answer, e.g. a lost node's local manager, could not remove its
    own; see :func:`remove_restart_files`). Returns the names removed."""
    import ray

    gm = find_actor(GLOBAL_NAME)
    recorded: dict[str, Any] = {}
    if gm is not None:
        try:
            recorded = dict(ray.get(gm.deployment.remote(), timeout=10.0))
        except Exception:  # noqa: BLE001 - the names below, no epoch
            recorded = {}
    if names is None:
        names = []
        if gm is not None:
            names = list(recorded.get("actors") or [GLOBAL_NAME])
            if GLOBAL_NAME not in names:
                names.insert(0, GLOBAL_NAME)
        if find_actor(CONTROLLER_NAME) is not None and CONTROLLER_NAME not in names:
            names.append(CONTROLLER_NAME)
    handles = {n: h for n in names if (h := find_actor(n)) is not None}
    # Local managers first (they own processes), then the controller, the global manager.
    order = sorted(handles, key=lambda n: (n == GLOBAL_NAME, n == CONTROLLER_NAME, n))
    refs = [handles[n].shutdown.remote() for n in order]
    try:
        ray.wait(refs, num_returns=len(refs), timeout=SHUTDOWN_TIMEOUT_S)
    except Exception:  # noqa: BLE001 - killed below anyway
        pass
    for n in order:
        try:
            ray.kill(handles[n], no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass
    if isinstance(recorded.get("epoch"), (int, float)):
        for path in remove_restart_files(float(recorded["epoch"])):
            log.info("removed the restart file %s left by an actor that did not answer", path)
        # The subtask processes such an actor left on this machine: the other managers'
        # sweeps spared them while its restart file held them for its restart.
        from local_manager.sweep import reap_stale_subtasks

        try:
            reap_stale_subtasks()
        except Exception:  # noqa: BLE001 - best effort; the next manager's sweep
            log.exception("sweep for stale subtasks")
    return order


def remove_restart_files(epoch: float) -> list[Path]:
    """Remove the restart files of the deployment whose model time 0 is ``epoch`` (real
    s) from this machine's ``<COALLOC_HOME>/runtime/`` (``gm-``, ``ctl-`` and every
    ``lm-<node>-`` file named by that epoch, see :func:`runtime_file`); files of other
    deployments stay. Returns the files removed. Local managers on other machines keep
    theirs if they could not remove them."""
    d = coalloc_home() / "runtime"
    stamp = f"-{int(epoch * 1000)}."
    ends = (".json", ".sqlite", ".sqlite-wal", ".sqlite-shm")
    removed = []
    for path in sorted(d.glob(f"*{stamp}*")) if d.is_dir() else []:
        name = path.name
        if name.split("-", 1)[0] in ("gm", "ctl", "lm") and \
                name[name.index(stamp) + len(stamp) - 1:] in ends:
            try:
                path.unlink()
            except FileNotFoundError:
                continue
            removed.append(path)
    return removed
