"""The steps of a grid cycle, written once; the simulator and the live runtime drive them.

A cycle of the model (``docs/model.md`` §3) is: admit and place what arrived (the global
manager), hand each placed run to the controller and its nodes (:func:`start_run`); on
every node apply the re-weight commands that came in, then step the local scheduler
(:func:`node_cycle`); feed the progress reports to the controller; every control period,
control and send the commands (:func:`control_cycle`).

The steps take their channels as arguments (callables and iterables), never a transport:
the simulator (:func:`global_manager.simulator.simulate`) passes in-memory calls and
steps every node itself on a manual clock; the live runtime passes Ray calls and ZeroMQ
sockets, and each actor runs its own step on model time (the global manager
:func:`start_run`, each local manager :func:`node_cycle`, the controller
:func:`control_cycle`). The same decisions follow from the same inputs: the parity tests
(``tests/unit/runtime/test_runtime_wiring.py``) hold the two drivers to it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from coallocator.core import ControllerCore
from local_manager.scheduler import CycleResult, LocalScheduler
from workloads.messages import JobRegistration, ReweightCommand
from workloads.model import Subtask


def start_run(
    registration: JobRegistration | None,
    subtasks: Sequence[Subtask],
    register: Callable[[JobRegistration], None],
    place: Callable[[str, list[Subtask]], None],
) -> None:
    """Hand a placed run to the controller (``registration``: grid QoS runs only; None
    for best-effort and local work), then to its nodes, one ``place`` call per node with
    its subtasks, nodes in the order of their first subtask. A failing call propagates:
    the caller decides what a partial start means (the live global manager withdraws it,
    see :meth:`runtime.global_service.GlobalService._settle`)."""
    if registration is not None:
        register(registration)
    by_node: dict[str, list[Subtask]] = {}
    for s in subtasks:
        by_node.setdefault(s.node, []).append(s)
    for node, group in by_node.items():
        place(node, group)


@dataclass(slots=True)
class CommandCounts:
    """What :func:`apply_commands` did with the commands it was given."""

    applied: int = 0
    unknown: int = 0  # no such subtask on the node (ended, cancelled, never placed)
    other_node: int = 0  # addressed to another node


def apply_commands(
    scheduler: LocalScheduler, commands: Iterable[ReweightCommand]
) -> CommandCounts:
    """Apply re-weight commands to one node's scheduler (weights in Mcycles/s, rate cap
    in Mcycles/s, 0 = none)."""
    counts = CommandCounts()
    node = scheduler.node.name
    for cmd in commands:
        if cmd.node != node:
            counts.other_node += 1
            continue
        try:
            applied = scheduler.set_weights(
                (cmd.job_id, cmd.subtask), cmd.weight, cmd.virtual_weight, cmd.rate_cap
            )
        except ValueError:
            applied = False
        if applied:
            counts.applied += 1
        else:
            counts.unknown += 1
    return counts


def node_cycle(
    scheduler: LocalScheduler,
    commands: Iterable[ReweightCommand],
    end: float,
    cycle: float,
) -> tuple[CycleResult | None, CommandCounts]:
    """One node's cycle ending at ``end`` (s) of length ``cycle`` (s): the commands that
    came in since the last one, then a scheduler step (none on an empty node)."""
    counts = apply_commands(scheduler, commands)
    result = scheduler.step(end, cycle) if len(scheduler) else None
    return result, counts


def control_cycle(
    controller: ControllerCore,
    end: float,
    send: Callable[[ReweightCommand], object],
    clock_offset: float | None = None,
    clock_quality: str | None = None,
) -> list[ReweightCommand]:
    """The control period ending at ``end`` (s): decide, then send every command."""
    commands = controller.control_period(end, clock_offset, clock_quality)
    for cmd in commands:
        send(cmd)
    return commands
