"""The web dashboard's server side (:mod:`runtime.dashboard` through :mod:`runtime.api`)
and ``coalloc dashboard``, without Ray: a real API server on loopback over a fake backend.

The page and its assets are refused without the token like every route; the page's
asset links carry the token, escaped; every file is sent with a policy that loads
nothing from elsewhere, and references nothing outside this server; ``coalloc dashboard``
prints the page's URL, which opens, and fails with one line when the runtime is not up."""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest

from runtime import dashboard
from runtime.api import ApiServer
from runtime.state import DeploymentState, save_state
from tests.unit.runtime.test_runtime_api import TOKEN, FakeBackend

ODD_TOKEN = 'a&b"<c> d/+%'


def get(server: ApiServer, path: str, headers: dict[str, str] | None = None
        ) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", path, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


@pytest.fixture(params=[TOKEN, ODD_TOKEN], ids=["plain", "odd"])
def served(request: pytest.FixtureRequest) -> Iterator[tuple[ApiServer, str]]:
    server = ApiServer(FakeBackend(request.param), "127.0.0.1", 0)
    try:
        yield server, request.param
    finally:
        server.close()


class _Links(HTMLParser):
    """Every src and href of a page."""

    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.links += [v for k, v in attrs if k in ("src", "href") and v is not None]


def page_links(server: ApiServer, token: str) -> list[str]:
    from urllib.parse import quote

    status, headers, body = get(server, "/?token=" + quote(token, safe=""))
    assert status == 200, body
    assert headers["content-type"].startswith("text/html")
    parser = _Links()
    parser.feed(body.decode("utf-8"))
    return parser.links


@pytest.mark.parametrize("path", ["/", "/index.html", "/dashboard/dashboard.js",
                                  "/dashboard/dashboard.css"])
@pytest.mark.parametrize("token", [None, "", "wrong"])
def test_the_page_and_its_assets_are_refused_without_the_token(
    served: tuple[ApiServer, str], path: str, token: str | None
) -> None:
    server, _ = served
    target = path if token is None else f"{path}?token={token}"
    status, headers, body = get(server, target)
    assert status == 401 and b" credential" in body
    assert "text/html" not in headers["content-type"]


def test_the_page_links_its_assets_with_the_token_and_they_are_served(
    served: tuple[ApiServer, str]
) -> None:
    server, token = served
    links = page_links(server, token)
    assets = [u for u in links if u.startswith(dashboard.ASSET_PREFIX)]
    assert sorted(urlsplit(u).path for u in assets) == sorted(
        dashboard.ASSET_PREFIX + name for name in dashboard.ASSETS)
    for link in assets:
        # The parser unescaped the HTML; the query is the token, URL-quoted.
        assert parse_qs(urlsplit(link).query) == {"token": [token]}
        status, headers, body = get(server, link)
        assert status == 200 and body
        assert headers["content-type"] == dashboard.ASSETS[urlsplit(link).path.split("/")[-1]]
        assert headers["content-security-policy"] == dashboard.CONTENT_SECURITY_POLICY
    # The token never appears raw in the HTML (it is escaped).
    status, _, body = get(server, "/", {"Authorization": f"Bearer {token}"})
    assert status == 200
    if token == ODD_TOKEN:
        assert token.encode() not in body


def test_every_reference_of_the_page_is_local(served: tuple[ApiServer, str]) -> None:
    server, token = served
    for link in page_links(server, token):
        assert link.startswith("/") and not link.startswith("//") or link == "data:,", link
    status, headers, _ = get(server, "/", {"Authorization": f"Bearer {token}"})
    policy = headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'self'" in policy
    assert headers["referrer-policy"] == "no-referrer" and headers["cache-control"] == "no-store"
    for name in dashboard.ASSETS:
        text = (Path(dashboard.__file__).parent / name).read_text()
        urls = set(re.findall(r"https?://[^\s\"')]+", text))
        assert urls <= {"http://www.w3.org/2000/svg"}, urls  # SVG's namespace, not a fetch


@pytest.mark.parametrize("path", ["/dashboard/", "/dashboard/nope.js", "/dashboard/../api.py",
                                  "/dashboard/__init__.py", "/favicon.ico"])
def test_other_paths_are_not_found(served: tuple[ApiServer, str], path: str) -> None:
    server, token = served
    status, headers, _ = get(server, path, {"Authorization": f"Bearer {token}"})
    assert status == 404 and headers["content-type"] == "application/json"


def test_the_json_routes_are_unchanged_beside_the_page(served: tuple[ApiServer, str]) -> None:
    server, token = served
    status, headers, body = get(server, "/api/v1/queue", {"Authorization": f"Bearer {token}"})
    assert status == 200 and headers["content-type"] == "application/json"
    assert b"j00001" in body


# ------------------------------------------------------------------ coalloc dashboard
@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COALLOC_HOME", str(tmp_path))
    monkeypatch.delenv("COALLOC_TRANSPORT", raising=False)
    return tmp_path


def record(url: str, token: str) -> None:
    save_state(DeploymentState(address="127.0.0.1:1", embedded=False,
                               extra={"api_url": url, "api_token": token}))


def test_dashboard_prints_the_url_of_the_page_with_its_token(
    home: Path, served: tuple[ApiServer, str], capsys: Any
) -> None:
    from coalloc import cli

    server, token = served
    record(server.url, token)
    assert cli.main(["dashboard"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith(server.url + "/?token=") and "\n" not in out
    url = urlsplit(out)
    assert parse_qs(url.query) == {"token": [token]}
    status, headers, _ = get(server, f"{url.path}?{url.query}")
    assert status == 200 and headers["content-type"].startswith("text/html")


def test_dashboard_without_a_deployment_is_one_line_and_exit_2(home: Path, capsys: Any) -> None:
    from coalloc import cli

    assert cli.main(["dashboard"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "coalloc up" in err


def test_dashboard_when_the_api_does_not_answer_is_one_line_and_exit_2(
    home: Path, capsys: Any
) -> None:
    from coalloc import cli

    server = ApiServer(FakeBackend(TOKEN), "127.0.0.1", 0)
    url = server.url
    server.close()  # nothing listens there now
    record(url, TOKEN)
    assert cli.main(["dashboard"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and err.startswith("coalloc: error: ")


def test_dashboard_with_a_token_that_is_not_the_deployments_is_refused(
    home: Path, served: tuple[ApiServer, str], capsys: Any
) -> None:
    from coalloc import cli

    server, _ = served
    record(server.url, "not-" + TOKEN)
    assert cli.main(["dashboard"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "token" in err and err.count("\n") == 1


def test_the_pages_files_are_package_data() -> None:
    """An editable install and a wheel both carry the page: the package is listed and
    its data patterns cover every file the server sends."""
    import fnmatch
    from importlib import resources

    tomllib = pytest.importorskip("tomllib")  # Python 3.11+

    root = Path(__file__).resolve().parents[3]
    tools = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert "runtime.dashboard" in tools["packages"]
    patterns = tools["package-data"]["runtime.dashboard"]
    for name in ["index.html", *dashboard.ASSETS]:
        assert any(fnmatch.fnmatch(name, p) for p in patterns), name
        assert resources.files("runtime.dashboard").joinpath(name).is_file(), name
