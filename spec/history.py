"""The history contract: what the engine records and what ``invariants/`` checks.

A *history* is everything the clients of one simulated run saw: one row per **operation**, an
invocation paired with its completion.  The shape is Jepsen's at the boundary (``type``,
``process``, ``f``, ``value``, ``index``) so that Jepsen and Porcupine data can be read as-is, and
Porcupine's inside (an operation is a *closed* interval ``[invoked_at, completed_at]`` of logical
time), because the checkers need intervals, not event streams.

Columns (also the Parquet schema, :data:`PARQUET_COLUMNS`):

==============  =========  ====================================================================
column          type       meaning
==============  =========  ====================================================================
history         string     the history's id (a run: workload, seed, ...); many per file allowed
index           int64      the operation's number in its history, unique, 0-based
process         int64      the client (Jepsen's process); at most one operation open per process
type            string     the outcome: ``ok``, ``fail``, ``info`` or ``invoke`` (see below)
f               string     the operation, in Pulsar's words: ``new_txn``, ``send``, ``receive``, ...
object          string     what it touched: ``kind:name`` (see :func:`object_id`)
value           string     the arguments, JSON text in the spellings of :mod:`spec.jsonvalues`
result          string?    what it returned, JSON text; null when nothing was returned
invoked_at      int64      logical time of the invocation
completed_at    int64?     logical time of the completion; null for ``invoke``
error           string?    the domain error's name (:mod:`spec.errors`) when the op failed
seed            int64?     the seed that reproduces the run (the same for every row of a history)
==============  =========  ====================================================================

Outcome types (Jepsen's, with Jepsen's meaning):

* ``ok`` — the operation took effect, atomically, at some instant in ``[invoked_at, completed_at]``,
  and returned ``result``.
* ``fail`` — the operation did **not** take effect.  It completed, with ``error`` (a domain error
  the server returned) or without one (the client refused it before sending).  A model may still
  check that the refusal was legitimate: a machine's step must return the same error.
* ``info`` — the outcome is unknown (crash, timeout): the operation may have taken effect at any
  instant after ``invoked_at``, or never.  ``completed_at`` is when the client gave up; checkers
  treat the return as ``+infinity``.  A process that got ``info`` never invokes again.
* ``invoke`` — the history ended before the operation completed: treated exactly like ``info``.

Pairing rules (:func:`pair_events` turns a Jepsen event stream into operations by them):

1. Every completion (``ok``, ``fail``, ``info``) matches the open invocation of the same process
   and names the same ``f``.
2. A process has at most one open invocation; it invokes again only after a completion.
3. After ``info`` a process is crashed: any later invocation by it is an error.
4. An invocation still open at the end of the stream becomes an ``invoke`` operation.
5. Completion values fill in invocation values where the invocation had none (Jepsen's reads
   invoke with ``nil`` and complete with the value read): the invocation's value is kept in
   ``value``, the completion's in ``result``.

Objects are ``kind:name``; names may contain ``:`` and ``/`` (Pulsar topic names do).  Kinds:
``coordinator`` (name: the coordinator id), ``partition`` (a topic partition's full name),
``subscription`` and ``tracker`` (``<topic partition>#<subscription>``; ``#`` cannot occur in a
Pulsar topic name), ``register`` and ``key`` (the generic models).

Machine-level operations.  Besides what clients did, an engine history records what the reference
machines inside the broker did, one operation per ``step`` on the machine's object
(``coordinator``, ``partition`` = the transaction buffer, ``subscription`` = the pending ack,
``tracker`` = the delayed tracker), so that each object can be checked for linearizability against
its machine.  They are told apart from client operations by their ``value``: a JSON object with an
``@type`` key (:func:`is_machine_operation`).

* ``f`` is the machine's ``VECTORS`` command name (``new_txn``, ``append_buffer_to_txn``,
  ``individual_ack``, ...), ``value`` the command in :mod:`spec.jsonvalues` spelling, ``result`` the
  JSON of the step's ``Ok`` value, ``error`` the ``Err``'s name.
* Format version 4: ``value`` also carries :data:`EFFECTS`, the digest of the step's effects
  (:func:`effects_digest`): what the machine asked its component to do (write this record, send
  that marker, arm this timer).  A step is what it returned *and* what it asked for, and most of a
  machine's decisions show only in the second.
* Each operation is its own ``process``.  A step the broker made while handling a client's request
  spans the request: ``invoked_at`` is when the client sent it, ``completed_at`` when the answer
  reached the client; ``ok``/``fail`` by the machine's result, ``info`` when the answer was an engine
  error, ``invoke`` (or ``info`` at a crash) when no answer came.  A step the broker made on its own
  (ticks, timers, phase 2 of END_TXN, dispatch) is atomic: ``invoked_at == completed_at``.
* ``f == "recover"`` (:data:`RECOVER`): the component lost its memory and loaded again.  ``value``
  is ``{"@type": "Recover", "machine": ..., "config": {broker.conf overrides}, ...}`` plus the
  durable inputs its recovery read (the machine's ``VECTORS.recover`` decodes them); the model
  restarts from that state.  Machine operations of an object are numbered in step order
  (``index``), so the operations between two ``recover`` rows are one *epoch* of the component: an
  operation belongs to the epoch of the last ``recover`` before it and can only have taken effect
  in that epoch.  Operations still open when a component crashes end ``info`` at the crash.
  Format version 3: a coordinator's or pending ack's ``recover`` row (one whose component has a
  record log) also carries ``log``, the live durable entries the recovery read, each
  ``[position, {"@bytes": hex}, ack_set]`` (the bytes the ledger stored, the cursor's batch ack set
  or null), and ``recovered``, :func:`state_digest` of the state the component recovered.  The
  model decodes ``log`` with the reference's own reader (:func:`reference.batched_log.replay`, then
  the record's ``from_pb``), recovers from what it decoded, and accepts the row only if the
  ``records`` the engine decoded and the digest of the state it recovered agree (TC-21, PA-18,
  BW-23): a recovery that decodes or replays its log wrongly is flagged at its ``recover`` row.
* ``f == "raised"`` (:data:`RAISED`, format version 2): the component raised outside any step of its
  machine (the PIP-160 writer in its log, a dispatch, a command's field check, a recovery, a timer)
  and crashed.  ``value`` is ``{"@type": "Raised", "machine": ..., "error": <exception type>,
  "where": <innermost frame>}``, the operation is atomic and completes ``fail`` with
  ``UnknownError`` (what a broker answers when a handler throws).  A step of a machine that raised is
  recorded as that command, ``fail`` with ``UnknownError``.  A correct broker raises nowhere, so
  no model accepts either.
* A query row (:data:`QUERY`, format version 5): the broker answered a question from the machine's
  state without stepping it (the admin ``checkPositionInPendingAckState``, PA-21).  ``f`` is the
  machine's ``VECTORS`` observer name, ``value`` is ``{"@type": "Query", "machine": ..., <the
  observer's arguments>}``, ``result`` the JSON of its answer; atomic, ``ok``.  The model accepts
  the row in a state only if the observer gives that answer there, and the state does not move:
  what a client was told about a machine's state is judged against the state its steps built.
* Format version 5: the PIP-160 writer of a coordinator's or subscription's log, while it batches
  (BW-2), is a machine of its own (``batched_log``) on the object ``log:<its owner's object>``
  (``log:coordinator:0``): each of its steps is a row, atomic, and each load of its owner starts it
  with a ``recover`` row stating its settings and the live entries it found
  (:func:`reference.batched_log.recovery_inputs`).  A writer that does not batch writes one record
  per entry and is not recorded.
* Format version 5: a ``recover`` row may carry ``"ordered": true`` (:data:`ORDERED`): the recorder
  vouches that the rows of that epoch are numbered in the order they took effect, each at its place
  (a row of unknown outcome too: the machine stepped it there; a ``fail`` without ``error`` never
  reached the machine).  The model then replays them in that order and nothing else: a row it rejects
  at its place is illegal even if another order would fit the rows' windows.  The engine's recorder
  says so (it numbers each row when the machine steps); a history without the key is searched as before.

Client operations that the client library itself failed (format version 2).  A client library that
throws an exception of its own (not one of Pulsar's errors) fails the application's call with it:
the operation completes ``fail`` with ``error`` the exception's type name (``TypeError``).  Pulsar
names no such error, so the client-visible check ``unexpected-error`` (TC-37) flags it.

This module is pure: no I/O.  Reading and writing files is :mod:`history_io.files`.
"""

