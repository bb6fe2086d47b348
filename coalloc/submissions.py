"""``coalloc submit``'s unanswered submissions: the idempotency token of a submission that
got no answer, kept so that running the same ``submit`` again reuses it.

A submission carries a token; the global manager answers a retried token with the first
answers and makes no job (for :data:`runtime.jobs.TOKEN_KEEP_S` real s after it
answered). A client that got no answer (:class:`~coalloc.errors.NoAnswer`: the manager
stopped, was cut off, or failed while answering) cannot know whether the submission was
applied. So ``submit`` writes the token down before sending, under a key of what is
submitted (the deployment, the user, the file's path and bytes), and removes it only when
an answer arrived. Running the same ``submit`` again finds it and sends the same token:
the jobs appear once, whatever the timing. A record older than the manager keeps tokens
is not reused: the user is asked to check first (``submit --new`` sends a fresh token).

Records are one small JSON file each in ``~/.coalloc/submissions/`` (0600).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from coalloc.errors import UserError
from runtime.jobs import TOKEN_KEEP_S
from workloads.atomic import atomic_write_json

#: A record is reused up to this many real s after it was sent: the manager keeps the
#: token at least :data:`TOKEN_KEEP_S` after it answered, which is after it was sent;
#: the margin covers a clock step on this host.
REUSE_S = TOKEN_KEEP_S - 600.0


@dataclass(frozen=True, slots=True)
class Unanswered:
    """A submission sent with ``token`` at ``sent_at`` (wall-clock s since the epoch) from
    the file ``source``, with no answer received yet."""

    token: str
    source: str
    sent_at: float

    @property
    def sent_at_text(self) -> str:
        return datetime.fromtimestamp(self.sent_at, timezone.utc).isoformat(timespec="seconds")


def submission_key(deployment: str, user: str, source: str, content: bytes) -> str:
    """The key of a submission: the same deployment, user, file and bytes give the same
    key (a file edited since is another submission)."""
    h = hashlib.sha256()
    for part in (deployment, user, os.path.abspath(source)):
        raw = part.encode("utf-8", "surrogatepass")
        h.update(len(raw).to_bytes(8, "big") + raw)  # length-prefixed: no two splits alike
    h.update(content)
    return h.hexdigest()


class Ledger:
    """The unanswered submissions kept in ``directory`` (created 0700 when first used)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def _path(self, key: str) -> Path:
        return self.directory / f"{key}.json"

    def find(self, key: str) -> Unanswered | None:
        """The unanswered submission under ``key``; None if there is none (or its record
        cannot be read: then it is as if it had never been written)."""
        try:
            data = json.loads(self._path(key).read_text(encoding="utf-8"))
            return Unanswered(str(data["token"]), str(data["source"]), float(data["sent_at"]))
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def begin(self, key: str, source: str, token: str, now: float,
              new: bool = False) -> tuple[Unanswered, bool]:
        """The submission to send for ``key``: the unanswered one if there is one young
        enough to reuse (and ``new`` is false), else ``token`` written down as sent at
        ``now``. Returns it and whether it is a retry. Raises UserError for a record too
        old to reuse safely."""
        old = None if new else self.find(key)
        if old is not None:
            if now - old.sent_at < REUSE_S:
                return old, True
            raise UserError(
                f"{source}: a submission of this file sent at {old.sent_at_text} got no "
                f"answer, and the global manager keeps a submission's token only "
                f"{TOKEN_KEEP_S / 3600:g} h: check with coalloc queue whether its jobs "
                "exist; to submit the file anew, run coalloc submit --new")
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        record = Unanswered(token, source, now)
        atomic_write_json(self._path(key), {"token": record.token, "source": record.source,
                                            "sent_at": record.sent_at}, mode=0o600)
        return record, False

    def answered(self, key: str) -> None:
        """An answer arrived for ``key`` (or the submission was refused before it was
        sent): forget it."""
        self._path(key).unlink(missing_ok=True)
