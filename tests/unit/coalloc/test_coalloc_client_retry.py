"""The client retries a call while the global manager restarts (Ray raises
RayActorError for a call to an actor that is down) and gives one line when it does not
come back; submissions carry a token so that a retry is admitted once."""

from __future__ import annotations

from typing import Any

import pytest

from coalloc import client as client_mod
from coalloc.client import Client
from coalloc.errors import UserError

ray = pytest.importorskip("ray")


class Method:
    def __init__(self, name: str, calls: list[tuple[str, tuple[Any, ...]]]) -> None:
        self.name, self.calls = name, calls

    def remote(self, *args: Any) -> tuple[str, tuple[Any, ...]]:
        self.calls.append((self.name, args))
        return (self.name, args)


class Handle:
    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Method:
        return Method(name, self.calls)


def test_a_call_is_retried_while_the_actor_restarts(monkeypatch: pytest.MonkeyPatch) -> None:
    failures = [ray.exceptions.ActorUnavailableError("restarting", None),
                ray.exceptions.ActorDiedError()]

    def fake_get(ref: Any, timeout: float | None = None) -> Any:
        if failures:
            raise failures.pop(0)
        return {"j00001": "running"}

    monkeypatch.setattr(ray, "get", fake_get)
    monkeypatch.setattr(client_mod, "RETRY_EVERY_S", 0.0)
    handle = Handle()
    assert Client(handle, "h:1").job_states(["j00001"]) == {"j00001": "running"}
    assert [c[0] for c in handle.calls] == ["job_states"] * 3


def test_one_line_when_it_does_not_come_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_get(ref: Any, timeout: float | None = None) -> Any:
        raise ray.exceptions.ActorUnavailableError("restarting", None)

    monkeypatch.setattr(ray, "get", fake_get)
    monkeypatch.setattr(client_mod, "RESTART_WAIT_S", 0.0)
    with pytest.raises(UserError) as err:
        Client(Handle(), "h:1").job_states()
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith("h:1: the coalloc global manager did not come back")


def test_a_retried_submission_sends_the_same_token(monkeypatch: pytest.MonkeyPatch) -> None:
    failures = [ray.exceptions.ActorUnavailableError("restarting", None)]

    def fake_get(ref: Any, timeout: float | None = None) -> Any:
        if ref[0] == "deployment":
            return {"n_nodes": 3}
        if failures:
            raise failures.pop(0)
        return [{"job_id": "j00001", "name": "a", "admitted": True, "reason": ""}]

    monkeypatch.setattr(ray, "get", fake_get)
    monkeypatch.setattr(client_mod, "RETRY_EVERY_S", 0.0)
    handle = Handle()
    job = {"name": "a", "qos": "best_effort", "subtasks": [{"work": 1}, {"work": 1}]}
    assert Client(handle, "h:1").submit(job) == "j00001"
    submits = [args for name, args in handle.calls if name == "submit"]
    assert len(submits) == 2 and submits[0][1] == submits[1][1] and len(submits[0][1]) == 32
