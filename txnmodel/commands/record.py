"""``txnmodel record``: drive a Pulsar-protocol broker with a named workload and write the history."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from history_io.folders import output_folder
from txnmodel.common import (
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_OK,
    non_negative_int,
    positive_float,
    positive_int,
    seed_int,
)

# A run stopped by SIGTERM, the shell's convention (128 + the signal's number; Ctrl-C's is
# EXIT_INTERRUPTED): the history so far is written all the same.
EXIT_TERMINATED = 128 + signal.SIGTERM


@contextlib.contextmanager
def _sigterm_stops() -> Iterator[list[int]]:
    """SIGTERM stops the run as Ctrl-C does (the history so far is written); which signal came."""
    came: list[int] = []

    def stop(number: int, frame: Any) -> None:
        came.append(number)
        raise KeyboardInterrupt(f"stopped by {signal.Signals(number).name}")

    try:
        previous = signal.signal(signal.SIGTERM, stop)
    except ValueError:  # not the main thread (a test calling main from a thread): nothing to install
        yield came
        return
    try:
        yield came
    finally:
        signal.signal(signal.SIGTERM, previous)


def _options(args: argparse.Namespace) -> Any:
    from recording import RecordOptions

    return RecordOptions(
        url=args.url,
        workload=args.workload,
        out=args.out,
        clients=args.clients,
        seconds=args.seconds,
        ops=args.ops,
        seed=args.seed,
        txn=not args.no_txn,
        jsonl=args.jsonl,
        partitions=args.partitions,
        namespace=args.namespace,
        operation_timeout_s=args.operation_timeout,
        send_timeout_ms=args.send_timeout_ms,
        receive_timeout_ms=args.receive_timeout_ms,
        broker_tick_ms=args.broker_tick_ms,
        broker_strict_delay=args.broker_strict_delay,
        slack_ms=args.slack_ms,
        liveness=args.liveness == "on",
        max_delay_ms=args.max_delay_ms,
        nack_delay_ms=args.nack_delay_ms,
        ack_timeout_ms=args.ack_timeout_ms,
        txn_timeout_ms=args.txn_timeout_ms,
        max_drain_s=args.max_drain_s,
        quiet_ms=args.quiet_ms,
        admin_url=args.admin_url,
        progress=not args.no_progress,
        broker_gone_s=args.broker_gone_s,
        overwrite=args.overwrite,
    )


def cmd_record(args: argparse.Namespace) -> int:
    from recording import record
    from spec.errors import InputError

    output_folder(Path(args.out), "--out")  # a usage error before any broker is asked anything
    with _sigterm_stops() as came:
        try:
            result = record(_options(args), edn=args.format == "edn")
        except InputError as exc:
            print(f"txnmodel record: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
        except KeyboardInterrupt as exc:  # before the run began: nothing was recorded
            print(f"txnmodel record: {exc or 'interrupted'} before anything was recorded", file=sys.stderr)
            return EXIT_TERMINATED if came else EXIT_INTERRUPTED
    print(f"history: {result.path}")
    if result.jsonl is not None:
        print(f"history (JSON Lines): {result.jsonl}")
    if result.edn is not None:
        print(f"history (Jepsen's Kafka workload, EDN): {result.edn}")
    run = result.metadata["runs"][result.history]
    topics = run["topics"]
    where = f"; {len(topics)} topics under {topics[0].rsplit('-', 1)[0]}-*" if topics else ""
    print(f"{result.operations} operations, {result.unknown} of unknown outcome{where}")
    if run["drain_timed_out"]:
        print(
            "warning: the final drain timed out (a consumer never went quiet): "
            "loss and liveness are judged only as far as the history shows",
            file=sys.stderr,
        )
    for note in run["notes"]:
        print(f"note: {note}", file=sys.stderr)
    print(f"check it: txnmodel verify {result.path.parent}")
    if result.stopped is None:
        return EXIT_OK
    print(
        f"txnmodel record: stopped before its end ({result.stopped}); the history so far is written, "
        "the calls still in flight as unknown outcomes, and no final drain was made",
        file=sys.stderr,
    )
    if result.broker_gone:
        return EXIT_BAD_INPUT
    return EXIT_TERMINATED if came else EXIT_INTERRUPTED


def _delays(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--broker-tick-ms",
        type=positive_int,
        default=1000,
        help="the broker's delayedDeliveryTickTimeMillis (default 1000, Pulsar's): enters the delivery bound",
    )
    parser.add_argument(
        "--broker-strict-delay",
        action="store_true",
        help="the broker sets isDelayedDeliveryDeliverAtTimeStrict=true; otherwise it may deliver a tick early",
    )
    parser.add_argument(
        "--max-delay-ms",
        type=positive_int,
        help="longest delay of the delayed workload (default three broker ticks: past the tick a non-strict "
        "broker may deliver early, so early-delivery can fire)",
    )
    parser.add_argument(
        "--nack-delay-ms", type=positive_int, default=300, help="the nack workload's negative-ack delay (default 300)"
    )
    parser.add_argument(
        "--ack-timeout-ms",
        type=positive_int,
        default=10_000,
        help="the ack-timeout workload's ack timeout (default 10000, the official client's least)",
    )
    parser.add_argument(
        "--txn-timeout-ms", type=positive_int, default=10_000, help="ctp and multi's transaction timeout"
    )


def _bounds(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--slack-ms", type=non_negative_int, default=500, help="margin added to every stated bound (default 500)"
    )
    parser.add_argument(
        "--liveness",
        choices=("on", "off"),
        default="on",
        help="state liveness bounds (late delivery, redelivery) for a fault-free run; off while faults are injected",
    )
    parser.add_argument(
        "--quiet-ms",
        type=positive_int,
        help="the final drain ends once every consumer found nothing for this long (default 600, 5000 with "
        "--liveness off or once a consumer was disconnected: clients reconnecting after faults catch up slowly)",
    )
    parser.add_argument(
        "--max-drain-s", type=positive_float, default=60.0, help="longest final drain, seconds (default 60)"
    )


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "record",
        help="drive a Pulsar-protocol broker with a workload and record the history its clients saw",
        description="Run a named workload against any broker that speaks Pulsar's binary protocol (the official "
        "pulsar-client package, and the project's wire client for transactions) and write what the clients saw "
        "as a history for `txnmodel verify`: every operation from the client's side on one monotonic clock, "
        "unique payloads, message ids as (ledger, entry, batch index, partition), an unknown outcome (info) "
        "whenever a timeout or a disconnect hides the result. Each run goes to a fresh folder "
        "OUT/<workload>/<UTC timestamp>/, with OUT/latest and OUT/<workload>/latest linking the newest; the history "
        "keeps its options and the command that records it again. Topics are fresh per run (a unique prefix); "
        "subscriptions are deleted at the end, topics too with --admin-url. Ctrl-C, SIGTERM or a broker that stays "
        "unreachable stop the run early: the history so far is written, calls in flight as unknown outcomes. "
        "Exit 0 when the history was written, 2 on bad options or a broker that cannot be used (also when it went "
        "away during the run), 130 (Ctrl-C) or 143 (SIGTERM) when stopped.",
    )
    parser.add_argument("--url", required=True, help="the broker's service URL, pulsar://HOST:PORT")
    from recording.workloads import WORKLOADS

    parser.add_argument("--workload", required=True, choices=tuple(WORKLOADS), help="what the clients do")
    parser.add_argument("--out", required=True, help="the store: each run goes to OUT/<workload>/<timestamp>/")
    parser.add_argument("--overwrite", action="store_true", help="replace a run folder of the same name")
    parser.add_argument("--clients", type=positive_int, default=4, help="writer or transformer threads (default 4)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--seconds", type=positive_float, help="run the writers this long")
    budget.add_argument("--ops", type=positive_int, help="messages (or transactions) to write (default 200)")
    parser.add_argument("--seed", type=seed_int, default=0, help="seed of the workload's choices (default 0)")
    parser.add_argument("--no-txn", action="store_true", help="the broker has no transactions: refuse ctp and multi")
    parser.add_argument("--jsonl", action="store_true", help="also write the history as JSON Lines")
    parser.add_argument(
        "--format",
        choices=("parquet", "edn"),
        default="parquet",
        help="edn: also write <history>.edn in the shape of Jepsen's Kafka workload, for Jepsen's own tools "
        "(the Parquet file is always written; default parquet)",
    )
    parser.add_argument("--partitions", type=positive_int, help="topics a workload spreads over (default 1 or 2)")
    parser.add_argument("--namespace", default="public/default", help="tenant/namespace of the run's topics")
    parser.add_argument("--operation-timeout", type=positive_int, default=5, help="client operation timeout, s")
    parser.add_argument("--send-timeout-ms", type=positive_int, default=3000, help="producer send timeout, ms")
    parser.add_argument("--receive-timeout-ms", type=positive_int, default=100, help="a consumer's receive wait")
    _delays(parser)
    _bounds(parser)
    parser.add_argument("--admin-url", help="the broker's admin REST URL (http://HOST:8080): delete the run's topics")
    parser.add_argument(
        "--broker-gone-s",
        type=positive_float,
        default=10.0,
        help="stop the run once the broker has been unreachable this long (default 10; raise it when the broker "
        "is restarted on purpose)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress lines on stderr")
    parser.set_defaults(func=cmd_record)
