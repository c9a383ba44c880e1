"""Jepsen's Kafka workload read from ``history.edn`` (``history_io.kafka``): the mapping onto the
contract, the file layouts, the nemesis and the operations that leave no row, every kind of bad
input named by its line, the fast path agreeing with ``edn-format``, and ``txnmodel verify`` on it."""

from __future__ import annotations

import json
from pathlib import Path
from unittest.mock import patch

import pytest
from hypothesis import given
from hypothesis import strategies as st

from history_io import edn
from history_io.edn import parse_edn
from invariants.queue import is_kafka_history
from spec.history import BadHistory, OpType, validate_history
from txnmodel.cli import main

HISTORY = """\
{:type :invoke, :f :assign, :value [0 1], :time 0, :process 0, :index 0}
{:type :ok, :f :assign, :value [0 1], :time 5, :process 0, :index 1}
{:type :invoke, :f :txn, :value [[:send 0 7] [:send 1 8]], :time 6, :process 1, :index 2}
{:type :info, :f :start-partition, :value nil, :time 7, :process :nemesis, :index 3}
{:type :ok, :f :txn, :value [[:send 0 [3 7]] [:send 1 [0 8]]], :time 16, :process 1, :index 4}
{:type :invoke, :f :poll, :value [[:poll]], :time 20, :process 0, :index 5}
{:type :ok, :f :poll, :value [[:poll {0 [[3 7]], 1 [[0 8]]}]], :time 30, :process 0, :index 6}
{:type :invoke, :f :crash, :value nil, :time 31, :process 0, :index 7}
{:type :info, :f :crash, :value nil, :time 32, :process 0, :index 8}
{:type :invoke, :f :send, :value [[:send 0 9]], :time 40, :process 2, :index 9}
{:type :fail, :f :send, :value [[:send 0 9]], :time 41, :process 2, :index 10, :error :txn-aborted}
{:type :invoke, :f :debug-topic-partitions, :value [0], :time 42, :process 3, :index 11}
{:type :ok, :f :debug-topic-partitions, :value {}, :time 43, :process 3, :index 12}
{:type :invoke, :f :txn, :value [[:poll] [:send 1 10]], :time 50, :process 4, :index 13}
"""


def _rows(text: str = HISTORY) -> list:  # type: ignore[type-arg]
    return parse_edn(text, history="h", where="h.edn")


def test_the_mapping_onto_the_contract() -> None:
    ops = _rows()
    validate_history(ops)  # one operation open per process, nothing after info
    assert is_kafka_history(ops)
    shape = [(o.f, o.object, o.type, o.process) for o in ops]
    assert shape == [
        ("subscribe", "subscription:h#p0", OpType.OK, 0),
        ("send", "partition:h/0", OpType.OK, 1),
        ("send", "partition:h/1", OpType.OK, 1),
        ("commit", "coordinator:h", OpType.OK, 1),
        ("receive", "subscription:h/0#p0", OpType.OK, 0),
        ("receive", "subscription:h/1#p0", OpType.OK, 0),
        ("commit", "coordinator:h", OpType.OK, 0),
        ("send", "partition:h/0", OpType.OK, 2),
        ("commit", "coordinator:h", OpType.FAIL, 2),
        ("send", "partition:h/1", OpType.OK, 4),
        ("commit", "coordinator:h", OpType.INVOKE, 4),
    ]
    assert ops[0].args["keys"] == ["0", "1"] and ops[0].args["sub_type"] == "Exclusive"
    assert ops[1].args == {"message": "7", "txn": [0, 1], "key": "0"} and ops[1].returned == {"position": [0, 3]}
    assert ops[4].returned == {"messages": [{"message": "7", "position": [0, 3]}]}
    assert ops[3].args["jepsen"] == {"f": "txn", "index": 4, "line": 5}
    # a transaction spans its operation's interval; its rows split it in order
    assert (ops[1].invoked_at, ops[3].completed_at) == (6, 16) and ops[1].completed_at <= ops[2].invoked_at
    assert ops[8].error == "txn-aborted"  # a keyword by its name, as everywhere in history_io.edn
    assert ops[10].completed_at is None and ops[9].returned is None  # never completed: no offset


