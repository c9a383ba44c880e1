"""Jepsen's ``history.edn`` as histories of the contract (:mod:`spec.history`).

A Jepsen history is a sequence of operation maps, one per line (``jepsen.store`` writes them so;
an older file wraps them in one vector, ``[{...} {...}]``; Jepsen 0.3 prints each as a
``#jepsen.history.Op{...}`` record)::

    {:type :invoke, :f :cas, :value [1 4], :time 3291485317, :process 0, :index 0}

Each form is read with ``edn-format`` (the reader the issue names), after this module has cut the
text into top-level forms itself, so that every problem names its line, and so that a form deeper
than :data:`MAX_DEPTH` or longer than :data:`MAX_FORM_BYTES`, a file larger than
:data:`MAX_FILE_BYTES` or one with more than :data:`MAX_OPS` operations is refused before the
parser sees it.  Anything that is not such a history is a :class:`~spec.history.BadHistory` naming
the file and the line: text that is not EDN, a truncated form, an unknown tag, a map without
``:type``/``:process``/``:f``, a workload this reader does not know.  Nothing is skipped silently
but the nemesis: operations whose ``:process`` is ``:nemesis`` (faults, not client operations).

The mapping.  Jepsen's ``:invoke``/``:ok``/``:fail``/``:info`` are the contract's types, paired by
:func:`spec.history.pair_events` (``:process`` is the process, ``:time`` the logical time: Jepsen's
nanoseconds; without any ``:time``, as in Knossos's older files, the form's number).  A ``:fail``
did not take effect and nothing more is concluded from it, as in Knossos.  Three workload shapes,
told apart by the ``:f`` values the history uses:

* **register / cas-register** (``:read``, ``:write``, ``:cas``): operations on
  ``register:<history>`` for the ``cas-register`` model; with ``jepsen.independent`` keys (every
  value a ``[key value]`` tuple) one register per key, ``register:<history>/<key>``.
* **set** (``:add``, ``:read``): an add is a ``send`` of the element to ``partition:<history>/set``;
  a read that returned ok is a fresh subscription that received every element it returned and
  then found nothing (``receive`` operations, each its own process, over the read's interval).  So
  the delivery checks say what Jepsen's set checker says: an element read that nobody added is a
  ``garbage-read`` (Jepsen's *unexpected*), an acknowledged add missing from a read invoked after
  every add completed is a ``lost-message`` (*lost*).
* **queue** (``:enqueue``, ``:dequeue``, ``:drain``): an enqueue is a ``send`` to
  ``partition:<history>/queue``; a dequeue is a ``receive`` on ``subscription:<history>/queue#queue``
  (one that returned nil found the queue empty), and a drain the receives of what it returned and
  then an empty one.  Jepsen's total-queue verdicts follow: *unexpected* is a ``garbage-read``,
  *lost* a ``lost-message`` once an empty dequeue or a drain came after every enqueue completed;
  a duplicate dequeue is allowed (at-least-once), as total-queue allows it.

* **kafka** (``:send``, ``:poll``, ``:txn``, ``:assign``, ``:subscribe``, ``:crash``,
  ``:debug-topic-partitions``): Jepsen's ``jepsen.tests.kafka`` workload, mapped onto the contract by
  :mod:`history_io.kafka` (a key is a partition, an offset a position, each operation a transaction).

Elements and enqueued values must be unique (each delivery names its send), and are spelled as EDN
text (``17``, ``:a``, ``"x"``).  Other workloads (Elle's list-append ``:txn`` of ``:append``/``:r``
micro-operations, ...) are refused, naming the first line that uses them.

Most forms of a large history are plain (numbers, keywords, vectors and maps, no strings): those are
read by :func:`_fast_op`, which turns the form into JSON text with a few regular-expression passes and
hands it to the ``json`` module, an order of magnitude faster than ``edn-format``'s grammar; any
other form, and any form the fast path finds anything odd in, goes to ``edn-format``, whose answer
(or error) it then is.
"""

