"""The named models of ``txnmodel check``: each a builder from bounds to a :class:`ModelSpec`.

Every model states its bounds (``txnmodel check --model NAME --bound K=V``); the defaults keep the
main job's model-checking phase short, bigger bounds are a flag away.  ``docs/check/<name>.md``
describes each: what it composes, its bounds, its properties, its cost, how to read a
counterexample.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from proofs.check.program import Faults, ModelSpec, Op, SubSpec, TxnScript
from spec.config import QUIRKS, Config

__all__ = ["DEFAULT_MODELS", "MODELS", "BadBound", "NamedModel", "build"]


class BadBound(ValueError):
    """An unknown model, an unknown bound, or a value out of range."""


@dataclass(frozen=True)
class NamedModel:
    name: str
    summary: str
    defaults: Mapping[str, int]
    limits: Mapping[str, tuple[int, int]]
    make: Callable[[dict[str, int], Config], ModelSpec]


def _config(quirks: tuple[str, ...] = (), **overrides: Any) -> Config:
    config = Config()
    for quirk in quirks:
        config = config.with_overrides(QUIRKS[quirk])
    return config.with_overrides(overrides) if overrides else config


def _faults(b: dict[str, int], **extra: Any) -> Faults:
    return Faults(
        loss=b.get("loss", 0),
        duplicate=b.get("duplicate", 0),
        crash_coordinator=b.get("crash_coordinator", 0),
        crash_partition=b.get("crash_partition", 0),
        rollover=b.get("rollover", 0),
        retention=b.get("retention", 0),
        timeouts=bool(b.get("timeouts", 0)),
        **extra,
    )


def _ends(b: dict[str, int]) -> tuple[str, ...]:
    return ("commit", "abort") if b.get("aborts", 1) else ("commit",)


# --- atomic multi-partition produce ----------------------------------------------------------


def _produce(b: dict[str, int], config: Config) -> ModelSpec:
    """Each client runs ``txns`` transactions, each sending ``messages`` messages to each of its
    ``spread`` partitions (client c starts at partition c), then commits or aborts.  A plain
    producer publishes ``publishes`` normal messages on each partition meanwhile;
    ``duplicate_sends`` lets the network duplicate a transactional send too (a late copy may reach
    the partition after the transaction ended there)."""
    clients, partitions, spread = b["clients"], b["partitions"], min(b["spread"], b["partitions"])
    programs = []
    for c in range(clients):
        targets = [(c + i) % partitions for i in range(spread)]
        ops = tuple(Op("send", p) for p in targets for _ in range(b["messages"]))
        programs.append(tuple(TxnScript(ops, _ends(b)) for _ in range(b["txns"])))
    subs = tuple(SubSpec(p, reader=True) for p in range(partitions)) if b["readers"] else ()
    duplicable = ("add_partition", "add_subscription", "send") if b["duplicate_sends"] else None
    return ModelSpec(
        "produce",
        "atomic multi-partition produce",
        partitions,
        tuple(programs),
        subs,
        publishes=(b["publishes"],) * partitions if b["publishes"] else (),
        faults=_faults(b) if duplicable is None else _faults(b, duplicable=duplicable),
        config=config,
        bounds=b,
    )


# --- consume-transform-produce ---------------------------------------------------------------


def _ctp(b: dict[str, int], config: Config) -> ModelSpec:
    """Partition 0 is the input, preloaded with ``input`` messages and read through one Shared
    subscription; each client's transaction consumes one message, acknowledges it in the
    transaction and sends one message to an output partition (1 + c mod outputs)."""
    clients, outputs = b["clients"], b["outputs"]
    programs = []
    for c in range(clients):
        ops = (Op("consume", 0), Op("send", 1 + c % outputs))
        programs.append(tuple(TxnScript(ops, _ends(b)) for _ in range(b["txns"])))
    preload = (b["input"],) + (0,) * outputs
    return ModelSpec(
        "ctp",
        "consume-transform-produce",
        1 + outputs,
        tuple(programs),
        (SubSpec(0, "Shared"),),
        preload=preload,
        faults=_faults(b),
        config=config,
        bounds=b,
    )


# --- the end-of-transaction path with a crash at every point ---------------------------------


def _end_path(b: dict[str, int], config: Config) -> ModelSpec:
    """One transaction with ``partitions`` partitions and one subscription as participants (it
    consumes one preloaded message and sends to every partition), then commit or abort; the
    environment may crash the coordinator and the topics at every point and lose END_TXN_ON_*
    requests or answers (the TB client's timeouts)."""
    partitions = b["partitions"]
    ops = (Op("consume", 0), *(Op("send", p) for p in range(partitions)))
    programs = tuple((TxnScript(ops, _ends(b)),) for _ in range(b["clients"]))
    return ModelSpec(
        "end-path",
        "the end-of-transaction path with crashes",
        partitions,
        programs,
        (SubSpec(0, "Exclusive"),),
        preload=(b["clients"],) + (0,) * (partitions - 1),
        faults=_faults(b),
        config=config,
        bounds=b,
    )


# --- pending-ack conflicts on a shared subscription ------------------------------------------


def _pending_ack(b: dict[str, int], config: Config) -> ModelSpec:
    """``clients`` clients each consume and acknowledge ``messages`` messages of one Shared
    subscription in a transaction (individually, or cumulatively with ``cumulative=1``), then commit
    or abort; aborted acknowledgements are redelivered (PA-13), so a message may be acknowledged
    by two transactions, which the pending ack must refuse (PA-6)."""
    clients = b["clients"]
    cumulative = bool(b["cumulative"])
    ops = tuple(Op("consume", 0, cumulative=cumulative) for _ in range(b["messages"]))
    programs = tuple(tuple(TxnScript(ops, _ends(b)) for _ in range(b["txns"])) for _ in range(clients))
    return ModelSpec(
        "pending-ack",
        "pending-ack conflicts on a shared subscription",
        1,
        programs,
        (SubSpec(0, "Shared"),),
        preload=(b["input"],),
        faults=_faults(b),
        config=config,
        bounds=b,
    )


# --- delayed delivery inside transactions ----------------------------------------------------


def _delayed(b: dict[str, int], config: Config) -> ModelSpec:
    """Each client sends ``messages`` delayed messages (deliver-at ``delay``, abstract ms) in a
    transaction and commits or aborts; one Shared subscription with the delayed-delivery tracker
    and a reader; the clock advances one tick at a time up to ``delay + 1``."""
    ops = tuple(Op("send", 0, deliver_at=b["delay"]) for _ in range(b["messages"]))
    programs = tuple(tuple(TxnScript(ops, _ends(b)) for _ in range(b["txns"])) for _ in range(b["clients"]))
    strict = config.with_overrides({"isDelayedDeliveryDeliverAtTimeStrict": True, "delayedDeliveryTickTimeMillis": 1})
    return ModelSpec(
        "delayed",
        "delayed delivery inside transactions",
        1,
        programs,
        (SubSpec(0, "Shared", reader=True, delayed=True),),
        faults=_faults(b),
        config=strict,
        clock_limit=b["delay"] + 1,
        tracker="bucket" if b["bucket"] else "in_memory",
        bounds=b,
    )


# --- the batched log's recovery -------------------------------------------------------------


def _batched_log(b: dict[str, int], config: Config) -> ModelSpec:
    """The coordinator's transaction log through PIP-160's batched writer (at most ``batch``
    records per entry): clients begin a transaction and commit or abort it (with ``partitions``
    partitions, after one send to each); the coordinator may crash with records buffered, or
    with a batch written but not yet acknowledged."""
    partitions = b["partitions"]
    ops = tuple(Op("send", p) for p in range(partitions))
    programs = tuple(tuple(TxnScript(ops, _ends(b)) for _ in range(b["txns"])) for _ in range(b["clients"]))
    batched = config.with_overrides(
        {"transactionLogBatchedWriteEnabled": True, "transactionLogBatchedWriteMaxRecords": b["batch"]}
    )
    return ModelSpec(
        "batched-log",
        "the batched transaction log's recovery",
        partitions,
        programs,
        faults=_faults(b),
        config=batched,
        batched_log=True,
        bounds=b,
    )


_FAULT_LIMITS = {
    "loss": (0, 4),
    "duplicate": (0, 4),
    "crash_coordinator": (0, 3),
    "crash_partition": (0, 3),
    "rollover": (0, 3),
    "retention": (0, 3),
    "timeouts": (0, 1),
    "aborts": (0, 1),
}

MODELS: dict[str, NamedModel] = {
    m.name: m
    for m in (
        NamedModel(
            "produce",
            "atomic multi-partition produce: every client's transaction sends to several partitions; readers see "
            "all of a committed transaction or none of an aborted one",
            {
                "clients": 1,
                "partitions": 2,
                "spread": 2,
                "messages": 1,
                "txns": 1,
                "readers": 1,
                "publishes": 0,
                "duplicate_sends": 0,
                "loss": 1,
                "duplicate": 1,
                "crash_coordinator": 0,
                "crash_partition": 0,
                "rollover": 0,
                "retention": 0,
                "timeouts": 0,
                "aborts": 1,
            },
            {
                "clients": (1, 4),
                "partitions": (1, 4),
                "spread": (1, 4),
                "messages": (1, 3),
                "txns": (1, 3),
                "readers": (0, 1),
            },
            _produce,
        ),
        NamedModel(
            "ctp",
            "consume-transform-produce: consume from an input partition, acknowledge in the transaction, produce to "
            "an output partition, commit or abort",
            {
                "clients": 2,
                "outputs": 1,
                "input": 1,
                "txns": 1,
                "loss": 0,
                "duplicate": 0,
                "crash_coordinator": 0,
                "crash_partition": 0,
                "rollover": 0,
                "retention": 0,
                "timeouts": 0,
                "aborts": 1,
            },
            {"clients": (1, 3), "outputs": (1, 3), "input": (1, 4), "txns": (1, 2)},
            _ctp,
        ),
        NamedModel(
            "end-path",
            "the end-of-transaction path: one transaction with partition and subscription participants, with "
            "coordinator and topic crashes at every point and END_TXN_ON_* timeouts",
            {
                "clients": 1,
                "partitions": 1,
                "loss": 0,
                "duplicate": 0,
                "crash_coordinator": 1,
                "crash_partition": 1,
                "rollover": 0,
                "retention": 0,
                "timeouts": 0,
                "aborts": 1,
            },
            {"clients": (1, 2), "partitions": (1, 3)},
            _end_path,
        ),
        NamedModel(
            "pending-ack",
            "pending-ack conflicts: transactions of several clients acknowledge the same messages of a Shared "
            "subscription; aborts redeliver",
            {
                "clients": 2,
                "messages": 1,
                "input": 1,
                "txns": 1,
                "cumulative": 0,
                "loss": 0,
                "duplicate": 0,
                "crash_coordinator": 0,
                "crash_partition": 0,
                "rollover": 0,
                "retention": 0,
                "timeouts": 0,
                "aborts": 1,
            },
            {"clients": (1, 3), "messages": (1, 3), "input": (1, 4), "txns": (1, 3), "cumulative": (0, 1)},
            _pending_ack,
        ),
        NamedModel(
            "delayed",
            "delayed delivery inside transactions: delayed messages of committed transactions are delivered at "
            "their time, never earlier, and those of aborted ones never",
            {
                "clients": 1,
                "messages": 1,
                "txns": 1,
                "delay": 2,
                "bucket": 0,
                "loss": 0,
                "duplicate": 0,
                "crash_coordinator": 0,
                "crash_partition": 1,
                "rollover": 0,
                "retention": 0,
                "timeouts": 0,
                "aborts": 1,
            },
            {"clients": (1, 3), "messages": (1, 3), "txns": (1, 2), "delay": (1, 4), "bucket": (0, 1)},
            _delayed,
        ),
        NamedModel(
            "batched-log",
            "the batched transaction log (PIP-160): the coordinator crashes with records buffered or in flight and "
            "recovers what the ledger holds",
            {
                "clients": 2,
                "partitions": 0,
                "txns": 1,
                "batch": 2,
                "loss": 0,
                "duplicate": 0,
                "crash_coordinator": 1,
                "crash_partition": 0,
                "rollover": 0,
                "retention": 0,
                "timeouts": 0,
                "aborts": 0,
            },
            {"clients": (1, 3), "partitions": (0, 2), "txns": (1, 2), "batch": (2, 4)},
            _batched_log,
        ),
    )
}

# What the main job runs, at their default bounds.
DEFAULT_MODELS: tuple[str, ...] = ("produce", "ctp", "end-path", "pending-ack", "delayed", "batched-log")


def build(name: str, bounds: Mapping[str, int] | None = None, *, quirks: tuple[str, ...] = ()) -> ModelSpec:
    """The model ``name`` at its default bounds overridden by ``bounds``; ``quirks`` switches on
    named quirks of :data:`spec.config.QUIRKS`."""
    model = MODELS.get(name)
    if model is None:
        raise BadBound(f"unknown model {name!r}; models are {', '.join(MODELS)}")
    for quirk in quirks:
        if quirk not in QUIRKS:
            raise BadBound(f"unknown quirk {quirk!r}; quirks are {', '.join(QUIRKS)}")
    given = dict(bounds or {})
    unknown = sorted(set(given) - set(model.defaults))
    if unknown:
        raise BadBound(f"model {name}: unknown bound(s) {', '.join(unknown)}; bounds are {', '.join(model.defaults)}")
    merged = {**model.defaults, **given}
    limits = {**_FAULT_LIMITS, **model.limits}
    for key, value in merged.items():
        low, high = limits.get(key, (0, 1 << 30))
        if not low <= value <= high:
            raise BadBound(f"model {name}: bound {key}={value} is outside [{low}, {high}]")
    spec = model.make(merged, _config(quirks))
    return spec