def test_one_op_per_line_vectors_and_records_read_the_same() -> None:
    lines = HISTORY.splitlines()
    assert _rows("[" + "\n".join(lines) + "]") == _rows()
    assert _rows("\n".join("#jepsen.history.Op" + line for line in lines)) == _rows()


def test_subscribe_reads_as_a_group_and_rebalances_are_kept() -> None:
    text = (
        "{:type :invoke, :f :subscribe, :value [0], :time 0, :process 0}\n"
        "{:type :ok, :f :subscribe, :value [0], :time 1, :process 0}\n"
        "{:type :invoke, :f :poll, :value [[:poll]], :time 2, :process 0}\n"
        "{:type :ok, :f :poll, :value [[:poll {0 []}]], :time 3, :process 0, :rebalance-log [{:keys [0 1]}]}\n"
    )
    sub, receive, commit = _rows(text)
    assert sub.args["mode"] == "subscribe" and sub.args["sub_type"] == "Failover"
    assert receive.object == "subscription:h/0#group" and receive.returned == {"messages": []}
    assert commit.args["rebalanced"] == ["0", "1"]


@pytest.mark.parametrize(
    "text, line, words",
    [
        ("{:type :invoke, :f :txn, :value [[:read 0]], :time 1, :process 0}\n", 1, "micro-operation"),
        (
            "{:type :invoke, :f :send, :value [[:send 0 1]], :time 1, :process 0}\n"
            "{:type :ok, :f :send, :value [[:send 0 [:x 1]]], :time 2, :process 0}\n",
            2,
            "an offset is an integer",
        ),
        (
            "{:type :invoke, :f :poll, :value [[:poll]], :time 1, :process 0}\n"
            "{:type :ok, :f :poll, :value [[:poll {0 [1 2]}]], :time 2, :process 0}\n",
            2,
            "returns [[offset value] ...]",
        ),
        ("{:type :ok, :f :poll, :value [[:poll {}]], :time 2, :process 0}\n", 1, "no open invocation"),
        (
            "{:type :invoke, :f :poll, :value [[:poll]], :time 1, :process 0}\n"
            "{:type :ok, :f :send, :value [], :time 2, :process 0}\n",
            2,
            "does not match",
        ),
        (
            "{:type :invoke, :f :crash, :time 1, :process 0}\n{:type :info, :f :crash, :time 2, :process 0}\n"
            "{:type :invoke, :f :poll, :value [[:poll]], :time 3, :process 0}\n",
            3,
            "after it got :info",
        ),
        (
            "{:type :invoke, :f :poll, :value [[:poll]], :time 1, :process 0}\n"
            "{:type :invoke, :f :read, :value nil, :time 2, :process 1}\n",
            2,
            "mixes workloads",
        ),
        (
            "{:type :invoke, :f :assign, :value 3, :time 1, :process 0}\n"
            "{:type :ok, :f :assign, :value 3, :time 2, :process 0}\n",
            2,
            "vector of keys",
        ),
        (
            "{:type :invoke, :f :poll, :value [[:poll]], :time 1, :process 0}\n"
            "{:type :ok, :f :poll, :value [[:poll {}]], :time 2, :process 0, :rebalance-log 7}\n",
            2,
            ":rebalance-log",
        ),
        (
            "{:type :invoke, :f :poll, :value [[:poll]], :time 5, :process 0}\n"
            "{:type :ok, :f :poll, :value [[:poll {}]], :time 2, :process 0}\n",
            2,
            "before its invocation",
        ),
        ("{:type :invoke, :f :poll, :value " + "[" * 70 + "]" * 70 + ", :process 0}\n", 1, "nested deeper"),
    ],
)
def test_bad_input_names_the_line(text: str, line: int, words: str) -> None:
    with pytest.raises(BadHistory) as info:
        _rows(text)
    assert f"line {line}:" in str(info.value) and words in str(info.value), str(info.value)


# Plain forms: what the fast path reads, and edn-format must read the same way.
_KEYWORD = st.from_regex(r":[a-z][a-z0-9?!*.:#-]{0,6}", fullmatch=True)
_SCALAR = st.one_of(
    st.integers(-(10**20), 10**20).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda x: repr(float(x))),
    st.sampled_from(["nil", "true", "false"]),
    _KEYWORD,
)
_FORM = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(lambda xs: "[" + " ".join(xs) + "]"),
        st.dictionaries(st.one_of(_KEYWORD, st.integers(0, 9).map(str)), inner, max_size=3).map(
            lambda d: "{" + ", ".join(f"{k} {v}" for k, v in d.items()) + "}"
        ),
    ),
    max_leaves=12,
)