from __future__ import annotations

import enum
import hashlib
import itertools
import json
import json.encoder
import json.scanner
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, cast

from spec.errors import InputError
from spec.json_limits import first_excess

__all__ = [
    "EFFECTS",
    "FIELDS",
    "JSONL_REQUIRED",
    "NULLABLE",
    "OBJECT_KINDS",
    "ORDERED",
    "PARQUET_COLUMNS",
    "QUERY",
    "RAISED",
    "RECOVER",
    "SCHEMA_VERSION",
    "TXN_FUNCTIONS",
    "BadHistory",
    "Event",
    "OpType",
    "Operation",
    "effects_digest",
    "is_machine_operation",
    "is_query",
    "make_operation",
    "object_id",
    "pair_events",
    "parse_object",
    "split_subscription",
    "state_digest",
    "validate_history",
]

# 2: machine-level ``raised`` rows (:data:`RAISED`) and client operations that failed with the client
# library's own exception (see the module docstring).  The columns are those of version 1, and a
# version-1 history reads and checks as before.
# 3: a coordinator's or pending ack's ``recover`` row also carries the durable entries its recovery
# decoded (``log``) and the digest of the state it recovered (``recovered``); the columns are those
# of version 1, and a version-1 or version-2 history reads and checks as before.
# 4: a machine step's ``value`` also carries the digest of the step's effects (:data:`EFFECTS`); the
# columns are those of version 1, and older histories read and check as before (their steps' effects
# are not judged).
# 5: query rows (:data:`QUERY`): an answer the broker gave from a machine's state; the columns are those
# of version 1, and older histories read and check as before (they hold no query to judge).
SCHEMA_VERSION: Final = 5


