"""Each machine's vocabulary as an implementer needs it: commands, observers and the shapes of values.

``docs/spec/conform-vocabulary.md`` is this module's output (``python -m conformance.vocabulary``;
``tests/conform/test_vocabulary.py`` checks that the page is up to date).  Commands and observers
come from the machines' ``VECTORS`` adapters and their type hints.  The shapes of the objects an
implementation answers with (results, effects, observed values: everything spelled with an
``@type``) are read off the reference's own answers to the machine's vectors and to a few seeded
generated runs, so the page lists exactly the keys the harness compares.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import sys
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, get_type_hints

from reference.conformance import machine_vectors
from reference.restarts import NoCrash, durable_for
from spec.machines import MACHINES
from spec.types import BatchedPosition, Position, Subscription, TxnID

__all__ = ["render", "spelled_type"]

ROOT = Path(__file__).resolve().parent.parent

#: What ``init`` takes, by machine (the ``init`` of a vector; each machine's ``_decode_init``).
INIT: Mapping[str, str] = {
    "coordinator": '`coordinator_id` (integer, default 0), `store_state` (a StoreState name, default `"READY"`)',
    "client": "`txn_id` (TxnID, default `[0, 0]`), `timeout_ms` (integer)",
    "buffer": "`topic` (string), `ledger_id` (integer, default 1), `recovered` (boolean, default true)",
    "pending_ack": "`sub_type`, `mark_delete_position`, `individually_deleted`, `batch_deleted`, `handle_state`",
    "batched_log": '`kind` (`"TRANSACTION_LOG"` or `"PENDING_ACK"`), `now_ms` (integer), `enabled` (boolean)',
    "delayed": '`tracker` (`"bucket"` or `"in_memory"`), `async_create` (boolean)',
}


def spelled_type(hint: Any) -> str:
    """How a value of type ``hint`` is spelled in JSON (:mod:`spec.jsonvalues`), in words."""
    origin = typing.get_origin(hint)
    args = typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        parts = [spelled_type(a) for a in args if a is not type(None)]
        text = " or ".join(parts)
        return f"{text} or null" if type(None) in args else text
    if origin in (tuple, list) or origin is typing.get_origin(tuple[int, ...]):
        if len(args) == 2 and args[1] is Ellipsis:
            return f"array of {spelled_type(args[0])}"
        return "[" + ", ".join(spelled_type(a) for a in args) + "]"
    if origin in (frozenset, set):
        return f"sorted array of {spelled_type(args[0])}"
    return _plain(hint)


def _plain(hint: Any) -> str:
    named = {
        int: "integer",
        str: "string",
        bool: "boolean",
        bytes: '{"@bytes": hex}',
        TxnID: "TxnID",
        Position: "Position",
        BatchedPosition: "BatchedPosition",
        Subscription: "Subscription",
        type(None): "null",
    }
    if hint in named:
        return named[hint]
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return "one of " + ", ".join(f"`{m.name}`" for m in hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return f"{hint.__name__} object"
    return getattr(hint, "__name__", str(hint))


def _fields(cls: type) -> str:
    hints = get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.compare:
            continue
        text = f"`{f.name}`: {spelled_type(hints[f.name])}"
        if f.default is not dataclasses.MISSING:
            text += f" = `{_json_default(f.default)}`"
        elif f.default_factory is not dataclasses.MISSING:
            text += " (optional)"
        out.append(text)
    return "; ".join(out) if out else "none"


def _json_default(value: Any) -> str:
    import json

    from spec.jsonvalues import to_json

    return json.dumps(to_json(value))


def _observer_args(fn: Any) -> str:
    hints = get_type_hints(fn)
    params = list(inspect.signature(fn).parameters.values())[1:]
    out = []
    for p in params:
        text = f"`{p.name}`: {spelled_type(hints.get(p.name, Any))}"
        if p.default is not inspect.Parameter.empty:
            text += f" = `{_json_default(p.default)}`"
        out.append(text)
    return "; ".join(out) if out else "none"


def shapes(machine: str, runs: int = 15) -> dict[str, list[str]]:
    """Every ``@type`` in the reference's answers to the machine's vectors and to ``runs`` seeded
    generated runs, with its keys in the order the reference writes them."""
    from conformance.differential import explore
    from conformance.implementation import InProcess
    from reference.sessions import Session, run_vector
    from runners.vectors import collect_vector_files, load_vector
    from spec import conform

    found: dict[str, list[str]] = {}
    session = Session(machine)

    def recording(request: dict[str, Any]) -> dict[str, Any]:
        answer = session.handle(request)
        for kind, keys in _typed(answer):
            found.setdefault(kind, keys)
        return answer

    for path in collect_vector_files([ROOT / "spec" / "vectors" / machine]):
        data = load_vector(path)
        run_vector(path, data)  # the vectors reach corners the generated runs do not
        recording(conform.init(data.get("config", {}), data.get("init", {})))
        for step in data["steps"]:
            name = step["command"]
            if name == "crash":
                recording(conform.crash())
            elif name == "recover":
                recording(conform.recover(step.get("args", {})))
            else:
                recording(conform.step(name, step.get("args", {})))
            for check in step.get("check", []):
                recording(conform.observe(check["observe"], check.get("args", {})))
    channel = InProcess(recording)
    hello = conform.check_hello(channel.exchange([conform.hello(machine)])[0], machine)
    explore(machine, channel, hello, seed=0, examples=runs)
    return dict(sorted(found.items()))


def _typed(value: Any) -> Iterator[tuple[str, list[str]]]:
    if isinstance(value, list):
        for item in value:
            yield from _typed(item)
    elif isinstance(value, dict):
        if isinstance(value.get("@type"), str):
            yield value["@type"], [k for k in value if k != "@type"]
        for item in value.values():
            yield from _typed(item)


def render(machine: str) -> str:
    """The machine's section of the vocabulary page (markdown)."""
    adapter = machine_vectors(machine)
    assert adapter is not None
    info = next(m for m in MACHINES if m.name == machine)
    try:
        recover = durable_for(machine).args
        crash = f"yes; `recover` takes {_fields(recover)}"
    except NoCrash:
        crash = "no (nothing durable: the harness never sends `crash`)"
    lines = [
        f"## {machine}",
        "",
        f"{info.title}; rules {info.rule_prefix}-n on [its rules page](../rules/{info.rules_page}.md).",
        "",
        f"* `init`: {INIT[machine]}",
        f"* crash: {crash}",
        "",
        "| command | arguments |",
        "|---|---|",
    ]
    lines += [f"| `{name}` | {_fields(cls)} |" for name, cls in adapter.commands.items()]
    lines += ["", "| observer | arguments |", "|---|---|"]
    lines += [f"| `{name}` | {_observer_args(fn)} |" for name, fn in adapter.observers.items()]
    lines += ["", "| `@type` in answers | keys, in the reference's order |", "|---|---|"]
    lines += [f"| `{kind}` | {', '.join(f'`{k}`' for k in keys) or 'none'} |" for kind, keys in shapes(machine).items()]
    return "\n".join(lines) + "\n"


HEADER = """# The machines' vocabulary for conform

What each machine's implementation is asked and answers under the conformance protocol
([its page](conform.md)): the `init` values, the commands with their arguments, the observers with
theirs, and every object the reference answers with (results, effects, observed values), with the
keys the harness compares. Values are spelled as in the vectors ([the spellings](vectors.md)): a
TxnID is `[most, least]`, a Position `[ledger, entry]`, a BatchedPosition `[ledger, entry,
batch_size, batch_index]`, a Subscription `[topic, subscription]`, an enum by its name, a set as a
sorted array, a map as a sorted array of `[key, value]` pairs, an object with its `@type` and every
field (an absent optional field is `null`, not left out). An error is answered with its name alone
(`{"error": "InvalidTxnStatus", "message": "..."}`); the message is the implementation's own.

This page is generated: `.venv/bin/python -m conformance.vocabulary > docs/spec/conform-vocabulary.md`
(`tests/conform/test_vocabulary.py` fails when it is out of date).
"""


def render_all() -> str:
    return HEADER + "".join("\n" + render(m.name) for m in MACHINES)


if __name__ == "__main__":
    sys.stdout.write(render_all())
