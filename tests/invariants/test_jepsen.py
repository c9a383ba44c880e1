"""The checker reproduces the published verdicts of the Jepsen etcd histories (Porcupine's test data)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from invariants.jepsen import JEPSEN_OBJECT, parse_jepsen_log, read_jepsen_log, read_verdicts
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
