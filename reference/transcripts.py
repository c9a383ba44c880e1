"""Transcripts: a conformance vector as a text file to read, one step after another.

A vector (``spec/vectors/<machine>/<id>.json``) is the contract: it says what a step must return,
partially.  Its transcript (``spec/transcripts/<machine>/<id>.txt``) shows everything the reference
machine did at each step, in the manner of data-driven test files: the command and its arguments
on one line, a ``----`` line, then what the machine returned, the effects it emitted and what each
observer check saw, and a blank line before the next step::

    # s3-open-to-committed-is-invalid (coordinator): OPEN -> COMMITTED is refused; ...
    # Rules: TC-6, TC-8.

    init coordinator
    ----
    ok

    update_txn_status txn_id=[0,0] new_status=COMMITTED expected_status=OPEN now_ms=1001
    ----
    error InvalidTxnStatus "Transaction `(0,0)` can not be changed from OPEN to COMMITTED"
    effect AppendRecord(record_id=1, record=TxnLogRecord(metadata_op=UPDATE, ...))
    effect DeleteRecords(record_ids=[1])
    check txn_status txn_id=[0,0] -> OPEN

The lines of a step's output, in this order:

* ``ok`` (the step returned nothing) or ``ok <value>``; or ``error <Name> "<message>"``;
* ``effect <value>``, one line for each effect, in the order they were emitted;
* ``check <observer> <name>=<value>... -> <value>``: each observer check of the step and what the
  observer returned (all of it, whatever the vector expects of it).

The first blocks are not steps: ``config <key>=<value>...`` (the broker.conf overrides; only when
the vector has some) and ``init <machine> <name>=<value>...`` (the machine's initial state
parameters); both print ``ok``.  A line starting with ``#`` is a comment: the lines just above a
command are its step's comment, the others say what the file is.

Values are the JSON spellings of :mod:`spec.jsonvalues` (TxnID ``[0,7]``, Position ``[3,12]``,
BatchedPosition ``[3,12,10,4]``, Subscription ``[t1,sub]``, maps as arrays of pairs) written more
briefly: a string that is a plain word (a letter or ``_``, then letters, digits, ``_``, ``.``,
``-``; not ``null``, ``true`` or ``false``) is written bare (``COMMITTED``), any other string
JSON-quoted; an object with an ``@type`` is ``Type(field=value, ...)``; bytes ``{"@bytes": hex}``
are ``0x<hex>``; any other object is ``{key=value, ...}``.  A value too long for its line is
broken after its opening bracket, its items indented by two spaces (as many to a line as fit, or
one a line when one of them must be broken too).  Whitespace between a value's tokens means
nothing to the reader, so each spelling reads back as exactly the JSON it spells.

Everything here is pure: :func:`render_transcript` turns a vector and its replay
(:func:`reference.sessions.replay_vector`) into text, :func:`read_transcript` reads text back,
and :func:`disagreements` says where a read transcript and its vector disagree.  Files are the
runner's (``runners/transcripts.py``).
"""

from __future__ import annotations

import json
import math
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from reference.conformance import StepOutcome, expectation_mismatch, matches

__all__ = [
    "SEPARATOR",
    "WIDTH",
    "Block",
    "Check",
    "Transcript",
    "TranscriptError",
    "disagreements",
    "parse_value",
    "read_transcript",
    "render_transcript",
    "spell",
]

#: The line between a command and what it printed.
SEPARATOR = "----"
#: The columns a value may take before it is broken across lines (a command line is never broken).
WIDTH = 100

_BARE = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_HEX = re.compile(r"(?:[0-9a-f]{2})*")
_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")
_STRING = re.compile(r'"(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u[0-9a-fA-F]{4})*"')
_BYTES = re.compile(r"0x((?:[0-9a-f]{2})*)")
_KEYWORDS = {"null": None, "true": True, "false": False}