from __future__ import annotations

import datetime
import fractions
import itertools
import json
import os
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from history_io.edn_values import EdnOp, to_edn
from spec.history import BadHistory, Event, Operation, OpType, make_operation, object_id, pair_events

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_FORM_BYTES",
    "MAX_OPS",
    "EdnOp",
    "history_id",
    "parse_edn",
    "read_edn",
    "to_edn",
    "write_edn",
]

MAX_FILE_BYTES = 1 << 30  # 1 GiB of text
MAX_FORM_BYTES = 1 << 20  # one operation map
MAX_DEPTH = 64  # nesting of one form
MAX_OPS = 10_000_000

_RECORD_TAGS = ("jepsen.history.Op",)  # printed records whose body is an operation map
_INTERESTING = re.compile(r'[\[\](){}"\\;\n]')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_TAG = re.compile(r"#([A-Za-z][\w.*+!?$%&=<>/-]*)\s*")
_SCALAR = re.compile(r"[^\s,\[\](){}\";]*")


@dataclass(frozen=True)
class _Form:
    text: str
    line: int  # 1-based line where it starts


def _bad(message: str, where: str, line: int | None = None) -> BadHistory:
    return BadHistory(message if line is None else f"line {line}: {message}", where=where)


def _forms(text: str, where: str) -> Iterator[_Form]:
    """The top-level forms (or, in a file that is one vector, the vector's elements), each with the
    line it starts on; the depth and size limits checked here, before any parsing."""
    pos, line, end = 0, 1, len(text)
    base = 0  # the bracket depth of an operation: 1 inside a wrapping vector
    first = True
    while True:
        pos, line = _skip_space(text, pos, line)
        if pos >= end:
            if base:
                raise _bad("the file ends inside the vector that holds the history (truncated?)", where, line)
            return
        c = text[pos]
        if first and c == "[":
            base, first = 1, False
            pos += 1
            continue
        first = False
        if c == "]" and base:
            rest, rest_line = _skip_space(text, pos + 1, line)
            if rest < end:
                raise _bad("text after the vector that holds the history", where, rest_line)
            return
        if c in ")]}":
            raise _bad(f"unbalanced {c!r}", where, line)
        start, start_line = pos, line
        if c == '"':
            string = _STRING.match(text, pos)
            if string is None:
                raise _bad("a string that never closes (truncated?)", where, line)
            pos = string.end()
            line += string.group().count("\n")
            yield _Form(text[start:pos], start_line)
            continue
        if c != "#" and c not in "([{":
            scalar = _SCALAR.match(text, pos)
            assert scalar is not None
            pos = max(scalar.end(), pos + 1)
            yield _Form(text[start:pos], start_line)
            continue
        whole = _whole_line(text, pos)
        if whole > pos:  # the common case: one plain map on its line, found without walking it
            pos = whole
            yield _Form(text[start:pos], start_line)
            continue
        pos, line = _close(text, pos, line, start_line, where)
        if pos - start > MAX_FORM_BYTES:
            raise _bad(f"one form is longer than {MAX_FORM_BYTES} bytes", where, start_line)
        yield _Form(text[start:pos], start_line)


_NOT_PLAIN = re.compile(r'["\\;#]')
_NOT_BRACKET = re.compile(r"[^\[\](){}]+")
_RECORD_START = "#jepsen.history.Op{"


def _whole_line(text: str, pos: int) -> int:
    """Where the form starting at ``pos`` ends, when it is a map (or a ``#jepsen.history.Op`` record)
    that fills the rest of its line, holds no string, comment, tag or character, and nests within
    the limits; else ``pos`` (:func:`_close` then walks it)."""
    body = pos + len(_RECORD_START) - 1 if text.startswith(_RECORD_START, pos) else pos
    if text[body] != "{":
        return pos
    nl = text.find("\n", pos)
    stop = len(text) if nl < 0 else nl
    while stop > body and text[stop - 1] in " \t\r,":
        stop -= 1
    if stop - pos > MAX_FORM_BYTES or text[stop - 1] != "}" or _NOT_PLAIN.search(text, body, stop):
        return pos
    # the braces at both ends close each other: what lies between is balanced on its own
    inner = _NOT_BRACKET.sub("", text[body + 1 : stop - 1])
    for _ in range(MAX_DEPTH - 1):
        if not inner:
            return stop
        shorter = inner.replace("[]", "").replace("{}", "").replace("()", "")
        if shorter == inner:
            return pos
        inner = shorter
    return pos


