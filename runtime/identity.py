"""Who an API request acts as, and what that user may do: credentials, their hashes and
the authorisation rule. Pure: no I/O, no HTTP, no Ray.

Credentials. ``coalloc up`` makes the first one, an admin's (the token it records in its
state file); an admin makes the others (``coalloc user add``). A credential is a random
token (:func:`new_token`, 256 bits); the global manager keeps only its keyed hash
(:meth:`Registry.digest`: HMAC-SHA256 under the deployment's salt, which ``up`` draws),
in its journal, and compares hashes in constant time (:meth:`Registry.authenticate`
compares every record, whatever matched first). Revoking keeps the record, marked
revoked, so that a revoked token is told from an unknown one (both are refused).

Roles (:class:`Role`): an ``admin`` may do everything; a ``user`` reads what every
credential reads, submits as itself and cancels its own jobs; a ``read-only`` user reads
only. Every credential sees every job, as ``squeue`` shows every job; a job's private
parts (its commands and environments) only its owner and the admins see, as Slurm's
``PrivateData`` hides them. :func:`allowed` is the whole rule; :func:`check_submit` and
:func:`check_cancel` apply it to a request and raise :class:`Forbidden` with the one
line the API answers 403 with.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from enum import Enum


class Role(str, Enum):
    """What a credential may do (see the module docstring)."""

    ADMIN = "admin"
    USER = "user"
    READ_ONLY = "read-only"


class Action(str, Enum):
    """What a request does. ``read``: status, queue, a job's public record, the
    dashboard; ``read_private``: a job's commands and environments; ``submit``: submit a
    job owned by the named user; ``cancel``: cancel a job; ``manage_users``: add, list
    and revoke credentials."""

    READ = "read"
    READ_PRIVATE = "read_private"
    SUBMIT = "submit"
    CANCEL = "cancel"
    MANAGE_USERS = "manage_users"


class Refusal(str, Enum):
    """Why a request was not authenticated (every one is answered 401 and counted)."""

    MISSING = "missing"
    UNKNOWN = "unknown"
    REVOKED = "revoked"


@dataclass(frozen=True, slots=True)
class Identity:
    """The user a request acts as."""

    name: str
    role: Role

    @property
    def admin(self) -> bool:
        return self.role is Role.ADMIN


def allowed(role: Role, action: Action, user: str, owner: str | None) -> bool:
    """Whether ``user`` (of ``role``) may do ``action`` on something ``owner`` owns (a
    job's user; for ``submit`` the user the job names; None: nothing owned)."""
    if role is Role.ADMIN or action is Action.READ:
        return True
    own = owner is not None and owner == user
    if action is Action.READ_PRIVATE:
        return own
    if action in (Action.SUBMIT, Action.CANCEL):
        return role is Role.USER and own
    return False


class Forbidden(Exception):
    """An authenticated request its user may not make: answered 403 with this one
    line."""


def check_submit(who: Identity, users: Iterable[str]) -> None:
    """Raise :class:`Forbidden` unless ``who`` may submit jobs owned by ``users`` (the
    ``user`` of each job of one submission)."""
    if who.role is Role.READ_ONLY:
        raise Forbidden(f"{who.name}: a read-only credential cannot submit jobs")
    others = sorted({u for u in users if not allowed(who.role, Action.SUBMIT, who.name, u)})
    if others:
        raise Forbidden(f"user: {who.name} may submit only as {who.name}, not as "
                        f"{', '.join(others)} (only an admin may submit for another user)")


def check_cancel(
    who: Identity, owners: Mapping[str, str], user_filter: str | None
) -> str | None:
    """The user filter a cancel by ``who`` runs with: ``owners`` are the named jobs'
    users (by job id; unknown ids are left out), ``user_filter`` the one asked for. A
    non-admin's cancel is limited to its own jobs. Raises :class:`Forbidden` naming the
    jobs (or the user) it may not cancel."""
    if who.role is Role.READ_ONLY:
        named = ", ".join(owners) + ": " if owners else ""
        raise Forbidden(f"{named}{who.name} has a read-only credential: it cannot cancel "
                        "jobs")
    if who.admin:
        return user_filter
    theirs = [j for j, u in owners.items() if not allowed(who.role, Action.CANCEL, who.name, u)]
    if theirs:
        named = ", ".join(f"{j} (user {owners[j]})" for j in theirs)
        raise Forbidden(f"{named}: not {who.name}'s job{'s' if len(theirs) > 1 else ''}; "
                        "only its user or an admin may cancel it")
    if user_filter is not None and user_filter != who.name:
        raise Forbidden(f"--user {user_filter}: {who.name} may cancel only its own jobs")
    return who.name


#: A user name: what a shell word, a file name and a job file's ``user`` all take.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_user_name(name: str) -> str:
    """``name`` unchanged, or ValueError saying what a user name may hold."""
    if not NAME_PATTERN.fullmatch(name):
        raise ValueError(f"user name {name!r}: 1-64 letters, digits, '.', '_' or '-', "
                         "starting with a letter or digit")
    return name


def new_token() -> str:
    """A fresh credential: 256 random bits, URL-safe text."""
    return secrets.token_urlsafe(32)


def new_salt() -> str:
    """A deployment's hash key (hex)."""
    return secrets.token_hex(32)


def token_digest(salt: str, token: str) -> str:
    """The keyed hash of ``token`` under ``salt`` (hex)."""
    return hmac.new(bytes.fromhex(salt), b"coalloc-credential\0"
                    + token.encode("utf-8", "surrogateescape"), hashlib.sha256).hexdigest()


@dataclass(frozen=True, slots=True)
class Credential:
    """One user's credential as the global manager keeps it: its hash only. ``created``
    and ``revoked``: wall-clock s since the Unix epoch (None: in force)."""

    name: str
    role: Role
    digest: str
    created: float
    revoked: float | None = None

    def to_record(self) -> dict[str, object]:
        return {"name": self.name, "role": self.role.value, "digest": self.digest,
                "created": self.created, "revoked": self.revoked}

    @staticmethod
    def from_record(rec: Mapping[str, object]) -> Credential:
        revoked = rec.get("revoked")
        return Credential(str(rec["name"]), Role(str(rec["role"])), str(rec["digest"]),
                          float(str(rec["created"])),
                          None if revoked is None else float(str(revoked)))


@dataclass(frozen=True, slots=True)
class AdminSeed:
    """What ``coalloc up`` hands the global manager: the hash key, the first admin's
    name and the hash of its token (never the token), and the secret the runs'
    key-value credentials derive from (:func:`runtime.rendezvous.kv_token`), which no
    user's credential changes."""

    salt: str
    admin: str
    admin_digest: str
    kv_secret: str


def seed(admin: str) -> tuple[AdminSeed, str]:
    """A new deployment's :class:`AdminSeed` and its admin's token."""
    salt, token = new_salt(), new_token()
    return AdminSeed(salt, check_user_name(admin), token_digest(salt, token),
                     secrets.token_hex(32)), token


class Registry:
    """The credentials of one deployment, by user name (not thread-safe: the global
    manager holds its lock)."""

    def __init__(self, salt: str, credentials: Iterable[Credential] = ()) -> None:
        self.salt = salt
        self.credentials: dict[str, Credential] = {c.name: c for c in credentials}

    def digest(self, token: str) -> str:
        return token_digest(self.salt, token)

    def authenticate(self, token: str | None) -> Identity | Refusal:
        """Who ``token`` is, or why it is refused. Every record is compared (constant
        time each), so the answer's time does not tell which matched."""
        if not token:
            return Refusal.MISSING
        given = self.digest(token).encode("ascii")
        found: Credential | None = None
        for cred in self.credentials.values():
            if hmac.compare_digest(given, cred.digest.encode("ascii")):
                found = cred
        if found is None:
            return Refusal.UNKNOWN
        if found.revoked is not None:
            return Refusal.REVOKED
        return Identity(found.name, found.role)

    def add(self, name: str, role: Role, token: str, now: float) -> Credential:
        """A credential for ``name`` (a revoked one's name may be given a new one).
        ValueError if the name is taken by a credential in force, or malformed."""
        check_user_name(name)
        old = self.credentials.get(name)
        if old is not None and old.revoked is None:
            raise ValueError(f"{name}: already has a credential (coalloc user revoke {name} "
                             "first)")
        cred = Credential(name, Role(role), self.digest(token), now)
        self.credentials[name] = cred
        return cred

    def revoke(self, name: str, now: float) -> Credential:
        """Revoke ``name``'s credential (KeyError: no such user). ValueError for the
        last admin in force: the deployment would have nobody to manage it."""
        old = self.credentials[name]
        if old.revoked is not None:
            return old
        if old.role is Role.ADMIN and not any(
                c.role is Role.ADMIN and c.revoked is None and c.name != name
                for c in self.credentials.values()):
            raise ValueError(f"{name}: the last admin; add another admin before revoking it")
        cred = replace(old, revoked=now)
        self.credentials[name] = cred
        return cred