class TranscriptError(ValueError):
    """Text that is not a transcript; ``line`` is the 1-based line of the problem."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}")
        self.line = line
        self.message = message


# -- Spelling values ----------------------------------------------------------------------------


def spell(value: Any, *, room: int = WIDTH, indent: int = 0) -> str:
    """``value`` (JSON, as :func:`spec.jsonvalues.to_json` makes it) in the transcript spelling:
    on one line when that takes at most ``room`` columns, otherwise broken after the opening
    bracket, the items indented ``indent + 2`` spaces (filled to :data:`WIDTH` when each fits on
    a line, else one a line) and the closing bracket ``indent``."""
    flat = _flat(value)
    if len(flat) <= room:
        return flat
    opening, items, closing = _parts(value)
    if not items:
        return flat
    inner = indent + 2
    labels = [_label(key) for key, _ in items]
    flats = [label + _flat(item) for label, (_, item) in zip(labels, items, strict=True)]
    if all(len(text) < WIDTH - inner for text in flats):
        lines = _filled(flats, WIDTH - inner)
    else:
        lines = [
            label + spell(item, room=WIDTH - inner - len(label) - 1, indent=inner)
            for label, (_, item) in zip(labels, items, strict=True)
        ]
    pad = " " * inner
    return opening + "\n" + pad + (",\n" + pad).join(lines) + "\n" + " " * indent + closing


def _filled(items: list[str], room: int) -> list[str]:
    """``items`` joined by ``", "`` into as few lines of at most ``room`` columns as they fit in
    (each line but the last then ends with a comma)."""
    lines = [items[0]]
    for item in items[1:]:
        if len(lines[-1]) + 2 + len(item) + 1 <= room:
            lines[-1] += ", " + item
        else:
            lines.append(item)
    return lines


def _parts(value: Any) -> tuple[str, list[tuple[str | None, Any]], str]:
    """A container's opening, its (key or None, item) pairs and its closing; no items for a
    value spelled as one token."""
    if isinstance(value, list):
        return "[", [(None, item) for item in value], "]"
    if isinstance(value, dict) and not _is_bytes(value):
        if _is_typed(value):
            return f"{value['@type']}(", [(k, v) for k, v in value.items() if k != "@type"], ")"
        return "{", list(value.items()), "}"
    return "", [], ""


def _flat(value: Any) -> str:
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"no transcript spelling for {value!r}: JSON has no such number")
        return json.dumps(value)
    if isinstance(value, str):
        return value if _BARE.fullmatch(value) and value not in _KEYWORDS else json.dumps(value)
    if isinstance(value, list):
        return "[" + ("," if all(map(_is_scalar, value)) else ", ").join(_flat(item) for item in value) + "]"
    if isinstance(value, dict):
        if _is_bytes(value):
            return "0x" + str(value["@bytes"])
        opening, items, closing = _parts(value)
        return opening + ", ".join(_label(k) + _flat(v) for k, v in items) + closing
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _is_scalar(value: Any) -> bool:
    """Spelled as one token: an array of these is written without blanks (``[0,7]``)."""
    return not isinstance(value, list | dict) or (isinstance(value, dict) and _is_bytes(value))


def _is_bytes(value: Mapping[str, Any]) -> bool:
    return set(value) == {"@bytes"} and isinstance(value["@bytes"], str) and bool(_HEX.fullmatch(value["@bytes"]))


def _is_typed(value: Mapping[str, Any]) -> bool:
    kind = value.get("@type")
    return (
        isinstance(kind, str)
        and bool(_NAME.fullmatch(kind))
        and all(key == "@type" or _NAME.fullmatch(key) for key in value)
    )


def _label(key: str | None) -> str:
    """What goes before an item: ``key=`` for an object's, nothing for an array's."""
    return "" if key is None else f"{_key(key)}="


def _key(key: str) -> str:
    return key if _NAME.fullmatch(key) else json.dumps(key)


def _arguments(args: Mapping[str, Any]) -> list[str]:
    return [f"{_key(name)}={_flat(value)}" for name, value in args.items()]


# -- Reading values -----------------------------------------------------------------------------


class _Cursor:
    """A place in some text that starts at line ``first_line`` of a file, read token by token."""

    def __init__(self, text: str, first_line: int) -> None:
        self.text = text
        self.pos = 0
        self.first_line = first_line

    def line(self) -> int:
        return self.first_line + self.text.count("\n", 0, self.pos)

    def fail(self, message: str) -> TranscriptError:
        return TranscriptError(self.line(), message)

    def skip(self, *, newlines: bool = True) -> None:
        blanks = " \t\n" if newlines else " \t"
        while self.pos < len(self.text) and self.text[self.pos] in blanks:
            self.pos += 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def at_line_end(self) -> bool:
        return self.peek() in ("", "\n")

    def take(self, char: str) -> bool:
        if self.peek() == char:
            self.pos += 1
            return True
        return False

    def need(self, char: str, what: str) -> None:
        if not self.take(char):
            raise self.fail(f"expected {char!r} {what}, found {self.shown()}")

    def match(self, pattern: re.Pattern[str]) -> re.Match[str] | None:
        found = pattern.match(self.text, self.pos)
        if found is not None:
            self.pos = found.end()
        return found

    def shown(self) -> str:
        rest = self.text[self.pos :].split("\n", 1)[0]
        if not rest:
            return "the end of the line"
        return repr(rest if len(rest) <= 30 else rest[:30] + "...")

    def word(self, what: str) -> str:
        found = self.match(_NAME)
        if found is None:
            raise self.fail(f"expected {what}, found {self.shown()}")
        return found.group()

    def key(self) -> str | None:
        """A ``name=`` or ``"quoted"=`` ahead (the ``=`` taken), or None with nothing taken."""
        start = self.pos
        found = self.match(_NAME) or self.match(_STRING)
        if found is not None and self.take("="):
            text = found.group()
            return str(json.loads(text)) if text.startswith('"') else text
        self.pos = start
        return None


def parse_value(text: str) -> Any:
    """The JSON value that ``text`` (one value in the transcript spelling, blanks around it
    allowed) spells; anything else raises :class:`TranscriptError` with the line (from 1)."""
    cursor = _Cursor(text, 1)
    cursor.skip()
    value = _read_value(cursor)
    cursor.skip()
    if cursor.peek():
        raise cursor.fail(f"expected the end of the value, found {cursor.shown()}")
    return value


def _read_value(cursor: _Cursor) -> Any:
    """The JSON value spelled at ``cursor`` (no blank before it), the cursor moved past it."""
    char = cursor.peek()
    if char == "[":
        cursor.pos += 1
        return [item for _, item in _items(cursor, "]", keyed=False)]
    if char == "{":
        cursor.pos += 1
        return _fields(cursor, "}")
    if char == '"':
        found = cursor.match(_STRING)
        if found is None:
            raise cursor.fail("a quoted string that does not end, or holds a character JSON escapes")
        return json.loads(found.group())
    found = cursor.match(_BYTES)
    if found is not None:
        _token_ends(cursor, "a byte string")
        return {"@bytes": found.group(1)}
    found = cursor.match(_NUMBER)
    if found is not None:
        _token_ends(cursor, "a number")
        return json.loads(found.group())
    found = cursor.match(_BARE)
    if found is None:
        raise cursor.fail(f"expected a value, found {cursor.shown()}")
    word = found.group()
    if cursor.take("("):
        if not _NAME.fullmatch(word):
            raise cursor.fail(f"{word!r} is not a type name")
        fields = _fields(cursor, ")")
        if "@type" in fields:
            raise cursor.fail(f"{word}(...) names its type twice")
        return {"@type": word, **fields}
    return _KEYWORDS.get(word, word)


def _token_ends(cursor: _Cursor, what: str) -> None:
    if cursor.match(_BARE) is not None:
        raise cursor.fail(f"{what} runs into a word (a blank or a comma belongs between them)")


def _fields(cursor: _Cursor, closing: str) -> dict[str, Any]:
    return {str(key): value for key, value in _items(cursor, closing, keyed=True)}


def _items(cursor: _Cursor, closing: str, *, keyed: bool) -> list[tuple[str | None, Any]]:
    items: list[tuple[str | None, Any]] = []
    keys: set[str] = set()
    cursor.skip()
    if cursor.take(closing):
        return items
    while True:
        cursor.skip()
        key = None
        if keyed:
            key = cursor.key()
            if key is None:
                raise cursor.fail(f"expected name=value, found {cursor.shown()}")
            if key in keys:
                raise cursor.fail(f"{key!r} given twice")
            keys.add(key)
        items.append((key, _read_value(cursor)))
        cursor.skip()
        if cursor.take(closing):
            return items
        cursor.need(",", f"or {closing!r} after an item")


# -- Rendering ----------------------------------------------------------------------------------


def render_transcript(data: Mapping[str, Any], outcomes: Sequence[StepOutcome]) -> str:
    """The transcript of a (schema-valid) vector ``data`` whose replay is ``outcomes``."""
    blocks: list[str] = []
    if data.get("config"):
        blocks.append(_block([], ["config", *_arguments(data["config"])], ["ok"]))
    blocks.append(_block([], ["init", _flat(data["machine"]), *_arguments(data.get("init", {}))], ["ok"]))
    for outcome in outcomes:
        head = [outcome.command, *_arguments(outcome.args)]
        blocks.append(_block(_comment(outcome.comment or ""), head, _printed(outcome)))
    return "\n".join(_header(data)) + "\n\n" + "\n\n".join(blocks) + "\n"


def _header(data: Mapping[str, Any]) -> list[str]:
    machine, vector_id = data["machine"], data["id"]
    lines = _comment(f"{vector_id} ({machine}): {data['description']}")
    if data.get("source"):
        lines += _comment(f"Source: {data['source']}.")
    if data.get("rules"):
        lines += _comment(f"Rules: {', '.join(data['rules'])}.")
    lines += _comment(
        f"Written by `txnmodel vectors transcript --rewrite` from the vector {machine}/{vector_id}.json "
        "and what the reference does at each step: change the vector, not this file."
    )
    return lines


def _comment(text: str) -> list[str]:
    return [f"# {line}" for line in textwrap.wrap(text, WIDTH - 2, break_long_words=False, break_on_hyphens=False)]


def _block(comments: list[str], head: list[str], printed: list[str]) -> str:
    return "\n".join([*comments, " ".join(head), SEPARATOR, *printed])


def _printed(outcome: StepOutcome) -> list[str]:
    result = outcome.result
    if "ok" not in result:
        lines = [f"error {result['error']} {json.dumps(result['message'])}"]
    elif result["ok"] is None:
        lines = ["ok"]
    else:
        lines = ["ok " + spell(result["ok"], room=WIDTH - 3)]
    lines += ["effect " + spell(effect, room=WIDTH - 7) for effect in result["effects"]]
    for seen in outcome.observations:
        head = " ".join(["check", seen.observe, *_arguments(seen.args), "->"]) + " "
        lines.append(head + spell(seen.observed, room=WIDTH - len(head)))
    return lines


# -- Reading transcripts ------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """One ``check`` line: the observer, its arguments and the value it printed."""

    line: int
    observe: str
    args: Mapping[str, Any]
    value: Any


@dataclass(frozen=True)
class Block:
    """One command and what it printed; ``result`` in :func:`reference.conformance.describe_result`'s
    spelling (``ok`` and ``effects``, or ``error``, ``message`` and ``effects``)."""

    line: int
    comments: tuple[str, ...]
    command: str
    positional: tuple[Any, ...]
    args: Mapping[str, Any]
    result: Mapping[str, Any]
    checks: tuple[Check, ...]


@dataclass(frozen=True)
class Transcript:
    """A transcript read back: the comments about the file, then its blocks in order."""

    comments: tuple[str, ...]
    blocks: tuple[Block, ...]


def read_transcript(text: str) -> Transcript:
    """Read a transcript; text that is not one raises :class:`TranscriptError` with its line."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    file_comments: list[str] = []
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        if not lines[i].strip():
            i += 1
            continue
        comments: list[str] = []
        while i < len(lines) and lines[i].startswith("#"):
            comments.append(lines[i][1:].removeprefix(" "))
            i += 1
        if i == len(lines) or not lines[i].strip():
            file_comments += comments
            continue
        command_line = i
        i += 1
        if i == len(lines) or lines[i] != SEPARATOR:
            raise TranscriptError(i + 1, f"expected {SEPARATOR} after the command on line {command_line + 1}")
        i += 1
        start = i
        while i < len(lines) and lines[i].strip():
            i += 1
        blocks.append(_read_block(lines[command_line], command_line + 1, tuple(comments), lines[start:i], start + 1))
    return Transcript(tuple(file_comments), tuple(blocks))


