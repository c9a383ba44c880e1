"""Where a recording goes and what it keeps, as Jepsen's store does: a folder per run, never reused.

``--out DIR`` is the store: each run writes ``DIR/<workload>/<UTC timestamp>/<history>.parquet``
(and ``.jsonl``), and the links ``DIR/<workload>/latest`` and ``DIR/latest`` name the newest run.
A run folder is made fresh; one that exists already (two runs in one millisecond, a clock set back)
is refused unless ``--overwrite`` is given, and then only the files a recording writes are replaced.
A ``latest`` that is not a link is never touched.  ``txnmodel verify DIR`` reads every run under
the store (the ``latest`` links are not followed twice), ``txnmodel verify DIR/latest`` the newest.

Every history keeps the options it was recorded with and the command that records it again
(:func:`reproduce_command`): the same workload, seed and options against the same URL, into the
same store.
"""

from __future__ import annotations

import datetime
import os
import shlex
from dataclasses import fields
from pathlib import Path
from typing import Any

from recording.runtime import RecordOptions
from spec.errors import InputError

__all__ = ["RUN_FILE_SUFFIXES", "link_latest", "options_json", "parse_url", "reproduce_command", "run_folder"]

# What a recording writes in its run folder (and --overwrite replaces).
RUN_FILE_SUFFIXES = (".parquet", ".jsonl")


def parse_url(url: str) -> tuple[str, int]:
    """The host and port of a ``pulsar://HOST:PORT`` URL; an :class:`InputError` naming what is
    wrong otherwise (a port outside 1-65535 is refused: a client would quietly take it modulo
    65536 and reach another port)."""
    scheme = "pulsar://"
    if not url.startswith(scheme):
        if url.startswith("pulsar+ssl://"):
            raise InputError(f"expected a pulsar://HOST:PORT URL, got {url!r}: the recorder does not speak TLS")
        raise InputError(f"expected a pulsar://HOST:PORT URL, got {url!r}")
    rest = url[len(scheme) :]
    rest = rest[:-1] if rest.endswith("/") else rest
    if "," in rest:
        raise InputError(f"expected one broker, pulsar://HOST:PORT, got {url!r}")
    if any(c in rest for c in "/?#@ "):
        raise InputError(f"expected pulsar://HOST:PORT with nothing after the port, got {url!r}")
    if rest.startswith("["):
        host, bracket, port = rest[1:].partition("]")
        if not bracket or not port.startswith(":"):
            raise InputError(f"expected pulsar://[IPv6]:PORT, got {url!r}")
        port = port[1:]
    else:
        host, colon, port = rest.rpartition(":")
        if not colon:
            raise InputError(f"expected pulsar://HOST:PORT (the port is required), got {url!r}")
    if not host:
        raise InputError(f"expected pulsar://HOST:PORT (no host), got {url!r}")
    if not port.isascii() or not port.isdigit() or not 1 <= int(port) <= 65535:
        raise InputError(f"the port of {url!r} is {port!r}: expected a number from 1 to 65535")
    return host, int(port)


def _stamp(unix_ms: int) -> str:
    moment = datetime.datetime.fromtimestamp(unix_ms / 1000, tz=datetime.UTC)
    return moment.strftime("%Y%m%dT%H%M%S.") + f"{unix_ms % 1000:03d}Z"


def run_folder(store: Path, workload: str, started_unix_ms: int, *, overwrite: bool) -> Path:
    """A fresh folder for one run under ``store`` (see the module docstring)."""
    folder = store / workload / _stamp(started_unix_ms)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        folder.mkdir()
    except FileExistsError:
        if not overwrite:
            raise InputError(
                "a run folder of that name exists already; --overwrite replaces its recording", where=str(folder)
            ) from None
        if not folder.is_dir() or folder.is_symlink():
            raise InputError("exists and is not a folder", where=str(folder)) from None
        for entry in folder.iterdir():
            if entry.is_file() and entry.name.endswith(RUN_FILE_SUFFIXES):
                entry.unlink()
    except OSError as exc:
        raise InputError(f"cannot create the run folder: {exc.strerror or exc}", where=str(folder)) from None
    return folder


def link_latest(store: Path, folder: Path) -> list[str]:
    """Point ``store/<workload>/latest`` and ``store/latest`` at ``folder``; what could not be linked
    (a ``latest`` that is not a link is left alone), in words."""
    problems = []
    for link in (folder.parent / "latest", store / "latest"):
        target = os.path.relpath(folder, link.parent)
        if link.exists() and not link.is_symlink():
            problems.append(f"{link} is not a link: left as it is")
            continue
        fresh = link.with_name(f".latest-{os.getpid()}")
        try:
            if fresh.is_symlink():
                fresh.unlink()
            fresh.symlink_to(target, target_is_directory=True)
            os.replace(fresh, link)
        except OSError as exc:
            problems.append(f"{link}: {exc.strerror or exc}")
    return problems


# Options that change nothing the broker sees or the history holds.
_NOT_REPRODUCED = frozenset({"out", "progress", "before_drain", "overwrite"})
# Each option's command-line spelling, where it is not --<name with dashes>.
_FLAGS = {"txn": "--no-txn", "operation_timeout_s": "--operation-timeout", "liveness": "--liveness"}


def options_json(options: RecordOptions) -> dict[str, Any]:
    """Every option of the run, as given (None: the default the workload derives)."""
    out: dict[str, Any] = {}
    for spec in fields(options):
        if spec.name in ("before_drain",):
            continue
        out[spec.name] = getattr(options, spec.name)
    out["longest_delay_ms"] = options.longest_delay_ms
    out["quiet_ms_used"] = options.quiet
    out["quiet_ms_if_disturbed"] = options.quiet_disturbed
    return out


def reproduce_command(options: RecordOptions) -> str:
    """The ``txnmodel record`` command that records this run again: its URL, workload, store, seed
    and budget, and every option that differs from its default."""
    words = ["txnmodel", "record", "--url", options.url, "--workload", options.workload, "--out", options.out]
    words += ["--seed", str(options.seed)]
    if options.seconds is not None:
        words += ["--seconds", f"{options.seconds:g}"]
    else:
        words += ["--ops", str(options.budget_ops)]
    defaults = RecordOptions(url=options.url, workload=options.workload, out=options.out)
    for spec in fields(options):
        name = spec.name
        if name in _NOT_REPRODUCED or name in ("url", "workload", "seed", "seconds", "ops"):
            continue
        value, default = getattr(options, name), getattr(defaults, name)
        if value == default or value is None:
            continue
        flag = _FLAGS.get(name, "--" + name.replace("_", "-"))
        if name == "txn":
            words.append(flag)
        elif name == "liveness":
            words += [flag, "on" if value else "off"]
        elif isinstance(value, bool):
            words.append(flag)
        else:
            words += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    return shlex.join(words)
