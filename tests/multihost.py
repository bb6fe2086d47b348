"""The namespaced multi-host cluster of the tests marked ``multihost`` (``tests/`` is on
``sys.path``: ``from multihost import ...``).

:class:`NetnsCluster` drives ``deploy/netns-cluster.sh``: hosts are network namespaces
with their own address on a bridge and their own raylet, the head (and so the global
manager and the controller ``coalloc up`` starts) in the root namespace on the bridge's
address. It cuts and restores a host's link, puts ``tc netem`` delay and loss on it, runs
``coalloc`` on the head or inside a host's namespace, and lists the processes that run
in a host. Every name (namespaces, veths, bridge, subnet, directory) carries this
process's id, so two test runs on one machine do not meet.

Where the cluster cannot be built (not root, no ``ip``/``tc``, namespaces refused, no
``ray`` CLI) :func:`require` skips with the reason, except under CI (``CI=true``, which
``.ci/run`` exports): there a multi-host test that cannot run fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "deploy" / "netns-cluster.sh"
MEMBER = Path(__file__).resolve().parent / "multihost_member.py"
LINK_EMULATOR = Path(__file__).resolve().parent / "link_emulator.py"


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def unavailable() -> str | None:
    """Why the namespaced cluster cannot be built here (None: it can)."""
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth pairs, a bridge)"
    for tool, package in (("ip", "iproute2"), ("tc", "iproute2"), ("nft", "nftables"),
                          ("ray", "ray")):
        if shutil.which(tool) is None:
            return f"the {tool} command is missing (install {package})"
    probe = f"mhprobe{os.getpid()}"
    added = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if added.returncode != 0:
        return f"network namespaces are not allowed here: {added.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    if not netem_in_kernel() and not os.path.exists("/dev/net/tun"):
        return "no netem qdisc in this kernel and no /dev/net/tun for tests/link_emulator.py"
    return None


_NETEM: list[bool] = []


def netem_in_kernel() -> bool:
    """Whether ``tc qdisc ... netem`` works here (a kernel without sch_netem refuses it)."""
    if not _NETEM:
        a, b = f"mhq{os.getpid() % 10000}a", f"mhq{os.getpid() % 10000}b"
        sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        try:
            _NETEM.append(sh("tc", "qdisc", "add", "dev", a, "root", "netem", "delay", "1ms",
                             check=False).returncode == 0)
        finally:
            sh("ip", "link", "del", a, check=False)
    return _NETEM[0]


def parse_netem(spec: Sequence[str]) -> tuple[float, float, float]:
    """(delay ms, jitter ms, loss %) of a netem spec such as ``delay 100ms 20ms loss 1%``."""
    delay = jitter = loss = 0.0
    words = list(spec)
    for i, w in enumerate(words):
        if w == "delay":
            delay = float(words[i + 1].removesuffix("ms"))
            if i + 2 < len(words) and words[i + 2].endswith("ms"):
                jitter = float(words[i + 2].removesuffix("ms"))
        elif w == "loss":
            loss = float(words[i + 1].removesuffix("%"))
    return delay, jitter, loss


def require() -> None:
    """Skip (outside CI) or fail (in CI) the calling test when the cluster cannot be built."""
    reason = unavailable()
    if reason is None:
        return
    if in_ci():
        pytest.fail(f"multihost test cannot run in CI: {reason}", pytrace=False)
    pytest.skip(f"multihost: {reason}")


def sh(*argv: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise AssertionError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr[-2000:]}")
    return done


@dataclass(frozen=True, slots=True)
class Host:
    """Host ``k``: namespace ``ns`` with address ``ip``; ``veth`` is its link's end on the
    bridge (in the root namespace)."""

    k: int
    ns: str
    ip: str
    veth: str


class NetnsCluster:
    """``deploy/netns-cluster.sh`` with this process's names (see the module docstring)."""

    def __init__(self, directory: Path, tag: str | None = None) -> None:
        tag = tag or str(os.getpid() % 10000)
        self.dir = directory
        self.prefix = f"mh{tag}h"
        self.client_prefix = f"mh{tag}c"
        self.subnet = f"10.77.{20 + int(tag) % 200}"
        self.bridge = f"mhbr{tag}"
        self.head_ip = f"{self.subnet}.254"
        self.hosts: list[Host] = []
        self.clients: list[Host] = []
        self.address = ""
        self.emulators: dict[int, subprocess.Popen[str]] = {}
        self._forwarding = ""

    # ----------------------------------------------------------------- the script
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
        env.update(
            COALLOC_NETNS_DIR=str(self.dir), COALLOC_NETNS_PREFIX=self.prefix,
            COALLOC_NETNS_SUBNET=self.subnet, COALLOC_NETNS_BRIDGE=self.bridge,
            PYTHON=sys.executable, RAY_AUTH_MODE="token",
        )
        # Ray's GCS declares a raylet dead after 5 missed health checks (3 s apart), and a
        # dead raylet exits when its link comes back: a host cut off for longer could
        # never answer again. 60 of them (3 min): the host is partitioned, not dead.
        env.setdefault("RAY_health_check_failure_threshold", "60")
        return env

    def script(self, *args: str, timeout: float = 400) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(SCRIPT), *args], env=self.env(), capture_output=True,
                              text=True, timeout=timeout)

    def up(self, n: int, mhz: Sequence[int] | None = None, clients: int = 1) -> None:
        args = ["up", str(n)] + (["--mhz", ",".join(map(str, mhz))] if mhz else [])
        failures = []
        for _ in range(2):  # a raylet can fail to start on a loaded machine: once more
            done = self.script(*args)
            if done.returncode == 0:
                break
            failures.append(done.stderr[-3000:])
            self.script("down", timeout=120)
        else:
            raise AssertionError(f"netns-cluster.sh up {n} failed twice:\n" + "\n".join(failures))
        self.address = self.script("address").stdout.strip()
        self.hosts = [Host(k, f"{self.prefix}{k}", f"{self.subnet}.{k}",
                           f"v{self.prefix}{k}"[:15]) for k in range(1, n + 1)]
        for c in range(1, clients + 1):
            self.clients.append(self._add_client(c))

    def _add_client(self, c: int) -> Host:
        """A namespace with an address on the bridge and no raylet: a user's machine."""
        client = Host(c, f"{self.client_prefix}{c}", f"{self.subnet}.{100 + c}",
                      f"v{self.client_prefix}{c}"[:15])
        sh("ip", "netns", "add", client.ns)
        sh("ip", "link", "add", client.veth, "type", "veth", "peer", "name", "eth0",
           "netns", client.ns)
        sh("ip", "link", "set", client.veth, "master", self.bridge)
        sh("ip", "link", "set", client.veth, "up")
        sh("ip", "-n", client.ns, "addr", "add", f"{client.ip}/24", "dev", "eth0")
        sh("ip", "-n", client.ns, "link", "set", "eth0", "up")
        sh("ip", "-n", client.ns, "link", "set", "lo", "up")
        return client

    def down(self) -> None:
        for host in list(self.hosts):
            self.clear_netem(host)
        for client in self.clients:
            for pid in self.pids(client):
                _kill(pid)
            sh("ip", "netns", "del", client.ns, check=False)
            sh("ip", "link", "del", client.veth, check=False)
        self.clients = []
        self.script("down", timeout=120)

    def host_alive(self, host: Host) -> bool:
        """Whether the host's raylet still runs (a raylet the GCS declared dead while its
        link was cut exits when the link comes back)."""
        status = self.script("status", timeout=30).stdout
        return f"{host.ns}  pid" in status and any(
            line.startswith(f"{host.ns}  pid") and line.endswith("  running")
            for line in status.splitlines())

    def rejoin(self, host: Host) -> None:
        """Start a new raylet in ``host`` if its own has exited (a new Ray node)."""
        done = self.script("rejoin", str(host.k))
        assert done.returncode == 0, done.stderr[-3000:]

    # ---------------------------------------------------------------- the network
    def cut(self, host: Host) -> None:
        """Take the host's link down (both directions; its processes run on)."""
        sh("ip", "link", "set", host.veth, "down")

    def restore(self, host: Host) -> None:
        sh("ip", "link", "set", host.veth, "up")

    @contextmanager
    def link_down(self, host: Host) -> Iterator[None]:
        """The host's link is down while inside."""
        self.cut(host)
        try:
            yield
        finally:
            self.restore(host)

    def netem(self, host: Host, *spec: str) -> None:
        """``tc netem SPEC`` on the host's link, both ways (its eth0 and the bridge's end):
        ``netem(h, "delay", "100ms", "20ms", "loss", "1%")`` adds 200 ms round trip.
        Where the kernel has no netem qdisc, ``tests/link_emulator.py`` does the same in
        user space (only delay, jitter and loss)."""
        if netem_in_kernel():
            sh("tc", "qdisc", "replace", "dev", host.veth, "root", "netem", *spec)
            sh("ip", "netns", "exec", host.ns, "tc", "qdisc", "replace", "dev", "eth0",
               "root", "netem", *spec)
            return
        self.clear_netem(host)
        delay, jitter, loss = parse_netem(spec)
        root_dev = f"lr{self.prefix}{host.k}"[:15]
        proc = subprocess.Popen(
            [sys.executable, str(LINK_EMULATOR), host.ns, root_dev, "lemu", str(delay),
             str(jitter), str(loss), str(host.k)],
            stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        self.emulators[host.k] = proc
        if not self._forwarding:
            self._forwarding = Path("/proc/sys/net/ipv4/ip_forward").read_text().strip()
            Path("/proc/sys/net/ipv4/ip_forward").write_text("1")  # host to host via root
        sh("ip", "link", "set", root_dev, "up")
        sh("ip", "-n", host.ns, "link", "set", "lemu", "up")
        sh("ip", "route", "add", f"{host.ip}/32", "dev", root_dev, "src", self.head_ip)
        sh("ip", "-n", host.ns, "route", "replace", f"{self.subnet}.0/24", "dev", "lemu",
           "src", host.ip)

    def clear_netem(self, host: Host) -> None:
        proc = self.emulators.pop(host.k, None)
        if proc is not None:
            sh("ip", "-n", host.ns, "route", "replace", f"{self.subnet}.0/24", "dev", "eth0",
               "proto", "kernel", "scope", "link", "src", host.ip, check=False)
            sh("ip", "route", "del", f"{host.ip}/32", check=False)
            proc.terminate()
            proc.wait(timeout=30)
            if not self.emulators and self._forwarding:
                Path("/proc/sys/net/ipv4/ip_forward").write_text(self._forwarding)
                self._forwarding = ""
            return
        if netem_in_kernel():
            sh("tc", "qdisc", "del", "dev", host.veth, "root", check=False)
            sh("ip", "netns", "exec", host.ns, "tc", "qdisc", "del", "dev", "eth0", "root",
               check=False)

    @contextmanager
    def answers_lost(self, host: Host, port: int) -> Iterator[None]:
        """While inside: the host's namespace drops every TCP segment with data (or a
        FIN) that comes from ``port``: connections open, requests go out, the answers
        never arrive. A partition that falls between a request and its answer."""
        table = f"mhcut{os.getpid()}"
        nft = ["ip", "netns", "exec", host.ns, "nft"]
        sh(*nft, "add", "table", "inet", table)
        sh(*nft, "add", "chain", "inet", table, "input",
           "{ type filter hook input priority 0 ; }")
        sh(*nft, "add", "rule", "inet", table, "input", "tcp", "sport", str(port),
           "tcp", "flags", "&", "(fin|psh)", "!=", "0", "drop")
        try:
            yield
        finally:
            sh(*nft, "delete", "table", "inet", table, check=False)

    # ---------------------------------------------------------------- processes
    def pids(self, host: Host) -> list[int]:
        """Every process that runs in the host's namespace."""
        out = sh("ip", "netns", "pids", host.ns, check=False).stdout
        return [int(p) for p in out.split()]

    def coalloc(
        self, home: Path, *argv: str, host: Host | None = None,
        env: dict[str, str] | None = None, timeout: float = 180,
    ) -> subprocess.CompletedProcess[str]:
        """``coalloc ARGV`` with ``COALLOC_HOME=home``, on the head or in ``host``."""
        full = self.env()
        full.update(COALLOC_HOME=str(home))
        full.update(env or {})
        cmd = [sys.executable, "-m", "coalloc.cli", *argv]
        if host is not None:
            cmd = ["ip", "netns", "exec", host.ns, *cmd]
        return subprocess.run(cmd, env=full, capture_output=True, text=True, timeout=timeout,
                              cwd=str(ROOT))

    def run_in(
        self, host: Host, *argv: str, timeout: float = 60
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ip", "netns", "exec", host.ns, *argv], env=self.env(),
                              capture_output=True, text=True, timeout=timeout)

    def connections(self, host: Host) -> list[tuple[str, str, str]]:
        """The host's established TCP connections: (local, peer, process)."""
        out = self.run_in(host, "ss", "-tnpH", "state", "established").stdout
        rows = []
        for line in out.splitlines():
            fields = line.split()
            if len(fields) >= 4:
                rows.append((fields[2], fields[3], " ".join(fields[4:])))
        return rows


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class Deployment:
    """``coalloc up`` on the namespaced cluster's head, with its own COALLOC_HOME."""

    def __init__(self, cluster: NetnsCluster, home: Path) -> None:
        self.cluster = cluster
        self.home = home
        self.state: dict[str, Any] = {}

    def up(self, *args: str) -> None:
        self.home.mkdir(parents=True, exist_ok=True)
        done = self.cluster.coalloc(self.home, "up", "--address", self.cluster.address, *args)
        assert done.returncode == 0, f"coalloc up: {done.stdout[-2000:]}{done.stderr[-3000:]}"
        self.state = json.loads((self.home / "state.json").read_text())

    @property
    def api_url(self) -> str:
        return str(self.state["extra"]["api_url"])

    def down(self) -> None:
        self.cluster.coalloc(self.home, "down", timeout=180)

    def cli(self, *argv: str, **kw: Any) -> subprocess.CompletedProcess[str]:
        return self.cluster.coalloc(self.home, *argv, **kw)

    def status(self, job: str | None = None) -> Any:
        done = self.cli("status", "--json", *([job] if job else []))
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout[done.stdout.index("{"):])


