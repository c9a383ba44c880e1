"""``txnmodel record``: drive a Pulsar-protocol broker with a named workload and write what the
clients saw as a history (``docs/spec/history.md``) for ``txnmodel verify``.

::

    from recording import RecordOptions, record

    result = record(RecordOptions(url="pulsar://127.0.0.1:6650", workload="produce-consume", out="out/rec"))
    result.path   # out/rec/produce-consume/<UTC timestamp>/<history>.parquet, run metadata inside

The recorder knows nothing of the engine: it needs a ``pulsar://`` URL, the official
``pulsar-client`` package, and for the transactional workloads a broker with transactions enabled
(the project's wire client speaks the transaction commands).  Pieces:

* :mod:`recording.log` — the history log, one monotonic clock, processes;
* :mod:`recording.clients` — each client call as one operation, outcomes never guessed;
* :mod:`recording.runtime` — options, stated bounds, the budget, the final drain, stopping;
* :mod:`recording.workloads` — the named workloads and the checks each names;
* :mod:`recording.store` — the run's folder, the ``latest`` links, the reproduce command;
* :mod:`recording.progress` — progress lines while it runs.

A run stopped before its end (Ctrl-C or SIGTERM, which the command turns into
:class:`KeyboardInterrupt`, or a broker that refuses connections for ``broker_gone_s``) still
writes what it recorded: the writers stop, the consumers stop without a final drain, calls still in
flight after a grace period are recorded as unknown outcomes, and the run metadata says where and
why it stopped (``RecordResult.stopped``).
"""

from __future__ import annotations

import contextlib
import json
import platform
import signal
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

from recording.log import HistoryLog
from recording.progress import RecordProgress
from recording.runtime import Budget, RecordOptions, Run, RunStopped
from recording.store import link_latest, options_json, parse_url, reproduce_command, run_folder
from recording.workloads import CHECKS, NEEDS_TXN, WORKLOADS, WorkloadResult
from spec.errors import InputError

__all__ = ["CHECKS", "WORKLOADS", "RecordError", "RecordOptions", "RecordResult", "record"]


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
    # Why the run stopped before its end (None: it ran to its end), and whether the broker went away.
    stopped: str | None = None
    broker_gone: bool = False


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
    coordinator: it answers TC_CLIENT_CONNECT.  A broker that refuses it, or does not answer it
    twice within the operation timeout, fails the run before anything is recorded; one that says
    ServiceNotReady (a coordinator still loading) is asked again for a while."""
    from spec.errors import ServerError
    from txnclient.client import WireClient, WireError, WireTimeout

    try:
        client = WireClient(url, operation_timeout_seconds=timeout_s)
    except (OSError, WireError, WireTimeout) as exc:
        raise RecordError(f"cannot connect: {exc}", where=url) from None
    version = client.server_version or "unknown"
    client.close()
    if not txn:
        return version
    # Advice that holds for Apache Pulsar only, given only to a broker that says it is one.
    pulsar = (
        " (Apache Pulsar: transactionCoordinatorEnabled=true in broker.conf)" if "pulsar" in version.lower() else ""
    )
    deadline = time.monotonic() + 4 * timeout_s
    unanswered = 0
    while True:
        try:
            with WireClient(url, operation_timeout_seconds=timeout_s) as probe:
                probe.tc_connect()
            return version
        except WireTimeout:
            unanswered += 1
            if unanswered >= 2:
                raise RecordError(
                    f"the broker ({version}) did not answer TC_CLIENT_CONNECT, the transaction coordinator's "
                    f"handshake, within {timeout_s:g} s, twice: the ctp and multi workloads need transactions"
                    f"{pulsar}; the others run without them (--no-txn)",
                    where=url,
                ) from None
        except (OSError, WireError) as exc:
            busy = isinstance(exc, WireError) and exc.code == ServerError.ServiceNotReady
            if not busy or time.monotonic() >= deadline:
                raise RecordError(
                    f"the broker ({version}) refused TC_CLIENT_CONNECT, the transaction coordinator's handshake "
                    f"({exc}): the ctp and multi workloads need transactions{pulsar}; the others run without "
                    "them (--no-txn)",
                    where=url,
                ) from None
            time.sleep(0.2)


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


def _check_options(options: RecordOptions) -> tuple[str, int]:
    """Bad options as :class:`RecordError`, before any broker is asked anything; the broker's host and port."""
    if options.workload not in WORKLOADS:
        raise RecordError(f"unknown workload {options.workload!r}; workloads are {', '.join(WORKLOADS)}")
    if options.workload in NEEDS_TXN and not options.txn:
        raise RecordError(f"workload {options.workload!r} needs transactions; --no-txn leaves only the others")
    try:
        host, port = parse_url(options.url)
    except InputError as exc:
        raise RecordError(str(exc)) from None
    if options.workload == "ack-timeout" and options.ack_timeout_ms < 10_000:
        raise RecordError("the official client refuses an ack timeout under 10000 ms")
    try:
        import pulsar  # noqa: F401
    except ImportError:
        raise RecordError("the official client is not installed: pip install 'txnmodel[record]'") from None
    return host, port


