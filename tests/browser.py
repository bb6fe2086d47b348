"""A real headless browser for the tests: the distribution's Chromium driven by
Playwright's Python package (imported by name, as ``prometheus_server``).

Playwright's own browser builds are never downloaded (no ``playwright install``): it
drives the system's ``chromium`` (Debian: ``apt-get install -y chromium``; ``.ci/run``
installs it) through ``executable_path``. :func:`chromium` yields a browser, or skips
the test with one line saying what is missing.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

#: Flags that keep a headless Chromium quiet and local: no GPU, no sandbox (root in a
#: container), no background fetches or component updates.
CHROMIUM_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage",
)


def chromium_binary() -> str | None:
    """The system's Chromium (``$COALLOC_CHROMIUM``, PATH, then Debian's /usr/bin), or None."""
    env = os.environ.get("COALLOC_CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("chromium", "chromium-browser"):
        found = shutil.which(name)
        if found:
            return found
    return "/usr/bin/chromium" if os.access("/usr/bin/chromium", os.X_OK) else None


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (a Playwright ``BrowserContext``) with a fresh profile, closed after
    the body; skips the test when Playwright or Chromium cannot be had."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        pytest.skip("playwright not installed (pip install -e '.[test]')")
    binary = chromium_binary()
    if binary is None:
        pytest.skip("chromium not installed (Debian: apt-get install -y chromium)")
    with tempfile.TemporaryDirectory(prefix="coalloc-chromium-") as profile, \
            sync_playwright() as pw:
        try:
            browser = pw.chromium.launch_persistent_context(
                profile, executable_path=binary, headless=True, args=list(CHROMIUM_FLAGS),
                viewport={"width": 1400, "height": 1000},
            )
        except Error as exc:
            pytest.skip(f"chromium at {binary} does not start: {str(exc).splitlines()[0]}")
        try:
            yield browser
        finally:
            browser.close()
