"""The process executor's pure parts: argv validation, /proc parsing on a fake /proc,
group CPU accounting, cgroup v2 detection and mode selection, and the duty-cycle pacer
driven by a fake clock and a simulated process group."""

from __future__ import annotations

import math
import os
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from local_manager.process_executor import (
    CGROUP_PARENT_ENV,
    OWNER_ENV,
    CgroupCpuLimit,
    DutyCyclePacer,
    ExecutorState,
    GroupCpuMeter,
    LimitMode,
    ProcessExecutor,
    ProcFs,
    cgroup2_mounts,
    cpu_max_value,
    detect_cgroup_v2,
    own_cgroup2_path,
    parse_proc_stat,
    select_limit_mode,
    share_for_grant,
    stale_subtasks,
    validate_argv,
)

# ----------------------------------------------------------------------------- helpers


def stat_line(
    pid: int,
    *,
    comm: str = "cmd",
    state: str = "R",
    ppid: int = 1,
    pgrp: int = 1,
    utime: int = 0,
    stime: int = 0,
    cutime: int = 0,
    cstime: int = 0,
    starttime: int = 1000,
) -> bytes:
    """A /proc/<pid>/stat line in the kernel's layout (proc(5)), 52 fields."""
    fields = [state, ppid, pgrp, pgrp, 0, -1, 4194304, 10, 0, 0, 0]
    fields += [utime, stime, cutime, cstime, 20, 0, 1, 0, starttime]
    fields += [0] * 32
    return f"{pid} ({comm}) {' '.join(str(f) for f in fields)}\n".encode()


class FakeProc:
    """A fake /proc directory tree the tests write stat files into."""

    def __init__(self, root: Path) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def put(self, pid: int, **kw: object) -> None:
        d = self.root / str(pid)
        d.mkdir(exist_ok=True)
        (d / "stat").write_bytes(stat_line(pid, **kw))  # type: ignore[arg-type]

    def drop(self, pid: int) -> None:
        d = self.root / str(pid)
        (d / "stat").unlink()
        d.rmdir()


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


# ----------------------------------------------------------------------------- /proc


def test_stat_parsing_survives_odd_command_names() -> None:
    line = stat_line(
        42, comm="a) (b c) x", state="S", ppid=7, pgrp=40, utime=11, stime=3, cutime=5,
        cstime=2, starttime=987,
    )
    st = parse_proc_stat(line)
    assert (st.pid, st.state, st.ppid, st.pgrp) == (42, "S", 7, 40)
    assert (st.utime, st.stime, st.cutime, st.cstime, st.starttime) == (11, 3, 5, 2, 987)
    assert st.ticks == 21
    assert not st.is_zombie
    assert parse_proc_stat(stat_line(1, state="Z")).is_zombie


def test_stat_parsing_matches_the_real_kernel_for_this_process() -> None:
    with open("/proc/self/stat", "rb") as f:
        st = parse_proc_stat(f.read())
    assert st.pid == os.getpid()
    assert st.ppid == os.getppid()
    assert st.pgrp == os.getpgrp()
    # The kernel counts this process's CPU in ticks; os.times() reports the same counters.
    t = os.times()
    tck = os.sysconf("SC_CLK_TCK")
    assert st.utime + st.stime <= round((t.user + t.system) * tck) + 1


@pytest.mark.parametrize(
    "data", [b"", b"12 (x", b"12 (cmd) R 1", b"x (cmd) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14"]
)
def test_malformed_stat_names_the_file(data: bytes) -> None:
    with pytest.raises(ValueError, match="/proc/9/stat: malformed"):
        parse_proc_stat(data, "/proc/9/stat")


