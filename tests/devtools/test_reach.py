"""Reach by rule id from the engine's machine-step records (devtools/reach.py)."""

from __future__ import annotations

from collections import Counter

from devtools.reach import all_rules, replay_reach, rule_map, rules_reached, traced
from engine.simulation.workloads import RunSpec, run


def test_rule_map_reads_the_docstrings() -> None:
    mapping = rule_map()
    assert mapping[("reference.buffer", "_handle_low_water_mark")] == ("TB-13",)
    assert "TC-25" in mapping[("reference.coordinator", "recover")]
    known = set(all_rules())
    assert {rule for ids in mapping.values() for rule in ids} <= known


def test_a_class_counts_when_one_of_its_methods_ran() -> None:
    mapping = {("m", "Box"): ("TB-1",), ("m", "Box.open"): ("TB-2",), ("m", "f"): ("TB-3",)}
    reached = rules_reached(Counter({("m", "Box.open"): 2, ("m", "g"): 1}), mapping)
    assert reached == {"TB-1": 2, "TB-2": 2}


def test_replaying_the_records_of_a_run_reaches_its_rules() -> None:
    result = run(RunSpec(workload="ctp", seed=3, ops=8))
    reached = rules_reached(replay_reach(result.operations))
    # a run that commits and aborts transactions drives NEW_TXN, the end phases and both markers
    assert {"TC-5", "TC-13", "TC-14", "TC-15", "TB-11", "TB-12", "PA-12"} <= set(reached)
    assert result.committed and result.aborted


def test_the_live_trace_also_sees_the_unrecorded_machines() -> None:
    with traced() as live:
        run(RunSpec(workload="multi", seed=2, ops=4))
    reached = rules_reached(live)
    assert any(rule.startswith("BW-") for rule in reached)  # the record logs' writer
    assert {"TC-29", "TC-30"} <= set(reached)  # the client's transaction machine


def test_engine_sites_count_only_on_their_rules_path() -> None:
    """The engine functions that alone carry out a rule count for it (and cite it); a run that
    takes none of their paths reaches none of their rules, although it runs the same engine modules."""
    from devtools.reach import ENGINE_SITES

    mapping = rule_map()
    for site, ids in ENGINE_SITES.items():
        assert mapping[site] == ids
    only_engine = {"PA-23", "PA-24", "DD-30", "BW-26"}
    with traced() as live:
        run(RunSpec(workload="delayed", seed=2, ops=4))
    assert not only_engine & set(rules_reached(live, mapping))
    with traced() as live:
        run(RunSpec(workload="delayed", seed=2, ops=4, readers=True, shared_delayed=True))
    assert {"PA-23", "PA-24", "DD-30"} <= set(rules_reached(live, mapping))
