"""``txnmodel record``: drive a Pulsar-protocol broker with a named workload and write what the
clients saw as a history (``docs/spec/history.md``) for ``txnmodel verify``.

::

    from recording import RecordOptions, record

    result = record(RecordOptions(url="pulsar://127.0.0.1:6650", workload="produce-consume", out="out/rec"))
    result.path   # out/rec/<history>.parquet, run metadata inside

The recorder knows nothing of the engine: it needs a ``pulsar://`` URL, the official
``pulsar-client`` package, and for the transactional workloads a broker with transactions enabled
(the project's wire client speaks the transaction commands).  Pieces:

* :mod:`recording.log` — the history log, one monotonic clock, processes;
* :mod:`recording.clients` — each client call as one operation, outcomes never guessed;
* :mod:`recording.runtime` — options, stated bounds, the budget, the final drain;
* :mod:`recording.workloads` — the named workloads.
"""

from __future__ import annotations

import json
import platform
import sys
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recording.log import HistoryLog
from recording.runtime import Budget, RecordOptions, Run
from recording.workloads import NEEDS_TXN, WORKLOADS, WorkloadResult
from spec.errors import InputError

__all__ = ["WORKLOADS", "RecordError", "RecordOptions", "RecordResult", "record"]


class RecordError(InputError):
    """Bad options, or a broker the recorder cannot use (unreachable, no transactions)."""


@dataclass(frozen=True)
class RecordResult:
    """Where the history went, its id, its operations and what the run noticed."""

    history: str
    path: Path
    jsonl: Path | None
    operations: int
    unknown: int
    metadata: dict[str, Any] = field(default_factory=dict)
    edn: Path | None = None  # the history in the shape of Jepsen's Kafka workload (--format edn)


def _client_versions() -> dict[str, str]:
    from importlib import metadata

    from txnclient.client import CLIENT_VERSION

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "not installed"

    return {
        "pulsar-client": version("pulsar-client"),
        "txnmodel": version("txnmodel"),
        "wire-client": CLIENT_VERSION,
        "python": platform.python_version(),
    }


def _probe(url: str, timeout_s: float, txn: bool) -> str:
    """The broker's version from its CONNECTED answer; with ``txn``, that it has a transaction
    coordinator (a broker without one refuses TC_CLIENT_CONNECT)."""
    import time

    from spec.errors import ServerError
    from txnclient.client import WireClient, WireError, WireTimeout

    try:
        client = WireClient(url, operation_timeout_seconds=timeout_s)
    except (OSError, WireError, WireTimeout) as exc:
        raise RecordError(f"cannot connect: {exc}", where=url) from None
    version = client.server_version or "unknown"
    client.close()
    # A coordinator that is loading (or a broker restarting) answers late or ServiceNotReady: asked
    # again for a while; a broker without transactions refuses at once.
    deadline = time.monotonic() + 4 * timeout_s
    while txn:
        try:
            with WireClient(url, operation_timeout_seconds=timeout_s) as probe:
                probe.tc_connect()
            break
        except (OSError, WireError, WireTimeout) as exc:
            busy = not isinstance(exc, WireError) or exc.code == ServerError.ServiceNotReady
            if not busy or time.monotonic() >= deadline:
                raise RecordError(
                    f"the broker refused transactions ({exc}); use a workload without them, or enable "
                    "transactionCoordinatorEnabled",
                    where=url,
                ) from None
            time.sleep(0.2)
    return version


def _delete_topics(admin_url: str, topics: list[str]) -> tuple[int, list[str]]:
    """Delete topics through Pulsar's admin REST API (``DELETE /admin/v2/persistent/...``)."""
    deleted, problems = 0, []
    for topic in topics:
        path = topic.replace("persistent://", "persistent/", 1)
        url = f"{admin_url.rstrip('/')}/admin/v2/{urllib.parse.quote(path)}?force=true"
        request = urllib.request.Request(url, method="DELETE")
        try:
            with urllib.request.urlopen(request, timeout=10):
                deleted += 1
        except (urllib.error.URLError, OSError) as exc:
            reason = exc.read().decode("utf-8", "replace")[:200] if isinstance(exc, urllib.error.HTTPError) else ""
            problems.append(f"{topic}: {exc}{': ' + reason if reason else ''}")
            print(f"txnmodel record: DELETE {url} failed: {problems[-1]}", file=sys.stderr)  # not only stored
    return deleted, problems


def _cleanup(run: Run, options: RecordOptions) -> dict[str, Any]:
    """Unsubscribe what the run subscribed (the binary protocol allows it), delete its topics where an
    admin URL is given (Pulsar's binary protocol has no command that deletes a topic)."""
    # A broker refuses to delete a subscription while another consumer is attached to it: close the
    # others first, then unsubscribe through the last one.
    by_subscription: dict[tuple[str, str], list[Any]] = {}
    for consumer in run.consumers:
        by_subscription.setdefault((consumer.topic, consumer.subscription), []).append(consumer)
    unsubscribed = 0
    for consumers in by_subscription.values():
        for consumer in consumers[:-1]:
            consumer.close()
        unsubscribed += consumers[-1].unsubscribe()
    out: dict[str, Any] = {"unsubscribed": unsubscribed, "of": len(by_subscription)}
    if options.admin_url:
        deleted, problems = _delete_topics(options.admin_url, run.topics)
        out["topics_deleted"] = deleted
        if problems:
            out["problems"] = problems[:10]
    else:
        out["topics_deleted"] = 0
        out["note"] = "no --admin-url: the run's topics are left (the binary protocol cannot delete a topic)"
    return out