class OpType(enum.Enum):
    """Jepsen's operation types; for an operation (a pair) this is how it completed."""

    INVOKE = "invoke"
    OK = "ok"
    FAIL = "fail"
    INFO = "info"

    @property
    def completed(self) -> bool:
        """Whether the client learned the outcome (``ok`` or ``fail``)."""
        return self in (OpType.OK, OpType.FAIL)

    @property
    def indeterminate(self) -> bool:
        """``info`` or ``invoke``: may or may not have taken effect; returns at +infinity."""
        return self in (OpType.INFO, OpType.INVOKE)


#: The deepest nesting of a row's ``value`` or ``result`` JSON (the engine's deepest is under 10).
MAX_VALUE_DEPTH: Final = 64
#: The longest number in a row's JSON: any 64-bit value fits, far below where parsing gets slow.
MAX_NUMBER_DIGITS: Final = 40


def _short(value: object) -> str:
    """``repr(value)``, cut: a message never quotes megabytes of input."""
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:60]}... ({len(text):,} characters)"


class BadHistory(InputError):
    """A history file or row that breaks the contract; names the file, the row and the field."""

    def __init__(
        self, message: str, *, where: str | None = None, row: int | None = None, column: str | None = None
    ) -> None:
        self.row = row
        self.column = column
        place = where or ""
        if row is not None:
            place += f" row {row}"
        if column is not None:
            place += f" field {column!r}"
        super().__init__(message, where=place.strip() or None)


# Column name -> (Arrow type name, nullable).  history_io.files builds the pyarrow schema from
# this table, so the contract lives here without importing pyarrow into spec/.
PARQUET_COLUMNS: Final[tuple[tuple[str, str, bool], ...]] = (
    ("history", "string", False),
    ("index", "int64", False),
    ("process", "int64", False),
    ("type", "string", False),
    ("f", "string", False),
    ("object", "string", False),
    ("value", "string", False),
    ("result", "string", True),
    ("invoked_at", "int64", False),
    ("completed_at", "int64", True),
    ("error", "string", True),
    ("seed", "int64", True),
)
FIELDS: Final = tuple(name for name, _, _ in PARQUET_COLUMNS)
NULLABLE: Final = frozenset(name for name, _, nullable in PARQUET_COLUMNS if nullable)
# A JSON Lines row may leave out nullable columns; these it must carry.
JSONL_REQUIRED: Final = tuple(name for name in FIELDS if name not in NULLABLE)

OBJECT_KINDS: Final = frozenset({"coordinator", "partition", "subscription", "tracker", "log", "register", "key"})

