"""Which local managers Ray is restarting, as the global manager's monitor sees them
(:class:`runtime.actors.RestartWatch`), without Ray: Ray's actor table is a fake query.

A node is restarting when the table says ``RESTARTING`` or its last call failed with
``ActorUnavailableError``; it stays so until it answers (the table says ``ALIVE``
before calls reach the new actor); a call that only timed out says nothing; the table
is asked once per round for every node not already known, and, when it cannot be read
(a cluster without Ray's dashboard), not again before ``STATE_API_RETRY_S``."""

from __future__ import annotations

from collections.abc import Collection

from runtime.actors import STATE_API_RETRY_S, RestartWatch


class Table:
    """Ray's actor table: the ids it says are restarting; None: it cannot be read."""

    def __init__(self) -> None:
        self.restarting: set[str] | None = set()
        self.asked: list[list[str]] = []

    def __call__(self, ids: Collection[str]) -> set[str] | None:
        self.asked.append(sorted(ids))
        return None if self.restarting is None else self.restarting & set(ids)


def _watch() -> tuple[RestartWatch, Table, list[float]]:
    table = Table()
    now = [100.0]
    return RestartWatch(lambda node: f"actor-{node}", table, lambda: now[0]), table, now


def test_the_table_says_restarting_and_it_is_kept_until_the_node_answers() -> None:
    watch, table, _ = _watch()
    assert watch.restarting(["n0", "n1"], {}) == set()
    assert table.asked == [["actor-n0", "actor-n1"]]  # one query for every node
    table.restarting = {"actor-n1"}
    assert watch.restarting(["n0", "n1"], {"n1": "no answer"}) == {"n1"}
    table.restarting = set()  # ALIVE again before calls reach it
    assert watch.restarting(["n0", "n1"], {}) == {"n1"}
    assert table.asked[-1] == ["actor-n0"]  # a node known to restart is not asked about
    watch.answered("n1")
    assert watch.restarting(["n0", "n1"], {}) == set()


def test_a_call_that_found_the_actor_unavailable_says_restarting_a_timeout_does_not() -> None:
    watch, table, _ = _watch()
    assert watch.restarting(["n0", "n1"], {"n0": "ActorUnavailableError",
                                           "n1": "GetTimeoutError"}) == {"n0"}
    assert table.asked == [["actor-n1"]]
    assert watch.restarting([], {}) == set()


def test_a_table_that_cannot_be_read_is_asked_again_only_after_a_while() -> None:
    watch, table, now = _watch()
    table.restarting = None  # no dashboard: the state API does not answer
    assert watch.restarting(["n0"], {}) == set()
    assert watch.restarting(["n0"], {"n0": "ActorUnavailableError"}) == {"n0"}
    assert watch.restarting(["n1"], {}) == set()
    assert len(table.asked) == 1  # the failed calls alone say it meanwhile
    now[0] += STATE_API_RETRY_S
    table.restarting = {"actor-n1"}
    assert watch.restarting(["n1"], {}) == {"n1"}
    assert len(table.asked) == 2


def test_a_node_without_a_handle_is_left_to_its_calls() -> None:
    table = Table()

    def actor_id(node: str) -> str:
        raise KeyError(node)

    watch = RestartWatch(actor_id, table)
    assert watch.restarting(["n0"], {}) == set() and table.asked == []