def node_of_host(status: Any, host: Host) -> str:
    """The coalloc node name of the host (its label is the host's namespace name)."""
    return next(n["name"] for n in status["nodes"] if host.ns in n.get("labels", []))


def records(directory: Path) -> list[dict[str, Any]]:
    """The members' own records (``tests/multihost_member.py``) in ``directory``."""
    out = []
    for path in sorted(directory.glob("*.log")):
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 7:
                kind, job, attempt, subtask, pid, t, node = parts
                out.append({"kind": kind, "job": job, "attempt": int(attempt),
                            "subtask": int(subtask), "pid": int(pid), "t": float(t),
                            "node": node})
    return out


def overlaps(recs: list[dict[str, Any]]) -> list[tuple[str, int, int, float]]:
    """Attempts of one job that ran at the same time: (job, attempt a, attempt b, seconds
    both ran), from each member's first and last record (start, beats, stop)."""
    spans: dict[tuple[str, int], tuple[float, float]] = {}
    for r in recs:
        key = (r["job"], r["attempt"])
        lo, hi = spans.get(key, (r["t"], r["t"]))
        spans[key] = (min(lo, r["t"]), max(hi, r["t"]))
    found = []
    for (job, a), (lo_a, hi_a) in spans.items():
        for (job_b, b), (lo_b, hi_b) in spans.items():
            if job_b == job and a < b:
                both = min(hi_a, hi_b) - max(lo_a, lo_b)
                if both > 0:
                    found.append((job, a, b, both))
    return found
