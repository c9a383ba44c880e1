"""Every bad input, on every command, is one clear line and exit 2; never a Python traceback.

The table below is the issue's list of bad inputs and the rest of their kind, one row per case:
the surface (command), the input, the exit code expected and words the message must contain.
Each case runs ``python -m txnmodel`` in a subprocess (real exit code, real streams, a time limit
so a hang fails instead of blocking), from its own temporary folder.

Every case, pending or not, must be free of tracebacks and of exit 3 (a bug report) unless it
expects one.  A case marked ``pending`` names what is still to do (and whose branch does it): its
expectation is checked and reported as an expected failure; once it holds, the test fails until
the mark is removed, so the table never understates what works.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from spec.envelope import LogKind, encode_batch
from spec.pb import PulsarTransactionMetadata_pb2 as tc_pb

_VECTOR = Path(__file__).resolve().parents[2] / "spec" / "vectors" / "delayed" / "c25-contains-message.json"


@dataclass(frozen=True)
class Case:
    surface: str
    name: str
    argv: tuple[str, ...]  # "{tmp}" is the case's temporary folder
    code: int
    words: tuple[str, ...]  # in the message: the last line of stderr (case-insensitive)
    setup: Callable[[Path], None] | None = None
    pending: str | None = None  # what is left to do, and on which branch
    timeout: float = 120.0
    pipe_closed: bool = False  # stdout is a pipe whose reader is gone before the command writes

    @property
    def id(self) -> str:
        return f"{self.surface}: {self.name}"


# ---------------------------------------------------------------------------------------------
# Inputs


def _write(name: str, data: bytes | str) -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)

    return setup


def _fifo(tmp: Path) -> None:
    os.mkfifo(tmp / "fifo")


def _fifo_named(name: str) -> Callable[[Path], None]:
    return lambda tmp: os.mkfifo(tmp / name)


def _folder(name: str) -> Callable[[Path], None]:
    return lambda tmp: (tmp / name).mkdir()


def _read_only_folder(tmp: Path) -> None:
    (tmp / "ro").mkdir()
    (tmp / "ro").chmod(0o500)


def _vector_with(change: Callable[[dict[str, object]], None], name: str = "v.json") -> Callable[[Path], None]:
    def setup(tmp: Path) -> None:
        data = json.loads(_VECTOR.read_text())
        change(data)
        (tmp / name).write_text(json.dumps(data))

    return setup


def _set_step_arg(index: int, key: str, value: object) -> Callable[[dict[str, object]], None]:
    def change(data: dict[str, object]) -> None:
        steps = data["steps"]
        assert isinstance(steps, list)
        steps[index]["args"][key] = value

    return change


def _two_vectors_one_id(tmp: Path) -> None:
    (tmp / "vs").mkdir()
    (tmp / "vs" / "a.json").write_text(_VECTOR.read_text())
    (tmp / "vs" / "b.json").write_text(_VECTOR.read_text())


def _huge_machine_name(data: dict[str, object]) -> None:
    data["machine"] = "x" * 5_000_000


def _torn_entry(tmp: Path) -> None:
    record = tc_pb.TransactionMetadataEntry(metadata_op=tc_pb.TransactionMetadataEntry.NEW, txnid_least_bits=1)
    (tmp / "torn.bin").write_bytes(encode_batch([record], LogKind.TRANSACTION_LOG)[:-3])


def _ledger_dir(tmp: Path) -> None:
    from engine.storage.file_ledger import FileLedger

    ml = FileLedger(tmp / "ml", name="bad-input")
    for i in range(4):
        ml.append(f"entry {i}".encode())
    ml.close()


def _ledger_dir_without_metadata(tmp: Path) -> None:
    from engine.storage.file_ledger import METADATA_NAME
    from engine.storage.journal import parse_segment_file_name

    _ledger_dir(tmp)
    for entry in (tmp / "ml").iterdir():
        if entry.name == METADATA_NAME or parse_segment_file_name(entry.name) is not None:
            entry.unlink()


def _jsonl_nested(tmp: Path) -> None:
    (tmp / "h").mkdir()
    (tmp / "h" / "deep.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")


def _flipped_parquet(tmp: Path) -> None:
    """A history file with one bit flipped in the middle of the first data page of ``value``."""
    import pyarrow.parquet as pq

    from history_io.files import write_parquet
    from invariants.models import random_register_history

    path = tmp / "h.parquet"
    write_parquet(path, random_register_history(3, ops=40, clients=3))
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(0).column(meta.schema.to_arrow_schema().names.index("value"))
    data = bytearray(path.read_bytes())
    data[column.data_page_offset + column.total_compressed_size // 2] ^= 0x10
    path.write_bytes(bytes(data))


def _parquet(tmp: Path, name: str, change: Callable[[object], object], history: str = "h") -> None:
    """A small transactional history as Parquet, its Arrow table changed by ``change`` first."""
    import dataclasses

    import pyarrow.parquet as pq

    from history_io.files import history_table
    from tests.invariants.synthetic import generate

    table = history_table([dataclasses.replace(op, history=history) for op in generate(1)])
    path = tmp / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "wb") as handle:
        pq.write_table(change(table), handle)


def _duplicate_column(tmp: Path) -> None:
    import pyarrow as pa

    def twice(table: object) -> object:
        assert isinstance(table, pa.Table)
        return pa.Table.from_arrays([*table.columns, table.column("f")], names=[*table.column_names, "f"])

    _parquet(tmp, "h.parquet", twice)


def _missing_column(tmp: Path) -> None:
    _parquet(tmp, "h.parquet", lambda table: table.drop(["invoked_at"]))  # type: ignore[attr-defined]


def _zero_rows(tmp: Path) -> None:
    _parquet(tmp, "h.parquet", lambda table: table.slice(0, 0))  # type: ignore[attr-defined]


def _not_utf8_name(tmp: Path) -> None:
    _parquet(tmp, os.fsdecode(b"d/h\xff.parquet"), lambda table: table)


def _long_history_id(tmp: Path) -> None:
    _parquet(tmp, "h.parquet", lambda table: table, history="h" * 300)


def _out_in_use(tmp: Path) -> None:
    _parquet(tmp, "h.parquet", lambda table: table)
    _write("d/index.html", "an earlier run's")(tmp)


def _link_loop(tmp: Path) -> None:
    (tmp / "d").mkdir()
    os.symlink("b.parquet", tmp / "d" / "a.parquet")
    os.symlink("a.parquet", tmp / "d" / "b.parquet")


def _trace_named_html(tmp: Path) -> None:
    """A valid trace saved as ``t.html``: its page's default name is the trace's own."""
    trace = {
        "format": "txnmodel-trace",
        "version": 1,
        "model": "ctp",
        "property": "p",
        "kind": "safety",
        "bounds": {},
        "initial": {"coordinator": {"@type": "CoordinatorState", "txns": []}},
        "steps": [],
        "loop_from": None,
    }
    (tmp / "t.html").write_text(json.dumps(trace))


def _ledger_dir_with_fifo(tmp: Path) -> None:
    _ledger_dir(tmp)
    os.mkfifo(tmp / "ml" / "ledger-00000000000000000009.log")


def _ledger_dir_with_loop(tmp: Path) -> None:
    _ledger_dir(tmp)
    os.symlink("ledger-00000000000000000008.log", tmp / "ml" / "ledger-00000000000000000008.log")


def _random_text(tmp: Path) -> None:
    import random
    import string

    rnd = random.Random(1)
    (tmp / "random.txt").write_text("".join(rnd.choice(string.ascii_letters + " \n{}[]:") for _ in range(3000)))


# ---------------------------------------------------------------------------------------------
# The table

CASES: tuple[Case, ...] = (
    # -- any command
    Case("txnmodel", "no command", (), 2, ("required",)),
    Case("txnmodel", "unknown command", ("kafka",), 2, ("invalid choice",)),
    Case("txnmodel", "stdout closed early (vectors --json)", ("vectors", "run", "--json"), 141, (), pipe_closed=True),
    Case("txnmodel", "stdout closed early (prove)", ("prove", "client"), 141, (), pipe_closed=True),
    Case("txnmodel", "stdout closed early (config)", ("config",), 141, (), pipe_closed=True),
    # -- prove
    Case("prove", "unknown machine", ("prove", "kafka"), 2, ("unknown machine", "kafka")),
    Case("prove", "--only matching nothing", ("prove", "all", "--only", "no such property"), 2, ("--only",)),
    Case("prove", "--rlimit 0", ("prove", "--rlimit", "0"), 2, ("--rlimit", "got 0")),
    Case("prove", "--rlimit not a number", ("prove", "--rlimit", "lots"), 2, ("--rlimit", "'lots'")),
    Case("prove", "--rlimit past Z3's 32 bits", ("prove", "--rlimit", str(2**32)), 2, ("--rlimit",)),
    # -- vectors run
    Case("vectors", "missing path", ("vectors", "run", "{tmp}/missing.json"), 2, ("missing.json", "no such file")),
    Case("vectors", "not JSON", ("vectors", "run", "{tmp}/v.json"), 2, ("not json", "line 1"), _write("v.json", "{x")),
    Case(
        "vectors",
        "empty file",
        ("vectors", "run", "{tmp}/v.json"),
        2,
        ("not json", "byte offset 0"),
        _write("v.json", ""),
    ),
    Case(
        "vectors",
        "deeply nested array",
        ("vectors", "run", "{tmp}/v.json"),
        2,
        ("nested deeper than 32", "MAX_VECTOR_DEPTH", "byte offset 32"),
        _write("v.json", "[" * 100_000 + "]" * 100_000),
    ),
    Case(
        "vectors",
        "deeply nested object",
        ("vectors", "run", "{tmp}/v.json"),
        2,
        ("MAX_VECTOR_DEPTH",),
        _write("v.json", '{"a":' * 50_000 + "1" + "}" * 50_000),
    ),
    Case(
        "vectors",
        "a 5000-digit number",
        ("vectors", "run", "{tmp}/v.json"),
        2,
        ("5,000 digits, more than 40", "MAX_INTEGER_DIGITS"),
        _write("v.json", '{"id": ' + "9" * 5000 + "}"),
    ),
    Case(
        "vectors",
        "over the size limit",
        ("vectors", "run", "{tmp}/v.json"),
        2,
        ("MAX_VECTOR_BYTES",),
        _write("v.json", b" " * (8 * 1024 * 1024 + 1)),
    ),
    Case(
        "vectors",
        "not UTF-8",
        ("vectors", "run", "{tmp}/v.json"),
        2,
        ("not utf-8", "byte offset 8"),
        _write("v.json", b'{"id": "\xff"}'),
    ),
    Case(
        "vectors", "a JSON array", ("vectors", "run", "{tmp}/v.json"), 2, ("$", "not of type"), _write("v.json", "[]")
    ),
    Case("vectors", "a FIFO", ("vectors", "run", "{tmp}/fifo"), 2, ("fifo",), _fifo, timeout=60),
    Case("vectors", "/dev/zero", ("vectors", "run", "/dev/zero"), 2, ("character device",), timeout=60),
    Case("vectors", "a folder without vectors", ("vectors", "run", "{tmp}/d"), 2, ("no *.json",), _folder("d")),
    Case(
        "vectors", "two vectors with one id", ("vectors", "run", "{tmp}/vs"), 2, ("also the id",), _two_vectors_one_id
    ),
    Case(
        "vectors",
        "an integer past 64 bits",
        ("vectors", "run", "{tmp}/v.json"),
        2,
        ("$.steps[0].args.entry_id", "64-bit"),
        _vector_with(_set_step_arg(0, "entry_id", 2**70)),
    ),
    Case(
        "vectors",
        "a position no ledger holds",
        ("vectors", "run", "{tmp}/v.json"),
        2,
        ("$.steps[0].args", "refused by the reference"),
        _vector_with(_set_step_arg(0, "entry_id", -5)),
    ),
    Case(
        "vectors",
        "a 5 MB string in the wrong place is not echoed",
        ("vectors", "run", "{tmp}/v.json"),
        2,
        ("$.machine", "5,000,000 characters", "is not one of"),
        _vector_with(_huge_machine_name),
    ),
    # -- config
    Case(
        "config",
        "a bad value in broker.conf",
        ("config", "--broker-conf", "{tmp}/broker.conf"),
        2,
        ("transactionCoordinatorEnabled", "maybe"),
        _write("broker.conf", "transactionCoordinatorEnabled=maybe\n"),
    ),
    Case(
        "config",
        "missing broker.conf",
        ("config", "--broker-conf", "{tmp}/nope.conf"),
        2,
        ("nope.conf", "no such file"),
    ),
    Case("config", "broker.conf is a folder", ("config", "--broker-conf", "{tmp}/d"), 2, ("folder",), _folder("d")),
    Case("config", "broker.conf is a FIFO", ("config", "--broker-conf", "{tmp}/fifo"), 2, ("fifo",), _fifo, timeout=60),
    Case("config", "broker.conf is /dev/zero", ("config", "--broker-conf", "/dev/zero"), 2, ("device",), timeout=60),
    Case("config", "--set without =", ("config", "--set", "oops"), 2, ("KEY=VALUE", "oops")),
    Case("config", "--set unknown key", ("config", "--set", "noSuchKey=1"), 2, ("noSuchKey",)),
    Case("config", "--set bad value", ("config", "--set", "transactionCoordinatorEnabled=maybe"), 2, ("maybe",)),
    # -- inspect
    Case("inspect", "missing path", ("inspect", "{tmp}/nope"), 2, ("nope",)),
    Case("inspect", "a FIFO", ("inspect", "{tmp}/fifo"), 2, ("fifo",), _fifo, timeout=60),
    Case("inspect", "/dev/zero", ("inspect", "/dev/zero"), 2, ("character device",), timeout=60),
    Case(
        "inspect",
        "a torn entry",
        ("inspect", "{tmp}/torn.bin", "--kind", "transaction_log"),
        2,
        ("torn.bin", "byte offset"),
        _torn_entry,
    ),
    Case(
        "inspect", "--hex of binary bytes", ("inspect", "{tmp}/b", "--hex"), 2, ("not hex",), _write("b", b"\xff\x00")
    ),
    Case(
        "inspect",
        "--entry not LEDGER:ENTRY",
        ("inspect", "{tmp}/ml", "--entry", "x"),
        2,
        ("LEDGER:ENTRY",),
        _ledger_dir,
    ),
    Case(
        "inspect",
        "--entry past the ledger's end",
        ("inspect", "{tmp}/ml", "--entry", "0:999"),
        2,
        ("999",),
        _ledger_dir,
    ),
    Case(
        "inspect",
        "METADATA and the journal gone",
        ("inspect", "{tmp}/ml"),
        2,
        ("metadata",),
        _ledger_dir_without_metadata,
    ),
    # -- run (usage errors, all before any work)
    Case("run", "--ops 0", ("run", "--ops", "0"), 2, ("--ops", "got 0")),
    Case("run", "--histories -1", ("run", "--histories", "-1"), 2, ("--histories",)),
    Case("run", "--seed past int64", ("run", "--seed", str(2**63)), 2, ("--seed",)),
    Case("run", "--seed of 300 digits", ("run", "--seed", "7" * 300), 2, ("--seed", "more characters")),
    Case(
        "run", "--seed + --histories past int64", ("run", "--seed", str(2**63 - 1), "--histories", "2"), 2, ("--seed",)
    ),
    Case("run", "--out is a file", ("run", "--out", "{tmp}/f"), 2, ("--out", "not a folder"), _write("f", "x")),
    Case(
        "run",
        "--out under a file",
        ("run", "--out", "{tmp}/f/out"),
        2,
        ("--out", "cannot create the folder", "not a directory"),
        _write("f", "x"),
    ),
    Case("run", "--out is read-only", ("run", "--out", "{tmp}/ro"), 2, ("--out", "not writable"), _read_only_folder),
    Case("run", "--master bogus", ("run", "--master", "bogus://x"), 2, ("--master", "Spark master")),
    Case("run", "--rlimit 0", ("run", "--rlimit", "0"), 2, ("--rlimit",)),
    # -- simulate
    Case("simulate", "--clients 0", ("simulate", "--clients", "0", "--ops", "2"), 2, ("--clients",)),
    Case(
        "simulate",
        "--partitions 0",
        ("simulate", "--partitions", "0", "--ops", "2"),
        2,
        ("--partitions",),
    ),
    Case("simulate", "--ops 0", ("simulate", "--ops", "0"), 2, ("--ops",)),
    Case("simulate", "--histories 0", ("simulate", "--histories", "0"), 2, ("--histories",)),
    Case(
        "simulate",
        "--seed past int64",
        ("simulate", "--seed", str(2**63), "--ops", "2", "--out", "{tmp}/out"),
        2,
        ("--seed",),
    ),
    Case(
        "simulate",
        "--seed of 300 digits (a 300-character history id)",
        ("simulate", "--seed", "7" * 300, "--ops", "2", "--out", "{tmp}/out"),
        2,
        ("--seed",),
    ),
    Case(
        "simulate",
        "--out is a file",
        ("simulate", "--ops", "2", "--out", "{tmp}/f"),
        2,
        ("--out", "not a folder"),
        _write("f", "x"),
    ),
    Case(
        "simulate",
        "--data is a file",
        ("simulate", "--ops", "2", "--ledger", "file", "--data", "{tmp}/f"),
        2,
        ("--data", "not a folder"),
        _write("f", "x"),
    ),
    Case(
        "simulate",
        "--out not empty",
        ("simulate", "--ops", "2", "--out", "{tmp}/o"),
        2,
        ("--out", "not empty", "--overwrite"),
        _write("o/ctp.parquet", "x"),
    ),
    Case(
        "simulate",
        "--data not empty",
        ("simulate", "--ops", "2", "--ledger", "file", "--data", "{tmp}/d"),
        2,
        ("--data", "not empty", "--overwrite"),
        _write("d/ctp-seed0/x", "x"),
    ),
    Case("simulate", "--data without file ledgers", ("simulate", "--data", "{tmp}/d"), 2, ("--data", "--ledger file")),
    Case("simulate", "--deadline 0", ("simulate", "--deadline", "0"), 2, ("--deadline",)),
    Case(
        "simulate",
        "--seed + --histories past int64",
        ("simulate", "--seed", str(2**63 - 1), "--histories", "2"),
        2,
        ("--seed", "passes"),
    ),
    Case(
        "simulate",
        "--out is read-only",
        ("simulate", "--ops", "2", "--out", "{tmp}/ro"),
        2,
        ("--out", "not writable"),
        _read_only_folder,
    ),
    # -- record (usage errors before any broker is asked anything; then a broker that is not there)
    Case("record", "no --url", ("record", "--workload", "nack", "--out", "{tmp}/o"), 2, ("--url",)),
    Case(
        "record",
        "--url not pulsar://",
        ("record", "--url", "http://127.0.0.1:1", "--workload", "nack", "--out", "{tmp}/o"),
        2,
        ("pulsar://",),
    ),
    Case(
        "record",
        "--url port past 65535",
        ("record", "--url", "pulsar://127.0.0.1:99999", "--workload", "nack", "--out", "{tmp}/o", "--ops", "2"),
        2,
        ("pulsar://127.0.0.1:99999", "expected a number from 1 to 65535"),
    ),
    Case(
        "record",
        "--out is a file",
        ("record", "--url", "pulsar://127.0.0.1:1", "--workload", "nack", "--out", "{tmp}/f"),
        2,
        ("--out", "not a folder"),
        _write("f", "x"),
    ),
    Case(
        "record",
        "--seconds -1",
        ("record", "--url", "pulsar://127.0.0.1:1", "--workload", "nack", "--out", "{tmp}/o", "--seconds", "-1"),
        2,
        ("--seconds",),
    ),
    Case(
        "record",
        "--seed past int64",
        ("record", "--url", "pulsar://127.0.0.1:1", "--workload", "nack", "--out", "{tmp}/o", "--seed", str(2**63)),
        2,
        ("--seed",),
    ),
    Case(
        "record",
        "--seconds and --ops",
        (
            "record",
            "--url",
            "pulsar://127.0.0.1:1",
            "--workload",
            "nack",
            "--out",
            "{tmp}/o",
            "--ops",
            "2",
            "--seconds",
            "1",
        ),
        2,
        ("not allowed with", "--ops"),
    ),
    Case(
        "record",
        "no broker at --url",
        ("record", "--url", "pulsar://127.0.0.1:1", "--workload", "nack", "--out", "{tmp}/o", "--ops", "2"),
        2,
        ("127.0.0.1:1", "cannot connect"),
        timeout=120,
    ),
    # -- simulate: the disk, the journal's group commit, processes
    Case("simulate", "--disk floppy", ("simulate", "--disk", "floppy"), 2, ("--disk", "invalid choice")),
    Case("simulate", "--jobs 0", ("simulate", "--jobs", "0"), 2, ("--jobs", "got 0")),
    Case("simulate", "--group-commit -1", ("simulate", "--group-commit", "-1"), 2, ("--group-commit", "got -1")),
    Case(
        "simulate",
        "--disk-capacity without the simulated disk",
        ("simulate", "--ledger", "file", "--disk-capacity", "4096", "--out", "{tmp}/o"),
        2,
        ("--disk-capacity", "--disk sim"),
    ),
    Case(
        "simulate",
        "a full simulated disk",
        (
            "simulate",
            "--ledger",
            "file",
            "--disk",
            "sim",
            "--disk-capacity",
            "65536",
            "--ops",
            "60",
            "--out",
            "{tmp}/o",
        ),
        2,
        ("stopped early", "no space left on device", "marked incomplete"),
        timeout=300,
    ),
    Case("run", "--jobs 0", ("run", "--jobs", "0"), 2, ("--jobs", "got 0")),
    Case("run", "--group-commit -1", ("run", "--group-commit", "-1"), 2, ("--group-commit",)),
    Case("run", "--disk floppy", ("run", "--disk", "floppy"), 2, ("--disk",)),
    # -- view
    Case("view", "missing trace", ("view", "{tmp}/nope.json"), 2, ("nope.json",)),
    Case("view", "not JSON", ("view", "{tmp}/t.json"), 2, ("not JSON", "line 1"), _write("t.json", "{x")),
    Case(
        "view",
        "deeply nested trace",
        ("view", "{tmp}/t.json"),
        2,
        ("nested deeper than 64", "byte offset 64"),
        _write("t.json", "[" * 100_000 + "]" * 100_000),
    ),
    Case("view", "a FIFO", ("view", "{tmp}/fifo"), 2, ("fifo",), _fifo, timeout=60),
    Case("view", "/dev/zero", ("view", "/dev/zero"), 2, ("character device",), timeout=60),
    Case("view", "not a trace", ("view", "{tmp}/t.json"), 2, ("$",), _write("t.json", "[1, 2]")),
    # -- check
    Case("check", "unknown model", ("check", "--model", "kafka"), 2, ("unknown model", "kafka")),
    Case("check", "bogus --master", ("check", "--model", "produce", "--master", "bogus"), 2, ("Spark master URL",)),
    Case("check", "--bound without =", ("check", "--model", "produce", "--bound", "clients"), 2, ("K=V",)),
    Case("check", "--bound not a number", ("check", "--model", "produce", "--bound", "clients=x"), 2, ("'x'",)),
    Case("check", "unknown bound", ("check", "--model", "produce", "--bound", "nonsense=1"), 2, ("nonsense",)),
    Case("check", "bound out of range", ("check", "--model", "produce", "--bound", "clients=99"), 2, ("clients=99",)),
    Case("check", "unknown quirk", ("check", "--model", "produce", "--quirk", "nope"), 2, ("nope",)),
    Case("check", "--master and --local", ("check", "--master", "local[1]", "--local"), 2, ("not allowed",)),
    Case("check", "--max-states 0", ("check", "--max-states", "0"), 2, ("--max-states",)),
    # -- serve (refused before it binds)
    Case("serve", "--port past 65535", ("serve", "--port", "70000"), 2, ("--port", "65535")),
    Case("serve", "--port -1", ("serve", "--port", "-1"), 2, ("--port",)),
    Case("serve", "--seed past int64", ("serve", "--seed", str(2**63)), 2, ("--seed",)),
    Case("serve", "--set without =", ("serve", "--port", "0", "--set", "oops"), 2, ("KEY=VALUE",)),
    Case("serve", "--ledger file without --data", ("serve", "--port", "0", "--ledger", "file"), 2, ("--data",)),
    # conform: its vector files are read as vectors run reads them; the implementation's own output
    # is judged, not refused (exit 1, tests/conform/test_cli.py)
    Case(
        "conform", "--impl not there", ("conform", "--machine", "client", "--impl", "{tmp}/nope"), 2, ("cannot start",)
    ),
    Case(
        "conform",
        "--step-timeout 0",
        ("conform", "--machine", "client", "--impl", "x", "--step-timeout", "0"),
        2,
        ("--step-timeout",),
    ),
    Case(
        "conform",
        "--seed past int64",
        ("conform", "--machine", "client", "--impl", "x", "--seed", str(2**63)),
        2,
        ("--seed",),
    ),
    Case(
        "conform",
        "--vectors not JSON",
        (
            "conform",
            "--machine",
            "client",
            "--impl",
            "x",
            "--vectors",
            "{tmp}/v.json",
        ),
        2,
        ("not json", "line 1"),
        _write("v.json", "{x"),
    ),
    Case(
        "conform",
        "--vectors a FIFO",
        (
            "conform",
            "--machine",
            "client",
            "--impl",
            "x",
            "--vectors",
            "{tmp}/fifo",
        ),
        2,
        ("fifo",),
        _fifo,
        timeout=60,
    ),
    Case(
        "serve",
        "broker.conf is a FIFO",
        ("serve", "--port", "0", "--broker-conf", "{tmp}/fifo"),
        2,
        ("fifo",),
        _fifo,
        timeout=60,
    ),
    # -- verify (most cases --local: the files are read by the same code on Spark)
    Case("verify", "missing path", ("verify", "{tmp}/nope"), 2, ("nope",)),
    Case("verify", "a folder without histories", ("verify", "{tmp}/d"), 2, ("no parquet files",), _folder("d")),
    Case("verify", "--master bogus", ("verify", "{tmp}/d", "--master", "bogus://x"), 2, ("--master",), _folder("d")),
    Case("verify", "--memory 0", ("verify", "{tmp}/d", "--memory", "0"), 2, ("--memory",), _folder("d")),
    Case("verify", "--budget 0", ("verify", "{tmp}/d", "--budget", "0"), 2, ("--budget",), _folder("d")),
    Case("verify", "--seconds nan", ("verify", "{tmp}/d", "--seconds", "nan"), 2, ("--seconds",), _folder("d")),
    Case(
        "verify",
        "--format jepsen on random text (Spark)",
        ("verify", "{tmp}/random.txt", "--format", "jepsen", "--out", "{tmp}/verdicts"),
        2,
        ("random.txt", "not a Jepsen log"),
        _random_text,
        timeout=300,
    ),
    Case(
        "verify",
        "a FIFO",
        ("verify", "{tmp}/fifo.parquet", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("fifo.parquet", "a FIFO"),
        _fifo_named("fifo.parquet"),
        timeout=60,
    ),
    Case(
        "verify",
        "/dev/zero as a Jepsen log",
        ("verify", "/dev/zero", "--format", "jepsen", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("/dev/zero", "character device"),
        timeout=60,
    ),
    Case(
        "verify",
        "deeply nested JSONL",
        ("verify", "{tmp}/h", "--format", "jsonl", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("deep.jsonl row 0", "nested deeper than 64", "MAX_VALUE_DEPTH", "byte offset 64"),
        _jsonl_nested,
        timeout=120,
    ),
    Case(
        "verify",
        "--format edn, truncated",
        ("verify", "{tmp}/h.edn", "--format", "edn", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("h.edn", "line 1", "truncated"),
        _write("h.edn", "{:type :invoke, :f :read"),
    ),
    Case(
        "verify",
        "--format edn, deeply nested",
        ("verify", "{tmp}/h.edn", "--format", "edn", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("h.edn", "nested deeper than 64"),
        _write("h.edn", "[" * 100_000),
    ),
    Case(
        "verify",
        "--format edn on random text",
        ("verify", "{tmp}/h.edn", "--format", "edn", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("h.edn", "line 1"),
        _write("h.edn", "hello world, this is not a history )\n"),
    ),
    Case(
        "verify",
        "--format edn, a FIFO",
        ("verify", "{tmp}/fifo.edn", "--format", "edn", "--out", "{tmp}/verdicts"),
        2,
        ("fifo.edn", "a FIFO"),
        _fifo_named("fifo.edn"),
        timeout=60,
    ),
    Case(
        "verify",
        "--format edn, /dev/zero",
        ("verify", "/dev/zero", "--format", "edn", "--out", "{tmp}/verdicts"),
        2,
        ("/dev/zero", "character device"),
        timeout=60,
    ),
    Case(
        "verify",
        "--format jepsen on random text (in this process)",
        ("verify", "{tmp}/random.txt", "--format", "jepsen", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("random.txt", "not a Jepsen log"),
        _random_text,
    ),
    # -- the issue's list (28): other tools' files
    Case(
        "verify",
        "a Parquet column twice",
        ("verify", "{tmp}/h.parquet", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("h.parquet", "f", "more than once"),
        _duplicate_column,
    ),
    Case(
        "verify",
        "a Parquet column missing",
        ("verify", "{tmp}/h.parquet", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("h.parquet", "missing column(s) invoked_at"),
        _missing_column,
    ),
    Case(
        "verify",
        "a history of zero rows",
        ("verify", "{tmp}/h.parquet", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("h.parquet", "nothing to check"),
        _zero_rows,
    ),
    Case(
        "verify",
        "a file name that is not UTF-8 (works)",
        ("verify", "{tmp}/d", "--local", "--out", "{tmp}/verdicts"),
        0,
        (),
        _not_utf8_name,
    ),
    Case(
        "verify",
        "a 300-character history id (works)",
        ("verify", "{tmp}/h.parquet", "--local", "--out", "{tmp}/verdicts"),
        0,
        (),
        _long_history_id,
    ),
    Case(
        "verify",
        "a symbolic link loop in a folder",
        ("verify", "{tmp}/d", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("a.parquet", "symbolic link loop"),
        _link_loop,
    ),
    Case(
        "verify",
        "a symbolic link loop named",
        ("verify", "{tmp}/d/a.parquet", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("a.parquet", "symbolic link loop"),
        _link_loop,
    ),
    Case(
        "verify",
        "a non-empty --out",
        ("verify", "{tmp}/h.parquet", "--local", "--out", "{tmp}/d"),
        2,
        ("--out", "not empty", "--overwrite"),
        _out_in_use,
    ),
    Case(
        "view",
        "its own input as the page (t.html)",
        ("view", "{tmp}/t.html"),
        2,
        ("t.html", "overwrite its own input"),
        _trace_named_html,
    ),
    Case(
        "inspect",
        "a FIFO inside a ledger folder",
        ("inspect", "{tmp}/ml"),
        2,
        ("ledger-00000000000000000009.log", "a FIFO"),
        _ledger_dir_with_fifo,
        timeout=60,
    ),
    Case(
        "inspect",
        "a symbolic link loop inside a ledger folder",
        ("inspect", "{tmp}/ml"),
        2,
        ("ledger-00000000000000000008.log", "symbolic link loop"),
        _ledger_dir_with_loop,
        timeout=60,
    ),
    Case(
        "inspect",
        "a symbolic link loop named",
        ("inspect", "{tmp}/ml/ledger-00000000000000000008.log"),
        2,
        ("ledger-00000000000000000008.log", "symbolic link loop"),
        _ledger_dir_with_loop,
        timeout=60,
    ),
    Case(
        "verify",
        "a flipped byte inside a Parquet data page",
        ("verify", "{tmp}/h.parquet", "--local", "--out", "{tmp}/verdicts"),
        2,
        ("h.parquet", "damaged Parquet data in row group 0"),
        _flipped_parquet,
        timeout=120,
    ),
)


# ---------------------------------------------------------------------------------------------
# Running a case


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    @property
    def message(self) -> str:
        lines = [line for line in self.stderr.splitlines() if line.strip()]
        return lines[-1] if lines else ""


def _run(case: Case, tmp: Path) -> Outcome:
    argv = [arg.replace("{tmp}", str(tmp)) for arg in case.argv]
    command = [sys.executable, "-m", "txnmodel", *argv]
    env = {**os.environ, "TMPDIR": str(tmp)}  # a bug report's traceback file lands here
    if case.pipe_closed:
        # The reader end is closed before the command can write (as `| head -1` does once it has its
        # line): every write then fails with EPIPE, whatever the size of the output and the timing.
        reader, writer = os.pipe()
        os.close(reader)
        try:
            done = subprocess.run(
                command,
                cwd=tmp,
                env=env,
                stdout=writer,
                capture_output=False,
                stderr=subprocess.PIPE,
                timeout=case.timeout,
                check=False,
            )
        finally:
            os.close(writer)
        return Outcome(done.returncode, "", done.stderr.decode())
    try:
        done = subprocess.run(
            command, cwd=tmp, env=env, capture_output=True, text=True, timeout=case.timeout, check=False
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{case.id}: no answer within {case.timeout} s (a hang)")
    return Outcome(done.returncode, done.stdout, done.stderr)


def _meets(case: Case, outcome: Outcome) -> list[str]:
    """What the outcome lacks against the case's expectation (empty: it meets it)."""
    problems = []
    if outcome.code != case.code:
        problems.append(f"exit {outcome.code}, expected {case.code}")
    message = outcome.message.lower()
    problems += [f"no {word!r} in the message" for word in case.words if word.lower() not in message]
    return problems


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_clear_line_never_a_traceback(case: Case, tmp_path: Path) -> None:
    if case.name.endswith("read-only") and os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    if case.setup is not None:
        case.setup(tmp_path)
    outcome = _run(case, tmp_path)
    problems = _meets(case, outcome)
    noise = ("pipe", "exception", "error")  # progress lines may be there; a complaint may not
    if case.pipe_closed and any(word in outcome.stderr.lower() for word in noise):
        problems.append("a reader gone early is reported on stderr")
    # No case may end in a traceback, an unbounded message or a bug report; a pending case (whose
    # fix is on another branch) is held to the same and reported as still failing.
    if "Traceback (most recent call last)" in outcome.stderr + outcome.stdout:
        problems.append("a Python traceback")
    if len(outcome.message) > 600:
        problems.append(f"a message of {len(outcome.message):,} characters")
    if outcome.code == 3 and case.code != 3:
        problems.append(f"a bug report: {outcome.message}")
    if case.pending is not None:
        if not problems:
            pytest.fail(f"{case.id} now works: remove its pending mark ({case.pending})")
        pytest.xfail(f"pending on {case.pending}: {'; '.join(problems)}")
    assert problems == [], outcome.stderr[-2000:]


def test_the_table_covers_every_command() -> None:
    from txnmodel.commands import COMMANDS

    surfaces = {c.surface for c in CASES}
    assert {module.__name__.rsplit(".", 1)[-1] for module in COMMANDS} <= surfaces
