"""Jepsen's ``history.edn`` (``history_io.edn``): round trips, the three workload shapes, and every
kind of bad input ending as a ``BadHistory`` that names the line, never another exception."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from history_io import edn
from history_io.edn import history_id, parse_edn, read_edn, write_edn
from invariants.models import random_register_history
from invariants.verify import VerifyOptions, check_histories
from spec.history import BadHistory, Operation, OpType
from txnmodel.cli import main
from views.report import rendered


def _key(op: Operation) -> tuple[int, int, str]:
    return (op.process, op.invoked_at, op.f)


def _shape(ops: list[Operation], objects: bool = True) -> list[tuple[object, ...]]:
    return [
        (
            o.type,
            o.f,
            o.object if objects else "",
            o.args,
            o.returned if o.f == "read" else None,
            o.invoked_at,
            o.completed_at,
            o.process,
        )
        for o in sorted(ops, key=_key)
    ]


@given(st.integers(0, 10_000), st.integers(1, 60), st.integers(1, 5), st.booleans(), st.booleans())
def test_register_histories_round_trip(seed: int, ops: int, clients: int, records: bool, wrapped: bool) -> None:
    history = random_register_history(seed, ops=ops, clients=clients, history="r")
    text = write_edn(history, records=records)
    if wrapped:  # the older layout: one vector around the maps
        text = "[" + text.replace("\n", "\n ") + "]"
    back = parse_edn(text, history="r")
    assert _shape(back, objects=False) == _shape(history, objects=False)
    assert {op.object for op in back} <= {"register:r"}
    for op in back:
        # a :fail did not take effect; nothing more is concluded (Knossos), so it carries an error
        assert (op.type is OpType.FAIL) == (op.error is not None)


def test_independent_keys_become_one_register_each() -> None:
    history = [op for key in (1, 2) for op in random_register_history(key, ops=20, clients=2, history="r") if True]
    # put each half on its own key's register and renumber
    ops: list[Operation] = []
    for i, op in enumerate(history):
        key = 1 if i < 20 else 2
        ops.append(
            Operation(
                op.history,
                i,
                op.process + 10 * key,
                op.type,
                op.f,
                f"register:r/{key}",
                op.value,
                op.result,
                op.invoked_at,
                op.completed_at,
                op.error,
                op.seed,
            )
        )
    text = write_edn(ops)
    assert "[1 " in text and "[2 " in text
    back = parse_edn(text, history="r")
    assert {op.object for op in back} == {"register:r/1", "register:r/2"}
    assert _shape(back) == _shape(ops)
    rows = check_histories({"r": back}, "f", VerifyOptions(counterexamples=False))
    assert [(r.checker, r.verdict, r.objects) for r in rows] == [("linearizability", "ok", 2)]


def test_a_register_history_is_checked_against_cas_register() -> None:
    text = """\
{:type :invoke, :f :write, :value 1, :time 10, :process 0, :index 0}
{:type :ok, :f :write, :value 1, :time 20, :process 0, :index 1}
{:type :info, :f :start-partition, :value nil, :time 25, :process :nemesis, :index 2}
{:type :invoke, :f :cas, :value [1 2], :time 30, :process 0, :index 3}
{:type :fail, :f :cas, :value [1 2], :time 40, :process 0, :index 4}
{:type :invoke, :f :read, :value nil, :time 50, :process 1, :index 5}
{:type :ok, :f :read, :value 2, :time 60, :process 1, :index 6}
"""
    ops = parse_edn(text, history="h")
    assert len(ops) == 3  # the nemesis is not a client
    rows = rendered(check_histories({"h": ops}, "f", VerifyOptions()))
    assert [(r.checker, r.model, r.verdict) for r in rows] == [("linearizability", "cas-register", "illegal")]
    assert "read -> 2" in (rows[0].counterexample or "")
    # had the cas succeeded, reading 2 is fine
    ok = parse_edn(text.replace(":type :fail, :f :cas", ":type :ok, :f :cas"), history="h")
    assert [r.verdict for r in check_histories({"h": ok}, "f", VerifyOptions())] == ["ok"]


def test_knossos_files_without_time_use_the_order() -> None:
    text = "{:process 0, :type :invoke, :f :write, :value 3}\n{:process 0, :type :ok, :f :write, :value 3}\n"
    (op,) = parse_edn(text, history="k")
    assert (op.invoked_at, op.completed_at, op.args) == (0, 1, 3)


SET = """\
{:type :invoke, :f :add, :value 1, :time 10, :process 0}
{:type :ok, :f :add, :value 1, :time 20, :process 0}
{:type :invoke, :f :add, :value 2, :time 21, :process 1}
{:type :info, :f :add, :value 2, :time 30, :process 1}
{:type :invoke, :f :add, :value 3, :time 31, :process 0}
{:type :ok, :f :add, :value 3, :time 40, :process 0}
{:type :invoke, :f :read, :value nil, :time 50, :process 0}
{:type :ok, :f :read, :value #{1 2 3}, :time 60, :process 0}
"""


def _anomalies(ops: list[Operation]) -> dict[str, list[dict[str, object]]]:
    found: dict[str, list[dict[str, object]]] = {}
    for row in check_histories({"h": ops}, "f", VerifyOptions()):
        if row.checker in ("transactional", "delivery"):  # each anomaly is in the row of its group
            for anomaly in json.loads(row.detail)["anomalies"]:
                found.setdefault(anomaly["name"], []).append(anomaly)
    return found


def test_a_set_read_is_a_fresh_subscription_that_drains() -> None:
    ops = parse_edn(SET, history="h")
    assert _anomalies(ops) == {}
    receives = [o for o in ops if o.f == "receive"]
    assert [o.returned for o in receives] == [{"message": "1"}, {"message": "2"}, {"message": "3"}, None]
    assert len({o.process for o in receives}) == 4 and len({o.object for o in receives}) == 1
    # Jepsen's "lost" (an acknowledged add missing from the final read) and "unexpected"
    bad = parse_edn(SET.replace("#{1 2 3}", "#{1 2 9}"), history="h")
    found = _anomalies(bad)
    assert set(found) == {"lost-message", "garbage-read"}
    assert "'3'" in str(found["lost-message"][0]["explanation"]) and "'9'" in str(
        found["garbage-read"][0]["explanation"]
    )
    # an add whose outcome is unknown may be missing (Jepsen's "recovered" when present)
    assert _anomalies(parse_edn(SET.replace("#{1 2 3}", "#{1 3}"), history="h")) == {}


QUEUE = """\
{:type :invoke, :f :enqueue, :value :a, :time 10, :process 0}
{:type :ok, :f :enqueue, :value :a, :time 20, :process 0}
{:type :invoke, :f :enqueue, :value :b, :time 21, :process 0}
{:type :ok, :f :enqueue, :value :b, :time 30, :process 0}
{:type :invoke, :f :dequeue, :value nil, :time 31, :process 1}
{:type :ok, :f :dequeue, :value :a, :time 40, :process 1}
{:type :invoke, :f :drain, :value nil, :time 50, :process 1}
{:type :ok, :f :drain, :value [:b], :time 60, :process 1}
"""


def test_a_queue_maps_to_sends_and_receives() -> None:
    assert _anomalies(parse_edn(QUEUE, history="h")) == {}
    lost = _anomalies(parse_edn(QUEUE.replace("[:b]", "[]"), history="h"))
    assert set(lost) == {"lost-message"}
    # a dequeue of unknown outcome may have taken it
    blind = QUEUE.replace("[:b]", "[]").replace(":type :ok, :f :dequeue", ":type :info, :f :dequeue")
    blind = blind.replace("{:type :invoke, :f :drain, :value nil, :time 50, :process 1}", "")
    blind = blind.replace("{:type :ok, :f :drain, :value [], :time 60, :process 1}", "")
    assert _anomalies(parse_edn(blind, history="h")) == {}


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("{:type :invoke, :f :read, :value nil, :process 0}\n{:type :ok", 2, "truncated"),
        ("{:type :invoke, :f :read, :value nil, :process 0}\n{:type :ok :f}\n", 2, "not EDN"),
        ("{:type :invoke, :f :read :process 0}\n\n#foo.Bar{:type :ok}\n", 3, "unknown tag #foo.Bar"),
        ("{:type :invoke, :f :read, :value #weird 1, :process 0}\n", 1, "unknown tag"),
        ("{:type :started, :f :read, :process 0}\n", 1, ":type must be"),
        ("{:f :read, :process 0}\n", 1, ":type must be :invoke, :ok, :fail or :info, got nothing"),
        ('{:type :invoke, :f :read, :process "p0"}\n', 1, ":process must be"),
        ("{:type :invoke, :f :read, :process 0, :time 1.5}\n", 1, ":time must be an integer"),
        ("{:type :invoke, :f 7, :process 0}\n", 1, ":f must be a keyword"),
        ("[1 2 3]\n", 1, "an operation is a map"),
        ("{:type :invoke, :f :read, :process 0}\n}\n", 2, "unbalanced"),
        ("[{:type :invoke, :f :read, :process 0}]\n{:type :ok}\n", 2, "text after the vector"),
        ("[{:type :invoke, :f :read, :process 0}\n", 2, "truncated"),
        ('{:type :invoke, :f :read, :value "abc, :process 0}\n', 1, "never closes"),
        # Elle's list-append is not Kafka's :txn (history_io.kafka reads that one)
        ("{:type :invoke, :f :txn, :value [[:append 1 2]], :time 1, :process 0}\n", 1, 'micro-operation ["append'),
        (
            "{:type :invoke, :f :add, :value 1, :time 1, :process 0}\n"
            "{:type :invoke, :f :enqueue, :value 2, :time 2, :process 1}\n",
            2,
            "mixes workloads",
        ),
        (
            "{:type :invoke, :f :write, :value 1, :time 1, :process 0}\n"
            "{:type :invoke, :f :write, :value 2, :time 2, :process 0}\n",
            2,
            "still open",
        ),
        (
            "{:type :invoke, :f :add, :value 1, :time 1, :process 0}\n"
            "{:type :ok, :f :add, :value 1, :time 2, :process 0}\n"
            "{:type :invoke, :f :add, :value 1, :time 3, :process 0}\n"
            "{:type :ok, :f :add, :value 1, :time 4, :process 0}\n",
            3,
            "added twice",
        ),
        (
            "{:type :invoke, :f :write, :value 1, :time 1, :process 0}\n{:type :ok, :f :write, :value 1, :process 0}\n",
            2,
            "no :time",
        ),
    ],
)
def test_bad_input_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(BadHistory) as caught:
        parse_edn(text, history="h", where="h.edn")
    message = str(caught.value)
    assert f"line {line}:" in message and "h.edn" in message, message
    assert words in message, message


def test_limits_are_checked_before_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    deep = "{:type :invoke, :f :write, :process 0, :value " + "[" * 100 + "]" * 100 + "}\n"
    with pytest.raises(BadHistory, match="line 1: nested deeper than 64"):
        parse_edn(deep, history="h")
    monkeypatch.setattr(edn, "MAX_FORM_BYTES", 40)
    with pytest.raises(BadHistory, match="line 2: one form is longer than 40 bytes"):
        parse_edn("{:type :invoke, :f :read, :process 0}\n{:type :ok, :f :read, :value 1, :process 0}\n", history="h")
    monkeypatch.setattr(edn, "MAX_FORM_BYTES", 1 << 20)
    monkeypatch.setattr(edn, "MAX_OPS", 1)
    with pytest.raises(BadHistory, match="line 2: more than 1 operations"):
        parse_edn(
            "{:type :invoke, :f :write, :value 1, :time 1, :process 0}\n"
            "{:type :ok, :f :write, :value 1, :time 2, :process 0}\n",
            history="h",
        )


def test_a_file_cut_anywhere_is_a_prefix_or_a_named_error() -> None:
    """Truncation at every byte: a history of the forms before the cut, or a BadHistory; never
    another exception, never an operation that was not in the file."""
    text = write_edn(random_register_history(5, ops=6, clients=2, history="t"), records=True)
    for cut in range(len(text) + 1):
        try:
            ops = parse_edn(text[:cut], history="t")
        except BadHistory as exc:
            assert "line" in str(exc) or "t:" in str(exc), str(exc)
            continue
        whole = len(text[:cut].splitlines())
        assert len(ops) <= whole


def test_files_and_the_command(tmp_path: Path) -> None:
    good = tmp_path / "in" / "etcd" / "20260101T000000" / "history.edn"
    good.parent.mkdir(parents=True)
    good.write_text(write_edn(random_register_history(1, ops=30, clients=3, history="x")))
    assert history_id(good) == "etcd/20260101T000000"
    assert list(read_edn(good)) == ["etcd/20260101T000000"]
    out = tmp_path / "out"
    assert main(["verify", str(tmp_path / "in"), "--format", "edn", "--local", "--no-progress", "--out", str(out)]) == 0
    (tmp_path / "in" / "bad.edn").write_bytes(b"{:type :invoke, :f :read, :process 0}\n{\xff\xfe")
    assert main(["verify", str(tmp_path / "in"), "--format", "edn", "--local", "--no-progress", "--out", str(out)]) == 2
    (tmp_path / "in" / "bad.edn").write_text(SET.replace("#{1 2 3}", "#{1 2}"))
    again = ["--out", str(out), "--overwrite"]  # the verdicts of the first run are replaced, never silently
    assert main(["verify", str(tmp_path / "in"), "--format", "edn", "--local", "--no-progress", *again]) == 1


def test_not_utf8_and_missing_files() -> None:
    folder = Path(tempfile.mkdtemp(prefix="edn-"))
    (folder / "x.edn").write_bytes(b"{:type :invoke}\n\xc3\x28")
    with pytest.raises(BadHistory, match=r"line 2: not UTF-8 text \(byte 16"):
        read_edn(folder / "x.edn")
    with pytest.raises(BadHistory, match="cannot read"):
        read_edn(folder / "absent.edn")