def _skip_space(text: str, i: int, line: int) -> tuple[int, int]:
    """Past whitespace, commas and comments."""
    end = len(text)
    while i < end:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif c in " \t\r,":
            i += 1
        elif c == ";":
            nl = text.find("\n", i)
            i = end if nl < 0 else nl
        else:
            break
    return i, line


def _close(text: str, pos: int, line: int, start_line: int, where: str) -> tuple[int, int]:
    """From the start of a bracketed form (or a tag before one) to just past its closing bracket."""
    depth = 0
    end = len(text)
    while True:
        match = _INTERESTING.search(text, pos)
        if match is None or match.start() - pos > MAX_FORM_BYTES:
            if match is None:
                raise _bad("the file ends inside a form (truncated?)", where, start_line)
            raise _bad(f"one form is longer than {MAX_FORM_BYTES} bytes", where, start_line)
        i = match.start()
        c = text[i]
        if c == "\n":
            line += 1
            pos = i + 1
        elif c == ";":
            nl = text.find("\n", i)
            pos = end if nl < 0 else nl
        elif c == '"':
            string = _STRING.match(text, i)
            if string is None:
                raise _bad("a string that never closes (truncated?)", where, line)
            line += string.group().count("\n")
            pos = string.end()
        elif c == "\\":
            pos = i + 2  # a character literal: \a, \newline, \u0041 (no delimiter among its letters)
        elif c in "([{":
            depth += 1
            if depth > MAX_DEPTH:
                raise _bad(f"nested deeper than {MAX_DEPTH}", where, line)
            pos = i + 1
        else:
            depth -= 1
            pos = i + 1
            if depth < 0:
                raise _bad(f"unbalanced {c!r}", where, line)
            if depth == 0:
                return pos, line


class _Parser:
    """``edn-format``'s grammar, built once (building it per form costs milliseconds)."""

    def __init__(self) -> None:
        import ply.yacc
        from edn_format import edn_lex, edn_parse

        self._parser = ply.yacc.yacc(module=edn_parse, debug=False, write_tables=False, errorlog=ply.yacc.NullLogger())
        self._lexer = edn_lex.lex()

    def parse(self, text: str) -> Any:
        self._lexer.lineno = 1
        found = list(self._parser.parse(text, lexer=self._lexer))
        if len(found) != 1:
            raise ValueError(f"expected one form, found {len(found)}")
        return found[0]


_PARSER: _Parser | None = None


def _parser() -> _Parser:
    global _PARSER
    if _PARSER is None:
        _PARSER = _Parser()
    return _PARSER


def _strip_record_tag(form: _Form, where: str) -> str:
    text = form.text
    if not text.startswith("#") or text.startswith(("#{", "#_")):
        return text
    tag = _TAG.match(text)
    if tag is None:
        raise _bad(f"not an operation: {text[:60]!r}", where, form.line)
    if tag.group(1) not in _RECORD_TAGS:
        raise _bad(f"unknown tag #{tag.group(1)} (operations are maps or #jepsen.history.Op records)", where, form.line)
    return text[tag.end() :]


