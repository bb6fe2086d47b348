"""``coalloc logs summarize`` and ``coalloc logs plot`` on logs written by the simulator."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from coalloc import cli
from coallocator.phase_log import read_log, summarize
from global_manager.simulator import SimConfig, simulate
from workloads.generator import PaperWorkloadParams, generate

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with the phase logs of one small workload under sq and strict."""
    d = tmp_path_factory.mktemp("logs")
    w = generate(PaperWorkloadParams(nodes=3, mean_interarrival=500.0, jobs=25,
                                     subtask_time_range=(100.0, 300.0)), seed=3)
    for policy in ("sq", "strict"):
        simulate(w, policy, seed=3, config=SimConfig(work_conserving=False, log_every=5),
                 log_path=d / f"{policy}.jsonl")
    return d


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = cli.main(["logs", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_summarize_table_of_one_log(logs: Path, capsys) -> None:
    path = logs / "sq.jsonl"
    rows, summary = summarize(read_log(path))
    assert summary.completed >= 5
    code, out, _ = run(capsys, "summarize", str(path))
    assert code == 0
    lines = out.splitlines()
    assert lines[0].split()[0] == "job"
    body = lines[1:1 + len(rows)]
    assert [ln.split()[0] for ln in body] == [r["job"] for r in rows]
    for ln, r in zip(body, rows):
        cells = ln.split()
        assert cells[1] == r["qos"] and int(cells[3]) == r["periods"]
        # the table rounds to 0.1 s (a tie like 1.25 may print as 1.2)
        assert float(cells[4]) == pytest.approx(r["mean_phase_difference"], abs=0.0501)
        assert float(cells[5]) == pytest.approx(r["max_phase_difference"], abs=0.05)
    last = lines[-1].split()
    assert int(last[0]) == summary.jobs and int(last[1]) == summary.completed
    assert float(last[2]) == pytest.approx(summary.mean_phase_difference, abs=0.05)
    assert float(last[3]) == pytest.approx(summary.max_phase_difference, abs=0.05)


def test_summarize_json_equals_the_library(logs: Path, capsys) -> None:
    path = logs / "strict.jsonl"
    rows, summary = summarize(read_log(path))
    code, out, _ = run(capsys, "summarize", str(path), "--json")
    assert code == 0
    payload = json.loads(out)
    (entry,) = payload["logs"]
    assert entry["file"] == str(path)
    assert [j["job"] for j in entry["jobs"]] == [r["job"] for r in rows]
    for got, want in zip(entry["jobs"], rows):
        for key in ("mean_phase_difference", "max_phase_difference", "completion_skew",
                    "turnaround", "completed", "subtasks"):
            assert got[key] == want[key]
    assert entry["summary"]["completed"] == summary.completed
    assert entry["summary"]["mean_turnaround"] == summary.mean_turnaround


def test_summarize_a_directory(logs: Path, capsys) -> None:
    code, out, _ = run(capsys, "summarize", str(logs))
    assert code == 0
    rows = [ln.split() for ln in out.splitlines()[1:]]
    assert [r[0] for r in rows] == ["sq.jsonl", "strict.jsonl"]
    for r in rows:
        _, summary = summarize(read_log(logs / r[0]))
        assert int(r[1]) == summary.jobs and int(r[2]) == summary.completed
    code, out, _ = run(capsys, "summarize", str(logs), "--json")
    assert [Path(e["file"]).name for e in json.loads(out)["logs"]] == ["sq.jsonl",
                                                                      "strict.jsonl"]
    code, out, _ = run(capsys, "summarize", str(logs), "--per-job")
    assert out.count("== ") == 2 and "j00001" in out


def test_a_directory_lists_logs_in_natural_order(logs: Path, tmp_path: Path, capsys) -> None:
    text = (logs / "sq.jsonl").read_text()
    for name in ("n12-lam10-sq.jsonl", "n3-lam500-sq.jsonl", "n3-lam10-sq.jsonl"):
        (tmp_path / name).write_text(text)
    (tmp_path / "notes.txt").write_text("not a log")
    code, out, _ = run(capsys, "summarize", str(tmp_path))
    assert code == 0
    assert [ln.split()[0] for ln in out.splitlines()[1:]] == [
        "n3-lam10-sq.jsonl", "n3-lam500-sq.jsonl", "n12-lam10-sq.jsonl"]


def test_summarize_json_turns_nan_into_null(tmp_path: Path, capsys) -> None:
    """A live log with period records only: nothing completed, run means are NaN."""
    path = tmp_path / "live.jsonl"
    path.write_text(json.dumps({"type": "period", "job": "j1", "period": 1, "real_time": 30.0,
                                "mean_virtual": 28.0, "phase_difference": 4.0,
                                "window": "none"}) + "\n")
    code, out, _ = run(capsys, "summarize", str(path), "--json")
    assert code == 0
    entry = json.loads(out)["logs"][0]
    assert entry["summary"]["mean_phase_difference"] is None
    assert entry["jobs"][0]["completed"] is False


def test_plot_defaults_to_the_job_with_the_largest_max_phase(logs: Path, tmp_path: Path,
                                                              capsys) -> None:
    path = logs / "strict.jsonl"
    rows, _ = summarize(read_log(path))
    plotted = {r["job"] for r in read_log(path) if r["type"] == "period"}
    worst = max((r for r in rows if r["job"] in plotted),
                key=lambda r: r["max_phase_difference"])
    out_png = tmp_path / "sub" / "worst.png"
    code, out, _ = run(capsys, "plot", str(path), "--out", str(out_png))
    assert code == 0
    assert f"job {worst['job']}" in out
    data = out_png.read_bytes()
    assert data[:8] == PNG_MAGIC and len(data) > 1000


def test_plot_a_named_job_with_both_windows(logs: Path, tmp_path: Path, capsys) -> None:
    path = logs / "sq.jsonl"
    job = next(r["job"] for r in read_log(path) if r["type"] == "period")
    out_png = tmp_path / "job.png"
    code, out, _ = run(capsys, "plot", str(path), "--job", job, "--out", str(out_png),
                       "--asynchrony", "120", "--overall-deviation", "300")
    assert code == 0 and f"job {job}" in out
    assert out_png.read_bytes()[:8] == PNG_MAGIC


def test_the_plot_x_axis_says_the_unit_it_shows(logs: Path, tmp_path: Path, capsys,
                                                monkeypatch) -> None:
    """The x axis is the log's ``real_time`` (the model's T_R, in model s; live, real s
    x the time scale): labelled so, its range the plotted periods'."""
    import matplotlib.figure

    seen: list[tuple[str, tuple[float, float]]] = []

    def savefig(fig: Any, out: Any, **_: Any) -> None:
        bottom = fig.axes[1]
        seen.append((bottom.get_xlabel(), bottom.get_xlim()))

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", savefig)
    path = logs / "sq.jsonl"
    job = next(r["job"] for r in read_log(path) if r["type"] == "period")
    ts = [float(r["real_time"]) for r in read_log(path)
          if r["type"] == "period" and r["job"] == job]
    code, _, _ = run(capsys, "plot", str(path), "--job", job, "--out",
                     str(tmp_path / "j.png"))
    assert code == 0
    ((label, (lo, hi)),) = seen
    assert "model time" in label and label.endswith("(model s)")
    assert lo <= min(ts) and max(ts) <= hi


def _one_line_error(code: int, err: str, message: str) -> None:
    assert code == 2
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_missing_path(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, "summarize", str(tmp_path / "nope.jsonl"))
    _one_line_error(code, err, "nope.jsonl: no such file or directory")
    code, _, err = run(capsys, "plot", str(tmp_path / "nope.jsonl"), "--out",
                       str(tmp_path / "x.png"))
    _one_line_error(code, err, "no such file or directory")


def test_empty_directory(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, "summarize", str(tmp_path))
    _one_line_error(code, err, "no .jsonl phase logs in this directory")


def test_bad_log_line_names_file_and_line(logs: Path, tmp_path: Path, capsys) -> None:
    path = tmp_path / "bad.jsonl"
    good = (logs / "sq.jsonl").read_text().splitlines()[0]
    path.write_text(good + "\n{not json\n")
    code, _, err = run(capsys, "summarize", str(path))
    _one_line_error(code, err, f"{path}: line 2: not JSON")
    code, _, err = run(capsys, "plot", str(path), "--out", str(tmp_path / "x.png"))
    _one_line_error(code, err, "line 2: not JSON")


def test_record_missing_a_field(tmp_path: Path, capsys) -> None:
    path = tmp_path / "short.jsonl"
    path.write_text(json.dumps({"type": "period", "job": "j7", "real_time": 30.0,
                                "mean_virtual": 30.0}) + "\n")
    code, _, err = run(capsys, "summarize", str(path))
    _one_line_error(code, err, "record 1 (job j7): phase_difference: missing")


def test_unknown_job_and_job_without_periods(logs: Path, tmp_path: Path, capsys) -> None:
    path = logs / "sq.jsonl"
    code, _, err = run(capsys, "plot", str(path), "--job", "j99999", "--out",
                       str(tmp_path / "x.png"))
    _one_line_error(code, err, "--job: no job 'j99999' in this log")
    records = list(read_log(path))
    with_periods = {r["job"] for r in records if r["type"] == "period"}
    lone = [r["job"] for r in records if r["type"] == "summary" and r["job"] not in with_periods]
    assert lone, "the workload should hold single-subtask strict jobs"
    code, _, err = run(capsys, "plot", str(path), "--job", lone[0], "--out",
                       str(tmp_path / "x.png"))
    _one_line_error(code, err, f"--job: {lone[0]} has no period records")
    assert not (tmp_path / "x.png").exists()


@pytest.mark.parametrize(("flag", "value"), [("--asynchrony", "abc"), ("--asynchrony", "0"),
                                             ("--overall-deviation", "nan")])
def test_bad_window_flags(logs: Path, tmp_path: Path, capsys, flag: str, value: str) -> None:
    code, _, err = run(capsys, "plot", str(logs / "sq.jsonl"), "--out",
                       str(tmp_path / "x.png"), flag, value)
    _one_line_error(code, err, f"{flag}: ")


def test_plot_refuses_a_directory_and_a_bad_format(logs: Path, tmp_path: Path,
                                                   capsys) -> None:
    code, _, err = run(capsys, "plot", str(logs), "--out", str(tmp_path / "x.png"))
    _one_line_error(code, err, "is a directory")
    code, _, err = run(capsys, "plot", str(logs / "sq.jsonl"), "--out",
                       str(tmp_path / "x.notaformat"))
    _one_line_error(code, err, "cannot write the plot")


def test_summarize_skips_a_torn_last_line_with_one_warning(logs: Path, tmp_path: Path,
                                                          capsys) -> None:
    whole = (logs / "sq.jsonl").read_bytes()
    path = tmp_path / "torn.jsonl"
    tail = b'{"type":"period","job":"j9","real'
    path.write_bytes(whole + tail)
    code, out, err = run(capsys, "summarize", "--json", str(path))
    assert code == 0
    assert err.splitlines() == [
        f"coalloc: warning: {path}: skipped a torn last line ({len(tail)} bytes): "
        "the writer stopped mid-line"]
    intact = tmp_path / "intact.jsonl"
    intact.write_bytes(whole)
    code, expected, _ = run(capsys, "summarize", "--json", str(intact))
    assert code == 0
    assert json.loads(out)["logs"][0]["jobs"] == json.loads(expected)["logs"][0]["jobs"]


def test_summarize_refuses_a_complete_bad_last_line(logs: Path, tmp_path: Path,
                                                    capsys) -> None:
    path = tmp_path / "bad-tail.jsonl"
    path.write_bytes((logs / "sq.jsonl").read_bytes() + b'{"type":"period","job":"j9","real\n')
    n = len(path.read_bytes().splitlines())
    code, _, err = run(capsys, "summarize", str(path))
    _one_line_error(code, err, f"{path}: line {n}: not JSON")


def test_summarize_shows_why_a_run_ended(logs: Path, tmp_path: Path, capsys) -> None:
    """A run the live runtime ended early (requeued, cancelled, failed) carries its
    reason in its summary record; the table shows it in the ``ended`` column."""
    records = [json.loads(x) for x in (logs / "sq.jsonl").read_text().splitlines()]
    first = next(r for r in records if r["type"] == "summary")
    first["reason"] = "requeued: node n2 lost (no answer from its local manager for 51 cycles)"
    path = tmp_path / "ended.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    code, out, _ = run(capsys, "summarize", str(path))
    assert code == 0
    header, *lines = out.splitlines()
    assert header.split()[-2:] == ["completed", "ended"]
    (row,) = [ln for ln in lines if ln.startswith(first["job"] + " ")]
    assert row.endswith(first["reason"])
    others = [ln for ln in lines if ln.startswith("j0") and ln != row]
    assert others and all(ln.rstrip().endswith(" -") for ln in others)
