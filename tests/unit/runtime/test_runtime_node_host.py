"""Several emulated nodes per local-manager process: which nodes share a process, and how
the global manager calls a hosted node as if it had its own actor."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runtime.deploy import _host_groups
from runtime.node_host import (
    MAX_NODES_PER_PROCESS,
    HostedNode,
    default_nodes_per_process,
    host_name,
)
from runtime.nodes import NodePlacement
from workloads.model import Node


def placements(emulated: int, real: int = 0) -> list[NodePlacement]:
    out = [NodePlacement(Node(f"n{i}", 300.0), "head", True) for i in range(emulated)]
    out += [NodePlacement(Node(f"r{i}", 300.0), f"ray{i}", False) for i in range(real)]
    return out


def test_small_grids_keep_a_process_per_node() -> None:
    assert default_nodes_per_process(1) == 1 and default_nodes_per_process(8) == 1
    assert default_nodes_per_process(64) == 32 and default_nodes_per_process(256) == 32
    assert default_nodes_per_process(9) == 9 and default_nodes_per_process(100) == 25
    assert all(len(g) == 1 for g in _host_groups(placements(8), 1))


@given(st.integers(1, 300), st.integers(0, 4), st.integers(1, 40))
def test_groups_cover_every_node_once_and_share_only_emulated_ray_nodes(
    emulated: int, real: int, per: int
) -> None:
    ps = placements(emulated, real)
    groups = _host_groups(ps, per)
    assert [p for g in groups for p in g] == ps  # every node once, in order
    for g in groups:
        assert 1 <= len(g) <= per
        if len(g) > 1:
            assert all(p.emulated for p in g) and len({p.ray_node_id for p in g}) == 1
    assert sum(1 for g in groups if not g[0].emulated) == real


@given(st.integers(9, 2000))
def test_the_default_makes_the_fewest_processes_of_at_most_the_largest_host(
    emulated: int
) -> None:
    per = default_nodes_per_process(emulated)
    groups = _host_groups(placements(emulated), per)
    assert per <= MAX_NODES_PER_PROCESS
    assert len(groups) == -(-emulated // MAX_NODES_PER_PROCESS)
    assert max(map(len, groups)) <= MAX_NODES_PER_PROCESS


class FakeMethod:
    def __init__(self, calls: list[tuple[str, tuple[Any, ...]]], name: str) -> None:
        self.calls, self.name = calls, name

    def remote(self, *args: Any) -> str:
        self.calls.append((self.name, args))
        return f"ref-{self.name}"


class FakeHost:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> FakeMethod:
        return FakeMethod(self.calls, name)


def test_a_hosted_node_is_called_like_its_own_actor() -> None:
    host = FakeHost()
    handle = HostedNode(host, "n3")
    assert handle.place.remote(["s"], 30.0) == "ref-place"
    handle.cancel.remote("j1")
    handle.status.remote()
    assert host.calls == [("place", ("n3", ["s"], 30.0)), ("cancel", ("n3", "j1")),
                          ("status", ("n3",))]
    assert host_name(2) == "coalloc-lmh-2"
