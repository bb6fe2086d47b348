"""The rendezvous key-value store (:mod:`runtime.kv_store`): limits answer with a clear
error, every run has its own namespace, a dropped run is gone for good, and ``get``
waits for a key (woken by the ``put``, or by the run's end)."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.kv_store import KvLimitError, KvLimits, KvStore, RunGone

#: Bound on how long a test waits for a thread it woke (a hang guard, not a timing).
JOIN_S = 60.0


def test_put_get_and_overwrite() -> None:
    kv = KvStore()
    kv.put("job-1", "addr", "10.0.0.1:5000")
    assert kv.get("job-1", "addr") == "10.0.0.1:5000"
    kv.put("job-1", "addr", "10.0.0.2:5000")
    assert kv.get("job-1", "addr") == "10.0.0.2:5000"
    assert kv.keys("job-1") == ["addr"]


def test_runs_do_not_see_each_other() -> None:
    kv = KvStore()
    kv.put("job-1", "k", "first run")
    assert kv.get("job-1.2", "k", timeout_s=0) is None
    kv.put("job-1.2", "k", "second run")
    assert kv.get("job-1", "k") == "first run"


def test_missing_key_without_wait_is_none() -> None:
    assert KvStore().get("job-1", "nothing", timeout_s=0) is None


@pytest.mark.parametrize("key, words", [
    ("", "empty"),
    ("k" * 257, "257 characters, more than the 256"),
    ("a/b", "only letters"),
    ("a b", "only letters"),
])
def test_bad_keys_are_refused(key: str, words: str) -> None:
    kv = KvStore()
    with pytest.raises(KvLimitError, match=words):
        kv.put("job-1", key, "v")
    with pytest.raises(KvLimitError, match=words):
        kv.get("job-1", key)


def test_value_size_limit() -> None:
    kv = KvStore(KvLimits(max_value=8))
    kv.put("r", "k", "12345678")
    with pytest.raises(KvLimitError, match="value of k: 9 bytes, more than the 8 byte limit"):
        kv.put("r", "k", "123456789")
    with pytest.raises(KvLimitError, match="10 bytes"):
        kv.put("r", "k", "é" * 5)  # counted in UTF-8 bytes
    assert kv.get("r", "k") == "12345678"


def test_key_count_limit_counts_new_keys_only() -> None:
    kv = KvStore(KvLimits(max_keys=2))
    kv.put("r", "a", "1")
    kv.put("r", "b", "2")
    kv.put("r", "a", "again")  # replacing is not a new key
    with pytest.raises(KvLimitError, match="already holds 2 keys, the limit"):
        kv.put("r", "c", "3")
    kv.put("other", "c", "3")  # the limit is per run


def test_run_bytes_limit() -> None:
    kv = KvStore(KvLimits(max_bytes=10))
    kv.put("r", "a", "123456789")  # 1 + 9 bytes
    with pytest.raises(KvLimitError, match="would take 11 bytes, more than the 10"):
        kv.put("r", "a", "1234567890")
    kv.put("r", "a", "1")
    kv.put("r", "b", "1234567")


def test_get_waits_for_the_put() -> None:
    kv = KvStore()
    got: list[str | None] = []
    waiter = threading.Thread(target=lambda: got.append(kv.get("r", "addr", JOIN_S)))
    waiter.start()
    kv.put("r", "other", "not it")
    kv.put("r", "addr", "here")
    waiter.join(JOIN_S)
    assert got == ["here"]


def test_get_times_out_on_its_clock() -> None:
    """The deadline is read on the store's clock: once it has passed, None."""
    readings = iter([0.0, 10.5])
    kv = KvStore(monotonic=lambda: next(readings))
    assert kv.get("r", "k", timeout_s=10.0) is None


def test_drop_wakes_waiters_and_refuses_later_requests() -> None:
    kv = KvStore()
    kv.put("r", "k", "v")
    errors: list[BaseException] = []
    started = threading.Event()

    def wait() -> None:
        started.set()
        try:
            kv.get("r", "never", JOIN_S)
        except RunGone as exc:
            errors.append(exc)

    waiter = threading.Thread(target=wait)
    waiter.start()
    started.wait(JOIN_S)
    kv.drop("r")
    waiter.join(JOIN_S)
    assert not waiter.is_alive()
    assert len(errors) == 1 and "run r has ended" in str(errors[0])
    with pytest.raises(RunGone):
        kv.put("r", "k", "again")
    assert kv.keys("r") == []


def test_retain_drops_runs_that_are_not_live() -> None:
    kv = KvStore()
    for run in ("a", "b", "c"):
        kv.put(run, "k", run)
    assert kv.retain({"b"}) == 2
    assert kv.runs == 1
    assert kv.get("b", "k") == "b"
    with pytest.raises(RunGone):
        kv.get("a", "k")


_keys = st.sampled_from(["a", "b", "c", "addr:0", "x.y"])
_runs = st.sampled_from(["j", "j.2", "k"])
_ops = st.lists(st.tuples(st.sampled_from(["put", "get", "drop"]), _runs, _keys,
                          st.text(max_size=12)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(_ops)
def test_store_behaves_as_a_dict_per_run(ops: list[tuple[str, str, str, str]]) -> None:
    """Against a model (a dict per run, a set of dropped runs), under limits small
    enough to be hit: every answer and every refusal matches, and a run's size never
    passes its byte limit."""
    limits = KvLimits(max_value=8, max_keys=3, max_bytes=20)
    kv = KvStore(limits)
    model: dict[str, dict[str, str]] = {}
    gone: set[str] = set()
    for op, run, key, value in ops:
        if op == "drop":
            kv.drop(run)
            model.pop(run, None)
            gone.add(run)
            continue
        if run in gone:
            with pytest.raises(RunGone):
                kv.put(run, key, value) if op == "put" else kv.get(run, key)
            continue
        ns = model.setdefault(run, {})
        if op == "get":
            assert kv.get(run, key) == ns.get(key)
            continue
        size = len(value.encode("utf-8", "surrogatepass"))
        after = {**ns, key: value}
        total = sum(len(k) + len(v.encode("utf-8", "surrogatepass")) for k, v in after.items())
        ok = size <= limits.max_value and len(after) <= limits.max_keys \
            and total <= limits.max_bytes
        if ok:
            kv.put(run, key, value)
            ns[key] = value
        else:
            with pytest.raises(KvLimitError):
                kv.put(run, key, value)
        assert kv.keys(run) == sorted(ns)
