"""Jepsen's Kafka-workload taxonomy (``invariants.queue``) on small histories written for each
anomaly from its meaning: each is planted and found, with the rows that prove it, failing the history
or only informing as Jepsen's checker decides, and a near miss next to it is not flagged."""

from __future__ import annotations

import re

import pytest

from benchmarks.kafka_scale import kafka_history
from history_io.edn import parse_edn
from invariants.queue import QUEUE_ANOMALIES, check_kafka
from invariants.queue import cycles as cyclic
from invariants.queue.kafka import realtime_lag
from invariants.queue.model import Assign, Findings, QueueHistory
from invariants.queue.taxonomy import CYCLES, KAFKA_CHECKS, PULSAR_CHECKS, QUEUE_RULES
from invariants.transactional import ANOMALIES, TxnResult, check_transactional
from spec.history import OpType
from spec.rules import RULES_DIR, parse_rules


def op(process: int, f: str, invoked: str, kind: str, done: str | None, at: int, took: int = 1, extra: str = "") -> str:
    """One Jepsen operation: its invocation at ``at`` and, unless ``done`` is None, its completion."""
    lines = [f"{{:type :invoke, :f :{f}, :value {invoked}, :time {at}, :process {process}}}"]
    if done is not None:
        lines.append(f"{{:type :{kind}, :f :{f}, :value {done}, :time {at + took}, :process {process}{extra}}}")
    return "\n".join(lines)


def check(*ops: str, ww_deps: bool = False) -> TxnResult:
    return check_transactional(parse_edn("\n".join(ops), history="h"), ww_deps=ww_deps)


def names(result: TxnResult) -> set[str]:
    return {a.name for a in [*result.anomalies, *result.informational]}


def send(process: int, at: int, *pairs: tuple[str, int | None, str], kind: str = "ok") -> str:
    """A :send of (key, offset, value) micro-operations."""
    invoked = "[" + " ".join(f"[:send {k} {v}]" for k, _, v in pairs) + "]"
    done = "[" + " ".join(f"[:send {k} [{'nil' if o is None else o} {v}]]" for k, o, v in pairs) + "]"
    return op(process, "send", invoked, kind, done, at)


def poll(process: int, at: int, polled: str, kind: str = "ok", f: str = "poll", extra: str = "") -> str:
    return op(process, f, "[[:poll]]", kind, f"[[:poll {polled}]]", at, extra=extra)


def assign(process: int, at: int, keys: str, f: str = "assign") -> str:
    return op(process, f, keys, "ok", keys, at)


# Three messages at offsets 0..2 of key :x, sent and committed
ABC = send(9, 0, (":x", 0, ":a"), (":x", 1, ":b"), (":x", 2, ":c"))


def test_a_clean_history_passes_and_every_check_had_something_to_judge() -> None:
    result = check(ABC, assign(0, 2, "[:x]"), poll(0, 4, "{:x [[0 :a] [1 :b]]}"), poll(0, 6, "{:x [[2 :c]]}"))
    assert result.ok and result.counts == {}
    applies = {s.check: s.applies for s in result.statements}
    assert set(applies) == set(KAFKA_CHECKS) | set(CYCLES)
    assert applies["poll-skip"] and applies["lost-write"] and applies["unseen"]


def test_g1a_a_failed_send_polled_by_an_ok_poll() -> None:
    failed = send(1, 0, (":x", None, 2), (":y", None, 3), kind="fail")
    result = check(failed, poll(2, 3, "{:x [[0 2]]}"))
    (found,) = [a for a in result.anomalies if a.name == "G1a"]
    assert not result.ok and not found.informational
    assert "failed" in found.explanation and len(found.ops) == 4  # the send, its end, the read, the poll's end
    assert "G1a" not in names(check(send(1, 0, (":x", 0, 2)), poll(2, 3, "{:x [[0 2]]}")))
    # a failed poll may return anything it likes about a failed send: only an ok reader is judged
    assert "G1a" not in names(check(failed, poll(2, 3, "{:x [[0 2]]}", kind="fail")))


def test_precommitted_read_a_transaction_polls_its_own_send() -> None:
    own = op(0, "txn", "[[:send :x :a] [:poll]]", "ok", "[[:send :x [0 :a]] [:poll {:x [[0 :a]]}]]", 0)
    assert "precommitted-read" in check(own).counts
    other = op(0, "txn", "[[:send :x :b] [:poll]]", "ok", "[[:send :x [1 :b]] [:poll {:x [[0 :a]]}]]", 2)
    assert "precommitted-read" not in names(check(send(1, 0, (":x", 0, ":a")), other))


