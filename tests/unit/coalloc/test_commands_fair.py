"""``coalloc fair``: the README's first command, flags form, JSON, and bad input as one
line naming file, field and reason (exit 2)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coalloc import cli

REPO = Path(__file__).resolve().parents[3]
EXAMPLE = REPO / "examples" / "drf-paper.yaml"


def _rows(out: str) -> dict[str, list[str]]:
    return {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:] if line.strip()}


def test_readme_first_command_prints_three_and_two_tasks(capsys) -> None:
    assert cli.main(["fair", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "policy: drf"
    rows = _rows(out)
    assert rows["user"] == ["tasks", "dominant", "share", "cpu", "memory_gb"]
    assert rows["A"] == ["3", "0.6667", "3", "12"]
    assert rows["B"] == ["2", "0.6667", "6", "2"]
    assert rows["total"] == ["9", "14"]
    assert rows["utilization"] == ["100.0%", "77.8%"]


def test_json_output(capsys) -> None:
    assert cli.main(["fair", str(EXAMPLE), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["policy"] == "drf"
    assert [(u["name"], u["tasks"]) for u in doc["users"]] == [("A", 3), ("B", 2)]
    assert doc["users"][0]["allocation"] == {"cpu": 3.0, "memory_gb": 12.0}
    assert doc["utilization"]["cpu"] == pytest.approx(1.0)


def test_flags_form_and_policy_choice(capsys) -> None:
    args = ["fair", "--capacity", "9,18", "--user", "A:1,4", "--user", "B:3,1",
            "--policy", "ceei", "--json"]
    assert cli.main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [u["tasks"] for u in doc["users"]] == pytest.approx([45 / 11, 18 / 11])
    assert doc["resources"] == ["r0", "r1"]


def test_flags_weight_and_max_tasks(capsys) -> None:
    args = ["fair", "--capacity", "9,18", "--resources", "cpu,mem", "--user", "A:1,4:1:1",
            "--user", "B:3,1", "--json"]
    assert cli.main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [u["tasks"] for u in doc["users"]] == [1, 2]
    assert list(doc["capacity"]) == ["cpu", "mem"]


def test_policy_flag_overrides_the_file(capsys) -> None:
    assert cli.main(["fair", str(EXAMPLE), "--policy", "asset_fairness", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [u["tasks"] for u in doc["users"]] == pytest.approx([2.52, 2.16])


def test_json_file_with_weights(tmp_path, capsys) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({
        "policy": "drf_divisible", "capacity": [9, 18],
        "users": [{"name": "A", "demand": [1, 4], "weight": 2},
                  {"name": "B", "demand": [3, 1], "weight": [1, 1]}]}))
    assert cli.main(["fair", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [u["tasks"] for u in doc["users"]] == pytest.approx([54 / 13, 18 / 13])


BAD_FILES = [
    ("missing.yaml", "capacity: [9, 18]\nusers:\n  - {name: A}\n",
     "users[0].demand: missing"),
    ("nocap.yaml", "users:\n  - {name: A, demand: [1]}\n", "capacity: missing"),
    ("negative.yaml", "capacity: [9, 18]\nusers:\n  - {name: A, demand: [1, -4]}\n",
     "users[0].demand[1]: must be >= 0, got -4"),
    ("policy.yaml", "policy: fifo\ncapacity: [9]\nusers: [{name: A, demand: [1]}]\n",
     "policy: unknown policy 'fifo'; known: drf,"),
    ("broken.yaml", "capacity: [9, 18\nusers: x\n", "line 2, column 6: not valid YAML"),
    ("broken.json", '{"capacity": [9, 18],', "line 1, column 22: not valid JSON"),
    ("zero.yaml", "capacity: [0, 18]\nusers: [{name: A, demand: [1, 1]}]\n",
     "capacity[0]: must be > 0, got 0"),
    ("short.yaml", "capacity: [9, 18]\nusers: [{name: A, demand: [1]}]\n",
     "users[0].demand: has 1 entries, expected 2 (one per capacity entry)"),
    ("typo.yaml", "capacity: [9]\nusers: [{name: A, demand: [1], wieght: 2}]\n",
     "users[0].wieght: unknown field; did you mean 'weight'?"),
    ("dup.yaml", "capacity: [9]\nusers: [{name: A, demand: [1]}, {name: A, demand: [2]}]\n",
     "users[1].name: 'A' is used twice"),
    ("allzero.yaml", "capacity: [9, 1]\nusers: [{name: A, demand: [0, 0]}]\n",
     "users[0].demand: is zero on every resource"),
    ("text.yaml", "capacity: [9, '18']\nusers: [{name: A, demand: [1, 1]}]\n",
     "capacity[1]: must be a number, got str '18'"),
    ("ceeicap.yaml", "policy: ceei\ncapacity: [9]\nusers: [{name: A, demand: [1], "
     "max_tasks: 2}]\n", "max_tasks[0]: the policy ceei does not support caps"),
    ("empty.yaml", "   \n", "empty file"),
    ("list.yaml", "- 1\n- 2\n", "expected a mapping with capacity and users, got list"),
]


@pytest.mark.parametrize(("name", "text", "expected"), BAD_FILES,
                         ids=[b[0] for b in BAD_FILES])
def test_bad_file_is_one_line_naming_file_and_field(tmp_path, capsys, name, text,
                                                     expected) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert cli.main(["fair", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert captured.err.startswith(f"coalloc: error: {path}: ")
    assert expected in captured.err


def test_missing_file_and_wrong_suffix(tmp_path, capsys) -> None:
    assert cli.main(["fair", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err.endswith("nope.yaml: no such file\n")
    other = tmp_path / "p.txt"
    other.write_text("capacity: [1]")
    assert cli.main(["fair", str(other)]) == 2
    assert "unknown file type '.txt'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--user", "A:1"], "--capacity: missing"),
        (["--capacity", "9"], "--user: missing"),
        (["--capacity", "9,x", "--user", "A:1"], "--capacity: entry 2 'x' is not a number"),
        (["--capacity", "9", "--user", "A"], "expected NAME:DEMAND[:WEIGHT[:MAX_TASKS]]"),
        (["--capacity", "9", "--user", "A:-1"], "--user A: demand: entry 1 '-1' must be"),
        (["--capacity", "9", "--user", "A:1:0"], "--user A: weight: entry 1 '0' must be"),
    ],
)
def test_bad_flags(capsys, args, expected) -> None:
    assert cli.main(["fair", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and expected in err


def test_file_and_flags_together_is_an_error(capsys) -> None:
    assert cli.main(["fair", str(EXAMPLE), "--capacity", "1"]) == 2
    assert "not both" in capsys.readouterr().err


STRICT_FILES = [
    ("textweight.yaml", "capacity: [9]\nusers: [{name: A, demand: [1], weight: '2'}]\n",
     "users[0].weight: must be a number, got str '2'"),
    ("boolcap.yaml", "capacity: [true]\nusers: [{name: A, demand: [1]}]\n",
     "capacity[0]: must be a number, got bool True"),
    ("listweight.yaml", "capacity: [9, 9]\nusers: [{name: A, demand: [1, 1], weight: [1, 0]}]\n",
     "users[0].weight[1]: must be > 0, got 0"),
    ("shortweight.yaml", "capacity: [9, 9]\nusers: [{name: A, demand: [1, 1], weight: [1]}]\n",
     "users[0].weight: has 1 entries, expected 2 (one per capacity entry)"),
    ("typo.yaml", "capacty: [9]\nusers: [{name: A, demand: [1]}]\n",
     "capacty: unknown field; did you mean 'capacity'?"),
    ("nomatch.yaml", "capacity: [9]\nusers: [{name: A, demand: [1], zzz: 1}]\n",
     "users[0].zzz: unknown field; known fields: name, demand, weight, max_tasks"),
    ("boolname.yaml", "capacity: [9]\nusers: [{name: true, demand: [1]}]\n",
     "users[0].name: must be a non-empty name"),
]


@pytest.mark.parametrize(("name", "text", "expected"), STRICT_FILES,
                         ids=[b[0] for b in STRICT_FILES])
def test_strict_types_and_unknown_fields(tmp_path, capsys, name, text, expected) -> None:
    path = tmp_path / name
    path.write_text(text)
    assert cli.main(["fair", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == f"coalloc: error: {path}: {expected}\n"


def test_a_user_named_by_a_number(tmp_path, capsys) -> None:
    path = tmp_path / "n.yaml"
    path.write_text("capacity: [9]\nusers: [{name: 1, demand: [1]}, {name: B, demand: [2]}]\n")
    assert cli.main(["fair", str(path), "--json"]) == 0
    assert [u["name"] for u in json.loads(capsys.readouterr().out)["users"]] == ["1", "B"]
