"""Which grid nodes the live runtime runs, and on which Ray node each local manager sits.

Two ways to get nodes:

* one local manager per Ray node (the default): the node's speed is its
  ``coalloc_mhz`` custom resource when it declares one, else ``core_mhz``; its cores are
  its ``CPU`` resource (at least 1); its labels are ``<name>`` for every custom resource
  ``coalloc_label_<name>`` it declares (``ray start --resources
  '{"coalloc_label_fast": 1}'``);
* emulated nodes (``--nodes SPEC``): ``SPEC`` is a count (``4``: speeds drawn in whole MHz
  uniform in 100-600, as the paper's generator draws them, from ``random.Random(seed)``;
  the same draws as :func:`workloads.generator.generate` makes for its nodes) or a
  comma-separated list of speeds in MHz, each optionally followed by labels, each after a
  ``:`` (``300:fast:gpu,450``: node n0 at 300 MHz labelled fast and gpu, n1 at 450 MHz
  without labels). Only a bare whole number alone is a count (``300:fast`` is one node).
  Each is a separate local-manager actor with one core; they are spread round-robin over
  the Ray nodes (several may share one Ray node).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workloads.model import Node

#: Speeds (MHz) the paper draws node CPUs from.
PAPER_SPEED_RANGE: tuple[int, int] = (100, 600)
#: Custom Ray resource a node may declare to give its speed in MHz.
SPEED_RESOURCE = "coalloc_mhz"
#: Largest number of emulated nodes (hosted several to a local-manager process past 8,
#: runtime.node_host; Ray's own envelope is about 2,000 nodes per cluster).
MAX_EMULATED = 1024
#: A Ray node's custom resource ``coalloc_label_<name>`` gives it the label ``<name>``.
LABEL_RESOURCE_PREFIX = "coalloc_label_"
#: Separates a ``--nodes`` speed from its labels, and the labels (``300:fast:gpu``); job
#: files refuse ``:`` (and ``,``) in a label, so it cannot be part of one.
LABEL_SEP = ":"
NODES_EXAMPLE = "300:fast:gpu,450"


@dataclass(frozen=True, slots=True)
class RayNodeInfo:
    """A live Ray node: its id, address and resources (as ``ray.nodes()`` gives them)."""

    node_id: str
    address: str
    resources: Mapping[str, float]
    is_head: bool = False


@dataclass(frozen=True, slots=True)
class NodePlacement:
    """A grid node and the Ray node its local manager is pinned to."""

    node: Node
    ray_node_id: str
    emulated: bool


def parse_nodes_spec(spec: str, seed: int = 0) -> list[Node]:
    """Emulated nodes from ``--nodes``: a count (paper speeds, seeded) or MHz values.

    Raises ValueError naming ``--nodes``, the position and the reason.
    """
    text = spec.strip()
    if not text:
        raise ValueError("--nodes: empty; give a count (4) or speeds in MHz (300,450,600)")
    if "," not in text and text.isdigit():
        count = int(text)
        if not 1 <= count <= MAX_EMULATED:
            raise ValueError(f"--nodes: count must be within 1..{MAX_EMULATED}, got {count}")
        rng = random.Random(seed)
        lo, hi = PAPER_SPEED_RANGE
        return [Node(name=f"n{i}", speed_mhz=float(rng.randint(lo, hi))) for i in range(count)]
    nodes: list[Node] = []
    for i, item in enumerate(text.split(",")):
        item = item.strip()
        speed_text, *label_texts = item.split(LABEL_SEP)
        speed_text = speed_text.strip()
        try:
            mhz = float(speed_text)
        except ValueError:
            raise ValueError(
                f"--nodes: item {i} ({item!r}): not a number of MHz; "
                f"give a count (4) or speeds in MHz with optional labels ({NODES_EXAMPLE})"
            ) from None
        if not math.isfinite(mhz) or mhz <= 0:
            raise ValueError(f"--nodes: item {i} ({item!r}): speed must be > 0 MHz")
        labels = [_check_label(lab.strip(), f"--nodes: item {i} ({item!r})",
                               f"; labels follow the speed, each after a ':' ({NODES_EXAMPLE})")
                  for lab in label_texts]
        nodes.append(Node(name=f"n{i}", speed_mhz=mhz, labels=frozenset(labels)))
    if len(nodes) > MAX_EMULATED:
        raise ValueError(f"--nodes: at most {MAX_EMULATED} nodes, got {len(nodes)}")
    return nodes


def _check_label(label: str, where: str, hint: str = "") -> str:
    """A node label as job files may name it: non-empty, without ``,`` ``:``, whitespace
    or control characters (``workloads.spec`` refuses ``,`` ``:`` and control characters
    in a subtask's ``labels``)."""
    if not label:
        raise ValueError(f"{where}: empty label{hint}")
    if "," in label or LABEL_SEP in label:
        raise ValueError(f"{where}: a label must not contain ',' or ':', got {label!r}")
    bad = next((c for c in label if c.isspace() or not c.isprintable()), None)
    if bad is not None:
        raise ValueError(f"{where}: label {ascii(label)}: must not contain whitespace or "
                         f"control characters ({ascii(bad)})")
    return label


def ray_nodes_from(raw: Sequence[Mapping[str, Any]]) -> list[RayNodeInfo]:
    """The alive nodes of a ``ray.nodes()`` listing, head first, then by node id."""
    out = []
    for n in raw:
        if not n.get("Alive", False):
            continue
        res = dict(n.get("Resources", {}))
        out.append(
            RayNodeInfo(
                node_id=str(n["NodeID"]),
                address=str(n.get("NodeManagerAddress", "")),
                resources=res,
                is_head="node:__internal_head__" in res,
            )
        )
    out.sort(key=lambda r: (not r.is_head, r.node_id))
    return out


def labels_from_resources(info: RayNodeInfo) -> frozenset[str]:
    """The labels a Ray node declares: ``<name>`` for each custom resource
    ``coalloc_label_<name>`` it has (any positive amount). Raises ValueError naming the
    node and the resource when ``<name>`` is not a label a job file could ask for."""
    labels = set()
    for key, amount in info.resources.items():
        if key.startswith(LABEL_RESOURCE_PREFIX) and float(amount) > 0:
            where = f"Ray node {info.node_id[:12]} ({info.address}): resource {key!r}"
            labels.add(_check_label(key[len(LABEL_RESOURCE_PREFIX):], where))
    return frozenset(labels)


def node_for_ray_node(info: RayNodeInfo, index: int, core_mhz: float) -> Node:
    """The grid node a Ray node stands for: speed from ``coalloc_mhz`` or ``core_mhz``,
    cores from its CPUs, labels from its ``coalloc_label_<name>`` resources. Named
    ``r<index>-<first 6 hex digits of the node id>``."""
    speed = float(info.resources.get(SPEED_RESOURCE, core_mhz))
    cores = max(1.0, float(info.resources.get("CPU", 1.0)))
    return Node(name=f"r{index}-{info.node_id[:6]}", speed_mhz=speed, cores=cores,
                labels=labels_from_resources(info))


def plan(
    ray_nodes: Sequence[RayNodeInfo], emulated: Sequence[Node] | None, core_mhz: float
) -> list[NodePlacement]:
    """Where each local manager goes: one per Ray node, or the emulated nodes round-robin."""
    if not ray_nodes:
        raise ValueError("ray cluster: no alive nodes")
    if emulated:
        return [
            NodePlacement(node, ray_nodes[i % len(ray_nodes)].node_id, True)
            for i, node in enumerate(emulated)
        ]
    return [
        NodePlacement(node_for_ray_node(info, i, core_mhz), info.node_id, False)
        for i, info in enumerate(ray_nodes)
    ]