def _read_block(head: str, line: int, comments: tuple[str, ...], printed: list[str], first: int) -> Block:
    cursor = _Cursor(head, line)
    command = cursor.word("a command")
    positional: list[Any] = []
    args: dict[str, Any] = {}
    while True:
        cursor.skip(newlines=False)
        if cursor.at_line_end():
            break
        key = cursor.key()
        if key is None:
            if args:
                raise cursor.fail("a value without a name after name=value arguments")
            positional.append(_read_value(cursor))
        elif key in args:
            raise cursor.fail(f"argument {key!r} given twice")
        else:
            args[key] = _read_value(cursor)
    if not printed:
        raise TranscriptError(first, f"expected what {command} printed (ok or error) after {SEPARATOR}")
    result, checks = _read_printed(_Cursor("\n".join(printed), first), command)
    return Block(line, comments, command, tuple(positional), args, result, tuple(checks))


def _read_printed(cursor: _Cursor, command: str) -> tuple[dict[str, Any], list[Check]]:
    kind = cursor.word(f"ok or error, what {command} returned")
    result: dict[str, Any]
    if kind == "ok":
        cursor.skip(newlines=False)
        result = {"ok": None if cursor.at_line_end() else _read_value(cursor), "effects": []}
    elif kind == "error":
        cursor.skip(newlines=False)
        name = cursor.word("an error name")
        cursor.skip(newlines=False)
        message = _read_value(cursor) if cursor.peek() == '"' else None
        if not isinstance(message, str):
            raise cursor.fail('expected the error\'s message, a "quoted" string')
        result = {"error": name, "message": message, "effects": []}
    else:
        raise TranscriptError(cursor.first_line, f"expected ok or error, found {kind!r}")
    checks: list[Check] = []
    while True:
        _line_ends(cursor)
        if not cursor.take("\n"):
            return result, checks
        line = cursor.line()
        kind = cursor.word("effect or check")
        cursor.skip(newlines=False)
        if kind == "effect" and not checks:
            result["effects"].append(_read_value(cursor))
        elif kind == "check":
            checks.append(_read_check(cursor, line))
        elif kind == "effect":
            raise cursor.fail("an effect after a check: effects come first")
        else:
            raise TranscriptError(line, f"expected effect or check, found {kind!r}")


