"""The process executor's pure parts: argv validation, process-tree CPU accounting on a
fake process table, stale-subtask detection, executor records, cgroup v2 detection and
mode selection, and the duty-cycle pacer driven by a fake clock and a simulated process
group."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import psutil
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local_manager.cgroups import (
    CGROUP_PARENT_ENV,
    SubtaskCgroup,
    cgroup2_mounts,
    cpu_max_value,
    detect_cgroup_containment,
    detect_cgroup_v2,
    own_cgroup2_path,
)
from local_manager.executor_records import (
    Containment,
    ExecutorRecord,
    ExecutorState,
    LimitMode,
    select_limit_mode,
    share_for_grant,
    validate_argv,
)
from local_manager.pacer import DutyCyclePacer
from local_manager.proc_tree import (
    OWNER_ENV,
    TAG_ENV,
    ProcSample,
    PsutilTable,
    TreeCpuMeter,
    owner_marker,
    stale_subtasks,
)
from local_manager.process_executor import ProcessExecutor

# ----------------------------------------------------------------------------- helpers

CREATED = 1_700_000_000.0  # a create time (s since the epoch)


class FakeTable:
    """A process table the tests write readings into (the meter's seam in place of
    psutil). ``kids`` are the cheap children lists (set explicitly: they may lag)."""

    def __init__(self) -> None:
        self.procs: dict[int, ProcSample] = {}
        self.kids: dict[int, list[int]] = {}
        self.envs: dict[int, dict[str, str]] = {}

    def put(
        self,
        pid: int,
        *,
        ppid: int = 1,
        pgid: int = 100,
        status: str = psutil.STATUS_RUNNING,
        created: float = CREATED,
        cpu: float = 0.0,
    ) -> ProcSample:
        sample = ProcSample(pid, ppid, pgid, status, created, cpu)
        self.procs[pid] = sample
        return sample

    def drop(self, pid: int) -> None:
        del self.procs[pid]

    def sample(self, pid: int) -> ProcSample | None:
        return self.procs.get(pid)

    def children(self, pid: int) -> list[int]:
        return list(self.kids.get(pid, []))

    def descendants(self, pid: int) -> list[int]:
        out, todo = [], [pid]
        while todo:
            parent = todo.pop(0)
            kids = sorted(p for p, s in self.procs.items() if s.ppid == parent)
            out += kids
            todo += kids
        return out

    def pids(self) -> list[int]:
        return sorted(self.procs)

    def environ(self, pid: int) -> dict[str, str] | None:
        return self.envs.get(pid)


# ----------------------------------------------------------------------------- argv


def test_argv_list_and_tuple_are_accepted() -> None:
    assert validate_argv(["python3", "-c", "pass"]) == ("python3", "-c", "pass")
    assert validate_argv(("true",)) == ("true",)
    # Empty arguments after argv[0] are legitimate (e.g. an empty option value).
    assert validate_argv(["prog", ""]) == ("prog", "")


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ("python3 -c pass", "not a single string"),
        (b"true", "not a single string"),
        ([], "must not be empty"),
        ([""], "argv[0]"),
        (["ls", 3], "argv[1]: must be a string, got int"),
        (["ls", "-l", None], "argv[2]"),
        (["ls", "a\x00b"], "argv[1]: must not contain a NUL"),
        ({"ls": 1}, "must be a list of strings, got dict"),
        (None, "got NoneType"),
    ],
)
def test_bad_argv_names_the_argument_and_reason(argv: object, needle: str) -> None:
    with pytest.raises(ValueError) as info:
        validate_argv(argv)
    assert needle in str(info.value)
    assert str(info.value).startswith("argv")


def test_constructor_validates_everything_before_starting(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="argv"):
        ProcessExecutor("sleep 1", speed_mhz=300)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="speed_mhz"):
        ProcessExecutor(["true"], speed_mhz=0)
    with pytest.raises(ValueError, match="speed_mhz"):
        ProcessExecutor(["true"], speed_mhz=math.nan)
    with pytest.raises(ValueError, match="cwd"):
        ProcessExecutor(["true"], speed_mhz=300, cwd=tmp_path / "missing")
    with pytest.raises(ValueError, match=r"env\['A=B'\]"):
        ProcessExecutor(["true"], speed_mhz=300, env={"A=B": "x"})
    with pytest.raises(ValueError, match="stdout"):
        ProcessExecutor(["true"], speed_mhz=300, stdout=tmp_path / "no" / "out.log")
    with pytest.raises(ValueError, match="mode: unknown limit mode 'fast'"):
        ProcessExecutor(["true"], speed_mhz=300, mode="fast")
    with pytest.raises(ValueError, match="period_s"):
        ProcessExecutor(["true"], speed_mhz=300, period_s=-1)
    with pytest.raises(ValueError, match="grace_s"):
        ProcessExecutor(["true"], speed_mhz=300, grace_s=-0.1)


def test_cycle_before_start_and_bad_share_are_refused() -> None:
    ex = ProcessExecutor(["true"], speed_mhz=300, mode=LimitMode.DUTY_CYCLE, ncores=2)
    with pytest.raises(RuntimeError, match="not started"):
        ex.begin_cycle(0.5, 1.0)
    with pytest.raises(ValueError, match=r"share: must be within 0..2 cores"):
        ex.begin_cycle(2.5, 1.0)
    with pytest.raises(ValueError, match="share"):
        ex.begin_cycle(-0.1, 1.0)
    with pytest.raises(ValueError, match="cycle_s"):
        ex.begin_cycle(0.5, 0.0)
    with pytest.raises(RuntimeError, match="no cycle begun"):
        ex.step()
    ex.cancel()  # never started: just marked cancelled, nothing to kill
    assert ex.state is ExecutorState.CANCELLED


def test_share_for_grant_converts_mcycles_to_cores() -> None:
    # 150 Mcycles in 1 s on a 300 MHz node is half a core.
    assert share_for_grant(150.0, 300.0, 1.0) == pytest.approx(0.5)
    assert share_for_grant(0.0, 300.0, 1.0) == 0.0
    with pytest.raises(ValueError, match="granted_mcycles"):
        share_for_grant(-1.0, 300.0, 1.0)
    with pytest.raises(ValueError, match="speed_mhz"):
        share_for_grant(1.0, 0.0, 1.0)


# ----------------------------------------------------------------------------- process trees


def test_tree_meter_counts_children_zombies_and_retired_members() -> None:
    table = FakeTable()
    table.put(100, cpu=0.15)
    table.put(101, ppid=100, cpu=0.20)
    meter = TreeCpuMeter(table, (100, CREATED))
    meter.scan()
    assert meter.total_s == pytest.approx(0.35)

    # 101 exits and its parent reaps it: the time moves into the parent's children times.
    table.drop(101)
    table.put(100, cpu=0.17 + 0.21)
    meter.refresh()
    assert meter.total_s == pytest.approx(0.38)

    # A new child is invisible to refresh() (its parent's children list is not known
    # here) until a full scan.
    table.put(102, ppid=100, cpu=0.07)
    meter.refresh()
    assert meter.total_s == pytest.approx(0.38)
    meter.scan()
    assert meter.total_s == pytest.approx(0.45)

    # 102 is orphaned to us and reaped here: retire() keeps its final time.
    zombie = table.put(102, ppid=1, status=psutil.STATUS_ZOMBIE, cpu=0.08)
    meter.retire(zombie)
    table.drop(102)
    meter.scan()
    assert meter.total_s == pytest.approx(0.38 + 0.08)
    assert meter.retired_s == pytest.approx(0.08)


def test_refresh_follows_children_lists_and_keeps_members_that_left_the_group() -> None:
    table = FakeTable()
    table.put(100, cpu=0.10)
    meter = TreeCpuMeter(table, (100, CREATED))
    meter.scan()
    # 100 forks 101 and 102, which calls setsid() (its own group); 101 forks 103.
    table.put(101, ppid=100, cpu=0.04)
    table.put(102, ppid=100, pgid=102, cpu=0.50)
    table.put(103, ppid=101, cpu=0.02)
    table.kids = {100: [101, 102], 101: [103]}
    meter.refresh()
    assert sorted(m.pid for m in meter.members) == [100, 101, 102, 103]
    assert meter.total_s == pytest.approx(0.66)
    assert sorted(meter.known) == [100, 101, 102, 103]


def test_a_remembered_member_stays_one_after_its_parent_dies() -> None:
    # 102 called setsid(); then its parent 101 exited and 102 was re-parented to PID 1,
    # outside the leader's tree. It is still the subtask's (remembered by pid and create
    # time), and so are the children it forks later.
    table = FakeTable()
    table.put(100, cpu=0.1)
    table.put(101, ppid=100, cpu=0.1)
    table.put(102, ppid=101, pgid=102, cpu=0.3, created=CREATED + 1)
    meter = TreeCpuMeter(table, (100, CREATED))
    meter.scan()
    table.drop(101)
    table.put(102, ppid=1, pgid=102, cpu=0.4, created=CREATED + 1)
    table.put(104, ppid=102, pgid=102, cpu=0.05, created=CREATED + 2)
    meter.scan()
    assert sorted(m.pid for m in meter.members) == [100, 102, 104]
    # A stranger that later gets a remembered pid is not adopted.
    table.drop(104)
    table.put(104, ppid=1, cpu=9.0, created=CREATED + 50)
    meter.scan()
    assert sorted(m.pid for m in meter.members) == [100, 102]


def test_extra_roots_bring_in_orphans_and_their_children() -> None:
    table = FakeTable()
    table.put(100, cpu=0.1)
    table.put(300, ppid=7, pgid=300, cpu=0.2)  # an orphan of ours the caller recognised
    table.put(301, ppid=300, pgid=300, cpu=0.3)
    table.put(400, ppid=7, cpu=5.0)  # not the subtask's
    calls: list[bool] = []

    def extra(full: bool) -> list[int]:
        calls.append(full)
        return [300]

    meter = TreeCpuMeter(table, (100, CREATED), extra_roots=extra)
    meter.scan()
    assert sorted(m.pid for m in meter.members) == [100, 300, 301]
    assert meter.total_s == pytest.approx(0.6)
    table.put(302, ppid=300, pgid=300, cpu=0.1)
    table.kids = {300: [301, 302]}
    meter.refresh()  # the extra roots' children lists are followed between scans too
    assert sorted(m.pid for m in meter.members) == [100, 300, 301, 302]
    assert calls == [True, False]


def test_meter_is_monotone_when_a_member_vanishes_mid_read() -> None:
    table = FakeTable()
    table.put(100, cpu=0.10)
    table.put(101, ppid=100, cpu=0.30)
    meter = TreeCpuMeter(table, (100, CREATED))
    meter.scan()
    # Reaped by its parent before the parent's new figure is visible: the reading drops,
    # the figure does not.
    table.drop(101)
    meter.scan()
    assert meter.total_s == pytest.approx(0.40)
    table.put(100, cpu=0.10 + 0.31)
    meter.scan()
    assert meter.total_s == pytest.approx(0.41)


def test_refresh_drops_a_reused_pid() -> None:
    table = FakeTable()
    table.put(100, cpu=0.1)
    table.put(101, ppid=100, cpu=0.3, created=CREATED + 5)
    meter = TreeCpuMeter(table, (100, CREATED), known={})
    meter.scan()
    # 101 died and its pid now names an unrelated process (another create time).
    table.put(101, ppid=100, cpu=0.01, created=CREATED + 9)
    table.kids = {}
    meter.refresh()
    assert [m.pid for m in meter.members] == [100]


def test_stale_subtasks_are_those_whose_owner_is_gone() -> None:
    table = FakeTable()
    table.put(10, created=555.0)  # a live owner
    table.put(11, created=777.0)  # pid 11 exists, but it is not the owner that started 21

    def put_env(pid: int, env: dict[str, str]) -> None:
        table.put(pid, pgid=pid)
        table.envs[pid] = env

    put_env(20, {"PATH": "/bin", OWNER_ENV: "10:555.000"})  # owner alive: keep
    put_env(21, {OWNER_ENV: "11:100.000", "HOME": "/"})  # owner pid recycled: stale
    put_env(22, {OWNER_ENV: "12:100.000"})  # owner gone: stale
    put_env(23, {"PATH": "/bin"})  # not a subtask
    put_env(24, {OWNER_ENV: "garbage"})  # unparsable owner: treated as gone
    put_env(25, {OWNER_ENV: "12:100.000", TAG_ENV: "ab12"})  # stale, but being re-attached
    table.put(26)  # no readable environment (another user's process): skipped
    assert stale_subtasks(table) == [21, 22, 24, 25]
    assert stale_subtasks(table, keep_tags={"ab12"}) == [21, 22, 24]


def test_owner_marker_names_this_process() -> None:
    pid, _, created = owner_marker().partition(":")
    assert int(pid) == os.getpid()
    assert abs(float(created) - psutil.Process().create_time()) < 0.01


def test_psutil_table_reads_this_process() -> None:
    table = PsutilTable()
    me = table.sample(os.getpid())
    assert me is not None
    assert (me.pid, me.ppid, me.pgid) == (os.getpid(), os.getppid(), os.getpgrp())
    assert not me.is_zombie and not me.is_stopped
    t = os.times()
    # psutil reads the same kernel counters as os.times(), in 10 ms ticks.
    assert abs(me.cpu_s - (t.user + t.system + t.children_user + t.children_system)) < 0.05
    assert os.getpid() in table.pids()
    assert os.getpid() in table.descendants(os.getppid())
    env = table.environ(os.getpid())
    assert env is not None and env.get("PATH") == os.environ.get("PATH")
    assert table.sample(2**22 + 12345) is None  # above pid_max: never a process


# ----------------------------------------------------------------------------- records


def a_record(**over: object) -> dict[str, object]:
    rec = ExecutorRecord(
        tag="0123abcd",
        argv=("python3", "-c", "pass"),
        pid=4321,
        pgid=4321,
        create_time=1_700_000_000.25,
        mode=LimitMode.DUTY_CYCLE,
        containment=Containment.PROCESS_TREE,
        cgroup=None,
        members=((4321, 1_700_000_000.25), (4400, 1_700_000_001.5)),
        reported_cpu_s=12.5,
        retired_cpu_s=0.75,
        cgroup_offset_s=0.0,
    ).to_dict()
    rec.update(over)
    return rec


def test_record_round_trips_through_json() -> None:
    data = json.loads(json.dumps(a_record()))
    rec = ExecutorRecord.from_dict(data)
    assert rec.to_dict() == a_record()
    assert rec.members[1] == (4400, 1_700_000_001.5)
    assert rec.mode is LimitMode.DUTY_CYCLE and rec.containment is Containment.PROCESS_TREE


def test_record_names_the_status_file_and_reads_version_1_records() -> None:
    rec = ExecutorRecord.from_dict(a_record(status_file="/run/x/0123abcd.exit"))
    assert rec.status_file == "/run/x/0123abcd.exit"
    assert rec.to_dict()["version"] == 2
    # A record written before the exit recorder (version 1) has no status file: the
    # field is ignored even if present.
    old = a_record(version=1, status_file="/run/x/0123abcd.exit")
    assert ExecutorRecord.from_dict(old).status_file is None


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"version": 3}, "version: must be 1 or 2"),
        ({"version": True}, "version: must be 1 or 2"),
        ({"status_file": "relative"}, "status_file: must be null or an absolute path"),
        ({"pid": 0}, "pid: must be an integer > 0"),
        ({"pid": True}, "pid: must be an integer > 0"),
        ({"tag": "a/b"}, "tag: must be a non-empty alphanumeric"),
        ({"argv": "sleep 1"}, "argv: must be a list of strings"),
        ({"mode": "fast"}, "mode: unknown limit mode 'fast'"),
        ({"containment": "jail"}, "containment: unknown containment 'jail'"),
        ({"cgroup": "relative/path"}, "cgroup: must be null or an absolute path"),
        ({"members": [[1]]}, r"members\[0\]: must be \[pid, create_time\]"),
        ({"members": [[1, -2.0]]}, r"members\[0\]: must be >= 0"),
        ({"reported_cpu_s": float("nan")}, "reported_cpu_s: must be a finite number"),
        ({"retired_cpu_s": -1}, "retired_cpu_s: must be >= 0"),
    ],
)
def test_bad_record_names_the_field(over: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle) as info:
        ExecutorRecord.from_dict(a_record(**over), "sub.json")
    assert str(info.value).startswith("sub.json: ")


def test_record_missing_field_and_wrong_type() -> None:
    data = a_record()
    del data["pgid"]
    with pytest.raises(ValueError, match="record: pgid: missing"):
        ExecutorRecord.from_dict(data)
    with pytest.raises(ValueError, match="record: must be a mapping, got list"):
        ExecutorRecord.from_dict([1, 2])


# ----------------------------------------------------------------------------- cgroup v2

MOUNTINFO = (
    "22 1 0:21 / /proc rw,nosuid - proc proc rw\n"
    "30 25 0:26 / /sys/fs/cgroup/cpu rw shared:9 - cgroup cgroup rw,cpu\n"
    "41 31 0:38 / /sys/fs/cgroup/uni\\040fied rw,relatime shared:1 master:2 - cgroup2 cgroup2 rw\n"
)


def test_mountinfo_parsing_finds_cgroup2_with_optional_fields_and_escapes() -> None:
    assert cgroup2_mounts(MOUNTINFO) == [("/", Path("/sys/fs/cgroup/uni fied"))]
    assert cgroup2_mounts("garbage line\n") == []
    assert own_cgroup2_path("4:memory:/a\n0::/user.slice/app\n") == "/user.slice/app"
    assert own_cgroup2_path("0::\n") == "/"
    assert own_cgroup2_path("1:cpu:/\n") is None


def make_fake_system(tmp_path: Path, subtree: str, own: str = "/app") -> tuple[Path, Path]:
    """A fake /proc/self and a fake cgroup v2 mount; returns (proc root, own cgroup dir)."""
    mount = tmp_path / "cgroup2"
    own_dir = mount / own.lstrip("/")
    own_dir.mkdir(parents=True)
    (own_dir / "cgroup.subtree_control").write_text(subtree)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(
        f"41 31 0:38 / {mount} rw,relatime - cgroup2 cgroup2 rw\n"
    )
    (proc / "self" / "cgroup").write_text(f"0::{own}\n")
    return proc, own_dir


def test_detection_accepts_a_writable_cgroup_with_cpu_for_children(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CGROUP_PARENT_ENV, raising=False)
    proc, own_dir = make_fake_system(tmp_path, "cpu memory\n")
    parent, reason = detect_cgroup_v2(proc)
    assert parent == own_dir
    assert "writable" in reason
    ex = ProcessExecutor(["true"], speed_mhz=300, proc_root=proc)
    assert ex.mode is LimitMode.CGROUP_V2
    # Duty cycling can always be forced.
    forced = ProcessExecutor(["true"], speed_mhz=300, proc_root=proc, mode="duty_cycle")
    assert forced.mode is LimitMode.DUTY_CYCLE


def test_detection_falls_back_to_duty_cycling_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CGROUP_PARENT_ENV, raising=False)
    proc, _ = make_fake_system(tmp_path, "memory io\n")  # cpu not delegated
    parent, reason = detect_cgroup_v2(proc)
    assert parent is None and "cpu controller not enabled" in reason
    ex = ProcessExecutor(["true"], speed_mhz=300, proc_root=proc)
    assert ex.mode is LimitMode.DUTY_CYCLE
    assert "cpu controller" in ex.mode_reason
    with pytest.raises(ValueError, match="mode: cgroup_v2 requested but not available"):
        ProcessExecutor(["true"], speed_mhz=300, proc_root=proc, mode=LimitMode.CGROUP_V2)


def test_detection_without_any_cgroup2_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CGROUP_PARENT_ENV, raising=False)
    proc = tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text(MOUNTINFO.splitlines()[1] + "\n")
    (proc / "self" / "cgroup").write_text("1:cpu:/\n")
    assert detect_cgroup_v2(proc) == (None, "no cgroup v2 file system is mounted")
    assert detect_cgroup_v2(tmp_path / "empty")[0] is None


def test_environment_names_the_delegated_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    proc, _ = make_fake_system(tmp_path, "memory\n")
    delegated = tmp_path / "delegated"
    delegated.mkdir()
    (delegated / "cgroup.subtree_control").write_text("cpu\n")
    monkeypatch.setenv(CGROUP_PARENT_ENV, str(delegated))
    assert detect_cgroup_v2(proc)[0] == delegated


def test_select_limit_mode() -> None:
    assert select_limit_mode(None, None) is LimitMode.DUTY_CYCLE
    assert select_limit_mode(None, Path("/x")) is LimitMode.CGROUP_V2
    assert select_limit_mode(LimitMode.DUTY_CYCLE, Path("/x")) is LimitMode.DUTY_CYCLE
    with pytest.raises(ValueError, match="COALLOC_CGROUP_PARENT"):
        select_limit_mode(LimitMode.CGROUP_V2, None, "none here")


def test_cpu_max_value_in_microseconds() -> None:
    assert cpu_max_value(0.25) == "25000 100000"
    assert cpu_max_value(1.5) == "150000 100000"  # quota above the period: 1.5 cores
    assert cpu_max_value(0.0) == "1000 100000"  # the kernel's minimum quota
    assert cpu_max_value(0.5, period_us=20_000) == "10000 20000"


def test_a_directory_that_is_no_cgroup_is_refused_and_removed(tmp_path: Path) -> None:
    # Not a cgroup file system: no cgroup.procs appears after mkdir.
    with pytest.raises(OSError, match="not a cgroup v2 directory"):
        SubtaskCgroup.create(tmp_path, "coalloc-test")
    assert not (tmp_path / "coalloc-test").exists()


def fake_cgroup(tmp_path: Path, name: str = "coalloc-1", cpu: bool = True) -> Path:
    """A directory laid out like a subtask cgroup (the kernel's files, plain here)."""
    child = tmp_path / name
    child.mkdir()
    (child / "cgroup.procs").write_text("41\n42\n")
    (child / "cpu.stat").write_text("usage_usec 2500000\nuser_usec 2000000\n")
    if cpu:
        (child / "cpu.max").write_text("max 100000\n")
    return child


def test_subtask_cgroup_files(tmp_path: Path) -> None:
    child = fake_cgroup(tmp_path)
    cg = SubtaskCgroup.create(tmp_path, "coalloc-1")
    assert cg.has_cpu_max
    cg.set_share(0.5)
    assert (child / "cpu.max").read_text() == "50000 100000"
    assert cg.procs() == [41, 42]
    assert cg.usage_s() == pytest.approx(2.5)
    (child / "cgroup.kill").write_text("")
    assert cg.kill() is True
    assert (child / "cgroup.kill").read_text() == "1"
    assert not SubtaskCgroup.open(fake_cgroup(tmp_path, "coalloc-2", cpu=False)).has_cpu_max
    (child / "cpu.stat").write_text("user_usec 1\n")
    with pytest.raises(OSError, match="no usage_usec"):
        cg.usage_s()


def test_containment_needs_only_a_writable_cgroup(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(CGROUP_PARENT_ENV, raising=False)
    proc, own_dir = make_fake_system(tmp_path, "memory\n")  # no cpu controller
    assert detect_cgroup_containment(proc)[0] is None  # no cgroup.procs: not a cgroup
    (own_dir / "cgroup.procs").write_text("")
    assert detect_cgroup_containment(proc) == (own_dir, f"{own_dir}: writable cgroup v2")
    ex = ProcessExecutor(["true"], speed_mhz=300, proc_root=proc)
    assert ex.containment is Containment.CGROUP and ex.mode is LimitMode.DUTY_CYCLE
    forced = ProcessExecutor(["true"], speed_mhz=300, proc_root=proc, containment="process_tree")
    assert forced.containment is Containment.PROCESS_TREE
    with pytest.raises(ValueError, match="containment: unknown containment 'jail'"):
        ProcessExecutor(["true"], speed_mhz=300, containment="jail")
    with pytest.raises(ValueError, match="containment: cgroup requested but not available"):
        ProcessExecutor(
            ["true"], speed_mhz=300, cgroup_parent=tmp_path / "nowhere", containment="cgroup"
        )


# ----------------------------------------------------------------------------- pacing


def simulate(
    share: float,
    rate: float,
    *,
    cycle_s: float = 1.0,
    cycles: int = 3,
    period_s: float = 0.02,
    tick_s: float = 0.01,
    late_s: float = 0.0,
    max_rate: float = 2.0,
) -> list[tuple[float, float, float]]:
    """Drive a pacer with a fake clock and a simulated group that consumes ``rate`` cores
    while running; readings are floored to ``tick_s`` like /proc's clock ticks and every
    wake-up is ``late_s`` late. Returns per cycle (real CPU-s, measured CPU-s, wall s)."""
    pacer = DutyCyclePacer(period_s, max_rate=max_rate)
    t = cpu = 0.0

    def reading() -> float:
        return math.floor(cpu / tick_s + 1e-9) * tick_s if tick_s > 0 else cpu

    mark = reading()
    out = []
    for _ in range(cycles):
        t0, cpu0 = t, cpu
        pacer.begin(share, cycle_s, t, mark)
        while (nxt := pacer.tick(t, reading())) is not None:
            dt = max(0.0, nxt - t) + late_s
            if pacer.running:
                cpu += rate * dt
            t += dt
        now_reading = reading()
        out.append((cpu - cpu0, now_reading - mark, t - t0))
        mark = now_reading
    return out


@settings(max_examples=80, deadline=None)
@given(
    share=st.floats(0.0, 2.0),
    rate=st.sampled_from([0.3, 0.7, 1.0, 1.6, 2.0]),
    period_s=st.floats(0.005, 0.05),
    late_s=st.floats(0.0, 0.002),
)
def test_pacer_holds_the_group_to_its_share(
    share: float, rate: float, period_s: float, late_s: float
) -> None:
    cycles = simulate(share, rate, period_s=period_s, late_s=late_s)
    expected = min(share, rate)  # a group cannot use more than it runs at
    real = sum(c[0] for c in cycles)
    wall = sum(c[2] for c in cycles)
    # Error budget: one tick of measurement lag, one period run at the wrong rate while
    # the rate estimate settles, and the late wake-ups of one period, per cycle.
    bound = len(cycles) * (0.01 + rate * (period_s + 2 * late_s)) / wall + 1e-9
    assert abs(real / wall - expected) <= bound
    # What is reported (the measurement) telescopes to the real CPU within one tick.
    measured = sum(c[1] for c in cycles)
    assert abs(measured - real) <= 0.01 + 1e-9


def test_pacer_share_zero_never_runs_and_full_share_never_stops() -> None:
    pacer = DutyCyclePacer(0.02, max_rate=2.0)
    pacer.begin(0.0, 1.0, 0.0, 0.0)
    t = 0.0
    while (nxt := pacer.tick(t, 0.0)) is not None:
        assert not pacer.running
        t = nxt
    assert pacer.run_s == 0.0
    # Share 2 of a group that can only use one core: it runs the whole cycle.
    cycles = simulate(2.0, 1.0, cycles=1)
    real, _, wall = cycles[0]
    assert real == pytest.approx(wall)


def test_pacer_learns_a_multi_core_groups_rate() -> None:
    pacer = DutyCyclePacer(0.02, max_rate=2.0)
    t = cpu = 0.0
    for _ in range(2):
        pacer.begin(0.5, 1.0, t, cpu)
        while (nxt := pacer.tick(t, cpu)) is not None:
            if pacer.running:
                cpu += 2.0 * (nxt - t)
            t = nxt
    assert pacer.rate == pytest.approx(2.0, rel=0.05)


def test_pacer_tick_without_begin_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="no cycle begun"):
        DutyCyclePacer().tick(0.0, 0.0)
    with pytest.raises(ValueError, match="period_s"):
        DutyCyclePacer(period_s=0.0)