@given(
    value=_FORM,
    kind=st.sampled_from(["invoke", "ok", "fail", "info"]),
    process=st.one_of(st.integers(0, 5).map(str), st.just(":nemesis")),
    extra=st.sampled_from(["", ", :index 3", ", :error :timeout", ", :rebalance-log [{:keys [1]}]", ", :time nil"]),
)
def test_the_fast_path_reads_plain_forms_as_edn_format_does(value: str, kind: str, process: str, extra: str) -> None:
    form = f"{{:type :{kind}, :f :poll, :value {value}, :process {process}{extra}}}"
    fast = edn._fast_op(form, 1)
    assert fast is not None, form
    with patch.object(edn, "_fast_op", lambda text, line: None):  # edn-format's grammar alone
        slow = edn._op(edn._Form(form, 1), "w")
    assert fast == slow


def test_the_fast_path_leaves_anything_else_to_edn_format() -> None:
    for form in [
        '{:type :ok, :f :poll, :value "x", :process 0}',
        "{:type :ok, :f :poll, :value #{1}, :process 0}",
        "{:type :ok, :f :poll, :value sym, :process 0}",
        "{:type :ok, :f :poll, :value NaN, :process 0}",
        "{:type :ok, :f :poll, :value 1N, :process 0}",
        "{:type :ok, :f :poll :f :send, :process 0}",
        "{:type :ok, :f :poll, :value :a/b, :process 0}",
    ]:
        assert edn._fast_op(form, 1) is None, form


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "kafka" / "20260101T000000" / "history.edn"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return path


def test_verify_judges_a_kafka_history(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    clean = (
        "{:type :invoke, :f :send, :value [[:send 0 1]], :time 0, :process 0}\n"
        "{:type :ok, :f :send, :value [[:send 0 [0 1]]], :time 1, :process 0}\n"
        "{:type :invoke, :f :poll, :value [[:poll]], :time 2, :process 1}\n"
        "{:type :ok, :f :poll, :value [[:poll {0 [[0 1]]}]], :time 3, :process 1}\n"
    )
    path = _write(tmp_path, clean)
    out = tmp_path / "verdicts"
    assert main(["verify", str(path), "--format", "edn", "--local", "--out", str(out), "--json", "--no-progress"]) == 0
    (result,) = json.loads(capsys.readouterr().out)["histories"]
    assert set(result["checkers"]) == {"transactional"}  # the Pulsar delivery oracle does not judge Kafka
    aborted = clean.replace(":type :ok, :f :send", ":type :fail, :f :send")
    # the same --out again: verify replaces its verdicts only when told to (issue 28)
    again = ["--format", "edn", "--local", "--out", str(out), "--overwrite"]
    assert main(["verify", str(_write(tmp_path / "b", aborted)), *again]) == 1
    assert "G1a" in capsys.readouterr().out
    broken = clean.replace("[[:send 0 [0 1]]]", "[[:send 0 [:zero 1]]]")
    assert main(["verify", str(_write(tmp_path / "c", broken)), *again]) == 2


def test_verify_ww_deps_makes_g1c_informational(tmp_path: Path) -> None:
    text = "\n".join(
        [
            "{:type :invoke, :f :txn, :value [[:send 0 1] [:poll]], :time 0, :process 0}",
            "{:type :invoke, :f :txn, :value [[:send 1 2] [:poll]], :time 1, :process 1}",
            "{:type :ok, :f :txn, :value [[:send 0 [0 1]] [:poll {1 [[0 2]]}]], :time 5, :process 0}",
            "{:type :ok, :f :txn, :value [[:send 1 [0 2]] [:poll {0 [[0 1]]}]], :time 5, :process 1}",
        ]
    )
    path = _write(tmp_path, text + "\n")
    out = str(tmp_path / "verdicts")
    assert main(["verify", str(path), "--format", "edn", "--local", "--out", out, "--no-progress"]) == 1
    again = ["--format", "edn", "--local", "--out", out, "--no-progress", "--overwrite", "--ww-deps"]
    assert main(["verify", str(path), *again]) == 0
