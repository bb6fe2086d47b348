"""The authorisation rule and the credential registry (:mod:`runtime.identity`), pure.

The rule is checked as a property over role x action x ownership; the registry keeps
hashes only, tells a revoked credential from an unknown one, and refuses to leave a
deployment without an admin."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.identity import (
    Action,
    Credential,
    Forbidden,
    Identity,
    Refusal,
    Registry,
    Role,
    allowed,
    check_cancel,
    check_submit,
    check_user_name,
    new_salt,
    seed,
    token_digest,
)

names = st.sampled_from(["alice", "bob", "carol"])
roles = st.sampled_from(list(Role))
actions = st.sampled_from(list(Action))


@given(roles, actions, names, st.none() | names)
def test_the_rule(role: Role, action: Action, user: str, owner: str | None) -> None:
    """Admins may everything; everyone reads; private parts, submitting and cancelling
    only one's own (and not read-only for the last two); users are managed by admins."""
    own = owner == user
    expected = {
        Action.READ: True,
        Action.READ_PRIVATE: own,
        Action.SUBMIT: role is Role.USER and own,
        Action.CANCEL: role is Role.USER and own,
        Action.MANAGE_USERS: False,
    }[action]
    assert allowed(role, action, user, owner) is (role is Role.ADMIN or expected)


@given(roles, names, st.lists(names, max_size=4))
def test_submit_as_another_user_is_refused_but_for_admins(
    role: Role, user: str, job_users: list[str]
) -> None:
    who = Identity(user, role)
    ok = role is Role.ADMIN or (role is Role.USER and all(u == user for u in job_users))
    if ok:
        check_submit(who, job_users)
        return
    with pytest.raises(Forbidden) as err:
        check_submit(who, job_users)
    assert "\n" not in str(err.value)


@given(roles, names, st.dictionaries(st.sampled_from(["j1", "j2", "j3"]), names),
       st.none() | names)
def test_cancel_is_limited_to_ones_own_jobs(
    role: Role, user: str, owners: dict[str, str], user_filter: str | None
) -> None:
    who = Identity(user, role)
    if role is Role.ADMIN:
        assert check_cancel(who, owners, user_filter) == user_filter
        return
    theirs = sorted(j for j, u in owners.items() if u != user)
    if role is Role.READ_ONLY or theirs or user_filter not in (None, user):
        with pytest.raises(Forbidden) as err:
            check_cancel(who, owners, user_filter)
        line = str(err.value)
        assert "\n" not in line
        if role is Role.READ_ONLY:
            assert all(j in line for j in owners)
        elif theirs:
            assert all(j in line for j in theirs)
        return
    assert check_cancel(who, owners, user_filter) == user


def test_registry_keeps_hashes_and_tells_revoked_from_unknown() -> None:
    salt = new_salt()
    reg = Registry(salt)
    reg.add("root", Role.ADMIN, "admin-token", 1.0)
    cred = reg.add("alice", Role.USER, "alice-token", 2.0)
    assert cred.digest == token_digest(salt, "alice-token") and "alice-token" not in repr(cred)
    assert reg.authenticate("alice-token") == Identity("alice", Role.USER)
    assert reg.authenticate(None) is Refusal.MISSING
    assert reg.authenticate("") is Refusal.MISSING
    assert reg.authenticate("nope") is Refusal.UNKNOWN
    with pytest.raises(ValueError, match="already has a credential"):
        reg.add("alice", Role.USER, "another", 3.0)
    reg.revoke("alice", 4.0)
    assert reg.authenticate("alice-token") is Refusal.REVOKED
    reg.add("alice", Role.READ_ONLY, "alice-new", 5.0)  # a new credential: rotation
    assert reg.authenticate("alice-new") == Identity("alice", Role.READ_ONLY)
    assert reg.authenticate("alice-token") is Refusal.UNKNOWN
    # Another deployment's key: the same token is not known there.
    assert Registry(new_salt(), reg.credentials.values()).authenticate("alice-new") \
        is Refusal.UNKNOWN