def test_lost_write_proved_by_a_higher_offset_read() -> None:
    # a at 0 and b at 1 committed; a poll of c at 2 shows the log held 0 and 1 too, nobody read them
    c = send(2, 4, (":x", None, ":c"), kind="info")
    history = [send(0, 0, (":x", 0, ":a")), send(0, 2, (":x", 1, ":b"), (":x", 3, ":d")), c]
    result = check(*history, poll(3, 8, "{:x [[2 :c]]}"))
    lost = [a for a in result.anomalies if a.name == "lost-write"]
    assert len(lost) == 2 and result.counts["lost-write"] == 2
    assert all("committed, yet no ok poll" in a.explanation for a in lost)
    # reading everything up to c clears it; d lies past the highest read, so nothing is concluded about it
    assert "lost-write" not in check(*history, poll(3, 8, "{:x [[0 :a] [1 :b] [2 :c]]}")).counts


def test_lost_write_of_an_info_send_needs_proof_it_committed() -> None:
    ab = send(0, 0, (":x", None, ":a"), (":y", 0, ":b"), kind="info")
    c = send(1, 2, (":y", None, ":c"), kind="info")
    later = poll(3, 8, "{:y [[1 :c]]}")
    assert "lost-write" not in check(ab, c, later).counts  # ab may never have committed
    # a poll of a proves ab committed, so b (before c) was lost
    assert check(ab, c, poll(2, 6, "{:x [[0 :a]]}"), later).counts.get("lost-write") == 1


def test_poll_skip_between_a_processs_polls_and_what_resets_it() -> None:
    first, second = poll(0, 4, "{:x [[0 :a]]}"), poll(0, 8, "{:x [[2 :c]]}")
    everything = poll(1, 10, "{:x [[0 :a] [1 :b] [2 :c]]}")  # so that b is neither lost nor unseen
    result = check(ABC, assign(0, 2, "[:x]"), first, second, everything)
    (skip,) = result.anomalies
    assert skip.name == "poll-skip" and not result.ok and 'skipping "b"' in skip.explanation
    # an assign that drops the key forgets where the process was
    assert check(ABC, assign(0, 2, "[:x]"), first, assign(0, 6, "[:y]"), second, everything).ok
    # one that keeps it does not
    assert "poll-skip" in check(ABC, assign(0, 2, "[:x]"), first, assign(0, 6, "[:x :y]"), second, everything).counts
    # once a process subscribed, a rebalance may move it: the skip is information
    subscribed = check(ABC, assign(0, 2, "[:x]", f="subscribe"), first, second, everything)
    assert subscribed.ok and subscribed.notes.get("poll-skip") == 1


def test_an_aborted_transaction_rewinds_its_consumer() -> None:
    start = [ABC, assign(0, 1, "[:x]"), poll(0, 2, "{:x [[0 :a]]}", f="txn")]
    rewound = [poll(0, 4, "{:x [[1 :b] [2 :c]]}", kind="fail", f="txn"), poll(0, 6, "{:x [[1 :b] [2 :c]]}", f="txn")]
    assert check(*start, *rewound).ok
    # after the abort the consumer must start again at b: beginning past it is a skip, even in a failed poll
    kept_going = [poll(0, 4, "{:x [[1 :b]]}", kind="fail", f="txn"), poll(0, 6, "{:x [[2 :c]]}", kind="fail", f="txn")]
    assert check(*start, *kept_going).counts.get("poll-skip") == 1


def test_nonmonotonic_poll_begins_at_or_before_where_it_left_off() -> None:
    result = check(ABC, poll(0, 4, "{:x [[0 :a] [1 :b]]}"), poll(0, 6, "{:x [[1 :b] [2 :c]]}"))
    assert result.counts == {"nonmonotonic-poll": 1}
    assert "nonmonotonic-poll" not in check(ABC, poll(0, 4, "{:x [[0 :a] [1 :b]]}"), poll(1, 6, "{:x [[1 :b]]}")).counts


def test_nonmonotonic_send_a_processs_later_send_lands_earlier() -> None:
    later = send(0, 0, (":x", 3, ":c"), (":x", 4, ":d"))
    earlier = send(0, 4, (":x", 1, ":a"), (":x", 2, ":b"))
    assert check(later, earlier, poll(1, 8, "{:x [[1 :a] [2 :b] [3 :c] [4 :d]]}")).counts == {"nonmonotonic-send": 1}
    assert "nonmonotonic-send" not in check(earlier, later).counts


