"""One module per ``txnmodel`` subcommand.  Each has ``register(sub)``, which adds its parser and
sets ``func``; :data:`COMMANDS` is the order ``txnmodel --help`` lists them in."""

from __future__ import annotations

from types import ModuleType

from txnmodel.commands import (
    check,
    config,
    conform,
    inspect,
    prove,
    record,
    run,
    serve,
    simulate,
    vectors,
    verify,
    view,
)

COMMANDS: tuple[ModuleType, ...] = (
    run,
    vectors,
    conform,
    prove,
    check,
    inspect,
    config,
    simulate,
    verify,
    serve,
    record,
    view,
)
