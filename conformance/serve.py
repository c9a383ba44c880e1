"""``txnmodel conform --serve-reference NAME``: the reference machine speaking the protocol on stdio.

Reads one request per line from standard input, writes one answer per line to standard output
(flushed after each), until ``close`` or the end of input.  A line that is not a JSON object, or
longer than :data:`MAX_REQUEST_BYTES`, is answered ``fail`` naming the line; so is a request the
reference cannot take, and a step that raises (a mutant of the reference, served by the mutation
benchmark, may).  Nothing is written anywhere else on standard output.
"""

from __future__ import annotations

import json
from typing import IO, Any

from reference.sessions import Session
from spec.json_limits import first_excess

__all__ = ["MAX_REQUEST_BYTES", "serve"]

#: The longest request line read (a vector's largest step is about 0.4 MB).
MAX_REQUEST_BYTES = 8 * 1024 * 1024


def serve(machine: str, requests: IO[bytes], answers: IO[bytes]) -> int:
    """Answer ``requests`` until ``close`` or their end; the exit status (0)."""
    session = Session(machine)
    line = 0
    while True:
        raw = requests.readline(MAX_REQUEST_BYTES + 1)
        if not raw:
            return 0
        line += 1
        if len(raw) > MAX_REQUEST_BYTES and not raw.endswith(b"\n"):
            while raw and not raw.endswith(b"\n"):  # skip the rest of the line
                raw = requests.readline(MAX_REQUEST_BYTES + 1)
            _write(answers, {"fail": f"request line {line} is longer than {MAX_REQUEST_BYTES:,} bytes"})
            continue
        if not raw.strip():
            line -= 1  # blank lines are not requests
            continue
        request = _parsed(raw, line)
        if "fail" in request:
            _write(answers, request)
            continue
        _write(answers, _answer(session, request["request"]))
        if isinstance(request["request"], dict) and request["request"].get("op") == "close":
            return 0


def _parsed(raw: bytes, line: int) -> dict[str, Any]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return {"fail": f"request line {line} is not UTF-8"}
    excess = first_excess(text, max_depth=64, max_digits=40)
    if excess is not None:
        return {"fail": f"request line {line}: JSON {excess[0]} at character {excess[1]}"}
    try:
        return {"request": json.loads(text)}
    except (json.JSONDecodeError, ValueError) as exc:
        return {"fail": f"request line {line} is not JSON: {exc}"}


def _answer(session: Session, request: Any) -> dict[str, Any]:
    try:
        return session.handle(request)
    except Exception as exc:
        return {"fail": f"{type(exc).__name__}: {exc}"}


def _write(answers: IO[bytes], answer: dict[str, Any]) -> None:
    answers.write(json.dumps(answer, separators=(",", ":")).encode() + b"\n")
    answers.flush()
