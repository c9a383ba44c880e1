"""``txnmodel config``: every broker.conf key the model uses."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from history_io.folders import UsageError
from history_io.inputs import read_input_bytes
from spec.errors import InputError
from txnmodel.common import EXIT_BAD_INPUT, EXIT_OK, one_line, print_json

# Pulsar's own broker.conf is about 80 kB.
BROKER_CONF_LIMIT = 4 * 1024 * 1024


def cmd_config(args: argparse.Namespace) -> int:
    from spec.config import Config

    for item in args.set or ():
        if "=" not in item:
            raise UsageError(f"--set {item!r}: expected KEY=VALUE")
    try:
        config = Config()
        if args.broker_conf:
            # java.util.Properties.load(InputStream), which Pulsar uses, reads ISO 8859-1
            path = Path(args.broker_conf)
            text = read_input_bytes(path, limit=BROKER_CONF_LIMIT, limit_name="BROKER_CONF_LIMIT").decode("latin-1")
            config = Config.from_broker_conf(text, where=args.broker_conf)
        if args.set:
            config = config.with_overrides(dict(item.split("=", 1) for item in args.set))
    except (InputError, ValueError) as exc:
        print(f"txnmodel config: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_BAD_INPUT
    items = dict(config.items())
    if args.json:
        print_json({k: list(v) if isinstance(v, tuple) else v for k, v in items.items()})
    else:
        for key, value in items.items():
            shown = ",".join(value) if isinstance(value, tuple) else value
            print(f"{key}={str(shown).lower() if isinstance(shown, bool) else shown}")
    return EXIT_OK


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = sub.add_parser(
        "config",
        help="show every broker.conf key the model uses, with Pulsar's defaults",
        description="Print every broker.conf key the machines use with its value: Pulsar's default, or "
        "the value from --broker-conf and --set. A bad key or value exits 2 naming the key.",
    )
    config.add_argument(
        "--broker-conf", help="read overrides from a broker.conf file (Java properties syntax, as Pulsar reads it)"
    )
    config.add_argument("--set", action="append", metavar="KEY=VALUE", help="override one key (repeatable)")
    config.add_argument("--json", action="store_true", help="machine-readable output")
    config.set_defaults(func=cmd_config)
