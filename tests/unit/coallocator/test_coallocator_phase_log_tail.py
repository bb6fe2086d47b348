"""A phase log a crashed writer left with a half-written last record: a new writer
(a restarted controller) cuts that tail before it appends, so every line stays whole."""

from __future__ import annotations

import json
from pathlib import Path

from coallocator.phase_log import PhaseLogWriter, SummaryRecord, drop_torn_tail


def _summary(job: str) -> SummaryRecord:
    return SummaryRecord(job, "strict", 2, 3, 1.0, 2.0, 0.5, 10.0, True)


def test_a_torn_tail_is_cut_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "phase.jsonl"
    with PhaseLogWriter(path) as w:
        w.write(_summary("a"))
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"job": "b", "qos": "str')
    with PhaseLogWriter(path) as w:
        w.write(_summary("c"))
    lines = path.read_text().splitlines()
    assert [json.loads(x)["job"] for x in lines] == ["a", "c"]


def test_drop_torn_tail_keeps_whole_files_and_empties_a_file_without_newline(
    tmp_path: Path,
) -> None:
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"a": 1}\n{"b": 2}\n')
    assert drop_torn_tail(path) == 0 and path.read_bytes() == b'{"a": 1}\n{"b": 2}\n'
    path.write_bytes(b'{"a": 1')
    assert drop_torn_tail(path) == 7 and path.read_bytes() == b""
    big = b"x" * 200_000
    path.write_bytes(b'{"a": 1}\n' + big)
    assert drop_torn_tail(path) == len(big) and path.read_bytes() == b'{"a": 1}\n'
    assert drop_torn_tail(tmp_path / "missing") == 0
