"""The proof framework's budgets: Z3 resource counts, the same work for the same query every time."""

from __future__ import annotations

import z3

from proofs.framework import RLIMIT, Obligation, Outcome, Verdict, prove_machine, prove_valid


def _pigeonhole(holes: int) -> z3.BoolRef:
    """``holes + 1`` pigeons do not fit in ``holes`` holes: valid, and costly for a SAT solver."""
    pigeons = holes + 1
    at = [[z3.Bool(f"p{p}_h{h}") for h in range(holes)] for p in range(pigeons)]
    each_somewhere = z3.And(*[z3.Or(*row) for row in at])
    no_sharing = z3.And(
        *[
            z3.Not(z3.And(at[p][h], at[q][h]))
            for h in range(holes)
            for p in range(pigeons)
            for q in range(p + 1, pigeons)
        ]
    )
    return z3.Not(z3.And(each_somewhere, no_sharing))


def test_a_query_over_budget_is_unknown_and_says_how_much_it_used() -> None:
    outcome = prove_valid(_pigeonhole(9), rlimit=50_000)
    assert outcome.verdict is Verdict.UNKNOWN
    assert outcome.reason is not None
    assert outcome.reason.count("rlimit") == 3  # every seed tried, each with its share
    assert "of 30,000 rlimit" in outcome.reason and "of 10,000 rlimit" in outcome.reason


def test_the_same_query_does_the_same_work_whatever_ran_before() -> None:
    """A fresh context per query: terms created by earlier proofs do not change the search."""

    def used() -> int:
        rows = prove_machine("client", only="preserved")
        return sum(r.rlimit_total for r in rows)

    first = used()
    for n in range(3, 7):  # unrelated terms and solver work in the shared context
        prove_valid(_pigeonhole(n), rlimit=RLIMIT)
    assert used() == first > 0


def test_rows_report_budget_usage_and_margin() -> None:
    rows = prove_machine("coordinator")
    assert rows and all(r.verdict is Verdict.PROVED for r in rows)
    for row in rows:
        assert row.rlimit == RLIMIT and row.queries >= 1 and 0 < row.rlimit_used <= row.rlimit_total
        assert row.margin is not None and row.margin >= 10, (row.name, row.rlimit_used)
        assert row.to_json()["rlimit_used"] == row.rlimit_used


def test_a_counterexample_is_described_in_the_callers_context() -> None:
    x = z3.Int("x")
    outcome = prove_valid(x > 0, rlimit=RLIMIT, describe=lambda m: f"x = {m.eval(x)}", assumptions=[x > -3])
    assert outcome.verdict is Verdict.COUNTEREXAMPLE
    assert outcome.counterexample in {"x = -2", "x = -1", "x = 0"}


def test_an_obligation_is_checked_with_the_budget_it_is_given() -> None:
    seen: list[int] = []

    def check(rlimit: int) -> Outcome:
        seen.append(rlimit)
        return prove_valid(z3.BoolVal(True), rlimit=rlimit)

    ob = Obligation("trivial", (), "unbounded", check)
    assert ob.check(1234).verdict is Verdict.PROVED and seen == [1234]


_PROVE_IN_ORDER = """
import json, sys
from proofs.framework import prove_machine
rows = [row for machine in sys.argv[1:] for row in prove_machine(machine)]
print(json.dumps([[row.machine, row.name, row.rlimit_used, row.rlimit] for row in rows]))
"""


def test_a_machine_proved_after_another_keeps_every_margin() -> None:
    """The main job's workers prove machines in whatever order they are handed them: the
    coordinator then the batched log is one worker's order.  Each query keeps its margin (a tenth of
    the first seed's share) there too; the five sequence lemmas proved as one conjunction used the
    whole share after the coordinator's proofs and 0.3 % of it after the buffer's."""
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _PROVE_IN_ORDER, "coordinator", "batched_log"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = json.loads(done.stdout)
    assert {machine for machine, *_ in rows} == {"coordinator", "batched_log"}
    thin = [(machine, name, used) for machine, name, used, rlimit in rows if used * 10 > rlimit * 3 // 5]
    assert thin == []
