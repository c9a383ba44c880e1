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

ADMIN_DEFAULT_PORT = 8080  # Pulsar's webServicePort


def admin_port(text: str) -> int | None:
    """An argparse type: a port for the admin API, 0 for a free one, ``off`` for none."""
    return None if text == "off" else port_int(text)


def cmd_serve(args: argparse.Namespace) -> int:
    from engine.serve.admin import AdminServer
    from engine.serve.admin_routes import routes
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
    admin: AdminServer | None = None
    port = ADMIN_DEFAULT_PORT if args.admin_port is None else args.admin_port
    if port is not None:
        # loopback only, whatever --host says: no authentication
        admin = AdminServer(server, routes, "127.0.0.1", port)
        try:
            url = f"{url} {admin.start()}"
        except OSError as exc:
            admin = None
            if args.admin_port is not None:  # asked for: a port that cannot be had is bad usage
                server.close()
                print(f"txnmodel serve: --admin-port {port}: {one_line(str(exc))}", file=sys.stderr)
                return EXIT_BAD_INPUT
            print(
                f"txnmodel serve: the admin API is not served: port {port} cannot be had ({one_line(str(exc))}); "
                "--admin-port N (0: a free one) serves it elsewhere",
                file=sys.stderr,
            )

    def stop(signum: int, _frame: FrameType | None) -> None:
        server.stop()

    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGTERM, stop)
    print(url, flush=True)
    try:
        server.run()
    finally:
        if admin is not None:
            admin.stop()
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
        "protocol on a TCP socket, on the wall clock, and Pulsar's admin REST API on --admin-port. Prints the "
        "service URL (pulsar://HOST:PORT) and the admin URL (http://HOST:PORT) on one line, serves until "
        "SIGINT or SIGTERM, then closes every connection and ledger and, with --history, writes the machine-level "
        "history for `txnmodel verify`. Exit 0 after a clean shutdown, 2 on bad options or configuration.",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)")
    serve.add_argument("--port", type=port_int, default=6650, help="port to bind; 0 picks a free one (default 6650)")
    serve.add_argument(
        "--admin-port",
        type=admin_port,
        default=None,
        help="port of the admin REST API (/admin/v2, /admin/v3) on 127.0.0.1 only; 0 picks a free one, 'off' "
        "serves none "
        "(default 8080, Pulsar's, when it is free; else the API is not served and a line says why)",
    )
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
        "participant_timeout",
    )
    serve.add_argument("--verbose", action="store_true", help="log more than warnings")
    serve.set_defaults(func=cmd_serve)