# The operations of the transactional vocabulary and the object kind each one touches.  The
# value/result shapes are in docs/spec/history.md; invariants.transactional reads exactly these.
TXN_FUNCTIONS: Final[Mapping[str, str]] = {
    "new_txn": "coordinator",
    "add_partition": "coordinator",
    "add_subscription": "coordinator",
    "commit": "coordinator",
    "abort": "coordinator",
    "send": "partition",
    "receive": "subscription",
    "ack": "subscription",
    "ack_cumulative": "subscription",
    "negative_ack": "subscription",
    "redeliver_unacknowledged": "subscription",
    # Questions that change nothing: the partition's last message id (TB-18), and the admin check
    # of a position in the subscription's pending ack (PA-21).
    "get_last_message_id": "subscription",
    "check_position_in_pending_ack": "subscription",
    # A seek by publish time (PA-23): the subscription restarts at the first message published then or later.
    "seek": "subscription",
}


# The ``f`` of a machine-level recovery (see the module docstring).
RECOVER: Final = "recover"
# The ``f`` of a machine-level operation that records a component raising outside any step of its
# machine (see the module docstring).  No machine has such a command: the model never accepts one.
RAISED: Final = "raised"
# The key of a ``recover`` row (format version 5) by which the recorder vouches that the rows of that
# epoch are numbered in the order they took effect, each at its place (see the module docstring).
ORDERED: Final = "ordered"
# The ``@type`` of a machine-level row that records a query of the machine (format version 5; its
# ``f`` is the ``VECTORS`` observer asked, see the module docstring).
QUERY: Final = "Query"


def is_machine_operation(op: Operation) -> bool:
    """A machine-level operation: its ``value`` is a JSON object carrying ``@type``."""
    if not op.value.startswith("{"):
        return False
    args = op.args
    return isinstance(args, dict) and "@type" in args


def is_query(op: Operation) -> bool:
    """A machine-level query row (:data:`QUERY`)."""
    if '"Query"' not in op.value:  # most rows: no parse
        return False
    args = op.args
    return isinstance(args, dict) and args.get("@type") == QUERY


def state_digest(state: object) -> str:
    """The digest a ``recover`` row (format version 3) gives of the machine state the component
    recovered: the first 16 hex digits of the SHA-256 of the state's canonical JSON
    (:func:`spec.jsonvalues.to_json`, keys sorted, no spaces).  Another implementation computes the
    same digest of the same state, so a checker compares what it recovers with what the engine did
    without the row carrying the whole state."""
    from spec.jsonvalues import to_json

    return hashlib.sha256(_sorted_compact(to_json(state)).encode()).hexdigest()[:16]


def _sorted_compact(value: Any) -> str:
    """``json.dumps(value, sort_keys=True, separators=(",", ":"))``: every machine step with effects
    is digested (format version 4), so the C encoder is built once (as for :func:`_compact`)."""
    if isinstance(value, str) or _C_ENCODE_SORTED is None:
        return _SORTED.encode(value)
    return "".join(_C_ENCODE_SORTED(value, 0))


_NO_EFFECTS: Final = hashlib.sha256(b"[]").hexdigest()[:16]


#: The key of a machine step's ``value`` (format version 4) that carries :func:`effects_digest` of
#: the step's effects; the rest of the value is the command.
EFFECTS: Final = "@effects"


def effects_digest(effects: Sequence[object]) -> str:
    """The digest a machine step's row gives of the step's effects (``Ok.effects`` or
    ``Err.effects``, in order): :func:`state_digest` of them as a JSON list.  The engine writes it and
    the checker compares it with the reference's effects for the same command in the same state, so
    a component whose machine decides the same answer but asks for other work (another record,
    another timer, no snapshot) is caught at that step."""
    if not effects:
        return _NO_EFFECTS
    return state_digest(list(effects))


def object_id(kind: str, name: str | int) -> str:
    """``kind:name``, e.g. ``object_id("partition", "persistent://public/default/t-partition-0")``."""
    if kind not in OBJECT_KINDS:
        raise ValueError(f"unknown object kind {kind!r}; kinds are {', '.join(sorted(OBJECT_KINDS))}")
    return f"{kind}:{name}"


def parse_object(text: str) -> tuple[str, str]:
    """Split ``kind:name`` at the first colon (names may contain colons)."""
    kind, sep, name = text.partition(":")
    if not sep or kind not in OBJECT_KINDS or not name:
        raise ValueError(
            f"not an object id: {text!r} (expected kind:name with kind one of {', '.join(sorted(OBJECT_KINDS))})"
        )
    return kind, name


def split_subscription(name: str) -> tuple[str, str]:
    """``<topic partition>#<subscription>`` -> (topic partition, subscription)."""
    topic, sep, sub = name.partition("#")
    if not sep or not topic or not sub:
        raise ValueError(f"not a subscription name: {name!r} (expected <topic partition>#<subscription>)")
    return topic, sub


