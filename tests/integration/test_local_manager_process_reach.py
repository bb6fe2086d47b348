"""The process executor reaches every descendant of a subtask, with REAL processes:
children that called ``setsid()`` (they leave the process group), children orphaned by
their parent's exit, the subtasks of a SIGKILLed owner, and a subtask adopted by a new
executor after its owner died (re-attach) without being killed.

Every check of "no process left" is made with psutil against (pid, create time), so a
recycled pid cannot pass for a survivor or hide one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from local_manager.cgroups import detect_cgroup_containment
from local_manager.executor_records import (
    Containment,
    CycleUsage,
    ExecutorRecord,
    ExecutorState,
    LimitMode,
)
from local_manager.proc_tree import acquire_child_subreaper, owner_marker, release_child_subreaper
from local_manager.process_executor import ProcessExecutor
from local_manager.sweep import reap_stale_subtasks
from workloads.atomic import atomic_write_json

pytestmark = pytest.mark.integration

SPEED_MHZ = 400.0
SHARE_TOL = 0.08  # cores, absolute (see test_local_manager_process_share.py)
CGROUP_AVAILABLE = detect_cgroup_containment()[0] is not None
CONTAINMENTS = [
    pytest.param(
        Containment.CGROUP,
        marks=pytest.mark.skipif(not CGROUP_AVAILABLE, reason="no writable cgroup v2 here"),
    ),
    Containment.PROCESS_TREE,
]

# The subtask: the leader forks a child; in "nested" the child calls setsid() and forks a
# grandchild; in "orphan" the child forks a grandchild that calls setsid(), and the child
# exits at once, so the grandchild is re-parented away from the leader's tree. The
# setsid() process and the grandchild sleep, or busy-loop with "busy". The pids are
# written (atomically) to the file named by argv[1] once all exist.
SPAWNER = textwrap.dedent(
    """
    import os, sys, time
    pidfile, shape, work = sys.argv[1], sys.argv[2], sys.argv[3]

    def idle():
        if work == "busy":
            while True:
                pass
        time.sleep(600)
        os._exit(0)

    def publish(pids):
        with open(pidfile + ".tmp", "w") as f:
            f.write(" ".join(str(p) for p in pids))
        os.rename(pidfile + ".tmp", pidfile)

    if os.fork() == 0:  # the child
        if shape == "nested":
            os.setsid()
            grandchild = os.fork()
            if grandchild == 0:
                idle()
            publish([os.getpid(), grandchild])
            idle()
        else:
            grandchild = os.fork()
            if grandchild == 0:
                os.setsid()
                idle()
            publish([grandchild])
            os._exit(0)  # orphans the grandchild
    time.sleep(600)
    """
)


def spawner_argv(tmp_path: Path, shape: str, work: str = "sleep") -> tuple[list[str], Path]:
    script = tmp_path / "spawner.py"
    script.write_text(SPAWNER)
    pidfile = tmp_path / "pids"
    return [sys.executable, str(script), str(pidfile), shape, work], pidfile


def identities(pids: list[int]) -> dict[int, float]:
    """pid -> create time of each process (all must exist now)."""
    return {pid: psutil.Process(pid).create_time() for pid in pids}


def survivors(procs: dict[int, float]) -> list[int]:
    """Those of ``procs`` (pid -> create time) that still exist, zombies included."""
    out = []
    for pid, created in procs.items():
        try:
            if abs(psutil.Process(pid).create_time() - created) < 0.05:
                out.append(pid)
        except psutil.NoSuchProcess:
            continue
    return out


def wait_for_pids(ex: ProcessExecutor, pidfile: Path) -> list[int]:
    """Run short cycles (the subtask runs only when granted CPU) until the subtask has
    published its pids; at most 30 s."""
    deadline = time.monotonic() + 30
    while not pidfile.exists():
        assert time.monotonic() < deadline, "the subtask never wrote its pids"
        usage = ex.run_cycle(1.0, 0.1)
        assert usage.state is ExecutorState.RUNNING
    return [int(p) for p in pidfile.read_text().split()]


def settled_status(pid: int, want: str) -> str:
    """``pid``'s status once a signal sent to it has been acted on (polled for up to 1 s:
    a signal is delivered when the process next runs)."""
    status = ""
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        status = psutil.Process(pid).status()
        if status == want:
            break
        time.sleep(0.01)
    return status


@pytest.fixture
def subreaper() -> Iterator[None]:
    """This test process is a child subreaper: what a killed owner orphans comes here
    (the owner was our child), as it would to a local manager's actor process."""
    assert acquire_child_subreaper()
    try:
        yield
    finally:
        release_child_subreaper()