def _read_check(cursor: _Cursor, line: int) -> Check:
    observe = cursor.word("an observer")
    args: dict[str, Any] = {}
    while True:
        cursor.skip(newlines=False)
        if cursor.take("-"):
            cursor.need(">", "before the observed value")
            cursor.skip(newlines=False)
            return Check(line, observe, args, _read_value(cursor))
        key = cursor.key()
        if key is None:
            raise cursor.fail(f"expected name=value or -> after {observe}, found {cursor.shown()}")
        if key in args:
            raise cursor.fail(f"argument {key!r} given twice")
        args[key] = _read_value(cursor)


def _line_ends(cursor: _Cursor) -> None:
    cursor.skip(newlines=False)
    if not cursor.at_line_end():
        raise cursor.fail(f"expected the end of the line, found {cursor.shown()}")


# -- Agreement with the vector ------------------------------------------------------------------


def disagreements(data: Mapping[str, Any], transcript: Transcript) -> list[str]:
    """Where ``transcript`` (as read) and its vector ``data`` disagree, each a line number and what
    differs: the same commands and arguments in the same order, the same step comments, the
    same observer checks, and every expectation of the vector met by the transcript's result
    under the vectors' partial-match rule.  Empty when they agree."""
    blocks = list(transcript.blocks)
    problems: list[str] = []
    end = blocks[-1].line if blocks else 1
    if data.get("config"):
        problems += _setup(blocks, "config", (), data["config"], end)
    elif blocks and blocks[0].command == "config":
        problems.append(f"line {blocks.pop(0).line}: a config block, but the vector overrides no config")
    problems += _setup(blocks, "init", (data["machine"],), data.get("init", {}), end)
    steps = data["steps"]
    if len(blocks) != len(steps):
        problems.append(f"line {end}: {len(blocks)} steps, but the vector has {len(steps)}")
    for index, (block, step) in enumerate(zip(blocks, steps, strict=False)):
        problems += _step_disagreements(index, block, step)
    return problems


