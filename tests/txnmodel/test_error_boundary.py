"""The command line's one error boundary (``txnmodel.cli.guarded``): typed errors are one line and
exit 2, a bug is one line and exit 3 with its traceback in a private file, a reader gone early is
quiet."""

from __future__ import annotations

import argparse
import errno
import stat
from pathlib import Path

import pytest

from history_io.folders import UsageError
from spec.errors import BadVector
from txnmodel import cli
from txnmodel.commands import config as config_command
from txnmodel.common import EXIT_BUG, MESSAGE_LIMIT, one_line


def _failing(exc: BaseException) -> object:
    def command(args: argparse.Namespace) -> int:
        raise exc

    return command


def _run_config_raising(
    exc: BaseException, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *argv: str
) -> tuple[int, str]:
    monkeypatch.setattr(config_command, "cmd_config", _failing(exc))
    code = cli.main([*argv, "config"])
    return code, capsys.readouterr().err


def test_an_unexpected_exception_is_one_line_and_exit_3_with_the_traceback_in_a_private_file(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr("tempfile.tempdir", None)
    code, err = _run_config_raising(RuntimeError("the invariant broke"), monkeypatch, capsys)
    assert code == EXIT_BUG == 3
    lines = err.splitlines()
    assert len(lines) == 1 and "Traceback" not in err
    assert "txnmodel config: internal error" in lines[0] and "RuntimeError: the invariant broke" in lines[0]
    where = Path(lines[0].split("traceback in ", 1)[1].split(";", 1)[0])
    assert where.parent.parent == tmp_path and where.parent.name.startswith("txnmodel-bug-")
    assert stat.S_IMODE(where.parent.stat().st_mode) == 0o700
    text = where.read_text()
    assert "Traceback (most recent call last)" in text and "RuntimeError: the invariant broke" in text
    assert "txnmodel config" in text.splitlines()[0]


def test_debug_prints_the_traceback(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run_config_raising(ZeroDivisionError("modulo by zero"), monkeypatch, capsys, "--debug")
    assert code == EXIT_BUG
    assert "Traceback (most recent call last)" in err and err.rstrip().splitlines()[-1].startswith("txnmodel config:")


@pytest.mark.parametrize(
    ("exc", "words"),
    [
        (BadVector("$.steps[3].args: bad", where="v.json"), "txnmodel config: v.json: $.steps[3].args: bad"),
        (UsageError("--out x: exists and is not a folder"), "txnmodel config: --out x: exists and is not a folder"),
        (OSError(errno.ENOSPC, "No space left on device", "/data/l.log"), "txnmodel config: /data/l.log: No space"),
        (OSError(errno.EFBIG, "File too large", "/data/l.log"), "txnmodel config: /data/l.log: File too large"),
        (PermissionError(errno.EACCES, "Permission denied", "/x"), "txnmodel config: /x: Permission denied"),
    ],
)
def test_typed_errors_and_refusals_of_the_file_system_are_one_line_and_exit_2(
    exc: BaseException, words: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run_config_raising(exc, monkeypatch, capsys)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(words)


def test_a_long_message_is_cut_and_says_how_much(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    code, err = _run_config_raising(BadVector("x" * 1_000_000 + "\nsecond line"), monkeypatch, capsys)
    assert code == 2 and err.count("\n") == 1
    assert len(err) < MESSAGE_LIMIT + 100 and "more characters)" in err


def test_a_reader_gone_early_ends_quietly(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run_config_raising(BrokenPipeError(errno.EPIPE, "Broken pipe"), monkeypatch, capsys)
    assert code == 141 and err == ""


def test_an_interrupt_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _run_config_raising(KeyboardInterrupt(), monkeypatch, capsys)
    assert code == 130 and err == "txnmodel config: interrupted\n"


def test_one_line() -> None:
    assert one_line("a\n  b\r\n\nc") == "a b c"
    assert one_line("x" * 50, 10) == "xxxxxxxxxx... (40 more characters)"