def test_int_poll_skip_and_rebalances() -> None:
    skipping = poll(0, 4, "{:x [[0 :a] [2 :c]]}")
    assert check(ABC, skipping, poll(1, 6, "{:x [[1 :b]]}")).counts == {"int-poll-skip": 1}
    # two polls in one operation are one read of the key
    two = op(0, "poll", "[[:poll] [:poll]]", "ok", "[[:poll {:x [[0 :a]]}] [:poll {:x [[2 :c]]}]]", 4)
    assert check(ABC, two, poll(1, 6, "{:x [[1 :b]]}")).counts == {"int-poll-skip": 1}
    moved = poll(0, 4, "{:x [[0 :a] [2 :c]]}", extra=", :rebalance-log [{:keys [:x]}]")
    assert check(ABC, moved, poll(1, 6, "{:x [[1 :b]]}")).ok


def test_int_nonmonotonic_poll() -> None:
    result = check(ABC, poll(0, 4, "{:x [[1 :b] [0 :a]]}"), poll(1, 6, "{:x [[2 :c]]}"))
    assert result.counts == {"int-nonmonotonic-poll": 1}


def test_int_send_skip_is_information_only() -> None:
    ac = send(0, 0, (":x", 0, ":a"), (":x", 2, ":c"))
    result = check(ac, send(1, 1, (":x", 1, ":b")), poll(2, 6, "{:x [[0 :a] [1 :b] [2 :c]]}"))
    assert result.ok and result.notes == {"int-send-skip": 1} and not result.anomalies
    (found,) = result.informational
    assert found.informational and "[informational]" in str(found) and found.to_json()["informational"]


def test_int_nonmonotonic_send() -> None:
    result = check(send(0, 0, (":x", 3, ":c"), (":x", 1, ":a")), poll(1, 4, "{:x [[1 :a] [3 :c]]}"))
    assert result.counts == {"int-nonmonotonic-send": 1}


def test_duplicate_one_value_at_two_offsets() -> None:
    result = check(
        send(0, 0, (":x", 1, ":a")), send(1, 2, (":x", None, ":b"), kind="info"), poll(2, 4, "{:x [[2 :b] [3 :a]]}")
    )
    (dup,) = [a for a in result.anomalies if a.name == "duplicate"]
    assert "2 offsets" in dup.explanation and set(result.counts) == {"duplicate"}


def test_inconsistent_offsets_and_info_sends_that_need_proof() -> None:
    info = send(0, 0, (":x", 0, 1), (":y", None, 1), kind="info")
    other = send(1, 2, (":x", 0, 2))
    assert "inconsistent-offsets" not in check(info, other, poll(2, 4, "{:x [[0 2]]}")).counts
    # a poll of the info send's y proves it committed, so offset 0 of x holds two values
    assert "inconsistent-offsets" in check(info, other, poll(2, 4, "{:x [[0 2]]}"), poll(3, 6, "{:y [[0 1]]}")).counts


def test_unseen_fails_the_history() -> None:
    result = check(send(0, 0, (":x", 0, ":a"), (":x", 1, ":b")), poll(1, 4, "{:x [[0 :a]]}"))
    (found,) = [a for a in result.anomalies if a.name == "unseen"]
    assert result.counts == {"unseen": 1} and '"b"' in found.explanation


def test_realtime_lag_is_measured_and_informs() -> None:
    # the log held offset 0 from time 3 (the send completed); a poll invoked at 10 saw nothing
    history = [assign(0, 0, "[:x]"), send(1, 2, (":x", 0, ":a")), poll(0, 10, "{}"), poll(0, 20, "{:x [[0 :a]]}")]
    result = check(*history)
    assert result.ok and result.notes == {"realtime-lag": 1}
    assert "worst realtime lag 7" in result.informational[0].explanation