def _plain(value: Any, where: str, line: int) -> Any:
    """An EDN value as JSON-able Python: keywords and symbols as their names, vectors, lists and sets
    as lists (a set sorted by its EDN text), maps as objects with text keys."""
    from edn_format import Char, Keyword, Symbol

    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise _bad(f"a number JSON cannot hold: {value}", where, line)
        return value
    if isinstance(value, Keyword | Symbol):
        return value.name
    if isinstance(value, Char):
        return str(value)
    if isinstance(value, frozenset):
        return sorted((_plain(v, where, line) for v in value), key=to_edn)
    if isinstance(value, Mapping):
        return {to_edn(_plain(k, where, line)): _plain(v, where, line) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_plain(v, where, line) for v in value]
    if isinstance(value, datetime.date | datetime.datetime):
        return value.isoformat()
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, fractions.Fraction):
        return f"{value.numerator}/{value.denominator}"
    raise _bad(f"a value this reader does not know: {type(value).__name__}", where, line)


def _keyword(data: Mapping[Any, Any], name: str) -> Any:
    from edn_format import Keyword

    return data.get(Keyword(name), _MISSING)


_MISSING = object()
_TYPES = {"invoke": OpType.INVOKE, "ok": OpType.OK, "fail": OpType.FAIL, "info": OpType.INFO}


def _op(form: _Form, where: str) -> EdnOp:
    from edn_format import Keyword

    text = _strip_record_tag(form, where)
    fast = _fast_op(text, form.line)
    if fast is not None:
        return fast
    try:
        data = _parser().parse(text)
    except Exception as exc:  # edn-format raises EDNDecodeError, ValueError, NotImplementedError...
        message = str(exc) or type(exc).__name__
        if "EOF" in message:
            message = "the form ends early (truncated?)"
        elif "tag" in message:
            message = f"unknown tag ({message})"
        raise _bad(f"not EDN: {message}", where, form.line) from None
    if not isinstance(data, Mapping):
        raise _bad(f"an operation is a map, got {type(data).__name__}: {form.text[:60]!r}", where, form.line)
    kind = _keyword(data, "type")
    if not isinstance(kind, Keyword) or kind.name not in _TYPES:
        raise _bad(f":type must be :invoke, :ok, :fail or :info, got {_show(kind)}", where, form.line)
    process = _keyword(data, "process")
    if isinstance(process, Keyword) and process.name == "nemesis":
        process_id = None
    elif isinstance(process, int) and not isinstance(process, bool):
        process_id = process
    else:
        raise _bad(f":process must be an integer or :nemesis, got {_show(process)}", where, form.line)
    f = _keyword(data, "f")
    if isinstance(f, Keyword):
        f_name = f.name
    elif isinstance(f, str):
        f_name = f
    else:
        raise _bad(f":f must be a keyword, got {_show(f)}", where, form.line)
    time = _keyword(data, "time")
    if time is _MISSING or time is None:
        time_ns = None
    elif isinstance(time, int) and not isinstance(time, bool):
        time_ns = time
    else:
        raise _bad(f":time must be an integer (nanoseconds), got {_show(time)}", where, form.line)
    value = _keyword(data, "value")
    error = _keyword(data, "error")
    index = _keyword(data, "index")
    found = {name: _keyword(data, name) for name in _EXTRAS}
    extras = {name: _plain(raw, where, form.line) for name, raw in found.items() if raw is not _MISSING}
    return EdnOp(
        form.line,
        _TYPES[kind.name],
        process_id,
        f_name,
        None if value is _MISSING else _plain(value, where, form.line),
        time_ns,
        None if error is _MISSING or error is None else _error_text(_plain(error, where, form.line)),
        index if isinstance(index, int) and not isinstance(index, bool) else None,
        extras,
    )


# The keys beyond Jepsen's own that a workload reads (see EdnOp.extras).
_EXTRAS = ("rebalance-log", "seek-to-beginning?")

