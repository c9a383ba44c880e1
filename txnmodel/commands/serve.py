"""``txnmodel serve``: the reference broker behind Pulsar's binary protocol."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path
from types import FrameType

from history_io.folders import UsageError
from history_io.inputs import read_input_bytes
from spec.errors import InputError
from txnmodel.common import EXIT_BAD_INPUT, EXIT_OK, one_line, port_int, seed_int


def cmd_serve(args: argparse.Namespace) -> int:
    from engine.serve.faults import parse_faults
    from engine.serve.server import PulsarServer, ServerOptions
    from runners.serve import history_id, write_history
    from spec.config import Config

    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(message)s")
    for item in args.set or ():
        if "=" not in item:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
    try:
        if args.broker_conf:
            # java.util.Properties.load(InputStream), which Pulsar uses, reads ISO 8859-1
            raw = read_input_bytes(Path(args.broker_conf), limit=4 * 1024 * 1024, limit_name="BROKER_CONF_LIMIT")
            config = Config.from_broker_conf(raw.decode("latin-1"), where=args.broker_conf)
        else:
            config = Config(transaction_coordinator_enabled=True)
        if args.set:
            config = config.with_overrides(dict(item.split("=", 1) for item in args.set))
        faults = parse_faults(args.faults) if args.faults else None
        if args.ledger == "file" and not args.data:
            raise InputError("--ledger file needs --data DIR")
        server = PulsarServer(
            ServerOptions(
                host=args.host,
                port=args.port,
                ledger=args.ledger,
                data_dir=args.data,
                config=config,
                seed=args.seed,
                record_history=args.history is not None,
                history_id=history_id(),
                faults=faults,
            )
        )
        url = server.start()
    except (InputError, OSError, ValueError) as exc:
        print(f"txnmodel serve: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT

    def stop(signum: int, _frame: FrameType | None) -> None:
        server.stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(url, flush=True)
    try:
        server.run()
    finally:
        server.close()
        if args.history is not None:
            path = write_history(server, Path(args.history))
            print(f"history: {path}", file=sys.stderr)
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser(
        "serve",
        help="serve Pulsar's binary protocol: the reference broker for real clients",
        description="Run the engine's broker (every decision from the reference machines) behind Pulsar's binary "
        "protocol on a TCP socket, on the wall clock. Prints the service URL (pulsar://HOST:PORT), serves until "
        "SIGINT or SIGTERM, then closes every connection and ledger and, with --history, writes the machine-level "
        "history for `txnmodel verify`. Exit 0 after a clean shutdown, 2 on bad options or configuration.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    serve.add_argument("--port", type=port_int, default=6650, help="port to bind; 0 picks a free one (default 6650)")
    serve.add_argument("--ledger", choices=("memory", "file"), default="memory", help="where topics live")
    serve.add_argument("--data", help="folder of the file ledgers and the topic registry (--ledger file)")
    serve.add_argument("--broker-conf", help="a broker.conf file (keys the model does not use are ignored)")
    serve.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one broker.conf key")
    serve.add_argument("--history", metavar="DIR", help="record the machine-level history and write it to DIR")
    serve.add_argument("--seed", type=seed_int, default=0, help="seed of the broker's random choices (faults)")
    serve.add_argument(
        "--faults",
        metavar="SPEC",
        help="inject faults, seeded by --seed and logged: 'on' (the simulator's kinds and rates), 'off', or "
        "KIND=RATE items (after 'on' to override): broker_crash, coordinator_crash, topic_unload, connection_drop, "
        "drop_request, drop_response, max_extra_delay_ms, ledger_append, ledger_read, short_txn_timeout, "
        "participant_timeout; and quirks, a broker that breaks one promise (docs/serve.md, Quirks): phantom_message, "
        "misplace_receipt, swap_positions, reorder_dispatch, hide_message, ignore_delay, deliver_late_ms, "
        "ignore_redelivery, commit_aborts, expose_open_txns, hide_txn_message, lose_txn_acks, end_twice",
    )
    serve.add_argument("--verbose", action="store_true", help="log more than warnings")
    serve.set_defaults(func=cmd_serve)