def record(options: RecordOptions, *, edn: bool = False) -> RecordResult:
    """Run one workload against ``options.url`` and write its history; bad options or a broker that
    cannot be used raise :class:`RecordError` before anything is recorded.  ``edn``: also write it
    in the shape of Jepsen's Kafka workload (:mod:`history_io.kafka_write`), for Jepsen's tools."""
    from history_io.files import write_jsonl, write_parquet
    from views.progress import Reporter

    if options.workload not in WORKLOADS:
        raise RecordError(f"unknown workload {options.workload!r}; workloads are {', '.join(WORKLOADS)}")
    if options.workload in NEEDS_TXN and not options.txn:
        raise RecordError(f"workload {options.workload!r} needs transactions; --no-txn leaves only the others")
    if not options.url.startswith("pulsar://"):
        raise RecordError(f"expected a pulsar://HOST:PORT URL, got {options.url!r}")
    try:  # the official client would take a port past 65535 modulo 65536: another broker's, silently
        _ = urllib.parse.urlsplit(options.url).port  # reading it checks its range
    except ValueError:
        raise RecordError(f"{options.url}: the port must be 0 to 65535 (pulsar://HOST:PORT)") from None
    if options.workload == "ack-timeout" and options.ack_timeout_ms < 10_000:
        raise RecordError("the official client refuses an ack timeout under 10000 ms")
    try:
        import pulsar  # noqa: F401
    except ImportError:
        raise RecordError("the official client is not installed: pip install 'txnmodel[record]'") from None
    server_version = _probe(options.url, float(options.operation_timeout_s), options.workload in NEEDS_TXN)

    reporter = Reporter(enabled=options.progress)
    history = f"{options.workload}-seed{options.seed}"
    log = HistoryLog(history, options.seed)
    run = Run(options, log)
    history = f"{options.workload}-seed{options.seed}-{run.run_id}"
    log.history = history
    started_ms = log.clock.now_ms()
    try:
        with reporter.phase(f"record {options.workload}", total=options.budget_ops, unit="units") as phase:
            budget = Budget(options.budget_ops, options.seconds, on_take=lambda: phase.advance())
            result: WorkloadResult = WORKLOADS[options.workload](run, budget)
    finally:
        cleanup = _cleanup(run, options)
        run.close_clients()
    if run.errors:
        raise run.errors[0]
    ops = log.operations()
    unknown = sum(op.type.indeterminate for op in ops)
    metadata = {
        "version": 1,
        "config": {},
        "runs": {
            history: {
                "workload": options.workload,
                "seed": options.seed,
                "fault_schedule": [],
                "recorded_by": "txnmodel record",
                "url": options.url,
                "server_version": server_version,
                "client_versions": _client_versions(),
                "clients": options.clients,
                "transactions": options.workload in NEEDS_TXN,
                "started_unix_ms": started_ms,
                "ended_unix_ms": log.clock.now_ms(),
                "topics": result.topics,
                "subscriptions": result.subscriptions,
                "bounds": run.bounds.to_json(),
                "options": {
                    "ops": options.budget_ops,
                    "seconds": options.seconds,
                    "operation_timeout_s": options.operation_timeout_s,
                    "send_timeout_ms": options.send_timeout_ms,
                    "max_delay_ms": options.max_delay_ms,
                    "nack_delay_ms": options.nack_delay_ms,
                    "ack_timeout_ms": options.ack_timeout_ms,
                    "txn_timeout_ms": options.txn_timeout_ms,
                    "quiet_ms": options.quiet,
                },
                "operations": len(ops),
                "unknown_outcomes": unknown,
                "drain_timed_out": result.drain_timed_out,
                "details": result.details,
                "cleanup": cleanup,
                "notes": run.notes,
            }
        },
    }
    out = Path(options.out)
    with reporter.phase("record: write", unit=""):
        path = out / f"{history}.parquet"
        write_parquet(path, {history: ops}, metadata=metadata)
        jsonl = None
        if options.jsonl:
            jsonl = out / f"{history}.jsonl"
            write_jsonl(jsonl, {history: ops}, metadata=metadata)
        kafka = None
        if edn:
            from history_io.kafka_write import write_kafka_edn

            kafka = out / f"{history}.edn"
            kafka.write_text(write_kafka_edn(ops), encoding="utf-8")
    return RecordResult(history, path, jsonl, len(ops), unknown, json.loads(json.dumps(metadata)), kafka)
