"""History readers bound what they read and stream one history at a time; damage is a typed error.

* every single-bit flip of a Parquet history file is refused with a :class:`BadHistory` or reads
  back exactly the same histories (page checksums: a flipped page never decodes to other data);
* JSON Lines: nesting, number length, line length and encoding are bounded and named by byte offset;
* a FIFO or a device is refused, not waited on or read without end;
* reading streams: a history is yielded once its last row group has been read, and memory holds one
  history's operations at a time, not the file's;
* the linearizability search stops with ``unknown`` when the history's memory budget runs out.
"""

from __future__ import annotations

import dataclasses
import os
import tracemalloc
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from history_io import files as history_module
from history_io.files import (
    MAX_JSONL_LINE_BYTES,
    iter_histories,
    iter_parquet_histories,
    read_jsonl,
    read_parquet,
    write_jsonl,
    write_parquet,
)
from history_io.jepsen import parse_jepsen_log, read_jepsen_log
from invariants.linearizability import Verdict, check_history
from invariants.models import CasRegister, random_register_history
from spec.history import BadHistory, Operation


def _histories(count: int, ops: int) -> list[Operation]:
    return [op for h in range(count) for op in random_register_history(h, ops=ops, clients=3, history=f"h{h:03d}")]


def test_every_flipped_bit_of_a_parquet_file_is_refused_or_changes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "h.parquet"
    write_parquet(path, random_register_history(3, ops=40, clients=3))
    original = list(iter_parquet_histories(path))
    data = path.read_bytes()
    outcomes = {"refused": 0, "unchanged": 0}
    damaged = tmp_path / "x.parquet"
    for offset in range(0, len(data), 3):  # a third of the bytes, a different bit each time
        flipped = bytearray(data)
        flipped[offset] ^= 1 << (offset % 8)
        damaged.write_bytes(bytes(flipped))
        try:
            got = list(iter_parquet_histories(damaged))
        except BadHistory as exc:
            assert str(damaged) in str(exc)
            outcomes["refused"] += 1
            continue
        assert got == original, f"a flip at byte {offset} read back as other operations"
        outcomes["unchanged"] += 1
    assert outcomes["refused"] > outcomes["unchanged"] > 0