# The fast path (see the module docstring).  A form qualifies when it is made of brackets, braces,
# keywords, integers, decimals and nil/true/false only: no string, character, tag, set, list,
# symbol or comment, so every JSON string the translation produces was a keyword (marked by its
# leading ':'), and a map becomes a JSON array whose first element is the marker "{".
_KEYWORD = r":[A-Za-z*+!_?<>=.-][\w*+!_?<>=.:#-]*"  # no "/": edn-format reads a namespace its own way
_NUMBER = r"-?\d+(?:\.\d+)?(?:[eE][+-]?\d+)?"
# One way only to match each character (no nested repetition), so a form that is not plain fails
# in linear time.
_PLAIN_FORM = re.compile(rf"(?:[\s,\[\]{{}}]|(?:{_KEYWORD}|{_NUMBER}|nil|true|false)(?=[\s,\[\]{{}}]|\Z))*\Z")
_SEPARATORS = re.compile(r"[\s,]+")
_KEYWORDS = re.compile(_KEYWORD)
_NIL = re.compile(r"(?<=[ \[])nil(?=[ \]])")


def _fast_op(text: str, line: int) -> EdnOp | None:
    """The operation a plain form states, or None when the form is not plain or anything in it is
    not what an operation holds (the slow path then reads it and says what is wrong)."""
    if not text.startswith("{") or not _PLAIN_FORM.match(text):
        return None
    json_text = _SEPARATORS.sub(" ", text).strip().replace("{", '["{" ').replace("}", "]")
    json_text = _NIL.sub("null", _KEYWORDS.sub(lambda m: '"' + m.group() + '"', json_text))
    json_text = json_text.replace(" ", ",").replace("[,", "[").replace(",]", "]")
    try:
        data = json.loads(json_text)
    except ValueError:
        return None
    fields = _fast_map(data)
    if fields is None:
        return None
    kind, process, f, time = fields.get(":type"), fields.get(":process"), fields.get(":f"), fields.get(":time")
    if not isinstance(kind, str) or kind[1:] not in _TYPES or not isinstance(f, str):
        return None
    if process == ":nemesis":
        process_id = None
    elif isinstance(process, int) and not isinstance(process, bool):
        process_id = process
    else:
        return None
    if time is not None and (not isinstance(time, int) or isinstance(time, bool)):
        return None
    index = fields.get(":index")
    error = fields.get(":error")
    value = fields.get(":value", _MISSING)
    return EdnOp(
        line,
        _TYPES[kind[1:]],
        process_id,
        f[1:],
        None if value is _MISSING else _fast_plain(value),
        time,
        None if error is None else _error_text(_fast_plain(error)),
        index if isinstance(index, int) and not isinstance(index, bool) else None,
        {name: _fast_plain(fields[":" + name]) for name in _EXTRAS if ":" + name in fields},
    )


def _fast_map(data: Any) -> dict[str, Any] | None:
    """A translated map as {":keyword": translated value}; None unless ``data`` is a map whose keys
    are distinct keywords."""
    if not isinstance(data, list) or not data or data[0] != "{" or len(data) % 2 != 1:
        return None
    keys = data[1::2]
    if not all(isinstance(key, str) for key in keys) or len(set(keys)) != len(keys):
        return None
    return dict(zip(keys, data[2::2], strict=True))


def _fast_plain(value: Any) -> Any:
    """A translated value as :func:`_plain` spells the same EDN: keywords by their names, maps with
    keys as EDN text."""
    if type(value) is list:
        if value and value[0] == "{":
            items = value[1:]
            return {to_edn(_fast_plain(items[i])): _fast_plain(items[i + 1]) for i in range(0, len(items) - 1, 2)}
        return [_fast_plain(v) for v in value]
    if type(value) is str:
        return value[1:]
    return value


def _error_text(error: Any) -> str:
    return error if isinstance(error, str) else to_edn(error)


def _show(value: Any) -> str:
    if value is _MISSING:
        return "nothing (missing)"
    return repr(str(value))[:60]


_REGISTER = frozenset({"read", "write", "cas"})
_SET = frozenset({"add", "read"})
_QUEUE = frozenset({"enqueue", "dequeue", "drain"})
_KAFKA = frozenset({"send", "poll", "txn", "assign", "subscribe", "crash", "debug-topic-partitions"})