def test_g0_needs_ww_dependencies_and_only_informs() -> None:
    t1 = op(0, "send", "[[:send :x :a] [:send :y :a]]", "ok", "[[:send :x [0 :a]] [:send :y [1 :a]]]", 0, 5)
    t2 = op(1, "send", "[[:send :x :b] [:send :y :b]]", "ok", "[[:send :x [1 :b]] [:send :y [0 :b]]]", 1, 5)
    everything = poll(2, 10, "{:x [[0 :a] [1 :b]] :y [[0 :b] [1 :a]]}")
    without = check(t1, t2, everything)
    assert without.ok and "G0" not in without.notes
    # and the verdict says G0 had nothing to judge, rather than passing it
    (g0_statement,) = [s for s in without.statements if s.check == "G0"]
    assert not g0_statement.applies and "--ww-deps" in g0_statement.evidence
    with_ww = check(t1, t2, everything, ww_deps=True)
    (g0,) = [a for a in with_ww.informational if a.name == "G0"]
    assert with_ww.ok and g0.informational and len(g0.cycle) == 2


def test_g1c_from_write_read_edges_fails_without_ww_dependencies() -> None:
    t1 = op(0, "txn", "[[:send :x :a] [:poll]]", "ok", "[[:send :x [0 :a]] [:poll {:y [[0 :b]]}]]", 0, 5)
    t2 = op(1, "txn", "[[:send :y :b] [:poll]]", "ok", "[[:send :y [0 :b]] [:poll {:x [[0 :a]]}]]", 1, 5)
    result = check(t1, t2)
    (g1c,) = [a for a in result.anomalies if a.name == "G1c"]
    assert not result.ok and len(g1c.cycle) == 2 and "polled" in g1c.explanation
    assert check(t1, t2, ww_deps=True).notes.get("G1c") == 1  # with ww dependencies, Jepsen allows G1c


def test_g1c_through_a_write_write_edge() -> None:
    t1 = op(0, "txn", "[[:send :x :a] [:send :y :c]]", "ok", "[[:send :x [0 :a]] [:send :y [2 :c]]]", 0, 5)
    t2 = op(1, "txn", "[[:poll] [:send :y :b]]", "ok", "[[:poll {:x [[0 :a]]}] [:send :y [1 :b]]]", 1, 5)
    reader = poll(2, 10, "{:y [[1 :b] [2 :c]]}")
    assert not {"G0", "G1c"} & names(check(t1, t2, reader))  # no ww edge without ww dependencies
    found = check(t1, t2, reader, ww_deps=True)
    assert found.notes.get("G1c") == 1 and any(
        "just before" in edge[2] for a in found.informational for edge in a.cycle
    )


def test_g1c_realtime_a_poll_of_a_message_sent_after_it_completed() -> None:
    reader = poll(0, 0, "{:x [[0 :a]]}")  # completes at 1
    writer = send(1, 10, (":x", 0, ":a"))  # invoked at 10
    result = check(reader, writer)
    (found,) = [a for a in result.anomalies if a.name == "G1c-realtime"]
    assert not result.ok and any("completed at 1 before" in edge[2] for edge in found.cycle)
    assert "G1c-realtime" not in check(send(1, 0, (":x", 0, ":a")), poll(0, 10, "{:x [[0 :a]]}")).counts


def test_g0_realtime_informs_with_ww_dependencies() -> None:
    first = send(0, 0, (":x", 1, ":a"))  # completes at 1, lands at offset 1
    second = send(1, 10, (":x", 0, ":b"))  # invoked later, lands before it
    result = check(first, second, poll(2, 20, "{:x [[0 :b] [1 :a]]}"), ww_deps=True)
    assert result.ok and result.notes.get("G0-realtime") == 1


def test_g1b_an_intermediate_read_informs() -> None:
    ab = send(0, 0, (":x", 0, ":a"), (":x", 1, ":b"))
    result = check(ab, poll(1, 4, "{:x [[0 :a]]}"), poll(1, 6, "{:x [[1 :b]]}"))
    assert result.ok and result.notes.get("G1b") == 1


def test_garbage_read_a_value_nobody_sent() -> None:
    assert check(poll(0, 0, "{:x [[0 :ghost]]}")).counts == {"garbage-read": 1}


@pytest.mark.parametrize("name", sorted(QUEUE_ANOMALIES))
def test_each_anomaly_is_registered_documented_and_tested_here(name: str) -> None:
    import inspect
    import sys

    assert ANOMALIES[name] == QUEUE_ANOMALIES[name] and QUEUE_RULES[name][1]
    # its rule is stated where it is checked: its function's docstring (the cycles: the module's)
    docs = [check.__doc__ or "" for table in (KAFKA_CHECKS, PULSAR_CHECKS) for n, check in table.items() if n == name]
    docs += [cyclic.__doc__ or ""] if name in CYCLES else []
    assert docs and all(f"``{name}``" in doc or f"**{name}**" in doc or name in doc for doc in docs), name
    assert f'"{name}"' in inspect.getsource(sys.modules[__name__]), name
    known = {r.id for page in RULES_DIR.glob("*.md") for r in parse_rules(page.read_text(), page.stem)}
    assert set(QUEUE_RULES[name][0]) <= known