def reap_zombie_children() -> None:
    """Reap whatever orphans of a killed owner were re-parented here and have exited."""
    for child in psutil.Process().children():
        try:
            if child.status() == psutil.STATUS_ZOMBIE:
                os.waitpid(child.pid, os.WNOHANG)
        except (psutil.NoSuchProcess, ChildProcessError):
            continue


def wait_gone(procs: dict[int, float], timeout_s: float = 10.0) -> list[int]:
    """Poll (reaping our zombie children) until none of ``procs`` exists; the survivors."""
    deadline = time.monotonic() + timeout_s
    while (left := survivors(procs)) and time.monotonic() < deadline:
        reap_zombie_children()
        time.sleep(0.02)
    return left


# ----------------------------------------------------------------------------- cancel


@pytest.mark.parametrize("containment", CONTAINMENTS)
@pytest.mark.parametrize("shape", ["nested", "orphan"])
def test_cancel_reaches_setsid_children_and_orphans(
    tmp_path: Path, containment: Containment, shape: str
) -> None:
    argv, pidfile = spawner_argv(tmp_path, shape)
    ex = ProcessExecutor(
        argv, speed_mhz=SPEED_MHZ, mode=LimitMode.DUTY_CYCLE, containment=containment,
        grace_s=0.5,
    )
    ex.start()
    assert ex.containment is containment
    assert ex.pid is not None
    escaped = wait_for_pids(ex, pidfile)
    tree = identities([ex.pid, *escaped])
    for pid in escaped:
        assert os.getsid(pid) != os.getsid(ex.pid)  # they really left the session
    # They are the subtask's: found, and held stopped between cycles like the leader.
    ex.run_cycle(0.5, 0.1)
    assert set(escaped) <= {m.pid for m in ex.members()}
    for pid in escaped:
        assert settled_status(pid, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED
    cgroup = ex.cgroup_path
    ex.cancel()
    assert ex.state is ExecutorState.CANCELLED
    assert survivors(tree) == []
    assert ex.leftover_pids == ()
    if cgroup is not None:
        assert not cgroup.exists()


# ----------------------------------------------------------------------------- a killed owner

OWNER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from local_manager.executor_records import LimitMode
    from local_manager.process_executor import ProcessExecutor
    argv, containment, pidfile = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
    ex = ProcessExecutor(argv, speed_mhz=100.0, mode=LimitMode.DUTY_CYCLE,
                         containment=containment)
    ex.start()
    deadline = time.monotonic() + 30
    while not os.path.exists(pidfile) and time.monotonic() < deadline:
        ex.run_cycle(1.0, 0.1)
    print(json.dumps({"pid": ex.pid, "cgroup": str(ex.cgroup_path or "")}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_a_sigkilled_owners_setsid_descendants_are_reaped(
    tmp_path: Path, containment: Containment, subreaper: None
) -> None:
    argv, pidfile = spawner_argv(tmp_path, "orphan")
    owner = subprocess.run(
        [sys.executable, "-c", OWNER, json.dumps(argv), containment.value, str(pidfile)],
        capture_output=True, text=True, timeout=60,
    )
    assert owner.returncode == -9, owner.stderr
    out = json.loads(owner.stdout)
    escaped = [int(p) for p in pidfile.read_text().split()]
    tree = identities([out["pid"], *escaped])
    assert survivors(tree) == list(tree)  # the owner's death killed nothing
    killed = reap_stale_subtasks()
    assert set(tree) <= set(killed)
    assert wait_gone(tree) == []
    if out["cgroup"]:
        assert not Path(out["cgroup"]).exists()


# ----------------------------------------------------------------------------- re-attach

CRASHING_OWNER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from local_manager.executor_records import LimitMode
    from local_manager.process_executor import ProcessExecutor
    from workloads.atomic import atomic_write_json
    argv, containment, pidfile, record = (
        json.loads(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4])
    ex = ProcessExecutor(argv, speed_mhz=100.0, mode=LimitMode.DUTY_CYCLE,
                         containment=containment)
    ex.start()
    deadline = time.monotonic() + 30
    while not os.path.exists(pidfile) and time.monotonic() < deadline:
        ex.run_cycle(1.0, 0.1)
    for _ in range(2):
        ex.run_cycle(0.5, 0.2)
    atomic_write_json(record, ex.checkpoint().to_dict())
    os.kill(os.getpid(), signal.SIGKILL)  # a crash: nothing is cleaned up
    """
)


def test_a_subtask_whose_owner_is_being_restarted_survives_other_owners_sweeps(
    tmp_path: Path, subreaper: None
) -> None:
    """The owner started the subtask with its restart file (a local manager's
    checkpoint), wrote the tag there and died by SIGKILL. Until its restarted successor
    re-attaches it, a sweep by any other owner of the machine (another node's manager
    starting or closing, another deployment's) leaves it alone; once the file is gone
    (``coalloc down``) the next sweep reaps it."""
    argv, pidfile = spawner_argv(tmp_path, "nested")
    restart_file = tmp_path / "lm-n0.json"
    script = CRASHING_OWNER.replace(
        "containment=containment)", "containment=containment, restart_file=record)")
    owner = subprocess.run(
        [sys.executable, "-c", script, json.dumps(argv), Containment.PROCESS_TREE.value,
         str(pidfile), str(restart_file)],
        capture_output=True, text=True, timeout=60,
    )
    assert owner.returncode == -9, owner.stderr
    record = ExecutorRecord.from_dict(json.loads(restart_file.read_text()), str(restart_file))
    tree = identities([record.pid, *(int(p) for p in pidfile.read_text().split())])
    assert not set(tree) & set(reap_stale_subtasks())  # another owner's sweep
    assert survivors(tree) == list(tree)
    # Its own restarted owner decides by what it keeps: here, nothing.
    restart_file.unlink()
    assert set(tree) <= set(reap_stale_subtasks())
    assert wait_gone(tree) == []


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_a_new_executor_adopts_a_running_subtask_measures_and_cancels_it(
    tmp_path: Path, containment: Containment, subreaper: None
) -> None:
    # Executor A (another process) runs a subtask whose busy worker left the session,
    # checkpoints it and dies by SIGKILL. Executor B adopts it from the record: nothing
    # is killed, B holds it to a share, measures the worker's CPU, and cancel reaches all.
    argv, pidfile = spawner_argv(tmp_path, "nested", work="busy")
    record_file = tmp_path / "subtask.json"
    owner = subprocess.run(
        [sys.executable, "-c", CRASHING_OWNER, json.dumps(argv), containment.value,
         str(pidfile), str(record_file)],
        capture_output=True, text=True, timeout=60,
    )
    assert owner.returncode == -9, owner.stderr
    record = ExecutorRecord.from_dict(json.loads(record_file.read_text()), str(record_file))
    escaped = [int(p) for p in pidfile.read_text().split()]
    tree = identities([record.pid, *escaped])
    assert {pid for pid, _ in record.members} >= set(tree)
    assert record.containment is containment
    assert record.reported_cpu_s > 0

    # A sweep for stale subtasks spares the one being re-attached ...
    assert not set(tree) & set(reap_stale_subtasks(keep_tags={record.tag}))
    ex = ProcessExecutor.attach(record, speed_mhz=SPEED_MHZ)
    try:
        assert ex.state is ExecutorState.RUNNING and ex.pid == record.pid
        assert ex.containment is containment
        assert survivors(tree) == list(tree)
        # ... and, once attached, any later sweep of this process does too.
        assert not set(tree) & set(reap_stale_subtasks())
        # Held stopped until its next cycle, the busy worker included.
        for pid in escaped:
            assert settled_status(pid, psutil.STATUS_STOPPED) == psutil.STATUS_STOPPED
        # Measured on from the record's reading (CPU used after A's last reading, while
        # the worker was being stopped, is still to be reported).
        assert ex.cpu_s_total >= record.reported_cpu_s

        usages: list[CycleUsage] = [ex.run_cycle(0.5, 0.4) for _ in range(3)]
        cpu = sum(u.cpu_s for u in usages)
        wall = sum(u.wall_s for u in usages)
        run = sum(u.run_s for u in usages)
        print(f"re-attached ({containment.value}): {cpu / wall:.3f} cores at share 0.5, "
              f"allowed to run {run / wall:.0%} of the time")
        assert cpu > 0
        assert ex.cpu_s_total == pytest.approx(record.reported_cpu_s + cpu)
        assert cpu / wall <= 0.5 + SHARE_TOL
        if run / wall < 0.9:
            assert cpu / wall >= 0.5 - SHARE_TOL
        # The record can be taken again and written atomically for the next restart.
        again = ex.checkpoint()
        assert again.tag == record.tag and again.reported_cpu_s == pytest.approx(
            record.reported_cpu_s + cpu
        )
        atomic_write_json(record_file, again.to_dict())
    finally:
        ex.cancel(grace_s=0.5)
    assert ex.state is ExecutorState.CANCELLED
    assert wait_gone(tree) == []
    if record.cgroup is not None:
        assert not Path(record.cgroup).exists()


def test_attaching_to_a_subtask_whose_leader_is_gone_finishes_and_kills_the_rest(
    tmp_path: Path, subreaper: None
) -> None:
    argv, pidfile = spawner_argv(tmp_path, "nested")
    record_file = tmp_path / "subtask.json"
    owner = subprocess.run(
        [sys.executable, "-c", CRASHING_OWNER, json.dumps(argv), "process_tree",
         str(pidfile), str(record_file)],
        capture_output=True, text=True, timeout=60,
    )
    assert owner.returncode == -9, owner.stderr
    record = ExecutorRecord.from_dict(json.loads(record_file.read_text()))
    escaped = [int(p) for p in pidfile.read_text().split()]
    rest = identities(escaped)
    # The leader dies while no one owns the subtask.
    os.kill(record.pid, 9)
    os.waitpid(record.pid, 0)  # it was re-parented here (subreaper)
    # The leader is the exit recorder: killed, it recorded nothing.
    assert record.status_file is not None and not Path(record.status_file).exists()
    ex = ProcessExecutor.attach(record, speed_mhz=SPEED_MHZ, grace_s=0.5)
    assert ex.state is ExecutorState.FINISHED
    assert ex.exit_code is None  # reaped by someone else, and no status file
    assert ex.exit_reason == "ended while its manager was down; exit status lost"
    assert wait_gone(rest) == []


# The command: it publishes its pid, waits for the file argv[2], then ends as argv[3] says
# ("exit N", or "signal S": killed by that signal).
ENDER = textwrap.dedent(
    """
    import os, sys, time
    pidfile, go, how = sys.argv[1], sys.argv[2], sys.argv[3]
    with open(pidfile + ".tmp", "w") as f:
        f.write(str(os.getpid()))
    os.rename(pidfile + ".tmp", pidfile)
    while not os.path.exists(go):
        time.sleep(0.01)
    kind, n = how.split()
    if kind == "signal":
        os.kill(os.getpid(), int(n))
    sys.exit(int(n))
    """
)


def wait_for(check: object, what: str, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.mark.parametrize(("how", "code"), [("exit 3", 3), ("exit 0", 0), ("signal 15", -15)])
def test_a_command_that_ends_while_no_one_owns_it_reports_its_exit_status_on_attach(
    tmp_path: Path, subreaper: None, how: str, code: int
) -> None:
    # Executor A starts the command and dies by SIGKILL. While no one owns it, the command
    # ends; its leader (the exit recorder) is reaped by someone else (here: this test, the
    # subreaper it was re-parented to). Executor B re-attaches from the record: it is not
    # the leader's parent, and reads the status the recorder wrote.
    script = tmp_path / "ender.py"
    script.write_text(ENDER)
    pidfile, go = tmp_path / "command.pid", tmp_path / "go"
    argv = [sys.executable, str(script), str(pidfile), str(go), how]
    record_file = tmp_path / "subtask.json"
    owner = subprocess.run(
        [sys.executable, "-c", CRASHING_OWNER, json.dumps(argv), "process_tree",
         str(pidfile), str(record_file)],
        capture_output=True, text=True, timeout=60,
    )
    assert owner.returncode == -9, owner.stderr
    record = ExecutorRecord.from_dict(json.loads(record_file.read_text()))
    assert record.status_file is not None
    status_file = Path(record.status_file)
    command = int(pidfile.read_text())
    assert psutil.Process(command).ppid() == record.pid  # the recorder's child
    # A left the group stopped; let it run, and end.
    os.killpg(record.pgid, 18)  # SIGCONT
    go.touch()
    wait_for(status_file.exists, "the status file")
    _, raw = os.waitpid(record.pid, 0)  # the recorder, re-parented here: reaped by us
    assert os.waitstatus_to_exitcode(raw) == code  # it ended as its command did
    ex = ProcessExecutor.attach(record, speed_mhz=SPEED_MHZ, grace_s=0.5)
    assert ex.state is ExecutorState.FINISHED
    assert ex.exit_code == code
    assert ex.exit_reason is None
    usage = ex.run_cycle(1.0, 0.05)
    assert usage.state is ExecutorState.FINISHED and usage.exit_code == code
    assert not status_file.exists()  # retired with the subtask
    ex.close()


SWEEP = textwrap.dedent(
    """
    import json
    from local_manager.exit_recorder import default_status_dir
    from local_manager.sweep import adopted_elsewhere_removed
    from local_manager.proc_tree import stale_subtasks
    stale = stale_subtasks()
    print(json.dumps({"stale": stale,
                      "reaped": adopted_elsewhere_removed(stale, default_status_dir())}))
    """
)


def test_a_reattached_executor_reads_the_status_when_the_command_ends_later(
    tmp_path: Path,
) -> None:
    # Re-attached while the command runs; it fails with status 5 under the new owner,
    # which is not the leader's parent: this test is no subreaper here, so the orphaned
    # recorder went to an ancestor subreaper or init, which reaps it when it exits.
    script = tmp_path / "ender.py"
    script.write_text(ENDER)
    pidfile, go = tmp_path / "command.pid", tmp_path / "go"
    argv = [sys.executable, str(script), str(pidfile), str(go), "exit 5"]
    record_file = tmp_path / "subtask.json"
    owner = subprocess.run(
        [sys.executable, "-c", CRASHING_OWNER, json.dumps(argv), "process_tree",
         str(pidfile), str(record_file)],
        capture_output=True, text=True, timeout=60,
    )
    assert owner.returncode == -9, owner.stderr
    record = ExecutorRecord.from_dict(json.loads(record_file.read_text()))
    assert record.status_file is not None
    ex = ProcessExecutor.attach(record, speed_mhz=SPEED_MHZ, grace_s=0.5)
    try:
        assert ex.state is ExecutorState.RUNNING
        assert psutil.Process(record.pid).ppid() != os.getpid()
        # The new owner is named next to the status file: the recorder does not forward
        # its group signals, and a sweep by another process (another local manager on
        # this host) does not take the subtask for stale although its environment still
        # names the dead owner. (The sweep is only computed there, nothing is killed.)
        assert Path(record.status_file + ".owner").read_text() == owner_marker()
        sweep = subprocess.run(
            [sys.executable, "-c", SWEEP], capture_output=True, text=True, timeout=60
        )
        assert sweep.returncode == 0, sweep.stderr
        seen = json.loads(sweep.stdout)
        assert record.pid in seen["stale"]  # by its environment alone ...
        assert record.pid not in seen["reaped"]  # ... but adopted by a live owner
        go.touch()
        usage = None
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            usage = ex.run_cycle(1.0, 0.1)
            if usage.state is not ExecutorState.RUNNING:
                break
        assert usage is not None and usage.state is ExecutorState.FINISHED
        assert usage.exit_code == 5 and ex.exit_code == 5
        assert not Path(record.status_file).exists()
        assert not Path(record.status_file + ".owner").exists()
    finally:
        ex.close()


COUNTER = textwrap.dedent(
    """
    import os, signal, sys, time
    log, ready = sys.argv[1], sys.argv[2]
    def note(*_):
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\\n")
    signal.signal(signal.SIGTERM, note)  # counts SIGTERMs and does not exit
    child = os.fork()
    if child == 0:
        os.setsid()
    else:
        with open(ready + ".tmp", "w") as f:
            f.write(f"{os.getpid()} {child}")
        os.rename(ready + ".tmp", ready)
    while True:
        time.sleep(0.01)
    """
)


@pytest.mark.parametrize("containment", CONTAINMENTS)
def test_every_member_gets_sigterm_once_then_sigkill(
    tmp_path: Path, containment: Containment
) -> None:
    # SIGTERM reaches the leader and the setsid child exactly once each (a second one
    # means "force" to some programs), and SIGKILL after the grace ends both.
    log, ready = tmp_path / "sigterms", tmp_path / "pids"
    ex = ProcessExecutor(
        [sys.executable, "-c", COUNTER, str(log), str(ready)],
        speed_mhz=SPEED_MHZ, containment=containment, grace_s=0.5,
    )
    ex.start()
    pids = wait_for_pids(ex, ready)
    tree = identities(pids)
    ex.run_cycle(0.5, 0.1)
    ex.cancel()
    assert ex.exit_code == -9  # the leader ignored SIGTERM: killed after the grace
    assert survivors(tree) == []
    counts = [int(p) for p in log.read_text().split()]
    assert sorted(counts) == sorted(pids)