def _setup(blocks: list[Block], command: str, positional: tuple[Any, ...], args: Any, end: int) -> list[str]:
    if not blocks or blocks[0].command != command:
        return [f"line {blocks[0].line if blocks else end}: expected the {command} block"]
    block = blocks.pop(0)
    problems = []
    if block.positional != positional or dict(block.args) != args:
        problems.append(f"line {block.line}: {command} {_arguments_text(block)}, but the vector has {_spelled(args)}")
    if block.result != {"ok": None, "effects": []} or block.checks:
        problems.append(f"line {block.line}: {command} prints ok and nothing else")
    return problems


def _step_disagreements(index: int, block: Block, step: Mapping[str, Any]) -> list[str]:
    at = f"line {block.line}: step {index} ({step['command']})"
    if block.command != step["command"]:
        return [f"line {block.line}: step {index} is {block.command}, but the vector's is {step['command']}"]
    if block.positional:
        return [f"{at}: a step's arguments are all name=value"]
    problems = []
    args = step.get("args", {})
    if dict(block.args) != args:
        problems.append(f"{at}: arguments {_arguments_text(block)}, but the vector's are {_spelled(args)}")
    if " ".join(" ".join(block.comments).split()) != " ".join(step.get("comment", "").split()):
        problems.append(f"{at}: the comment above it is not the vector's")
    if "expect" in step:
        mismatch = expectation_mismatch(index, step["command"], step["expect"], block.result)
        if mismatch is not None:
            problems.append(f"{at}: the vector expects {mismatch.what} {_spelled(mismatch.expected)}")
    checks = step.get("check", [])
    if len(block.checks) != len(checks):
        problems.append(f"{at}: {len(block.checks)} checks, but the vector has {len(checks)}")
    for seen, check in zip(block.checks, checks, strict=False):
        where = f"line {seen.line}: step {index} ({step['command']}) check {check['observe']}"
        if seen.observe != check["observe"] or dict(seen.args) != check.get("args", {}):
            problems.append(f"{where}: the transcript checks {seen.observe} {_spelled(dict(seen.args))}")
        elif not matches(check["equals"], seen.value):
            problems.append(
                f"{where}: the vector expects {_spelled(check['equals'])}, the transcript has {_spelled(seen.value)}"
            )
    return problems


def _arguments_text(block: Block) -> str:
    return " ".join([*(_flat(p) for p in block.positional), *_arguments(block.args)]) or "(no arguments)"


def _spelled(value: Any) -> str:
    text = _flat(value)
    return text if len(text) <= 200 else text[:197] + "..."