def _notes_before(run: Run) -> None:
    """What the options leave a named check unable to catch, said before the run (and kept)."""
    options = run.options
    if options.workload == "delayed" and options.longest_delay_ms <= run.bounds.deliver_early():
        run.notes.append(
            f"early-delivery cannot fire: the longest delay ({options.longest_delay_ms} ms) is within the "
            f"{run.bounds.deliver_early()} ms a non-strict broker may deliver early (--max-delay-ms above it, or "
            "--broker-strict-delay)"
        )
    if not options.liveness and options.workload in ("nack", "ack-timeout", "delayed"):
        run.notes.append("--liveness off: late-delivery and lost-redelivery have no bound to judge")


def _withdraw_liveness(run: Run) -> None:
    """The liveness bounds hold for a fault-free run; one that was disturbed (a consumer
    disconnected: a broker crash, a topic unload, a dropped connection) states none, as with
    ``--liveness off``: late-delivery and lost-redelivery then say they had nothing to judge."""
    if not run.options.liveness or run.disturbance is None:
        return

    def change(f: str, value: dict[str, Any]) -> None:
        if f == "negative_ack":
            value.pop("redeliver_within_ms", None)
        elif f == "send":
            value.pop("deliver_within_ms", None)
        elif f == "subscribe":
            value.pop("redeliver_within_ms", None)
            value["liveness"] = False

    run.log.restate(change)
    run.notes.append(f"liveness bounds withdrawn: the run was not fault-free ({run.disturbance})")


# What a stop by each signal is called (the KeyboardInterrupt's text where it reaches the run).
_STOP_REASONS: dict[int, str] = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "stopped by SIGTERM"}