@dataclass(frozen=True, slots=True)
class Operation:
    """One row of a history: an invocation paired with its completion."""

    history: str
    index: int
    process: int
    type: OpType
    f: str
    object: str
    value: str = "null"
    result: str | None = None
    invoked_at: int = 0
    completed_at: int | None = None
    error: str | None = None
    seed: int | None = None
    # Decoded JSON, filled once by the constructor's caller (never compared or hashed).
    _value: Any = field(default=None, compare=False, hash=False, repr=False)
    _result: Any = field(default=None, compare=False, hash=False, repr=False)

    @property
    def args(self) -> Any:
        """``value`` decoded from JSON."""
        return self._value if self._value is not None or self.value == "null" else json.loads(self.value)

    @property
    def returned(self) -> Any:
        """``result`` decoded from JSON (``None`` when there is none)."""
        if self.result is None:
            return None
        return self._result if self._result is not None or self.result == "null" else json.loads(self.result)

    @property
    def return_time(self) -> float:
        """When the operation is known to have finished: ``completed_at``, or +inf if indeterminate."""
        if self.type.indeterminate or self.completed_at is None:
            return float("inf")
        return float(self.completed_at)

    def to_row(self) -> dict[str, Any]:
        """The row as a plain dict of the contract's columns (Parquet / JSON Lines)."""
        return {
            "history": self.history,
            "index": self.index,
            "process": self.process,
            "type": self.type.value,
            "f": self.f,
            "object": self.object,
            "value": self.value,
            "result": self.result,
            "invoked_at": self.invoked_at,
            "completed_at": self.completed_at,
            "error": self.error,
            "seed": self.seed,
        }

    @classmethod
    def from_row(cls, row: Mapping[str, Any], *, where: str | None = None, row_number: int | None = None) -> Operation:
        """Build and type-check one row; a problem raises :class:`BadHistory` naming the field."""

        def bad(column: str, message: str) -> BadHistory:
            return BadHistory(message, where=where, row=row_number, column=column)

        missing = [name for name in FIELDS if name not in NULLABLE and row.get(name) is None]
        if missing:
            raise bad(missing[0], "missing (required: " + ", ".join(JSONL_REQUIRED) + ")")
        unknown = sorted(set(row) - set(FIELDS))
        if unknown:
            raise bad(unknown[0], f"unknown column (columns are {', '.join(FIELDS)})")
        for name, kind, _ in PARQUET_COLUMNS:
            value = row.get(name)
            if value is None:
                continue
            if kind == "int64" and (not isinstance(value, int) or isinstance(value, bool)):
                raise bad(name, f"expected an integer, got {_short(value)}")
            if kind == "int64" and not -(2**63) <= value < 2**63:
                raise bad(name, f"expected a 64-bit integer, got {_short(value)}")
            if kind == "string" and not isinstance(value, str):
                raise bad(name, f"expected a string, got {_short(value)}")
        return cls.from_typed(
            row["history"],
            row["index"],
            row["process"],
            row["type"],
            row["f"],
            row["object"],
            row["value"],
            row.get("result"),
            row["invoked_at"],
            row.get("completed_at"),
            row.get("error"),
            row.get("seed"),
            where=where,
            row_number=row_number,
        )

    @classmethod
    def from_typed(
        cls,
        history: str,
        index: int,
        process: int,
        op_type: str,
        f: str,
        obj: str,
        value: str,
        result: str | None,
        invoked_at: int,
        completed_at: int | None,
        error: str | None,
        seed: int | None,
        *,
        where: str | None = None,
        row_number: int | None = None,
    ) -> Operation:
        """The rest of :meth:`from_row`'s checks, for a row whose columns are known to be present
        and of their types (a Parquet file whose schema and required columns were checked as a
        whole), in the columns' order: the reader's fast path, row by row without a dict."""

        def bad(column: str, message: str) -> BadHistory:
            return BadHistory(message, where=where, row=row_number, column=column)

        kind = _OP_TYPES.get(op_type)
        if kind is None:
            raise bad("type", f"expected one of invoke, ok, fail, info, got {_short(op_type)}")
        try:
            parse_object(obj)
        except ValueError as exc:
            raise bad("object", str(exc)) from None
        decoded: list[Any] = []
        for name, text in (("value", value), ("result", result)):
            if text is None or text == "null":
                decoded.append(None)
                continue
            excess = first_excess(text, max_depth=MAX_VALUE_DEPTH, max_digits=MAX_NUMBER_DIGITS)
            if excess is not None:
                limit = "MAX_VALUE_DEPTH" if excess[0].startswith("nested") else "MAX_NUMBER_DIGITS"
                raise bad(name, f"JSON text {excess[0]} at char {excess[1]} (limit {limit})")
            try:
                decoded.append(_json(text))
            except json.JSONDecodeError as exc:
                raise bad(name, f"not JSON text: {exc.msg} at char {exc.pos}") from None
        decoded_value, decoded_result = decoded
        if index < 0:
            raise bad("index", f"must be >= 0, got {index}")
        if kind is OpType.INVOKE and completed_at is not None:
            raise bad("completed_at", "an 'invoke' operation never completed; completed_at must be null")
        if completed_at is None and (kind is OpType.OK or kind is OpType.FAIL):
            raise bad("completed_at", f"an '{op_type}' operation needs completed_at")
        if completed_at is not None and completed_at < invoked_at:
            raise bad("completed_at", f"completed_at {completed_at} is before invoked_at {invoked_at}")
        if error is not None and kind is OpType.OK:
            raise bad("error", "an 'ok' operation carries no error")
        return cls(
            history,
            index,
            process,
            kind,
            f,
            obj,
            value,
            result,
            invoked_at,
            completed_at,
            error,
            seed,
            decoded_value,
            decoded_result,
        )


