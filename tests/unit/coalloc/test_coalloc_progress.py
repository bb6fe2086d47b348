"""The application's side of progress reporting (coalloc.progress, ``coalloc progress
report``): nothing happens outside coalloc, a call only stores, the thread sends the
latest value at most once per change and interval, and the command sends one datagram."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from support import run_cli, wait_until

from coalloc import progress
from local_manager.progress_wire import ADDR_ENV, KEY_ENV, parse

KEY = "5" * 32


@pytest.fixture
def sink() -> Iterator[socket.socket]:
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(("127.0.0.1", 0))
    s.settimeout(10.0)
    yield s
    progress._install(None)
    s.close()


def addr(s: socket.socket) -> str:
    host, port = s.getsockname()
    return f"{host}:{port}"


def test_outside_coalloc_every_call_does_nothing() -> None:
    assert progress.reporter_from_env({}) is None
    assert progress.reporter_from_env({ADDR_ENV: "127.0.0.1:9"}) is None
    progress._install(None)
    assert not progress.enabled()
    progress.report(3, 10)
    with progress.waiting():
        pass


def test_bad_values_raise_at_the_call() -> None:
    for t in (float("nan"), float("inf"), -1.0):
        with pytest.raises(ValueError, match="t: must be a finite number >= 0"):
            progress.report(t)
    with pytest.raises(ValueError, match="t_end: must be a finite number > 0"):
        progress.report(1.0, 0.0)


def test_a_call_stores_and_a_flush_sends_the_latest_once(sink: socket.socket) -> None:
    r = progress.reporter_from_env({ADDR_ENV: addr(sink), KEY_ENV: KEY})
    assert r is not None
    r.interval_s = 3600.0  # the thread never sends by itself in this test
    progress._install(r)
    for i in range(1000):
        progress.report(i, 2000)
    assert r.sent == 0  # calls only store
    assert r.flush() and not r.flush()  # one datagram, then nothing new to send
    got = parse(sink.recv(512))
    assert (got.key, got.t, got.t_end, got.waiting) == (KEY, 999.0, 2000.0, False)
    with progress.waiting():
        assert r.flush()
        assert parse(sink.recv(512)).waiting
    assert r.flush()
    last = parse(sink.recv(512))
    assert not last.waiting and last.wait_s >= 0.0
    assert r.sent == 3


def test_the_thread_sends_at_a_capped_rate(sink: socket.socket) -> None:
    r = progress.Reporter(sink.getsockname(), KEY, interval_s=0.01)
    progress._install(r)
    progress.report(7, 8)
    assert parse(sink.recv(512)).t == 7.0
    wait_until(lambda: r.sent == 1)  # counted just after the send
    sent, looked = r.sent, r.wakeups
    # With no new value, no datagram: wait for the thread to have looked a few times.
    wait_until(lambda: r.wakeups >= looked + 3)
    assert r.sent == sent
    progress.report(8, 8)
    assert parse(sink.recv(512)).t == 8.0


def test_close_sends_the_last_value(sink: socket.socket) -> None:
    r = progress.Reporter(sink.getsockname(), KEY, interval_s=3600.0)
    progress._install(r)
    progress.report(5)
    progress._install(None)  # closes it: what a process exit does
    got = parse(sink.recv(512))
    assert (got.t, got.t_end) == (5.0, None)


def test_the_command(sink: socket.socket, capsys: pytest.CaptureFixture[str],
                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ADDR_ENV, raising=False)
    assert run_cli(capsys, "progress", "report", "3") == (0, "", "")  # outside: nothing
    monkeypatch.setenv(ADDR_ENV, addr(sink))
    monkeypatch.setenv(KEY_ENV, KEY)
    assert run_cli(capsys, "progress", "report", "12", "--end", "40")[0] == 0
    got = parse(sink.recv(512))
    assert (got.key, got.t, got.t_end) == (KEY, 12.0, 40.0)
    code, _, err = run_cli(capsys, "progress", "report", "nan")
    assert code == 2 and "T: must be a finite number >= 0" in err
    code, _, err = run_cli(capsys, "progress", "report", "1", "--end", "0")
    assert code == 2 and "--end: must be a finite number > 0" in err
    monkeypatch.setenv(ADDR_ENV, "nowhere")
    code, _, err = run_cli(capsys, "progress", "report", "1")
    assert code == 2 and "HOST:PORT" in err and "Traceback" not in err