def _workload(ops: Sequence[EdnOp], where: str) -> str:
    fs = {op.f for op in ops}
    if fs <= _REGISTER:
        return "register"
    if fs <= _SET and "add" in fs:
        return "set"
    if fs <= _QUEUE:
        return "queue"
    known = _REGISTER | _SET | _QUEUE | _KAFKA
    odd = next((op for op in ops if op.f not in known), None)
    if odd is not None:
        raise _bad(
            f":f :{odd.f} is not a workload this reader knows (register and cas-register: read, write, cas; "
            "set: add, read; queue: enqueue, dequeue, drain; kafka: send, poll, txn, assign, subscribe, crash)",
            where,
            odd.line,
        )
    family = _KAFKA if fs & _KAFKA else _SET if "add" in fs else _QUEUE if fs & _QUEUE else _REGISTER
    mixed = next(op for op in ops if op.f not in family)
    raise _bad(
        f"one history mixes workloads: :f :{mixed.f} beside {', '.join(sorted(fs - {mixed.f}))}", where, mixed.line
    )


def _independent(ops: Sequence[EdnOp]) -> bool:
    """``jepsen.independent``: every value a ``[key value]`` tuple (a read invokes with
    ``[key nil]``, a cas's value is ``[key [from to]]``)."""

    def pair(value: Any) -> bool:
        return isinstance(value, list) and len(value) == 2

    if not ops or not all(pair(op.value) for op in ops if op.type is OpType.INVOKE or op.value is not None):
        return False
    return all(pair(op.value[1]) for op in ops if op.f == "cas" and op.value is not None)


def history_id(path: str | Path) -> str:
    """The history id of a file: its name without ``.edn``; for Jepsen's ``history.edn`` the two
    folders above it (``<test>/<start time>``), since every test's file has that name."""
    file = Path(path)
    if file.stem == "history":
        parts = [p for p in (file.parent.parent.name, file.parent.name) if p]
        if parts:
            return "/".join(parts)
    return file.stem


def _client_ops(text: str, where: str) -> Iterator[EdnOp]:
    """The operations of the file in order, the nemesis's left out, at most :data:`MAX_OPS`."""
    count = 0
    for form in _forms(text, where):
        op = _op(form, where)
        if op.process is None:
            continue  # the nemesis: faults, not client operations
        count += 1
        if count > MAX_OPS:
            raise _bad(f"more than {MAX_OPS} operations", where, form.line)
        yield op


def parse_edn(text: str, *, history: str, where: str | None = None) -> list[Operation]:
    """The operations of one Jepsen history (see the module docstring).  A history whose first
    operation is the Kafka workload's is handed to :mod:`history_io.kafka` as it is read (it holds
    only the operations still open), any other is read whole first."""
    place = where or history
    stream = _client_ops(text, place)
    first = next(stream, None)
    if first is None:
        return []
    if first.f in _KAFKA:
        from history_io.kafka import kafka_operations

        return kafka_operations(itertools.chain([first], stream), history, place)
    ops = [first, *stream]
    timed = [op.time is not None for op in ops]
    if any(timed) and not all(timed):
        missing = ops[timed.index(False)]
        raise _bad("this operation has no :time while others have one", place, missing.line)
    workload = _workload(ops, place)
    events = [
        Event(op.process or 0, op.type, op.f, op.value, op.time if op.time is not None else i, op.error)
        for i, op in enumerate(ops)
    ]
    lines = [op.line for op in ops]
    try:
        paired = pair_events(history, events, obj=object_id("register", history), where=place)
    except BadHistory as exc:
        raise _rename(exc, lines, place) from None
    if workload == "register":
        return _registers(paired, history, _independent(ops), place)
    return _deliveries(paired, ops, history, workload, place)


def _rename(exc: BadHistory, lines: list[int], where: str) -> BadHistory:
    """pair_events names the event's number in the stream; say the file's line instead."""
    message = str(exc)
    if exc.row is not None and 0 <= exc.row < len(lines):
        message = message.split(": ", 1)[-1] if message.startswith(where) else message
        return _bad(message, where, lines[exc.row])
    return exc