_OP_TYPES: Final = {kind.value: kind for kind in OpType}
# what json.loads runs under its per-call checks (the scanner JSONDecoder() builds for itself)
_SCAN: Final = json.scanner.make_scanner(cast(Any, json.JSONDecoder()))
_COMPACT: Final = json.JSONEncoder(separators=(",", ":"))
# ``JSONEncoder.encode`` builds a new C encoder at every call, which costs more than encoding a
# small value; the engine encodes two per recorded operation, so the encoder is built once here
# with ``encode``'s own arguments (no circular check: a JSON value the engine built has no cycle).
_C_MAKE_ENCODER: Final[Callable[..., Callable[[Any, int], Sequence[str]]] | None] = getattr(
    json.encoder, "c_make_encoder", None
)
_C_ENCODE: Final = (
    None
    if _C_MAKE_ENCODER is None
    else _C_MAKE_ENCODER(
        None, _COMPACT.default, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
    )
)


_SORTED: Final = json.JSONEncoder(sort_keys=True, separators=(",", ":"))
_C_ENCODE_SORTED: Final = (
    None
    if _C_MAKE_ENCODER is None
    else _C_MAKE_ENCODER(None, _SORTED.default, json.encoder.encode_basestring_ascii, None, ":", ",", True, False, True)
)


def _compact(value: Any) -> str:
    """``value`` as compact JSON, the bytes of ``json.dumps(value, separators=(",", ":"))``."""
    if isinstance(value, str) or _C_ENCODE is None:
        return _COMPACT.encode(value)
    return "".join(_C_ENCODE(value, 0))


def _json(text: str) -> Any:
    """``json.loads(text)``, without its per-call overhead when ``text`` is one JSON value with
    nothing around it (every history the engine writes); anything else goes to ``json.loads``, whose
    value or error it then is."""
    try:
        decoded, end = _SCAN(text, 0)
    except StopIteration:
        return json.loads(text)
    return decoded if end == len(text) else json.loads(text)


def make_operation(
    history: str,
    index: int,
    process: int,
    op_type: OpType,
    f: str,
    obj: str,
    value: Any,
    result: Any = None,
    *,
    invoked_at: int,
    completed_at: int | None,
    error: str | None = None,
    seed: int | None = None,
    null_result: bool = False,
) -> Operation:
    """Build an operation from already-JSON values (spelled as :mod:`spec.jsonvalues` spells them);
    ``null_result``: a None ``result`` is a returned JSON null (``"null"``), not nothing recorded."""
    return Operation(
        history=history,
        index=index,
        process=process,
        type=op_type,
        f=f,
        object=obj,
        value=_compact(value),
        result=None if result is None and not null_result else _compact(result),
        invoked_at=invoked_at,
        completed_at=completed_at,
        error=error,
        seed=seed,
        _value=value,
        _result=result,
    )


