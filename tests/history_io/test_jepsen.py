"""The checker reproduces the published verdicts of the Jepsen etcd histories (Porcupine's test data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from history_io.jepsen import JEPSEN_OBJECT, parse_jepsen_log, read_jepsen_log, read_verdicts
from invariants.linearizability import Verdict, check_history
from invariants.models import CasRegister
from spec.history import BadHistory, OpType

# The shared data sit beside the repository (../shared); TXNMODEL_JEPSEN_DATA points elsewhere (a
# worktree one level deeper, say).
DATA = Path(
    os.environ.get(
        "TXNMODEL_JEPSEN_DATA",
        Path(__file__).resolve().parents[3] / "shared" / "data" / "porcupine" / "jepsen-etcd",
    )
)
needs_data = pytest.mark.skipif(not (DATA / "VERDICTS.tsv").exists(), reason=f"no Jepsen data at {DATA}")
# The budget keeps a regression from hanging the suite; the hardest history (etcd_002) needs about
# 1.4 million search steps.  An unknown verdict fails the test: every verdict must be reproduced.
BUDGET = 5_000_000


def _verdicts() -> dict[str, bool]:
    return read_verdicts(DATA / "VERDICTS.tsv") if (DATA / "VERDICTS.tsv").exists() else {}


@needs_data
@pytest.mark.parametrize("name", sorted(_verdicts()))
def test_published_verdict(name: str) -> None:
    linearizable = _verdicts()[name]
    result = check_history(CasRegister(), read_jepsen_log(DATA / name), step_budget=BUDGET)
    assert result.verdict is (Verdict.OK if linearizable else Verdict.ILLEGAL), result.objects[0].reason


@needs_data
def test_every_log_parses_and_the_one_without_a_verdict_is_empty() -> None:
    logs = sorted(DATA.glob("etcd_*.log"))
    assert len(logs) == 103 and len(_verdicts()) == 102
    unlisted = [log for log in logs if log.name not in _verdicts()]
    assert [log.name for log in unlisted] == ["etcd_095.log"] and read_jepsen_log(unlisted[0]) == []


LOG = """\
INFO  jepsen.core - Setting up
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 1\t:invoke\t:cas\t[1 4]
INFO  jepsen.util - 0\t:ok\t:read\tnil
INFO  jepsen.util - 1\t:fail\t:cas\t[1 4]
INFO  jepsen.util - 2   :invoke :write  3
INFO  jepsen.util - 2   :info   :write  :timed-out
INFO  jepsen.util - 0\t:invoke\t:read\tnil
INFO  jepsen.util - 0\t:fail\t:read\t:timed-out
INFO  jepsen.util - 3\t:invoke\t:write\t1
"""


def test_parse_a_small_log() -> None:
    ops = parse_jepsen_log(LOG, history="small")
    assert [(o.process, o.type, o.f, o.args, o.returned, o.error, o.invoked_at, o.completed_at) for o in ops] == [
        (0, OpType.OK, "read", None, None, None, 1, 3),
        (1, OpType.FAIL, "cas", [1, 4], None, None, 2, 4),
        (2, OpType.INFO, "write", 3, None, "timed-out", 5, 6),
        (0, OpType.FAIL, "read", None, None, "timed-out", 7, 8),
        (3, OpType.INVOKE, "write", 1, None, None, 9, None),
    ]
    assert {o.object for o in ops} == {JEPSEN_OBJECT}
    assert check_history(CasRegister(), ops).verdict is Verdict.OK


def test_a_mangled_operation_line_is_bad_input() -> None:
    with pytest.raises(BadHistory, match="row 2") as info:
        parse_jepsen_log(LOG.replace("[1 4]", "[1 four]", 1), history="bad", where="bad.log")
    assert info.value.column == "value"
    with pytest.raises(BadHistory, match="does not parse"):
        parse_jepsen_log("INFO  jepsen.util - 0\t:invoke\t:frobnicate\t1\n", history="bad")


# --- Porcupine's key-value logs ------------------------------------------------------------------

KV_LOG = """{:process 0, :type :invoke, :f :put, :key "a", :value "x"}
{:process 1, :type :invoke, :f :get, :key "a", :value nil}
{:process 0, :type :ok, :f :put, :key "a", :value "x"}
{:process 1, :type :ok, :f :get, :key "a", :value "x"}
{:process 2, :type :invoke, :f :append, :key "b", :value "y"}
{:process 2, :type :ok, :f :append, :key "b", :value "y"}
{:process 1, :type :invoke, :f :get, :key "b", :value nil}
{:process 1, :type :ok, :f :get, :key "b", :value "yy"}
"""


def test_kv_logs_parse_into_one_object_per_key() -> None:
    from history_io.jepsen import parse_kv_log
    from invariants.models import KeyValue

    ops = parse_kv_log(KV_LOG, history="kv")
    assert [(o.f, o.object, o.args, o.returned, o.invoked_at, o.completed_at) for o in ops] == [
        ("put", "key:a", "x", None, 0, 2),
        ("get", "key:a", None, "x", 1, 3),
        ("append", "key:b", "y", None, 4, 5),
        ("get", "key:b", None, "yy", 6, 7),
    ]
    result = check_history(KeyValue(), ops)
    assert result.verdict is Verdict.ILLEGAL and result.failing() is not None
    assert result.failing().object == "key:b"  # type: ignore[union-attr]
    with pytest.raises(BadHistory) as info:
        parse_kv_log('{:process 0, :type :invoke, :f :cas, :key "a", :value "x"}\n', history="kv")
    assert info.value.row == 0


KV_DATA = os.environ.get("TXNMODEL_PORCUPINE_KV")


@pytest.mark.skipif(not KV_DATA, reason="TXNMODEL_PORCUPINE_KV names no folder of Porcupine's kv test data")
def test_porcupine_kv_verdicts() -> None:
    """Porcupine's own kv test data (c01, c10, c50; -ok linearizable, -bad not), when pointed at."""
    from history_io.jepsen import read_kv_log
    from invariants.models import KeyValue

    files = sorted(Path(str(KV_DATA)).glob("c*-*.txt"))
    assert files
    for path in files:
        result = check_history(KeyValue(), read_kv_log(path), step_budget=BUDGET)
        assert result.verdict is (Verdict.OK if path.stem.endswith("-ok") else Verdict.ILLEGAL), path.name