def test_the_cap_keeps_counting() -> None:
    sends = [send(0, 4 * i, (":x", i, i)) for i in range(30)]
    result = check_kafka(parse_edn("\n".join(sends), history="h"), cap=5)
    assert result.findings.counts == {"unseen": 1}
    ghosts = [poll(1, 200 + 4 * i, f"{{:x [[{100 + i} {1000 + i}]]}}") for i in range(30)]
    capped = check_kafka(parse_edn("\n".join(ghosts), history="h"), cap=5)
    assert (
        capped.findings.counts["garbage-read"] == 30
        and sum(f.name == "garbage-read" for f in capped.findings.found) == 5
    )


def test_every_finding_cites_rows_of_the_history() -> None:
    text = "\n".join([ABC, poll(0, 4, "{:x [[0 :a]]}"), poll(0, 8, "{:x [[2 :c]]}"), poll(1, 9, "{:x [[0 :ghost]]}")])
    ops = parse_edn(text, history="h")
    result = check_transactional(ops)
    assert result.anomalies and all(set(a.ops) <= {o.index for o in ops} and a.ops for a in result.anomalies)
    assert all(re.search(r"\w", a.explanation) for a in result.anomalies)


def _naive_worst_lag(q: QueueHistory) -> int:
    """Jepsen's realtime lag by its definition, every poll and every key, no shortcut."""
    shown = [
        (key, offset, unit.completed_at)
        for unit in q.units
        if unit.type in (OpType.OK, OpType.INFO) and unit.completed_at is not None
        for key, offset in {
            item.key: max(i.offset for i in [*unit.reads, *unit.writes] if i.key == item.key and i.offset is not None)
            for item in [*unit.reads, *unit.writes]
            if item.offset is not None
        }.items()
    ]
    worst = 0
    for timeline in q.timelines.values():
        seen: dict[str, int | None] = {}
        for entry in timeline:
            if isinstance(entry, Assign):
                if entry.type is OpType.OK:
                    seen = {k: seen.get(k) for k in entry.keys} if entry.mode == "assign" else {}
                continue
            if entry.type is not OpType.OK or entry.f == "send":
                continue
            for item in [*entry.reads, *entry.writes]:
                if item.offset is not None and (seen.get(item.key) is None or item.offset > seen[item.key]):  # type: ignore[operator]
                    seen[item.key] = item.offset
            for key, upto in seen.items():
                times = [t for k, o, t in shown if k == key and (upto is None or o > upto)]
                if times:
                    worst = max(worst, entry.invoked_at - min(times))
    return worst


@pytest.mark.parametrize("seed", range(6))
def test_the_worst_realtime_lag_is_jepsens(seed: int) -> None:
    text = kafka_history(400, seed=seed)
    q = QueueHistory.build(parse_edn(text, history="h"))
    out = Findings(5)
    realtime_lag(q, out)
    expected = _naive_worst_lag(q)
    found = [f for f in out.found if f.name == "realtime-lag"]
    assert (found[0].explanation.split()[3] if found else "0") == str(expected)


def test_anomalies_planted_in_a_large_history_are_found() -> None:
    clean = kafka_history(3000, seed=3)
    assert check_transactional(parse_edn(clean, history="h")).ok
    last = max(int(line.split(":time ")[1].split(",")[0]) for line in clean.splitlines())
    cycle = [
        op(91, "txn", "[[:send 90 :a] [:poll]]", "ok", "[[:send 90 [0 :a]] [:poll {91 [[0 :b]]}]]", last + 10, 5),
        op(92, "txn", "[[:send 91 :b] [:poll]]", "ok", "[[:send 91 [0 :b]] [:poll {90 [[0 :a]]}]]", last + 11, 5),
    ]
    found = check_transactional(parse_edn(clean + "\n".join(cycle), history="h"))
    assert set(found.counts) == {"G1c"}
    aborted = [send(93, last + 20, (92, 0, ":c"), kind="fail"), poll(94, last + 30, "{92 [[0 :c]]}")]
    found = check_transactional(parse_edn(clean + "\n".join(aborted), history="h"))
    assert set(found.counts) == {"G1a"}
