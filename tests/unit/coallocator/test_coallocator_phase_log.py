"""The phase-difference log: JSON Lines writing, reading, errors and summaries."""

from __future__ import annotations

import io
import json
import math
from dataclasses import asdict
from pathlib import Path

import pytest

from coallocator.controller import JobDecision, WeightChange, Window
from coallocator.phase_log import (
    JobPhaseTracker,
    LogFormatError,
    PeriodRecord,
    PhaseLogWriter,
    SummaryRecord,
    period_record,
    read_log,
    summarize,
    to_json_line,
)

PERIOD = PeriodRecord(
    job="j1",
    period=3,
    real_time=30.0,
    mean_virtual=29.5,
    phase_difference=12.25,
    window="asynchrony",
    factors={"0": 1.5, "1": -1.5},
    weights={"0": 51.5, "1": 48.5},
    virtual_weights={"0": 0.0, "1": 1.5},
)
SUMMARY = SummaryRecord(
    job="j1",
    qos="strict",
    subtasks=2,
    periods=3,
    mean_phase_difference=8.0,
    max_phase_difference=12.25,
    completion_skew=None,
    turnaround=None,
    completed=False,
)


def test_json_line_is_deterministic_and_drops_only_optional_nones() -> None:
    line = to_json_line(PERIOD)
    assert "\n" not in line and " " not in line
    d = json.loads(line)
    assert list(d) == sorted(d)
    assert "clock_offset" not in d and "clock_quality" not in d
    assert d["type"] == "period"
    s = json.loads(to_json_line(SUMMARY))
    # A summary keeps its null skew and turnaround: "not completed" is information.
    assert s["completion_skew"] is None and s["turnaround"] is None
    with pytest.raises(ValueError):
        to_json_line(SummaryRecord("j", "strict", 1, 1, math.nan, 0.0, None, None, False))


