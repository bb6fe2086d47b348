"""The command-line dispatcher: discovery of sub-commands and error reporting."""

from __future__ import annotations

import argparse

import pytest

from coalloc import cli
from coalloc.errors import UserError


def test_every_discovered_command_is_registered() -> None:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    modules = {m.rsplit(".", 1)[1] for m in cli.command_modules()}
    assert modules <= set(sub.choices)


def test_user_error_is_one_line_and_nonzero(monkeypatch, capsys) -> None:
    def boom(args: argparse.Namespace) -> int:
        raise UserError("jobs.yaml: subtasks[0].work: must be >= 0")

    parser = argparse.ArgumentParser(prog="coalloc")
    subs = parser.add_subparsers(dest="command")
    subs.add_parser("boom").set_defaults(handler=boom)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    code = cli.main(["boom"])
    err = capsys.readouterr().err
    assert code == 2
    assert err == "coalloc: error: jobs.yaml: subtasks[0].work: must be >= 0\n"


def test_help_exits_cleanly(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli.main(["--help"])
    assert exc.value.code == 0
    assert "co-allocation" in capsys.readouterr().out


def test_the_submitting_user_is_the_os_user_or_the_default(monkeypatch) -> None:
    import getpass

    from coalloc.client import submitting_user
    from workloads.spec import DEFAULT_USER

    monkeypatch.setattr(getpass, "getuser", lambda: "alice")
    assert submitting_user() == "alice"

    def no_user() -> str:
        raise KeyError("getpwuid(): uid not found: 4242")

    monkeypatch.setattr(getpass, "getuser", no_user)
    assert submitting_user() == DEFAULT_USER
