"""Bad input at the edge: file size, subtask count and names are refused early, with
one clear message (workloads.spec)."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coalloc.errors import escape_controls, is_unprintable
from workloads import spec
from workloads.spec import (
    MAX_DOCUMENT_BYTES,
    MAX_SUBTASKS,
    SpecError,
    load_jobs,
    parse_document,
    parse_job,
)

STRICT = {"qos": "strict", "overall_deviation": 60, "asynchrony": 20}


def test_a_file_above_the_limit_is_refused_before_it_is_read(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # 200 MiB, sparse: nothing is written
        f.truncate(200 * 2**20)
    tracemalloc.start()
    try:
        with pytest.raises(SpecError) as exc:
            load_jobs(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(exc.value) == (
        f"{big}: {200 * 2**20} bytes, larger than the 1024 KiB limit for this file; "
        "split it into several files"
    )
    assert peak < MAX_DOCUMENT_BYTES // 4  # the file was never read


def test_the_limit_is_inclusive(tmp_path: Path) -> None:
    job = json.dumps([dict(STRICT, name="a", subtasks=[{"work": 5}])])
    at_limit = tmp_path / "at.json"
    at_limit.write_text(job + " " * (MAX_DOCUMENT_BYTES - len(job)))
    assert at_limit.stat().st_size == MAX_DOCUMENT_BYTES
    assert [j.name for j in load_jobs(at_limit)] == ["a"]
    over = tmp_path / "over.json"
    over.write_text(job + " " * (MAX_DOCUMENT_BYTES + 1 - len(job)))
    with pytest.raises(SpecError, match="larger than the 1024 KiB limit"):
        load_jobs(over)


def _never(*args: object, **kwargs: object) -> None:
    raise AssertionError("a subtask was parsed")


def test_more_subtasks_than_nodes_are_refused_before_any_is_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wide = dict(STRICT, name="wide", subtasks=[{"work": 1}] * 50_000)
    path = tmp_path / "wide.json"
    path.write_text(json.dumps([dict(STRICT, name="ok", subtasks=[{"work": 1}]), wide]))
    assert path.stat().st_size < MAX_DOCUMENT_BYTES
    monkeypatch.setattr(spec, "_validate_job", _never)  # not even the first job's
    with pytest.raises(SpecError) as exc:
        load_jobs(path, n_nodes=3)
    assert str(exc.value) == (
        f"{path}: jobs[1].subtasks: more subtasks than nodes: 50000 subtasks, 3 nodes "
        "(a job's subtasks run on distinct nodes)"
    )
    with pytest.raises(SpecError, match="jobs\\[1\\].subtasks: more subtasks than nodes: "
                                        f"50000 subtasks, more than any grid.*{MAX_SUBTASKS}"):
        load_jobs(path)  # the grid is not known: the static bound


def test_parallelism_above_the_node_count_is_refused() -> None:
    job = {"name": "p", "qos": "loose", "work": 10, "parallelism": 4}
    with pytest.raises(SpecError, match="parallelism: more subtasks than nodes: 4 subtasks, "
                                        "3 nodes"):
        parse_job(job, "x", n_nodes=3)
    assert parse_job(job, "x", n_nodes=4).parallelism == 4
    with pytest.raises(SpecError, match="parallelism: more subtasks than nodes"):
        parse_document([dict(job, parallelism=MAX_SUBTASKS + 1)], "x")


@pytest.mark.parametrize(
    ("name", "shown"),
    [
        ("\x1b[31mred\x1b[0m", "'\\x1b'"),
        ("nul\x00", "'\\x00'"),
        ("two\nlines", "'\\n'"),
        ("tab\there", "'\\t'"),
        ("rtl\u202eevil", "'\\u202e'"),
        ("del\x7f", "'\\x7f'"),
        ("c1\x9b", "'\\x9b'"),
    ],
)
def test_names_with_control_characters_are_refused(name: str, shown: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_job(dict(STRICT, name=name, subtasks=[{"work": 1}]), "f.yaml")
    msg = str(exc.value)
    assert msg.startswith("f.yaml: name: must not contain control characters (found ")
    assert shown in msg
    assert msg.isprintable()  # the message itself never carries the raw character
    with pytest.raises(SpecError, match="node: must not contain control characters"):
        parse_job({"name": "l", "qos": "local", "node": name, "subtasks": [{"work": 1}]},
                  "f.yaml", allow_local=True)


def test_printable_unicode_names_are_fine() -> None:
    for name in ("coupled-sim", "Kopplung ü", "模拟", "a b", "emoji 🚀"):
        assert parse_job(dict(STRICT, name=name, subtasks=[{"work": 1}])).name == name


def test_messages_echoing_user_keys_are_escaped() -> None:
    with pytest.raises(SpecError) as exc:
        parse_job(dict(STRICT, name="x", subtasks=[{"work": 1}], **{"\x1b[2Jbad": 1}))
    assert "\x1b" not in str(exc.value) and "\\x1b[2Jbad" in str(exc.value)


@given(st.text(max_size=30))
def test_escape_controls_leaves_nothing_unprintable(text: str) -> None:
    out = escape_controls(text)
    assert not any(is_unprintable(ch) for ch in out)
    if not any(is_unprintable(ch) for ch in text):
        assert out == text


WIDE_YAML = """\
- name: fits
  qos: loose
  subtasks:
    - {work: 1, command: [python3, -c, "print(1)", a, b, c]}
    - {work: 1, demand: {cpu: 1}}
    - work: 1
      command:
        - python3
        - -c
        - pass
- name: wide
  qos: loose
  subtasks:
""" + "    - {work: 1}\n" * 5000


def test_a_yaml_file_is_refused_while_it_is_scanned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "wide.yaml"
    path.write_text(WIDE_YAML)
    monkeypatch.setattr(spec, "_validate_job", _never)
    with pytest.raises(SpecError) as exc:
        load_jobs(path, n_nodes=3)
    assert str(exc.value) == (
        f"{path}: jobs[1].subtasks: more subtasks than nodes: at least 4 subtasks, 3 nodes "
        "(a job's subtasks run on distinct nodes)"
    )


def test_the_yaml_scan_counts_only_the_jobs_subtasks(tmp_path: Path) -> None:
    """Nested lists (commands, a job named 'subtasks'...) do not count as subtasks."""
    path = tmp_path / "fits.yaml"
    path.write_text(WIDE_YAML.split("- name: wide")[0])
    (job,) = load_jobs(path, n_nodes=3)
    assert len(job.subtasks) == 3 and job.subtasks[0].command is not None
    single = tmp_path / "single.yaml"
    single.write_text("name: subtasks\nqos: loose\nsubtasks: [{work: 1}, {work: 2}]\n")
    assert load_jobs(single, n_nodes=2)[0].name == "subtasks"
    with pytest.raises(SpecError, match="^.*single.yaml: subtasks: more subtasks than nodes: "
                                        "at least 2 subtasks, 1 nodes"):
        load_jobs(single, n_nodes=1)
    broken = tmp_path / "broken.yaml"
    broken.write_text("name: x\nqos: loose\nsubtasks: [{work: 1}\n")
    with pytest.raises(SpecError, match="not valid YAML"):  # the full load reports it
        load_jobs(broken, n_nodes=3)
