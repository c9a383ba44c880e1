"""The implementation as a child process: untrusted output, time limits, a killed process group."""

from __future__ import annotations

import os
import shlex
import time
from pathlib import Path

import pytest

from conformance.implementation import (
    ImplementationDied,
    ImplementationHung,
    ProtocolBroken,
    Subprocess,
)
from spec import conform
from tests.conform.conftest import PYTHON, python_child

HELLO = conform.hello("coordinator")


def child(code: str, timeout: float = 5.0) -> Subprocess:
    return Subprocess(shlex.split(python_child(code)), timeout=timeout)


def answering(*lines: str, then: str = "") -> str:
    """A child that reads one request per line it writes back (the given lines, in turn)."""
    return (
        "import sys\n"
        f"for out in {list(lines)!r}:\n"
        "    sys.stdin.readline()\n"
        "    sys.stdout.write(out + '\\n')\n"
        "    sys.stdout.flush()\n" + then
    )


def test_an_answer_per_request_in_order() -> None:
    channel = child(answering('{"ok": 1}', '{"error": "X", "effects": [1]}'))
    try:
        first, second = channel.exchange([conform.step("a", {}), conform.step("b", {})])
        assert (first.kind, first.value) == ("ok", 1)
        assert (second.kind, second.value, second.effects) == ("error", "X", (1,))
    finally:
        channel.close()


@pytest.mark.parametrize(
    "line,fragment",
    [
        ("DEBUG starting up", "line 1 of the implementation's output (the answer to"),
        ("[1, 2]", "a JSON object, not an array"),
        ('{"ok": NaN}', "not JSON"),
        ('{"ok": ' + "[" * 100 + "]" * 100 + "}", "nested deeper than 64 levels"),
        ('{"ok": ' + "9" * 50 + "}", "more than 40"),
        ('{"ok": 1, "bogus": 2}', "unexpected key(s) 'bogus'"),
    ],
)
def test_output_that_is_not_an_answer_is_a_protocol_error_naming_the_line(line: str, fragment: str) -> None:
    channel = child(answering(line))
    try:
        with pytest.raises(ProtocolBroken) as caught:
            channel.exchange([conform.step("a", {})])
        assert fragment in str(caught.value)
        assert "line 1" in str(caught.value)
    finally:
        channel.close()


def test_a_later_bad_line_is_named_by_its_number() -> None:
    channel = child(answering('{"ok": 1}', '{"ok": 2}', "oops"))
    try:
        channel.exchange([conform.step("a", {}), conform.step("b", {})])
        with pytest.raises(ProtocolBroken, match="line 3 "):
            channel.exchange([conform.step("c", {})])
    finally:
        channel.close()


def test_a_hanging_child_is_killed_with_its_whole_process_group(tmp_path: Path) -> None:
    """The child starts a grandchild and never answers: both are gone after the time limit."""
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([{PYTHON!r}, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "sys.stdin.readline()\n"
        "time.sleep(600)\n"
    )
    channel = child(code, timeout=1.0)
    try:
        with pytest.raises(ImplementationHung) as caught:
            channel.exchange([conform.step("tick", {"now_ms": 1})])
        assert "did not answer within 1 s" in str(caught.value)
        assert '"command":"tick"' in str(caught.value)
        grandchild = int(pid_file.read_text())
        for _ in range(100):  # reaped by init once killed; wait until it is gone (bounded)
            if not _alive(grandchild):
                break
            time.sleep(0.05)
        assert not _alive(grandchild)
    finally:
        channel.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split()[2] != "Z"
    except OSError:
        return False


def test_a_child_that_exits_is_reported_with_the_end_of_its_stderr() -> None:
    code = "import sys; sys.stdin.readline(); sys.stderr.write('NullPointerException at Tc.java:42'); sys.exit(3)"
    channel = child(code)
    try:
        with pytest.raises(ImplementationDied) as caught:
            channel.exchange([HELLO])
        assert "exited with status 3" in str(caught.value)
        assert "NullPointerException at Tc.java:42" in str(caught.value)
        with pytest.raises(ImplementationDied):
            channel.exchange([HELLO])
    finally:
        channel.close()


def test_a_command_that_cannot_start_is_an_os_error() -> None:
    with pytest.raises(OSError):
        Subprocess(["/nonexistent/implementation"], timeout=1.0)


def test_a_long_exchange_does_not_deadlock_on_full_pipes() -> None:
    """Many requests written at once while the child answers each at once: both pipes fill."""
    code = (
        "import sys\n"
        "for line in sys.stdin:\n"
        "    sys.stdout.write('{\"ok\": \"' + 'x' * 2000 + '\"}\\n'); sys.stdout.flush()\n"
    )
    channel = child(code, timeout=30.0)
    try:
        answers = channel.exchange([conform.observe("o", {"pad": "y" * 500})] * 300)
        assert len(answers) == 300 and all(a.kind == "ok" for a in answers)
    finally:
        channel.close()
