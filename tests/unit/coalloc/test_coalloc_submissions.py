"""``coalloc submit``'s ledger of unanswered submissions: a submission with no answer is
resent with its own token; an answered one is forgotten; another file, user, deployment or
an edited file is another submission; a record too old to reuse safely is refused with
one line, and ``new`` sends a fresh token."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from coalloc.errors import UserError
from coalloc.submissions import REUSE_S, Ledger, submission_key


def test_an_unanswered_submission_is_resent_with_its_token_until_answered(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path / "submissions")
    key = submission_key("http://h:1", "alice", "job.yaml", b"name: a\n")
    sent, retry = ledger.begin(key, "job.yaml", "t1", now=1000.0)
    assert (sent.token, retry) == ("t1", False)
    again, retry = ledger.begin(key, "job.yaml", "t2", now=1000.0 + REUSE_S - 1)
    assert (again.token, again.sent_at, retry) == ("t1", 1000.0, True)
    assert stat.S_IMODE((tmp_path / "submissions" / f"{key}.json").stat().st_mode) == 0o600
    assert stat.S_IMODE((tmp_path / "submissions").stat().st_mode) == 0o700
    ledger.answered(key)
    fresh, retry = ledger.begin(key, "job.yaml", "t3", now=1001.0)
    assert (fresh.token, retry) == ("t3", False)


def test_a_record_too_old_to_reuse_is_refused_and_new_sends_a_fresh_token(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path)
    key = submission_key("http://h:1", "alice", "job.yaml", b"x")
    ledger.begin(key, "job.yaml", "t1", now=0.0)
    with pytest.raises(UserError) as err:
        ledger.begin(key, "job.yaml", "t2", now=REUSE_S)
    msg = str(err.value)
    assert msg.startswith("job.yaml: ") and "coalloc queue" in msg and "--new" in msg
    sent, retry = ledger.begin(key, "job.yaml", "t2", now=REUSE_S, new=True)
    assert (sent.token, retry) == ("t2", False)
    assert ledger.find(key) == sent


def test_an_unreadable_record_counts_as_none(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path)
    (tmp_path / "k.json").write_text("{not json")
    assert ledger.find("k") is None
    assert ledger.begin("k", "f", "t", now=5.0)[1] is False


NAMES = st.text(st.sampled_from("a\0/."), max_size=4)
PARTS = st.tuples(NAMES, NAMES, NAMES.filter(bool), st.binary(max_size=2))


@given(PARTS, PARTS)
def test_the_key_is_the_same_exactly_for_the_same_submission(
    a: tuple[str, str, str, bytes], b: tuple[str, str, str, bytes]
) -> None:
    same = submission_key(*a) == submission_key(*b)
    assert same == (a[:2] == b[:2] and os.path.abspath(a[2]) == os.path.abspath(b[2])
                    and a[3] == b[3])