def test_a_flip_inside_a_data_page_names_its_row_group(tmp_path: Path) -> None:
    path = tmp_path / "h.parquet"
    write_parquet(path, random_register_history(1, ops=30, clients=2))
    meta = pq.ParquetFile(path).metadata
    column = meta.row_group(0).column(meta.schema.to_arrow_schema().names.index("value"))
    data = bytearray(path.read_bytes())
    data[column.data_page_offset + column.total_compressed_size // 2] ^= 0x10
    path.write_bytes(bytes(data))
    with pytest.raises(BadHistory, match="damaged Parquet data in row group 0"):
        read_parquet(path)


@pytest.mark.parametrize(
    ("line", "words", "offset"),
    [
        ("[" * 10_000 + "]" * 10_000, "nested deeper than 64 levels at byte offset {} (limit MAX_VALUE_DEPTH)", 64),
        ('{"index": ' + "7" * 500 + "}", "a number of 500 digits, more than 40 at byte offset {}", 10),
        ('{"history": "h", "index": 0, "oops', "not JSON: Invalid control character at byte offset {}", 34),
        ("[1, 2]", "expected a JSON object, got list", 0),
    ],
)
def test_jsonl_lines_past_a_bound_or_not_json_are_typed_errors(
    tmp_path: Path, line: str, words: str, offset: int
) -> None:
    path = tmp_path / "h.jsonl"
    write_jsonl(path, random_register_history(1, ops=4, clients=1))
    good = path.read_text()
    path.write_text(good + line + "\n")
    row = good.count("\n")
    with pytest.raises(BadHistory) as caught:
        read_jsonl(path)
    at = len(good.encode()) + offset  # offsets count from the start of the file
    assert words.format(at) in str(caught.value) and f"row {row}:" in str(caught.value)


def test_jsonl_line_length_and_encoding_are_bounded(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes(b'{"history": "' + b"x" * (MAX_JSONL_LINE_BYTES + 10) + b'"}\n')
    with pytest.raises(BadHistory, match="MAX_JSONL_LINE_BYTES"):
        read_jsonl(path)
    path.write_bytes(b'{"history": "h\xff"}\n')
    with pytest.raises(BadHistory, match=r"byte 0xff at byte offset 14"):
        read_jsonl(path)


def test_a_row_value_nested_too_deep_is_refused_in_parquet_too(tmp_path: Path) -> None:
    ops = random_register_history(1, ops=4, clients=1)
    deep = [dataclasses.replace(op, value="[" * 500 + "]" * 500) if i == 2 else op for i, op in enumerate(ops)]
    path = tmp_path / "h.parquet"
    write_parquet(path, deep)
    with pytest.raises(BadHistory, match=r"row 2 field 'value'.*nested deeper than 64.*MAX_VALUE_DEPTH"):
        read_parquet(path)


@pytest.mark.parametrize("fmt", ["parquet", "jsonl", "jepsen"])
def test_a_fifo_or_a_device_is_refused(tmp_path: Path, fmt: str) -> None:
    fifo = tmp_path / f"h.{fmt}"
    os.mkfifo(fifo)
    with pytest.raises(BadHistory, match="a FIFO"):
        list(iter_histories(fifo, fmt))
    with pytest.raises(BadHistory, match="a character device"):
        list(iter_histories("/dev/zero", fmt))


def test_a_jepsen_log_needs_an_operation_line() -> None:
    assert parse_jepsen_log("", history="empty") == []  # an empty log is an empty history
    with pytest.raises(BadHistory, match="not a Jepsen log: none of its 2 lines is an operation"):
        parse_jepsen_log("hello\nworld {}\n", history="random", where="random.log")


def test_a_jepsen_log_that_is_not_utf8_names_the_offset(tmp_path: Path) -> None:
    path = tmp_path / "etcd_1.log"
    path.write_bytes(b"INFO  jepsen.util - 0\t:invoke\t:read\tnil\n\xfe")
    with pytest.raises(BadHistory, match=r"row 1: not UTF-8 text: byte 0xfe at byte offset 40"):
        read_jepsen_log(path)


def test_histories_are_yielded_as_soon_as_their_last_row_group_is_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(history_module, "ROW_GROUP_ROWS", 25)
    path = tmp_path / "h.parquet"
    write_parquet(path, _histories(6, ops=60))  # 60 rows a history, written one after the other
    groups = pq.ParquetFile(path).metadata.num_row_groups
    read: list[int] = []
    original = history_module._ParquetInput.read

    def spy(self: object, group: int, columns: object = None) -> object:
        if columns is None:
            read.append(group)
        return original(self, group, columns)  # type: ignore[arg-type]

    monkeypatch.setattr(history_module._ParquetInput, "read", spy)
    stream = iter_parquet_histories(path)
    name, ops = next(stream)
    assert name == "h000" and len(ops) == 60
    assert read == [0, 1, 2] and groups == 15  # only the row groups that hold h000
    assert [n for n, _ in stream] == [f"h{h:03d}" for h in range(1, 6)]
    assert read_parquet(path) == dict(iter_parquet_histories(path))


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_reading_one_history_at_a_time_holds_a_fraction_of_the_file(tmp_path: Path, fmt: str) -> None:
    """Python memory (traced allocations, not wall-clock or RSS) while streaming 16 histories and
    dropping each, against reading them all at once."""
    path = tmp_path / f"h.{fmt}"
    (write_parquet if fmt == "parquet" else write_jsonl)(path, _histories(16, ops=150))

    def peak(read: object) -> int:
        tracemalloc.start()
        try:
            read()  # type: ignore[operator]
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    def stream() -> None:
        for _name, _ops in iter_histories(path, fmt):
            pass

    whole = peak(lambda: (read_parquet if fmt == "parquet" else read_jsonl)(path))
    streamed = peak(stream)
    assert streamed * 4 < whole, (streamed, whole)


def test_the_search_stops_at_the_memory_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """The budget reads resident memory; here it grows by a megabyte at every look (the search
    looks between two slices of its steps, so the history takes some twenty slices to search)."""
    import invariants.linearizability as lin

    ops = random_register_history(7, ops=2000, clients=8, max_latency=200)
    assert check_history(CasRegister(), ops).verdict is Verdict.OK  # the history is fine, and long to search
    grown = iter(range(0, 10**12, 1 << 20))
    monkeypatch.setattr(lin, "resident_bytes", lambda: next(grown))
    result = check_history(CasRegister(), ops, memory_bytes=4 << 20)
    assert result.verdict is Verdict.UNKNOWN
    assert any("memory budget exhausted" in part.reason for part in result.objects)