@contextlib.contextmanager
def _signals_stop(run: Run) -> Iterator[None]:
    """Ctrl-C and SIGTERM stop the run first, then do what they did before (raise KeyboardInterrupt).
    The official client turns a signal that comes during one of its blocking calls into its own
    exception (``pulsar.Interrupted``, an ``Exception``), which the recorder takes for that call's
    failure: the KeyboardInterrupt never reached the run (found in CI: Ctrl-C five seconds into a
    run that was still subscribing its consumers, and the run recorded its whole 60 s).  Once the
    run is stopped, every retry loop, the writers and the drains see it whatever became of the
    exception.  Only a handler that is a Python function is wrapped (Python's own for Ctrl-C, the
    command line's for SIGTERM); outside the main thread nothing can be installed."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: dict[int, Any] = {}

    def stop(number: int, frame: FrameType | None) -> None:
        run.stop(_STOP_REASONS.get(number, f"stopped by {signal.Signals(number).name}"))
        previous[number](number, frame)

    for number in _STOP_REASONS:
        handler = signal.getsignal(number)
        if callable(handler):
            previous[number] = handler
            signal.signal(number, stop)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


def _state_visibility_slack(run: Run) -> None:
    """Every subscribe of a run with liveness bounds states the slack the delivery oracle's
    ``late-visibility`` adds to its dispatch bound (``visible_slack_ms``): the recorder's slack for a
    busy machine plus the longest any send of the run took to be answered.  A broker that stalled
    that long answering a send may stall as long dispatching to a consumer (found in CI: under a
    saturating nack workload on a loaded machine one send took 1.1 s, and two messages written just
    then reached their Exclusive consumer 1.1 s after they were readable, past the oracle's 1 s)."""
    if not run.options.liveness or run.disturbance is not None:
        return  # no liveness bound is stated at all (_withdraw_liveness)
    slack = run.options.slack_ms + run.log.longest("send")

    def state(f: str, value: dict[str, Any]) -> None:
        if f == "subscribe":
            value["visible_slack_ms"] = slack

    run.log.restate(state)


def _wind_down(run: Run, progress: RecordProgress) -> list[str]:
    """A stopped run: let the calls in flight finish for a while (a second Ctrl-C cuts it short);
    the threads still busy after it, whose operations stay open (unknown outcomes)."""
    grace = run.options.operation_timeout_s + 1.0
    with progress.phase(f"stopping: waiting up to {grace:g} s for the calls in flight", counts=False):
        try:
            return run.wind_down(grace)
        except KeyboardInterrupt:
            return ["(not waited for: interrupted again)"]


def _run_workload(run: Run, budget: Budget, progress: RecordProgress) -> tuple[WorkloadResult | None, dict[str, Any]]:
    """The workload, its final drain and the cleanup; a stop (Ctrl-C, SIGTERM, a broker gone) ends
    them early and the run winds down instead (the history so far is kept)."""
    options = run.options
    result: WorkloadResult | None = None
    run.phase = "writers"
    try:
        with progress.phase(f"record {options.workload}", left=_time_left(run, budget), note=_note(run, budget)):
            try:
                result = WORKLOADS[options.workload](run, budget)
            except KeyboardInterrupt as exc:
                run.stop(str(exc) or "interrupted (Ctrl-C)")
            except RunStopped:
                pass
        if not run.stopping.is_set():
            run.phase = "cleanup"
            try:
                with progress.phase("cleanup", counts=False):
                    return result, _cleanup(run, options)
            except KeyboardInterrupt as exc:
                run.stop(str(exc) or "interrupted (Ctrl-C)")
        busy = _wind_down(run, progress)
        cleanup: dict[str, Any] = {"skipped": "the run was stopped: its subscriptions and topics are left"}
        if busy:
            cleanup["busy_threads"] = busy
        return result, cleanup
    finally:
        run.finished.set()
        run.close_clients()


def _time_left(run: Run, budget: Budget) -> Any:
    def left(elapsed: float) -> float | None:
        if run.phase != "writers":
            return None
        return budget.left_s(elapsed)

    return left


def _note(run: Run, budget: Budget) -> Any:
    def note() -> str:
        draining = [d for d in run.drains if d.draining.is_set() and not d.done.is_set()]
        if draining:
            quiet, of = map(sum, zip(*(d.idle_count() for d in draining), strict=True))
            return f"final drain: {quiet} of {of} consumers found nothing"
        total = f"/{budget.total}" if budget.total is not None else ""
        return f"writers: {budget.taken}{total} units"

    return note


def _metadata(
    run: Run,
    history: str,
    server_version: str,
    result: WorkloadResult | None,
    cleanup: dict[str, Any],
    started_ms: int,
    unknown: int,
    count: int,
) -> dict[str, Any]:
    options = run.options
    subscriptions = sorted(
        {c.subscription for c in run.consumers} | {s.consumer_spec[1] for s in run.sessions if s.consumer_spec}
    )
    stopped = None
    if run.stop_reason is not None:
        stopped = {"reason": run.stop_reason, "at_unix_ms": run.stopped_at_ms, "phase": run.phase}
    return {
        "version": 1,
        "config": {},
        "runs": {
            history: {
                "workload": options.workload,
                "seed": options.seed,
                "fault_schedule": [],
                "recorded_by": "txnmodel record",
                "command": reproduce_command(options),
                "checks": list(CHECKS[options.workload]),
                "complete": stopped is None,
                "stopped": stopped,
                "url": options.url,
                "server_version": server_version,
                "client_versions": _client_versions(),
                "clients": options.clients,
                "transactions": options.workload in NEEDS_TXN,
                "started_unix_ms": started_ms,
                "ended_unix_ms": run.log.clock.now_ms(),
                "topics": result.topics if result is not None else list(run.topics),
                "subscriptions": result.subscriptions if result is not None else subscriptions,
                "bounds": {**run.bounds.to_json(), "withdrawn": run.disturbance if options.liveness else None},
                "options": options_json(options),
                "operations": count,
                "unknown_outcomes": unknown,
                "drain_timed_out": result.drain_timed_out if result is not None else None,
                "details": result.details if result is not None else {},
                "cleanup": cleanup,
                "notes": run.notes,
            }
        },
    }


def record(options: RecordOptions, *, edn: bool = False) -> RecordResult:
    """Run one workload against ``options.url`` and write its history into a fresh run folder under
    ``options.out`` (:mod:`recording.store`); bad options or a broker that cannot be used raise
    :class:`RecordError` before anything is recorded.  A run stopped early (Ctrl-C, a broker gone)
    writes what it recorded and says so in ``RecordResult.stopped``.  ``edn``: also write it in the
    shape of Jepsen's Kafka workload (:mod:`history_io.kafka_write`), for Jepsen's tools."""
    from history_io.files import write_jsonl, write_parquet

    host, port = _check_options(options)
    server_version = _probe(options.url, float(options.operation_timeout_s), options.workload in NEEDS_TXN)
    log = HistoryLog(f"{options.workload}-seed{options.seed}", options.seed)
    run = Run(options, log)
    history = f"{options.workload}-seed{options.seed}-{run.run_id}"
    log.history = history
    started_ms = log.clock.now_ms()
    store = Path(options.out)
    folder = run_folder(store, options.workload, started_ms, overwrite=options.overwrite)
    progress = RecordProgress(log, lambda: run.stop_reason, enabled=options.progress)
    _notes_before(run)
    for note in run.notes:
        progress.say(f"note: {note}")
    budget = Budget(options.budget_ops, options.seconds)
    run.budget = budget
    run.watch_broker(host, port)
    with _signals_stop(run):
        result, cleanup = _run_workload(run, budget, progress)
    if run.errors:
        raise run.errors[0]
    run.phase = "write"
    _withdraw_liveness(run)
    _state_visibility_slack(run)
    with progress.phase("write", counts=False):
        ops = log.operations(cut_short=run.stop_reason is not None)
        unknown = sum(op.type.indeterminate for op in ops)
        metadata = _metadata(run, history, server_version, result, cleanup, started_ms, unknown, len(ops))
        path = folder / f"{history}.parquet"
        write_parquet(path, {history: ops}, metadata=metadata)
        jsonl = None
        if options.jsonl:
            jsonl = folder / f"{history}.jsonl"
            write_jsonl(jsonl, {history: ops}, metadata=metadata)
        kafka = None
        if edn:
            from history_io.kafka_write import write_kafka_edn

            kafka = folder / f"{history}.edn"
            kafka.write_text(write_kafka_edn(ops), encoding="utf-8")
    for problem in link_latest(store, folder):
        run.notes.append(f"latest link: {problem}")
    return RecordResult(
        history,
        path,
        jsonl,
        len(ops),
        unknown,
        json.loads(json.dumps(metadata)),
        edn=kafka,
        stopped=run.stop_reason,
        broker_gone=run.broker_gone,
    )