def test_round_trip_through_a_file(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "phase.jsonl"
    live = PeriodRecord("j2", 1, 10.0, 10.0, 0.0, "none", clock_offset=-0.003, clock_quality="ntp",
                        estimated={"1": 30.0})
    with PhaseLogWriter(path) as w:
        w.write(PERIOD)
        w.write_all([live, SUMMARY])
        w.flush()
    got = list(read_log(path))
    expected = [asdict(PERIOD), asdict(live), asdict(SUMMARY)]
    expected[0] = {k: v for k, v in expected[0].items() if v is not None}
    # A summary of a run without late reports says nothing about them.
    del expected[2]["estimated_periods"]
    assert got == expected
    # The writer appends.
    with PhaseLogWriter(path) as w:
        w.write(SUMMARY)
    assert len(list(read_log(path))) == 4


def test_writer_on_a_stream_leaves_it_open() -> None:
    buf = io.StringIO()
    w = PhaseLogWriter(buf)
    w.write(SUMMARY)
    w.close()
    assert buf.getvalue() == to_json_line(SUMMARY) + "\n"
    assert not buf.closed


def test_blank_lines_are_skipped(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    path.write_text("\n" + to_json_line(SUMMARY) + "\n\n", encoding="utf-8")
    assert [r["job"] for r in read_log(path)] == ["j1"]


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("{not json", "not JSON"),
        ('{"type": "other", "job": "j"}', "type: must be 'period' or 'summary'"),
        ("[1, 2]", "type: must be"),
        ('{"type": "period"}', "job: missing"),
    ],
)
def test_bad_line_names_file_and_line(tmp_path: Path, bad: str, reason: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(to_json_line(PERIOD) + "\n" + bad + "\n", encoding="utf-8")
    with pytest.raises(LogFormatError, match=f"bad.jsonl: line 2: {reason}") as err:
        list(read_log(path))
    assert str(path) in str(err.value)
    assert isinstance(err.value, ValueError)


def _summary(job: str, qos: str, mean: float, mx: float, skew: float, turn: float) -> dict:
    return asdict(SummaryRecord(job, qos, 2, 4, mean, mx, skew, turn, True))


def test_summarize_by_hand() -> None:
    records = [
        _summary("a", "strict", 10.0, 20.0, 5.0, 100.0),
        _summary("b", "strict", 30.0, 50.0, 15.0, 300.0),
        _summary("c", "loose", 999.0, 999.0, 999.0, 999.0),  # not strict: left out
        asdict(PeriodRecord("d", 1, 10.0, 10.0, 4.0, "none")),
        asdict(PeriodRecord("d", 2, 20.0, 20.0, 8.0, "asynchrony")),
        asdict(PeriodRecord("a", 1, 10.0, 10.0, 1e6, "none")),  # a's summary wins
    ]
    rows, run = summarize(records)
    assert [r["job"] for r in rows] == ["a", "b", "c", "d"]
    d = rows[3]
    assert (d["periods"], d["mean_phase_difference"], d["max_phase_difference"]) == (2, 6.0, 8.0)
    assert d["completed"] is False
    assert rows[0]["mean_phase_difference"] == 10.0
    assert (run.jobs, run.completed) == (4, 2)
    assert run.mean_phase_difference == pytest.approx(20.0)
    assert run.max_phase_difference == pytest.approx(50.0)
    assert run.mean_completion_skew == pytest.approx(10.0)
    assert run.mean_turnaround == pytest.approx(200.0)


def test_summarize_with_nothing_completed_gives_nan() -> None:
    rows, run = summarize([asdict(PERIOD)])
    assert len(rows) == 1 and run.completed == 0
    assert math.isnan(run.mean_phase_difference) and math.isnan(run.max_phase_difference)


def test_summarize_reads_what_the_writer_wrote(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    done = SummaryRecord("j9", "strict", 3, 2, 7.0, 9.0, 4.0, 50.0, True)
    with PhaseLogWriter(path) as w:
        w.write_all([PERIOD, done])
    _, run = summarize(read_log(path))
    assert (run.completed, run.mean_phase_difference, run.mean_turnaround) == (1, 7.0, 50.0)


def test_tracker_summary_by_hand() -> None:
    t = JobPhaseTracker("j", "strict", 3, arrival=100.0)
    for phi in (10.0, 0.0, 35.0):
        t.observe(phi)
    t.finished(400.0)
    t.finished(380.0)
    assert not t.completed
    s = t.summary()
    assert (s.periods, s.completion_skew, s.turnaround, s.completed) == (3, None, None, False)
    t.finished(450.0)
    s = t.summary()
    assert s.mean_phase_difference == pytest.approx(15.0)
    assert s.max_phase_difference == 35.0
    assert (s.completion_skew, s.turnaround, s.completed) == (70.0, 350.0, True)
    assert JobPhaseTracker("e", "strict", 1, 0.0).summary().mean_phase_difference == 0.0


def test_period_record_from_a_decision() -> None:
    decision = JobDecision(
        "j",
        105.0,
        40.0,
        Window.ASYNCHRONY,
        (WeightChange(1, "n1", -2.0, 8.0, 2.0),),
    )
    rec = period_record(decision, 7, 100.0, {1: (8.0, 2.0), 0: (10.0, 0.0)}, 0.01, "ntp")
    assert rec == PeriodRecord(
        job="j",
        period=7,
        real_time=100.0,
        mean_virtual=105.0,
        phase_difference=40.0,
        window="asynchrony",
        factors={"1": -2.0},
        weights={"0": 10.0, "1": 8.0},
        virtual_weights={"0": 0.0, "1": 2.0},
        clock_offset=0.01,
        clock_quality="ntp",
    )
    assert list(rec.weights) == ["0", "1"]


# -- a torn last line (a crash mid-append) -------------------------------------------------


def _torn_log(tmp_path: Path, tail: bytes) -> Path:
    path = tmp_path / "torn.jsonl"
    path.write_bytes((to_json_line(PERIOD) + "\n" + to_json_line(SUMMARY) + "\n").encode()
                     + tail)
    return path


@pytest.mark.parametrize(
    "tail",
    [
        to_json_line(SUMMARY).encode()[:17],  # cut in the middle of a record
        b'{"job":"j\xc3',  # cut inside a multi-byte character: not UTF-8 either
        b"{",
    ],
)
def test_a_torn_last_line_is_skipped_and_reported(tmp_path: Path, tail: bytes) -> None:
    from coallocator.phase_log import TornLine

    path = _torn_log(tmp_path, tail)
    torn: list[TornLine] = []
    got = list(read_log(path, on_torn=torn.append))
    assert [r["type"] for r in got] == ["period", "summary"]
    assert torn == [TornLine(path, 3, len(tail))]
    assert torn[0].message() == (
        f"{path}: skipped a torn last line ({len(tail)} bytes): the writer stopped mid-line")


def test_a_torn_last_line_warns_without_a_callback(tmp_path: Path) -> None:
    from coallocator.phase_log import TornLineWarning

    path = _torn_log(tmp_path, b'{"type":"per')
    with pytest.warns(TornLineWarning, match="skipped a torn last line \\(12 bytes\\)"):
        assert len(list(read_log(path))) == 2


def test_an_unterminated_last_record_that_is_complete_is_read(tmp_path: Path) -> None:
    torn: list[object] = []
    path = _torn_log(tmp_path, to_json_line(SUMMARY).encode())
    assert len(list(read_log(path, on_torn=torn.append))) == 3
    assert torn == []


@pytest.mark.parametrize(
    ("content", "line", "reason"),
    [
        # a malformed line in the middle
        (to_json_line(PERIOD) + "\n{torn\n" + to_json_line(SUMMARY) + "\n", 2, "not JSON"),
        # a complete (newline-terminated) bad last line
        (to_json_line(PERIOD) + "\n{torn\n", 2, "not JSON"),
        # unterminated but valid JSON: not torn, just not a record
        (to_json_line(PERIOD) + '\n{"type": "x"}', 2, "type: must be"),
    ],
)
def test_other_bad_lines_are_still_errors(tmp_path: Path, content: str, line: int,
                                          reason: str) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text(content, encoding="utf-8")
    torn: list[object] = []
    with pytest.raises(LogFormatError, match=f"bad.jsonl: line {line}: {reason}"):
        list(read_log(path, on_torn=torn.append))
    assert torn == []


def test_a_line_that_is_not_utf8_in_the_middle_is_an_error(tmp_path: Path) -> None:
    path = tmp_path / "bin.jsonl"
    path.write_bytes(b"\xff\xfe\n" + to_json_line(SUMMARY).encode() + b"\n")
    with pytest.raises(LogFormatError, match="bin.jsonl: line 1: not UTF-8"):
        list(read_log(path))


def test_a_writer_appending_after_a_crash_drops_the_torn_tail(tmp_path: Path) -> None:
    path = _torn_log(tmp_path, b'{"type":"per')
    with PhaseLogWriter(path) as w:
        assert w.dropped_torn_bytes == 12
        w.write(SUMMARY)
    torn: list[object] = []
    assert [r["type"] for r in read_log(path, on_torn=torn.append)] == [
        "period", "summary", "summary"]
    assert torn == []


def test_a_writer_appending_keeps_a_complete_unterminated_record(tmp_path: Path) -> None:
    path = _torn_log(tmp_path, to_json_line(PERIOD).encode())
    with PhaseLogWriter(path) as w:
        assert w.dropped_torn_bytes == 0
        w.write(SUMMARY)
    assert [r["type"] for r in read_log(path)] == ["period", "summary", "period", "summary"]


def test_a_log_that_is_one_torn_line_reads_as_empty(tmp_path: Path) -> None:
    from coallocator.phase_log import drop_torn_tail

    path = tmp_path / "one.jsonl"
    path.write_bytes(b'{"job":')
    torn: list[object] = []
    assert list(read_log(path, on_torn=torn.append)) == []
    assert len(torn) == 1
    assert drop_torn_tail(path) == 7
    assert path.read_bytes() == b""
    assert drop_torn_tail(tmp_path / "absent.jsonl") == 0
