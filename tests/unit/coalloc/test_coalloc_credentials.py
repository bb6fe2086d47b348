"""A user's credentials file (:mod:`coalloc.credentials`): found in COALLOC_HOME,
overridden by ``$COALLOC_API``/``$COALLOC_TOKEN``, refused when others may read it or it
is not one; ahead of the state file."""

from __future__ import annotations

from pathlib import Path

import pytest

from coalloc.client import recorded_api
from coalloc.credentials import credentials_document, find_api
from coalloc.errors import UserError
from runtime.state import DeploymentState, save_state


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COALLOC_HOME", str(tmp_path))
    for name in ("COALLOC_API", "COALLOC_TOKEN", "COALLOC_TRANSPORT"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def write(home: Path, data: bytes, mode: int = 0o600) -> Path:
    path = home / "credentials"
    path.write_bytes(data)
    path.chmod(mode)
    return path


def test_the_file_then_the_variables(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert find_api() is None
    path = write(home, credentials_document("http://h:1", "tok", "alice"))
    found = find_api()
    assert found is not None and (found.url, found.token, found.source) == (
        "http://h:1", "tok", str(path))
    monkeypatch.setenv("COALLOC_TOKEN", "other")
    found = find_api()
    assert found is not None and (found.url, found.token, found.source) == (
        "http://h:1", "other", "$COALLOC_TOKEN")
    path.unlink()
    with pytest.raises(UserError, match="COALLOC_API: not set"):
        find_api()
    monkeypatch.setenv("COALLOC_API", "http://e:2/")
    found = find_api()
    assert found is not None and found.url == "http://e:2"


@pytest.mark.parametrize("data, mode, why", [
    (credentials_document("http://h:1", "t", "a"), 0o644, "chmod 600"),
    (b"{not json", 0o600, "not a coalloc credentials file"),
    (b'{"api": "http://h:1"}', 0o600, "api, token"),
])
def test_bad_files_are_one_line(home: Path, data: bytes, mode: int, why: str) -> None:
    write(home, data, mode)
    with pytest.raises(UserError, match=why) as err:
        find_api()
    assert "\n" not in str(err.value)


def test_the_credentials_come_before_the_state_file(home: Path) -> None:
    save_state(DeploymentState(address="127.0.0.1:1", embedded=False,
                               extra={"api_url": "http://s:3", "api_token": "admin"}))
    found = recorded_api(None)
    assert found is not None and (found.url, found.address) == ("http://s:3", "127.0.0.1:1")
    write(home, credentials_document("http://h:1", "tok", "alice"))
    found = recorded_api(None)
    assert found is not None and (found.url, found.token, found.address) == (
        "http://h:1", "tok", "")
    # An explicit Ray address names the deployment up recorded.
    found = recorded_api("127.0.0.1:1")
    assert found is not None and found.token == "admin"