def _with(op: Operation, **changes: Any) -> Operation:
    fields = {
        "value": op.args,
        "result": op.returned,
        "obj": op.object,
        "f": op.f,
        "op_type": op.type,
        "process": op.process,
        "error": op.error,
        "invoked_at": op.invoked_at,
        "completed_at": op.completed_at,
    }
    fields.update(changes)
    return make_operation(
        op.history,
        op.index,
        fields["process"],
        fields["op_type"],
        fields["f"],
        fields["obj"],
        fields["value"],
        fields["result"],
        invoked_at=fields["invoked_at"],
        completed_at=fields["completed_at"],
        error=fields["error"],
        seed=op.seed,
    )


def _registers(paired: list[Operation], history: str, independent: bool, where: str) -> list[Operation]:
    out = []
    for op in paired:
        error = op.error
        if op.type is OpType.FAIL and error is None:
            error = "fail"  # did not take effect; nothing more (a failed cas proves no compare)
        value, result = op.args, op.returned
        obj = object_id("register", history)
        if independent:
            key = value[0] if isinstance(value, list) else None
            obj = object_id("register", f"{history}/{to_edn(key)}")
            value = value[1] if isinstance(value, list) else None
            result = result[1] if isinstance(result, list) and len(result) == 2 else result
        if op.f == "read":
            value = None
        else:
            result = None  # a write or cas completes with its own arguments: nothing returned
        if op.f == "cas" and not (isinstance(value, list) and len(value) == 2):
            raise _bad(f"op {op.index}: a cas takes [from to], got {to_edn(value)}", where)
        out.append(_with(op, value=value, result=result, obj=obj, error=error))
    return out


def _deliveries(
    paired: list[Operation], ops: Sequence[EdnOp], history: str, workload: str, where: str
) -> list[Operation]:
    """A set or a queue in the transactional vocabulary (see the module docstring)."""
    partition = f"{history}/{workload}"
    part_obj = object_id("partition", partition)
    invoke_lines: dict[tuple[int, str], list[int]] = {}
    for read in ops:
        if read.type is OpType.INVOKE:
            invoke_lines.setdefault((read.process or 0, read.f), []).append(read.line)
    sent: dict[str, int] = {}
    out: list[Operation] = []
    next_process = max(op.process for op in paired) + 1
    seen_per_process: dict[tuple[int, str], int] = {}

    def line_of(op: Operation) -> int:
        key = (op.process, op.f)
        n = seen_per_process.get(key, 0)
        seen_per_process[key] = n + 1
        found = invoke_lines.get(key, [])
        return found[n] if n < len(found) else 0

    for op in paired:
        line = line_of(op)
        error = op.error
        if op.f in ("add", "enqueue"):
            payload = to_edn(op.args)
            if payload in sent:
                verb = "added" if op.f == "add" else "enqueued"
                raise _bad(
                    f"{payload} is {verb} twice (lines {sent[payload]} and {line}): elements must be unique",
                    where,
                    line,
                )
            sent[payload] = line
            out.append(
                _with(op, f="send", obj=part_obj, value={"message": payload, "txn": None}, result=None, error=error)
            )
            continue
        if workload == "set":
            sub = object_id("subscription", f"{partition}#read-{op.index}")
        else:
            sub = object_id("subscription", f"{partition}#queue")
        if op.f == "dequeue":
            result = None if op.type is not OpType.OK or op.returned is None else {"message": to_edn(op.returned)}
            out.append(_with(op, f="receive", obj=sub, value={}, result=result, error=error))
            continue
        # a set's read or a queue's drain: what it returned, then nothing more
        if op.type is OpType.FAIL:
            continue  # it took nothing
        if op.type.indeterminate:
            if workload == "queue":  # a drain of unknown outcome may have taken anything
                out.append(_with(op, f="receive", obj=sub, value={}, result=None))
            continue
        got = op.returned
        if not isinstance(got, list):
            raise _bad(f"a {op.f} returns a collection, got {to_edn(got)}", where, line)
        for element in [*got, None]:
            result = None if element is None else {"message": to_edn(element)}
            out.append(_with(op, f="receive", obj=sub, value={}, result=result, process=next_process, error=None))
            next_process += 1
    return [_reindex(op, i) for i, op in enumerate(out)]


