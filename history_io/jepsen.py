"""Jepsen etcd logs (``../shared/data/porcupine/jepsen-etcd``) as histories of the cas-register model,
and Jepsen key-value logs (Porcupine's ``test_data/kv``) as histories of the kv model.

A log line that records an operation looks like::

    INFO  jepsen.util - 3	:invoke	:cas	[1 4]

(fields separated by tabs or runs of spaces).  Events are paired by :func:`spec.history.pair_events`;
logical time is the line number.  The mapping, chosen to agree with Porcupine's etcd test:

* ``:ok :read nil|N`` — the read returned nil or N;
* ``:ok :write N``, ``:ok :cas [a b]`` — took effect; ``:fail :cas [a b]`` — the compare failed;
* ``:info ... :timed-out`` — outcome unknown: an ``info`` operation (return at +infinity);
* ``:fail :read :timed-out`` — a read that returned nothing: a ``fail`` with error ``timed-out``
  (it constrains nothing, as in Porcupine, which gives it an "unknown" output);
* an invocation never completed — an ``invoke`` operation.
"""

from __future__ import annotations

import re
from pathlib import Path

from spec.history import BadHistory, Event, Operation, OpType, make_operation, object_id, pair_events

__all__ = [
    "JEPSEN_OBJECT",
    "MAX_JEPSEN_LOG_BYTES",
    "parse_jepsen_log",
    "parse_kv_log",
    "read_jepsen_log",
    "read_kv_log",
    "read_verdicts",
]

JEPSEN_OBJECT = object_id("register", "etcd")

#: The largest log read (the etcd logs of the Porcupine data are under 100 kB each).
MAX_JEPSEN_LOG_BYTES = 64 * 1024 * 1024

_LINE = re.compile(r"^INFO\s+jepsen\.util\s+-\s+(\d+)\s+:(invoke|ok|fail|info)\s+:(read|write|cas)\s+(.+?)\s*$")
_CAS = re.compile(r"^\[\s*(-?\d+)\s+(-?\d+)\s*\]$")


def _value(text: str, f: str, where: str, row: int) -> object:
    if text == "nil":
        return None
    if text.startswith(":"):
        return text  # a keyword such as :timed-out
    if f == "cas":
        match = _CAS.match(text)
        if match is None:
            raise BadHistory(f"a cas value is [from to], got {text!r}", where=where, row=row, column="value")
        return [int(match.group(1)), int(match.group(2))]
    try:
        return int(text)
    except ValueError:
        raise BadHistory(f"expected nil or an integer, got {text!r}", where=where, row=row, column="value") from None


def parse_jepsen_log(text: str, *, history: str, where: str | None = None) -> list[Operation]:
    """Parse the text of one log.  Lines that are not operations are skipped (setup, nemesis); a
    log that is not empty but has no operation line at all is not a Jepsen log (random text would
    otherwise be an empty, trivially linearizable history)."""
    place = where or history
    events: list[Event] = []
    lines = text.splitlines()
    for row, line in enumerate(lines):
        match = _LINE.match(line)
        if match is None:
            if "jepsen.util" in line and re.search(r":(invoke|ok|fail|info)\b", line):
                raise BadHistory(f"an operation line that does not parse: {line.strip()!r}", where=place, row=row)
            continue
        process, kind, f, raw = int(match.group(1)), OpType(match.group(2)), match.group(3), match.group(4)
        value = _value(raw, f, place, row)
        error = None
        if isinstance(value, str):  # :timed-out and friends: the completion carries no value
            error, value = value.lstrip(":"), None
        if kind is OpType.INVOKE and f == "read":
            value = None
        events.append(Event(process, kind, f, value, row, error))
    if not events and text.strip():
        raise BadHistory(
            f"not a Jepsen log: none of its {len(lines):,} lines is an operation "
            "('INFO jepsen.util - PROCESS :TYPE :F VALUE')",
            where=place,
        )
    return pair_events(history, events, obj=JEPSEN_OBJECT, where=place)


def read_jepsen_log(path: str | Path) -> list[Operation]:
    """Read one ``etcd_NNN.log`` (a regular file of at most :data:`MAX_JEPSEN_LOG_BYTES`); the
    history id is the file name without ``.log``."""
    file = Path(path)
    return parse_jepsen_log(_read_text(file), history=file.stem, where=str(file))


def _read_text(file: Path) -> str:
    """A log's text: a regular file (a FIFO or a device is refused) of at most
    :data:`MAX_JEPSEN_LOG_BYTES`, UTF-8."""
    from history_io.inputs import open_input

    with open_input(file) as handle:
        raw = handle.read(MAX_JEPSEN_LOG_BYTES + 1)
    if len(raw) > MAX_JEPSEN_LOG_BYTES:
        raise BadHistory(
            f"more than {MAX_JEPSEN_LOG_BYTES:,} bytes, over the limit (MAX_JEPSEN_LOG_BYTES)", where=str(file)
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        row = raw.count(b"\n", 0, exc.start)
        raise BadHistory(
            f"not UTF-8 text: byte 0x{raw[exc.start]:02x} at byte offset {exc.start}", where=str(file), row=row
        ) from None


def read_verdicts(path: str | Path) -> dict[str, bool]:
    """``VERDICTS.tsv``: file name -> linearizable?"""
    verdicts: dict[str, bool] = {}
    for row, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines()):
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2 or parts[1] not in ("linearizable", "not-linearizable"):
            raise BadHistory(
                f"expected '<file>\\t(linearizable|not-linearizable)', got {line!r}", where=str(path), row=row
            )
        verdicts[parts[0]] = parts[1] == "linearizable"
    return verdicts


# {:process 0, :type :invoke, :f :append, :key "0", :value "x 0 0 y"}; a get's invocation has :value nil
_KV_LINE = re.compile(
    r'^\{:process (\d+), :type :(invoke|ok|fail|info), :f :(get|put|append), :key "([^"]*)", :value (nil|"[^"]*")\}$'
)


def parse_kv_log(text: str, *, history: str, where: str | None = None) -> list[Operation]:
    """Parse a Jepsen key-value log, one event per line (Porcupine's kv test data).

    Each key is its own object (``key:<k>``, the kv model's partition); a get's completion carries
    the value read (nil reads as the empty string), a put's and an append's the value written.
    Logical time is the line number.  Blank lines are skipped; any other line that does not parse
    is bad input, with its row."""
    place = where or history
    events: list[Event] = []
    for row, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        match = _KV_LINE.match(line.strip())
        if match is None:
            raise BadHistory(f"not a key-value event: {line.strip()!r}", where=place, row=row)
        process, kind, f, key, raw = match.groups()
        value = None if raw == "nil" else raw[1:-1]
        events.append(Event(int(process), OpType(kind), f, [key, value], row))
    paired = pair_events(history, events, obj=object_id("key", ""), where=place)
    out = []
    for op in paired:
        key, argument = op.args
        result = op.returned[1] if op.returned is not None and op.f == "get" else None
        out.append(
            make_operation(
                history,
                op.index,
                op.process,
                op.type,
                op.f,
                object_id("key", key),
                argument,
                result,
                invoked_at=op.invoked_at,
                completed_at=op.completed_at,
                error=op.error,
            )
        )
    return out


def read_kv_log(path: str | Path) -> list[Operation]:
    """Read one key-value log; the history id is the file name without its extension."""
    file = Path(path)
    return parse_kv_log(_read_text(file), history=file.stem, where=str(file))