def test_group_listing_on_a_fake_proc(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.put(100, pgrp=100, utime=10)
    proc.put(101, pgrp=100, ppid=100, utime=5, comm="child (worker)")
    proc.put(102, pgrp=100, ppid=100, state="Z", stime=2)
    proc.put(200, pgrp=200, utime=99)  # another group
    (proc.root / "300").mkdir()  # exited between listing and reading: no stat file
    (proc.root / "self").mkdir()  # non-numeric entries are not processes
    (proc.root / "sys").mkdir()
    fs = ProcFs(proc.root, clk_tck=100)
    members = fs.group(100)
    assert sorted(m.pid for m in members) == [100, 101, 102]
    assert fs.read_stat(300) is None
    assert fs.read_stat(999) is None
    assert fs.group(555) == []
    assert ProcFs(tmp_path / "nowhere", clk_tck=100).pids() == []


def test_meter_counts_children_zombies_and_retired_members(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    fs = ProcFs(proc.root, clk_tck=100)
    meter = GroupCpuMeter(fs, 100)
    proc.put(100, pgrp=100, utime=10, stime=5)
    proc.put(101, pgrp=100, ppid=100, utime=20)
    meter.scan()
    assert meter.total_ticks == 35
    assert meter.total_s == pytest.approx(0.35)

    # 101 exits and its parent reaps it: the time moves into the parent's cutime.
    proc.drop(101)
    proc.put(100, pgrp=100, utime=12, stime=5, cutime=21)
    meter.refresh()
    assert meter.total_ticks == 38

    # A new child is invisible to refresh() (known pids only) until a full scan.
    proc.put(102, pgrp=100, ppid=100, utime=7)
    meter.refresh()
    assert meter.total_ticks == 38
    meter.scan()
    assert meter.total_ticks == 45

    # 102 is orphaned to us and reaped here: retire() keeps its final time.
    zombie = parse_proc_stat(stat_line(102, state="Z", pgrp=100, ppid=1, utime=8))
    meter.retire(zombie)
    proc.drop(102)
    meter.scan()
    assert meter.total_ticks == 38 + 8


def test_refresh_follows_children_lists_to_new_members(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    meter = GroupCpuMeter(ProcFs(proc.root, clk_tck=100), 100)
    proc.put(100, pgrp=100, utime=10)
    meter.scan()
    # 100 forks 101 (same group) and 102, which moved itself to another group; 101
    # forks 103.
    proc.put(101, pgrp=100, ppid=100, utime=4)
    proc.put(102, pgrp=102, ppid=100, utime=50)
    proc.put(103, pgrp=100, ppid=101, utime=2)
    for parent, kids in ((100, "101 102"), (101, "103")):
        task = proc.root / str(parent) / "task" / str(parent)
        task.mkdir(parents=True)
        (task / "children").write_text(kids + " ")
    meter.refresh()
    assert sorted(m.pid for m in meter.members) == [100, 101, 103]
    assert meter.total_ticks == 16


def test_meter_is_monotone_when_a_member_vanishes_mid_read(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    meter = GroupCpuMeter(ProcFs(proc.root, clk_tck=100), 100)
    proc.put(100, pgrp=100, utime=10)
    proc.put(101, pgrp=100, utime=30)
    meter.scan()
    # Reaped by someone we did not see yet: the reading drops, the figure does not.
    proc.drop(101)
    meter.scan()
    assert meter.total_ticks == 40
    proc.put(100, pgrp=100, utime=10, cutime=31)
    meter.scan()
    assert meter.total_ticks == 41


def test_refresh_drops_a_reused_pid(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    meter = GroupCpuMeter(ProcFs(proc.root, clk_tck=100), 100)
    proc.put(100, pgrp=100, utime=10)
    proc.put(101, pgrp=100, utime=30, starttime=500)
    meter.scan()
    # 101 died and the pid now belongs to an unrelated process (different start time)
    # that happens to share the group number in the fake: it must not be counted.
    proc.put(101, pgrp=100, utime=1, starttime=900)
    meter.refresh()
    assert [m.pid for m in meter.members] == [100]


def test_stale_subtasks_are_those_whose_owner_is_gone(tmp_path: Path) -> None:
    proc = FakeProc(tmp_path / "proc")
    proc.put(10, starttime=555)  # a live owner
    proc.put(11, starttime=777)  # pid 11 exists, but it is not the owner that started 21

    def put_env(pid: int, *entries: str) -> None:
        proc.put(pid, pgrp=pid)
        (proc.root / str(pid) / "environ").write_bytes(
            b"\0".join(e.encode() for e in entries) + b"\0"
        )

    put_env(20, "PATH=/bin", f"{OWNER_ENV}=10:555")  # owner alive: keep
    put_env(21, f"{OWNER_ENV}=11:100", "HOME=/")  # owner pid recycled: stale
    put_env(22, f"{OWNER_ENV}=12:100")  # owner gone: stale
    put_env(23, "PATH=/bin")  # not a subtask
    put_env(24, f"{OWNER_ENV}=garbage")  # unparsable owner: treated as gone
    proc.put(25)  # no environ file (another user's process): skipped
    assert stale_subtasks(proc.root) == [21, 22, 24]


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


def test_cgroup_without_cpu_max_is_refused_and_removed(tmp_path: Path) -> None:
    # A directory that is not a cgroup (no cpu.max appears after mkdir).
    with pytest.raises(OSError, match="cpu.max"):
        CgroupCpuLimit(tmp_path, "coalloc-test")
    assert not (tmp_path / "coalloc-test").exists()


def test_cgroup_limit_writes_cpu_max(tmp_path: Path) -> None:
    child = tmp_path / "coalloc-1"
    child.mkdir()
    (child / "cpu.max").write_text("max 100000\n")
    limit = CgroupCpuLimit(tmp_path, "coalloc-1")
    limit.set_share(0.5)
    assert (child / "cpu.max").read_text() == "50000 100000"


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
