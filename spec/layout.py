"""The product's packages and the layers they form: the one statement of what may import what.

The pure core answers four questions (``spec``: the words, rules and formats; ``reference``: how each
machine behaves; ``invariants``: what must hold of a state and of a history; ``proofs``: is it true
for every state, or every interleaving within a bound).  The shell beside it runs the machines
(``engine``), reads and writes histories (``history_io``), renders what people read (``views``), runs
work over processes and clusters (``runners``), talks to brokers (``txnclient``, ``recording``), helps
develop txnmodel itself (``devtools``), checks other implementations of the machines against the
reference (``conformance``), and is reached from the command line (``txnmodel``).

A layer may import itself and the layers it names, nothing else, lazily or under ``TYPE_CHECKING``
either; ``tests/test_layering.py`` reads every import and fails on one that crosses upward.  The
engine's own sub-packages are layers too, so the simulated substrate, the broker and its two drivers
(the seeded simulation and the protocol server) stay apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["LAYERS", "PACKAGES", "layer_of", "may_import"]

_CORE = ("spec", "reference", "invariants", "proofs")
_ENGINE_BASE = ("spec", "reference", "engine.scheduler", "engine.recorder")
_BELOW_BROKER = (*_ENGINE_BASE, "engine.storage", "engine.simulated", "engine.ledger_store", "engine.delayed")

# Each layer and the layers below it that it may import (itself always).
LAYERS: Mapping[str, frozenset[str]] = MappingProxyType(
    {
        "spec": frozenset(),
        "reference": frozenset({"spec"}),
        "invariants": frozenset({"spec", "reference"}),
        "proofs": frozenset({"spec", "reference", "invariants"}),
        # the engine, bottom up
        "engine": frozenset({"spec", "reference"}),  # the package itself: its docstring
        "engine.scheduler": frozenset({"spec", "reference"}),
        "engine.recorder": frozenset({"spec", "reference"}),
        "engine.storage": frozenset(_ENGINE_BASE),
        "engine.simulated": frozenset({*_ENGINE_BASE, "engine.storage"}),
        "engine.ledger_store": frozenset({*_ENGINE_BASE, "engine.storage", "engine.simulated"}),
        "engine.delayed": frozenset({*_ENGINE_BASE, "engine.storage", "engine.simulated", "engine.ledger_store"}),
        "engine.broker": frozenset(
            {*_ENGINE_BASE, "engine.storage", "engine.simulated", "engine.ledger_store", "engine.delayed"}
        ),
        "engine.simulation": frozenset(
            {
                *_ENGINE_BASE,
                "engine.storage",
                "engine.simulated",
                "engine.ledger_store",
                "engine.delayed",
                "engine.broker",
            }
        ),
        "engine.serve": frozenset(
            {
                *_ENGINE_BASE,
                "engine.storage",
                "engine.simulated",
                "engine.ledger_store",
                "engine.delayed",
                "engine.broker",
            }
        ),
        # the shell around the core and the engine
        "history_io": frozenset({"spec", "reference"}),
        "views": frozenset({*_CORE, "history_io"}),
        "txnclient": frozenset({"spec"}),
        "runners": frozenset({*_CORE, "engine", "history_io", "views"}),
        "recording": frozenset({"spec", "history_io", "views", "txnclient"}),
        "devtools": frozenset({*_CORE, "engine", "history_io", "views", "runners"}),
        "conformance": frozenset({*_CORE, "history_io", "views", "runners"}),
        "txnmodel": frozenset(
            {*_CORE, "engine", "history_io", "views", "txnclient", "runners", "recording", "devtools", "conformance"}
        ),
    }
)

# The top-level packages, core first.
PACKAGES: tuple[str, ...] = tuple(dict.fromkeys(name.split(".")[0] for name in LAYERS))


def layer_of(module: str) -> str:
    """The layer a dotted module name belongs to: its longest prefix that is a layer.

    ``engine.broker.partition`` is in ``engine.broker``; ``engine.ledger_store`` is its own layer;
    ``proofs.check.model`` is in ``proofs``.  A name outside the product is returned unchanged."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        prefix = ".".join(parts[:end])
        if prefix in LAYERS:
            return prefix
    return module


def may_import(importer: str, imported: str) -> bool:
    """Whether module ``importer`` may import module ``imported`` (both dotted, both ours)."""
    mine, theirs = layer_of(importer), layer_of(imported)
    if mine == theirs:
        return True
    # a sub-layer of the engine may import the engine package itself (its docstring), and the
    # engine's layers count as "engine" for the layers above it
    if theirs.startswith("engine") and "engine" in LAYERS[mine]:
        return True
    return theirs in LAYERS[mine]