def test_the_last_admin_cannot_be_revoked() -> None:
    reg = Registry(new_salt())
    reg.add("root", Role.ADMIN, "t1", 1.0)
    with pytest.raises(ValueError, match="last admin"):
        reg.revoke("root", 2.0)
    reg.add("ops", Role.ADMIN, "t2", 3.0)
    reg.revoke("root", 4.0)
    with pytest.raises(KeyError):
        reg.revoke("nobody", 5.0)


@given(st.text(max_size=80))
def test_user_names(name: str) -> None:
    ok = bool(name) and len(name) <= 64 and name[0].isascii() and name[0].isalnum() and all(
        c.isascii() and (c.isalnum() or c in "._-") for c in name)
    if ok:
        assert check_user_name(name) == name
    else:
        with pytest.raises(ValueError, match="user name"):
            check_user_name(name)


def test_seed_and_records_round_trip() -> None:
    s, token = seed("root")
    reg = Registry(s.salt, [Credential("root", Role.ADMIN, s.admin_digest, 0.0)])
    assert reg.authenticate(token) == Identity("root", Role.ADMIN)
    assert token not in repr(s) and s.kv_secret != s.salt
    cred = Credential("bob", Role.READ_ONLY, "ab" * 32, 1.5, 2.5)
    assert Credential.from_record(cred.to_record()) == cred


# ------------------------------------------------------- the global manager's journal
def test_credentials_survive_a_restart_of_the_global_manager_as_hashes(
    tmp_path: Path,
) -> None:
    """Added and revoked credentials are in the journal (hashes only, never a token)
    and a service rebuilt over it (a restarted global manager) knows them; up's admin
    is not added again over a revocation."""
    from runtime.global_service import GlobalService
    from runtime.job_journal import read_journal
    from tests.unit.runtime.test_runtime_gm_recovery import Recorder, _service
    from tests.unit.runtime.test_runtime_wiring import NODES

    path = tmp_path
    s, admin_token = seed("root")
    gm = _service(path, Recorder())
    gm.open_users(s)
    _, alice = gm.add_user("alice", Role.USER)
    _, ops = gm.add_user("ops", Role.ADMIN)
    gm.revoke_user("root")
    assert gm.authenticate("wrong") is Refusal.UNKNOWN
    assert gm.counters["api_refused_unknown"] == 1
    gm.close()
    text = (path / "gm.json").read_bytes()
    assert alice.encode() not in text and admin_token.encode() not in text
    assert set(read_journal(path / "gm.json")["users"]) == {"root", "alice", "ops"}

    again = GlobalService(NODES, gm.config, gm.clock, Recorder(), path / "gm.json")
    again.open_users(s)
    assert again.authenticate(alice) == Identity("alice", Role.USER)
    assert again.authenticate(ops) == Identity("ops", Role.ADMIN)
    assert again.authenticate(admin_token) is Refusal.REVOKED
    assert [c.name for c in again.list_users()] == ["alice", "ops", "root"]
    again.close()


def test_status_of_a_job_shows_its_private_part_only_when_served() -> None:
    """``coalloc status JOB`` prints the commands and environment the record carries
    (its user's and the admins' view), and nothing when the API left them out."""
    from coalloc.commands.status import _private_lines
    from runtime.status import JobPrivate, JobRecord
    from workloads.model import JobPhase, QosClass

    rec = JobRecord(job_id="j1", name="a", qos=QosClass.STRICT, user="alice", priority=0,
                    state=JobPhase.RUNNING, reason="", submitted_at=0.0, run_id="j1")
    assert _private_lines(rec) == []
    rec = rec.model_copy(update={"private": JobPrivate(
        commands=[["python3", "-c", "print('x y')"], None], env={"A": "1 2"},
        subtask_env=[{}, {}])})
    assert _private_lines(rec) == ["  command[0]: python3 -c 'print('\"'\"'x y'\"'\"')'",
                                   "  env: A='1 2'"]
