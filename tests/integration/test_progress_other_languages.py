"""The documented ways to report progress without the Python library really work: the C
example of docs/wire.md, compiled with the system's C compiler, and the bash line of
docs/coupled.md, each sending to the local manager's real progress socket
(runtime.progress_listener), which parses what they send."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import wait_until

from local_manager.progress_wire import ADDR_ENV, KEY_ENV, ProgressDatagram
from runtime.progress_listener import ProgressListener

pytestmark = pytest.mark.integration

DOCS = Path(__file__).resolve().parents[2] / "docs"
KEY = "c0" * 16


def _received(listener: ProgressListener, n: int) -> list[ProgressDatagram]:
    got: list[ProgressDatagram] = []

    def enough() -> bool:
        for item in listener.drain():
            assert isinstance(item, ProgressDatagram), item
            got.append(item)
        return len(got) >= n

    wait_until(enough, timeout=10)
    return got


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_c_example_of_wire_md(tmp_path: Path) -> None:
    code = re.search(r"```c\n(.*?)```", (DOCS / "wire.md").read_text(), re.S)
    assert code is not None
    src = tmp_path / "report.c"
    src.write_text(code.group(1) + "\nint main(void) { coalloc_report(42, 1000); "
                   "coalloc_report(43.5, 0); return 0; }\n")
    subprocess.run(["cc", "-Wall", "-Wextra", "-Werror", "-o", str(tmp_path / "report"),
                    str(src)], check=True)
    listener = ProgressListener()
    try:
        env = dict(os.environ, **{ADDR_ENV: listener.address, KEY_ENV: KEY})
        subprocess.run([str(tmp_path / "report")], env=env, check=True)
        assert _received(listener, 2) == [ProgressDatagram(KEY, 42.0, 1000.0, 0.0, False),
                                          ProgressDatagram(KEY, 43.5, None, 0.0, False)]
        # Outside coalloc it does nothing (and does not crash).
        env = {k: v for k, v in os.environ.items() if k not in (ADDR_ENV, KEY_ENV)}
        subprocess.run([str(tmp_path / "report")], env=env, check=True)
    finally:
        listener.close()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
def test_the_bash_line_of_coupled_md() -> None:
    found = re.search(r"From bash without coalloc\ninstalled: `(.*?)`\.",
                      (DOCS / "coupled.md").read_text(), re.S)
    assert found is not None
    listener = ProgressListener()
    try:
        env = dict(os.environ, **{ADDR_ENV: listener.address, KEY_ENV: KEY})
        subprocess.run(["bash", "-c", found.group(1)], env=env, check=True)
        assert _received(listener, 1) == [ProgressDatagram(KEY, 42.0, None, 0.0, False)]
    finally:
        listener.close()
