"""Node specs (--nodes), Ray node -> grid node, placement of local managers; the config,
the time base and the state file."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from clocks.base import ManualClock
from coalloc.errors import UserError
from global_manager.simulator import SimConfig
from runtime.config import RuntimeConfig, local_manager_name, runtime_core
from runtime.nodes import (
    RayNodeInfo,
    node_for_ray_node,
    parse_nodes_spec,
    plan,
    ray_nodes_from,
)
from runtime.state import DeploymentState, clear_state, load_state, save_state, state_path
from runtime.timebase import ModelClock, TimeBase, boundary_at_or_after, boundary_index
from workloads.generator import PaperWorkloadParams, generate


def test_count_spec_draws_the_papers_speeds_as_the_generator_does() -> None:
    for seed in (0, 1, 7):
        nodes = parse_nodes_spec("4", seed)
        gen = generate(
            PaperWorkloadParams(nodes=4, jobs=1, local_flow=False, best_effort_flow=False), seed
        )
        assert [n.speed_mhz for n in nodes] == [n.speed_mhz for n in gen.nodes]
        assert all(100 <= n.speed_mhz <= 600 and n.cores == 1 for n in nodes)
    assert parse_nodes_spec("4", 0) != parse_nodes_spec("4", 1)
    assert [n.name for n in parse_nodes_spec("3")] == ["n0", "n1", "n2"]


def test_list_spec_gives_speeds_in_mhz() -> None:
    nodes = parse_nodes_spec("300, 450,600.5")
    assert [(n.name, n.speed_mhz) for n in nodes] == [("n0", 300.0), ("n1", 450.0),
                                                      ("n2", 600.5)]
    assert len(parse_nodes_spec("2")) == 2  # a bare integer is a count, not MHz
    assert [n.speed_mhz for n in parse_nodes_spec("2.0")] == [2.0]  # a number with a dot: MHz


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("", "empty"),
        ("0", "count must be within"),
        ("5000", "count must be within"),
        ("300,abc", "item 1 ('abc'): not a number"),
        ("300,-5", "item 1 ('-5'): speed must be > 0"),
        ("300,nan", "item 1 ('nan'): speed must be > 0"),
    ],
)
def test_bad_node_specs_name_the_item(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match="--nodes") as exc:
        parse_nodes_spec(spec)
    assert message in str(exc.value)


def test_labels_follow_the_speed_after_colons() -> None:
    nodes = parse_nodes_spec("300:fast,450, 600 : gpu : fast ,2.5:a+b")
    assert [(n.name, n.speed_mhz, n.labels) for n in nodes] == [
        ("n0", 300.0, frozenset({"fast"})),
        ("n1", 450.0, frozenset()),
        ("n2", 600.0, frozenset({"gpu", "fast"})),
        ("n3", 2.5, frozenset({"a+b"})),
    ]
    # With a label a lone whole number is a speed, not a count.
    assert [(n.speed_mhz, n.labels) for n in parse_nodes_spec("4:fast")] == [
        (4.0, frozenset({"fast"}))]
    assert all(n.labels == frozenset() for n in parse_nodes_spec("3"))


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("300:", "item 0 ('300:'): empty label"),
        ("300,450::gpu", "item 1 ('450::gpu'): empty label"),
        ("fast:300", "item 0 ('fast:300'): not a number of MHz"),
        (":fast", "item 0 (':fast'): not a number of MHz"),
        ("300:fa st", "must not contain whitespace"),
        ("300:a\x1b[31m", "control characters"),
        ("300;fast", "not a number of MHz"),
    ],
)
def test_bad_labels_name_the_flag_and_the_item(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match="^--nodes: ") as exc:
        parse_nodes_spec(spec)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_labels_from_custom_resources() -> None:
    from runtime.nodes import labels_from_resources

    infos = ray_nodes_from([
        _info("aaaaaaaa", head=True, CPU=2.0, coalloc_label_fast=1.0, coalloc_label_gpu=4.0),
        _info("bbbbbbbb", CPU=1.0, coalloc_label_fast=0.0, coalloc_mhz=300.0),
        _info("cccccccc", CPU=1.0, coalloc_labelx=1.0),
    ])
    nodes = [node_for_ray_node(info, i, 1000.0) for i, info in enumerate(infos)]
    assert [(n.name, n.labels) for n in nodes] == [
        ("r0-aaaaaa", frozenset({"fast", "gpu"})),
        ("r1-bbbbbb", frozenset()),  # an amount of 0 declares nothing
        ("r2-cccccc", frozenset()),  # not the prefix
    ]
    # The labels reach the nodes the actors are built with.
    assert [p.node.labels for p in plan(infos, None, 1000.0)] == [n.labels for n in nodes]
    bad = RayNodeInfo("dddddddd1234abcd", "10.0.0.4", {"coalloc_label_": 1.0})
    with pytest.raises(ValueError, match="Ray node dddddddd1234 .10.0.0.4.: resource "
                                         "'coalloc_label_': empty label"):
        labels_from_resources(bad)
    with pytest.raises(ValueError, match="must not contain ',' or ':'"):
        labels_from_resources(RayNodeInfo("e", "", {"coalloc_label_a:b": 1.0}))


def _info(node_id: str, head: bool = False, **res: float) -> dict[str, object]:
    resources = dict(res)
    if head:
        resources["node:__internal_head__"] = 1.0
    return {"NodeID": node_id, "Alive": True, "NodeManagerAddress": "10.0.0.1",
            "Resources": resources}


def test_ray_nodes_head_first_dead_ones_dropped_and_speeds_from_resources() -> None:
    raw = [
        _info("bbbbbbbb", CPU=4.0),
        {"NodeID": "dead", "Alive": False, "Resources": {}},
        _info("cccccccc", head=True, CPU=2.0, coalloc_mhz=450.0),
        _info("aaaaaaaa", CPU=0.0),
    ]
    infos = ray_nodes_from(raw)
    assert [i.node_id for i in infos] == ["cccccccc", "aaaaaaaa", "bbbbbbbb"]
    nodes = [node_for_ray_node(info, i, 1000.0) for i, info in enumerate(infos)]
    assert [(n.speed_mhz, n.cores) for n in nodes] == [(450.0, 2.0), (1000.0, 1.0),
                                                       (1000.0, 4.0)]
    assert nodes[0].name == "r0-cccccc"
    assert local_manager_name(nodes[0].name) == "coalloc-lm-r0-cccccc"


def test_plan_one_per_ray_node_or_emulated_round_robin() -> None:
    infos = [RayNodeInfo("h", "", {"CPU": 1.0}, True), RayNodeInfo("w", "", {"CPU": 1.0})]
    per_node = plan(infos, None, 1000.0)
    assert [(p.ray_node_id, p.emulated) for p in per_node] == [("h", False), ("w", False)]
    emulated = plan(infos, parse_nodes_spec("1,2,3"), 1000.0)
    assert [(p.node.speed_mhz, p.ray_node_id, p.emulated) for p in emulated] == [
        (1.0, "h", True), (2.0, "w", True), (3.0, "h", True)
    ]
    with pytest.raises(ValueError, match="no alive nodes"):
        plan([], None, 1000.0)


def test_runtime_config_defaults_are_the_simulators() -> None:
    cfg = RuntimeConfig()
    sim = SimConfig()
    got = cfg.sim_config()
    for name in ("cycle", "control_every", "rate_per_weight", "queue_weights",
                 "work_conserving", "log_every"):
        assert getattr(got, name) == getattr(sim, name), name
    assert cfg.real_cycle == pytest.approx(cfg.cycle / cfg.time_scale)
    assert cfg.qos_share == pytest.approx(0.5)
    assert RuntimeConfig(runtime_core(cycle=5.0, control_every=3)).control_period == 15.0


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"policy": "nope"}, "policy"),
        ({"time_scale": 0.0}, "time_scale"),
        ({"cycle": float("inf")}, "cycle"),
        ({"control_every": 0}, "control_every"),
        ({"control_lag": 1.0}, "control_lag"),
        ({"report_port": 70000}, "report_port"),
        ({"start_margin_s": -1.0}, "start_margin_s"),
        ({"queue_weights": (0.0, 0.0, 0.0)}, "queue_weights"),
        ({"time_scale": "100"}, "time_scale: must be a finite number > 0, got '100'"),
        ({"control_every": 2.0}, "control_every: must be an integer >= 1, got 2.0"),
        ({"insecure": 1}, "insecure: must be true or false, got 1"),
        ({"queue": "wiat"}, "queue: must be one of reject, wait, got 'wiat'"),
    ],
)
def test_runtime_config_rejects_bad_values_naming_the_field(
    kwargs: dict[str, object], field: str
) -> None:
    core = {k: v for k, v in kwargs.items() if k in SimConfig.__dataclass_fields__}
    rest = {k: v for k, v in kwargs.items() if k not in core}
    with pytest.raises(ValueError, match=field):
        RuntimeConfig(runtime_core(**core), **rest)  # type: ignore[arg-type]


def test_runtime_config_lists_become_tuples() -> None:
    cfg = RuntimeConfig(ntp_servers=["a:123"])  # type: ignore[arg-type]
    assert cfg.ntp_servers == ("a:123",)
    core = SimConfig(queue_weights=[0.3, 0.5, 0.2])  # type: ignore[arg-type]
    assert core.queue_weights == (0.3, 0.5, 0.2)


def test_time_base_and_cycle_boundaries() -> None:
    base = TimeBase(epoch=1_000.0, scale=100.0)
    assert base.model_at(1_002.5) == pytest.approx(250.0)
    assert base.real_at(base.model_at(1_234.5)) == pytest.approx(1_234.5)
    real = ManualClock(1_001.0)
    clock = ModelClock(real, base)
    assert clock.now() == pytest.approx(100.0)
    assert clock.seconds_until(300.0) == pytest.approx(2.0)
    assert clock.clock_status() == (None, None)  # a clock without status()
    assert boundary_at_or_after(20.0, 10.0) == 20.0
    assert boundary_at_or_after(20.0001, 10.0) == 30.0
    assert boundary_index(29.9999, 10.0) == 2
    assert boundary_index(30.0, 10.0) == 3
    with pytest.raises(ValueError, match="scale"):
        TimeBase(0.0, 0.0)


def test_state_file_round_trip_and_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COALLOC_HOME", str(tmp_path / "home"))
    assert load_state() is None
    st = DeploymentState(address="127.0.0.1:6379", embedded=True, actors=("a", "b"),
                         head_pid=42, phase_log="/x.jsonl", started_at=1.5)
    path = save_state(st)
    assert path == state_path() and path.parent == tmp_path / "home"
    assert load_state() == st
    # Readable by its owner only, also when it replaces a looser file; no temp file left.
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    path.chmod(0o644)
    save_state(st)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["state.json"]
    path.write_text("{not json")
    with pytest.raises(UserError, match="unreadable state file"):
        load_state()
    path.write_text(json.dumps({"version": 99}))
    with pytest.raises(UserError, match="version"):
        load_state()
    path.write_text(json.dumps({"version": 1, "embedded": True}))
    with pytest.raises(UserError, match="malformed"):
        load_state()
    clear_state()
    clear_state()  # idempotent
    assert load_state() is None
