"""The global manager's monitor keeps its report calls out across rounds
(:class:`runtime.actors.ReportCalls`): a node whose call is still out (a SIGSTOPped
manager) is not asked again, so a round never waits on it and the other nodes are asked
every round; a call out longer than the give-up bound is dropped and its node asked
again; a call that came back frees its node."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runtime.actors import STATUS_TIMEOUT_S, ReportCalls

NODES = ["n0", "n1", "n2"]


def test_a_node_with_a_call_out_is_not_asked_again_until_it_answers() -> None:
    calls = ReportCalls(STATUS_TIMEOUT_S)
    for n in calls.to_ask(NODES):
        calls.asked(("r0", n), n, 0.0)
    for n in ("n0", "n2"):  # n1's manager is stopped: its call stays out
        assert calls.came(("r0", n)) == n
    assert calls.still_out(1.0) == ["n1"]
    assert calls.to_ask(NODES) == ["n0", "n2"]
    assert calls.refs() == [("r0", "n1")]
    assert calls.came(("r0", "n1")) == "n1"  # it answers a round later
    assert calls.to_ask(NODES) == NODES and calls.refs() == []


def test_a_call_out_longer_than_the_bound_is_given_up_and_asked_again() -> None:
    calls = ReportCalls(5.0)
    calls.asked("r", "n1", 10.0)
    assert calls.still_out(15.0) == ["n1"] and calls.to_ask(NODES) == ["n0", "n2"]
    assert calls.still_out(15.5) == ["n1"]  # listed once more, then dropped
    assert calls.refs() == [] and calls.to_ask(NODES) == NODES


@given(st.lists(st.tuples(st.sampled_from(NODES), st.booleans()), max_size=30))
def test_every_node_has_at_most_one_call_out(rounds: list[tuple[str, bool]]) -> None:
    """Whatever answers when: a node is never asked while its call is out, and every
    node without one is asked."""
    calls = ReportCalls(STATUS_TIMEOUT_S)
    k = 0
    for node, answers in rounds:
        ask = calls.to_ask(NODES)
        out = {r[1] for r in calls.refs()}
        assert set(ask) == set(NODES) - out
        for n in ask:
            k += 1
            calls.asked((k, n), n, 0.0)
        if answers:
            ref = next(r for r in calls.refs() if r[1] == node)
            calls.came(ref)
        nodes_out = [r[1] for r in calls.refs()]
        assert len(nodes_out) == len(set(nodes_out))