def validate_history(ops: Sequence[Operation], *, where: str | None = None) -> None:
    """Check the cross-row rules of one history (rows are already type-checked).

    Indexes unique; one history id and one seed; per process, operations never overlap in time and
    nothing follows an ``info`` or ``invoke`` (rules 2 and 3 above).  Raises :class:`BadHistory`.
    """
    seen: dict[int, Operation] = {}
    by_process: dict[int, list[Operation]] = {}
    seeds = {op.seed for op in ops if op.seed is not None}
    if len(seeds) > 1:
        raise BadHistory(f"history {ops[0].history!r} has several seeds {sorted(seeds)}", where=where, column="seed")
    for op in ops:
        if op.history != ops[0].history:
            raise BadHistory(f"mixed histories {ops[0].history!r} and {op.history!r}", where=where, column="history")
        if op.index in seen:
            raise BadHistory(f"history {op.history!r}: index {op.index} appears twice", where=where, column="index")
        seen[op.index] = op
        by_process.setdefault(op.process, []).append(op)
    for process, mine in by_process.items():
        mine.sort(key=lambda o: (o.invoked_at, o.index))
        for before, after in itertools.pairwise(mine):
            if before.type.indeterminate:
                raise BadHistory(
                    f"history {before.history!r}: process {process} got '{before.type.value}' for op {before.index} "
                    f"and invoked op {after.index} afterwards (a crashed process never invokes again)",
                    where=where,
                    column="process",
                )
            assert before.completed_at is not None
            if after.invoked_at < before.completed_at:
                raise BadHistory(
                    f"history {before.history!r}: process {process} invoked op {after.index} at {after.invoked_at} "
                    f"while op {before.index} was open until {before.completed_at}",
                    where=where,
                    column="invoked_at",
                )


@dataclass(frozen=True, slots=True)
class Event:
    """One Jepsen event: an invocation or a completion, in stream order."""

    process: int
    type: OpType
    f: str
    value: Any
    time: int
    error: str | None = None


def pair_events(
    history: str, events: Iterable[Event], *, obj: str, seed: int | None = None, where: str | None = None
) -> list[Operation]:
    """Pair a Jepsen event stream into operations by the module's pairing rules 1-5.

    ``obj`` names the object every event touched (Jepsen's single-register tests have one).
    Problems raise :class:`BadHistory` with ``row`` = the event's position in the stream.
    """
    open_: dict[int, tuple[int, Event]] = {}
    crashed: set[int] = set()
    ops: list[tuple[int, Operation]] = []  # (invocation's stream position, op) to keep invoke order
    for number, event in enumerate(events):
        if event.type is OpType.INVOKE:
            if event.process in crashed:
                raise BadHistory(
                    f"process {event.process} invokes after it got 'info'", where=where, row=number, column="process"
                )
            if event.process in open_:
                raise BadHistory(
                    f"process {event.process} invokes while op at row {open_[event.process][0]} is still open",
                    where=where,
                    row=number,
                    column="process",
                )
            open_[event.process] = (number, event)
            continue
        if event.process not in open_:
            raise BadHistory(
                f"'{event.type.value}' from process {event.process} with no open invocation",
                where=where,
                row=number,
                column="type",
            )
        start, invocation = open_.pop(event.process)
        if invocation.f != event.f:
            raise BadHistory(
                f"completion {event.f!r} does not match invocation {invocation.f!r} of process {event.process}",
                where=where,
                row=number,
                column="f",
            )
        if event.type is OpType.INFO:
            crashed.add(event.process)
        result = event.value if event.type is OpType.OK else None
        ops.append(
            (
                start,
                make_operation(
                    history,
                    0,
                    event.process,
                    event.type,
                    event.f,
                    obj,
                    invocation.value,
                    result,
                    invoked_at=invocation.time,
                    completed_at=event.time,
                    error=event.error,
                    seed=seed,
                ),
            )
        )
    for start, invocation in open_.values():
        ops.append(
            (
                start,
                make_operation(
                    history,
                    0,
                    invocation.process,
                    OpType.INVOKE,
                    invocation.f,
                    obj,
                    invocation.value,
                    None,
                    invoked_at=invocation.time,
                    completed_at=None,
                    seed=seed,
                ),
            )
        )
    ops.sort(key=lambda pair: pair[0])
    return [_with_index(op, i) for i, (_, op) in enumerate(ops)]


def _with_index(op: Operation, index: int) -> Operation:
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
