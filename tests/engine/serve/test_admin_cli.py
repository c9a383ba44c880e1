"""``txnmodel serve --admin-port`` and ``txnmodel --version`` on the command line."""

from __future__ import annotations

import socket

import pytest

from txnmodel.cli import main


def test_an_admin_port_that_cannot_be_had_is_bad_usage(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        assert main(["serve", "--port", "0", "--admin-port", str(port)]) == 2
    err = capsys.readouterr().err
    assert f"--admin-port {port}" in err and "Traceback" not in err


def test_admin_port_off_and_bad_values(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["serve", "--admin-port", "70000"]) == 2
    assert main(["serve", "--admin-port", "eighty"]) == 2


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("txnmodel ") and out.split()[1][0].isdigit()