def _reindex(op: Operation, index: int) -> Operation:
    return Operation(
        op.history,
        index,
        op.process,
        op.type,
        op.f,
        op.object,
        op.value,
        op.result,
        op.invoked_at,
        op.completed_at,
        op.error,
        op.seed,
        op._value,
        op._result,
    )


def read_edn(path: str | Path) -> dict[str, list[Operation]]:
    """Read one ``history.edn``: ``{history id: operations}`` (:func:`history_id`)."""
    from history_io.inputs import open_input  # a regular file only: a FIFO or a device is refused

    file = Path(path)
    where = str(file)
    with open_input(file) as handle:
        try:
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_FILE_BYTES:
                raise BadHistory(f"{size} bytes: larger than {MAX_FILE_BYTES} (the reader's limit)", where=where)
            raw = handle.read(MAX_FILE_BYTES + 1)
        except OSError as exc:
            raise BadHistory(f"cannot read: {exc.strerror}", where=where) from None
    if len(raw) > MAX_FILE_BYTES:  # grew while it was read
        raise BadHistory(f"larger than {MAX_FILE_BYTES} bytes (the reader's limit)", where=where)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise _bad(f"not UTF-8 text (byte {exc.start}: {exc.reason})", where, line) from None
    name = history_id(file)
    return {name: parse_edn(text, history=name, where=where)}


def write_edn(ops: Sequence[Operation], *, records: bool = False) -> str:
    """A register history (``read``/``write``/``cas`` on ``register`` objects) as Jepsen's events,
    one map per line, in time order: the inverse of :func:`parse_edn` for such histories (an object
    ``register:<history>/<key>`` writes ``jepsen.independent`` tuples).  ``records``: print each as
    a ``#jepsen.history.Op`` record, as Jepsen 0.3 does."""
    # (time, phase, index, step, text): at one instant, completions (phase 0) come before
    # invocations (phase 1), so a process may invoke the instant its last operation completed; an
    # operation that took no time completes right after its own invocation (phase 1, step 1).
    events: list[tuple[int, int, int, int, str]] = []
    for op in ops:
        name = op.object.partition(":")[2]
        key = name.split("/", 1)[1] if "/" in name else None
        value = op.args if op.f != "read" else None

        def wrap(v: Any, key: str | None = key) -> str:
            return to_edn(v) if key is None else f"[{key} {to_edn(v)}]"

        events.append((op.invoked_at, 1, op.index, 0, _event("invoke", op, wrap(value))))
        if op.type is OpType.INVOKE:
            continue
        done = op.completed_at if op.completed_at is not None else op.invoked_at
        shown = op.returned if op.type is OpType.OK and op.f == "read" else value
        phase = 1 if done == op.invoked_at else 0
        events.append((done, phase, op.index, 1, _event(op.type.value, op, wrap(shown))))
    lines = []
    for index, (*_, text) in enumerate(sorted(events)):
        body = text.replace("}", f", :index {index}}}", 1) if text.endswith("}") else text
        lines.append(("#jepsen.history.Op" if records else "") + body)
    return "\n".join(lines) + ("\n" if lines else "")


def _event(kind: str, op: Operation, value: str) -> str:
    error = f", :error {to_edn(op.error)}" if op.error is not None and kind in ("fail", "info") else ""
    time = op.invoked_at if kind == "invoke" else op.completed_at
    return f"{{:type :{kind}, :f :{op.f}, :value {value}, :time {time}, :process {op.process}{error}}}"
