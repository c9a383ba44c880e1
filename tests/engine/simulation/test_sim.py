"""The deterministic simulation: same seed, same history bytes, on either ledger; workloads under
faults produce histories the checkers accept; ``simulate_main`` writes them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from engine.scheduler import Future, Simulation, spawn
from engine.simulation.workloads import RunSpec, SimulateOptions, run
from history_io.files import read_jsonl, read_parquet, write_parquet
from invariants.transactional import check_transactional
from spec.history import OpType, validate_history
from txnmodel.commands.simulate import build_parser, simulate_main


def _bytes(tmp: Path, spec: RunSpec, name: str) -> bytes:
    ops = run(spec).operations
    path = tmp / f"{name}.parquet"
    write_parquet(path, ops)
    return path.read_bytes()


@pytest.mark.parametrize("workload", ["ctp", "multi", "delayed"])
def test_same_seed_same_history_bytes(tmp_path: Path, workload: str) -> None:
    spec = RunSpec(workload=workload, seed=11, ops=25, faults=True)
    first = _bytes(tmp_path, spec, "a")
    assert first == _bytes(tmp_path, spec, "b")
    other = _bytes(tmp_path, RunSpec(workload=workload, seed=12, ops=25, faults=True), "c")
    assert first != other


@pytest.mark.parametrize("batching", [False, True])
def test_file_ledger_is_deterministic_and_agrees_with_memory(tmp_path: Path, batching: bool) -> None:
    def spec(ledger: str, data: str | None) -> RunSpec:
        return RunSpec(workload="ctp", seed=3, ops=20, faults=True, ledger=ledger, data_dir=data, batching=batching)

    on_file = run(spec("file", str(tmp_path / "one"))).operations
    again = run(spec("file", str(tmp_path / "two"))).operations
    in_memory = run(spec("memory", None)).operations
    assert [op.to_row() for op in on_file] == [op.to_row() for op in again]
    # The ledger backend is invisible to clients: same operations, outcomes and times.
    assert [(o.f, o.type, o.value, o.result, o.invoked_at, o.completed_at) for o in on_file] == [
        (o.f, o.type, o.value, o.result, o.invoked_at, o.completed_at) for o in in_memory
    ]


@pytest.mark.parametrize("workload", ["ctp", "multi", "delayed"])
@pytest.mark.parametrize("seed", [21, 22, 23])
def test_workloads_under_faults_are_transactionally_clean(workload: str, seed: int) -> None:
    result = run(RunSpec(workload=workload, seed=seed, ops=40, faults=True))
    ops = result.operations
    validate_history(ops)
    assert {op.type for op in ops} >= {OpType.OK}
    verdict = check_transactional(ops)
    # A message redelivered after a broker restart carries redelivery_count 0 (Pulsar's in-memory
    # redelivery tracker does not survive the broker); the checker judges first deliveries from the
    # history itself, so no anomaly at all is acceptable here.
    assert verdict.ok, [str(a) for a in verdict.anomalies]
    assert verdict.txns > 0 and verdict.messages > 0


def test_faults_really_happen() -> None:
    result = run(RunSpec(workload="multi", seed=5, ops=60, faults=True))
    kinds = {op.type for op in result.operations}
    assert OpType.INFO in kinds and OpType.FAIL in kinds
    assert result.crashes > 0


def test_simulate_main_writes_parquet_and_jsonl(tmp_path: Path) -> None:
    out, data = tmp_path / "out", tmp_path / "data"
    argv = [
        "--seed",
        "4",
        "--ledger",
        "file",
        "--data",
        str(data),
        "--out",
        str(out),
        "--workload",
        "multi",
        "--histories",
        "2",
        "--ops",
        "15",
        "--faults",
        "on",
        "--jsonl",
        "--check",
        "--quiet",
    ]
    assert simulate_main(argv) == 0
    histories = read_parquet(out / "multi.parquet")
    assert sorted(histories) == ["multi-file-seed4", "multi-file-seed5"]
    assert read_jsonl(out / "multi.jsonl").keys() == histories.keys()
    assert any(data.iterdir())  # the ledgers live under --data
    assert build_parser().parse_args(["--workload", "all"]).workload == "all"


def test_histories_carry_their_run_metadata(tmp_path: Path) -> None:
    from history_io.files import read_metadata, run_config

    argv = [
        "--seed",
        "7",
        "--out",
        str(tmp_path),
        "--workload",
        "ctp",
        "--histories",
        "2",
        "--ops",
        "15",
        "--faults",
        "on",
        "--jsonl",
        "--quiet",
    ]
    assert simulate_main(argv) == 0
    meta = read_metadata(tmp_path / "ctp.parquet")
    assert meta is not None and meta == read_metadata(tmp_path / "ctp.jsonl")
    assert sorted(meta["runs"]) == ["ctp-memory-seed7", "ctp-memory-seed8"]
    run7 = meta["runs"]["ctp-memory-seed7"]
    assert (run7["workload"], run7["seed"], run7["ledger"], run7["batching"], run7["faults"]) == (
        "ctp",
        7,
        "memory",
        False,
        True,
    )
    assert run7["fault_rates"]["drop_request"] == 0.01 and run7["cut_at_deadline"] is False
    # The broker.conf overrides rebuild the run's Config exactly.
    assert run_config(meta) == RunSpec().config and meta["config"] == run7["config"]
    # The schedule is what the fault process did, in time order, within the run.
    schedule = run7["fault_schedule"]
    assert schedule and [e["time_ms"] for e in schedule] == sorted(e["time_ms"] for e in schedule)
    assert {e["kind"] for e in schedule} & {"broker-crash", "coordinator-crash", "topic-unload"}
    assert schedule[-1]["kind"] == "heal"
    # Same seeds, same bytes: the metadata is deterministic too.
    again = tmp_path / "again"
    assert simulate_main([*argv[:2], "--out", str(again), *argv[4:]]) == 0
    assert (again / "ctp.parquet").read_bytes() == (tmp_path / "ctp.parquet").read_bytes()


def test_a_run_stops_at_its_deadline_with_open_operations_recorded() -> None:
    full = run(RunSpec(workload="multi", seed=2, ops=20, faults=True))
    assert not full.cut and full.sim_time_ms < RunSpec().deadline_ms
    cut = run(RunSpec(workload="multi", seed=2, ops=20, faults=True, deadline_ms=300))
    assert cut.cut and cut.sim_time_ms == 300
    assert cut.faults[-1].kind == "deadline" and cut.metadata()["cut_at_deadline"] is True
    validate_history(cut.operations)
    assert any(op.type is OpType.INVOKE for op in cut.operations)  # what was under way stays open
    assert all(op.invoked_at <= 300 for op in cut.operations)
    # Up to the deadline the run is the full run's prefix.
    prefix = {op.index: op.to_row() for op in full.operations if op.completed_at is not None and op.completed_at <= 300}
    assert all(
        op.to_row() == prefix[op.index] for op in cut.operations if op.type is not OpType.INVOKE and op.index in prefix
    )


def test_fault_rates_can_be_narrowed_per_run() -> None:
    only = {
        "drop_request": 0.0,
        "drop_response": 0.0,
        "duplicate_request": 0.0,
        "ledger_append": 0.0,
        "ledger_read": 0.0,
        "broker_crash": 0.0,
        "topic_unload": 0.0,
        "coordinator_crash": 1.0,
    }
    result = run(RunSpec(workload="ctp", seed=4, ops=200, faults=True, fault_rates=only))
    kinds = {e.kind for e in result.faults}
    assert "coordinator-crash" in kinds and not kinds & {"broker-crash", "topic-unload"}
    assert result.crashes == 0 and result.counters["network_dropped"] == 0
    with pytest.raises(ValueError, match="unknown fault rate"):
        RunSpec(faults=True, fault_rates={"meteor_strike": 1.0}).rates()


def test_scheduler_runs_processes_in_a_seeded_order() -> None:
    def trace(seed: int) -> list[tuple[int, str]]:
        sim = Simulation(seed)
        seen: list[tuple[int, str]] = []

        def proc(name: str):  # type: ignore[no-untyped-def]
            for _ in range(3):
                yield sim.sleep(sim.rng.randint(1, 10))
                seen.append((sim.now, name))

        for name in "abc":
            spawn(sim, proc(name))
        sim.run_all()
        return seen

    assert trace(1) == trace(1)
    assert trace(1) != trace(2)
    done: Future[int] = Future()
    sim = Simulation(0)
    sim.schedule(5, lambda: done.set_result(42))
    assert sim.wait(done) == 42 and sim.now == 5


# --- workload variants: batch messages, partition keys and Key_Shared, the bucket tracker ----------

VARIANT = {"batch_messages": True, "key_shared": True, "delayed_tracker": "bucket"}


@pytest.mark.parametrize("workload", ["ctp", "multi", "delayed"])
def test_variants_are_deterministic_and_clean_under_faults(tmp_path: Path, workload: str) -> None:
    spec = RunSpec(workload=workload, seed=13, ops=30, faults=True, **VARIANT)  # type: ignore[arg-type]
    first = _bytes(tmp_path, spec, "a")
    assert first == _bytes(tmp_path, spec, "b")
    ops = run(spec).operations
    validate_history(ops)
    verdict = check_transactional(ops)
    assert verdict.ok, [str(a) for a in verdict.anomalies]
    sends = [op for op in ops if op.f == "send" and op.type is OpType.OK]
    assert all(op.args.get("partition_key") for op in sends)
    assert {
        op.args["sub_type"] for op in ops if op.f == "subscribe" and ("#verify" in op.object or "#read" in op.object)
    } == {"Key_Shared"}
    batched = [op for op in sends if "batch_index" in op.returned]
    assert batched
    if workload == "ctp":
        # The feeders' sends meet in batches of several messages, consumed with batch-index acks.
        assert max(op.returned["batch_size"] for op in batched) > 1
        assert any("batch_index" in op.args for op in ops if op.f == "ack")
    if workload == "delayed":
        assert (
            run(spec)
            .metadata()["config"]["delayedDeliveryTrackerFactoryClassName"]
            .endswith("BucketDelayedDeliveryTrackerFactory")
        )


def test_a_batch_history_from_the_engine_is_clean_and_a_moved_batch_index_is_flagged() -> None:
    ops = run(RunSpec(workload="ctp", seed=2, ops=30, faults=True, batch_messages=True)).operations
    assert check_transactional(ops).ok
    import json

    victim = next(op for op in ops if op.f == "receive" and op.returned and op.returned.get("batch_index", 0) > 0)
    moved = dict(victim.returned, batch_index=victim.returned["batch_index"] - 1)
    mutated = [dataclasses.replace(op, result=json.dumps(moved), _result=None) if op is victim else op for op in ops]
    verdict = check_transactional(mutated)
    assert set(verdict.counts) == {"inconsistent-position"}, verdict.counts
    assert any(victim.index in a.ops for a in verdict.anomalies)


def test_plain_runs_draw_nothing_for_the_variants() -> None:
    """The variants are off by default and cost a plain run nothing: not even a random draw."""
    plain = run(RunSpec(workload="multi", seed=9, ops=15, faults=True))
    ops = plain.operations
    assert not any("partition_key" in op.args for op in ops if op.f == "send")
    assert not any("batch_index" in (op.returned or {}) for op in ops if op.f == "send")
    assert {op.args["sub_type"] for op in ops if op.f == "subscribe"} == {"Exclusive"}
    meta = plain.metadata()
    assert (meta["batch_messages"], meta["key_shared"], meta["delayed_tracker"]) == (False, False, "memory")


def test_mixed_variants_by_seed_and_the_bucket_runs_file(tmp_path: Path) -> None:
    from engine.simulation.workloads import variant
    from history_io.files import read_metadata

    assert [variant("mixed", s, 2) for s in range(4)] == [False, True, False, True]
    assert [variant("mixed", s, 3) for s in range(4)] == [False, True, False, False]
    assert [variant("mixed", s, 2, step=2) for s in range(8)] == [False, False, True, True] * 2
    assert variant("on", 0, 2) and not variant("off", 1, 2)
    argv = [
        "--seed",
        "1",
        "--out",
        str(tmp_path),
        "--workload",
        "all",
        "--histories",
        "2",
        "--ops",
        "10",
        "--faults",
        "on",
        "--check",
        "--quiet",
    ]
    assert simulate_main(argv) == 0
    # (the folder's lock, .txnmodel.lock, is simulate's own and hidden from history readers)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [
        "ctp.parquet",
        "delayed-bucket.parquet",
        "delayed.parquet",
        "multi.parquet",
    ]
    plain, bucket = read_metadata(tmp_path / "delayed.parquet"), read_metadata(tmp_path / "delayed-bucket.parquet")
    assert plain is not None and bucket is not None
    assert sorted(plain["runs"]) == ["delayed-memory-seed1"] and sorted(bucket["runs"]) == ["delayed-memory-seed2"]
    assert bucket["config"]["delayedDeliveryTrackerFactoryClassName"].endswith("BucketDelayedDeliveryTrackerFactory")
    assert "delayedDeliveryTrackerFactoryClassName" not in plain["config"]
    seed1, seed2 = plain["runs"]["delayed-memory-seed1"], bucket["runs"]["delayed-memory-seed2"]
    assert (seed1["batch_messages"], seed1["key_shared"], seed1["delayed_tracker"]) == (True, True, "memory")
    assert (seed2["batch_messages"], seed2["key_shared"], seed2["delayed_tracker"]) == (False, False, "bucket")
    ctp = read_metadata(tmp_path / "ctp.parquet")
    assert ctp is not None and {r["delayed_tracker"] for r in ctp["runs"].values()} == {"memory"}
    with pytest.raises(ValueError, match="unknown delayed tracker"):
        RunSpec(delayed_tracker="disk").broker_config()


def test_the_fault_schedule_lists_each_injected_ledger_failure() -> None:
    result = run(RunSpec(workload="ctp", seed=1, ops=30, faults=True, fault_rates={"ledger_append": 0.05}))
    ledger = [e for e in result.faults if e.kind.startswith("ledger-")]
    assert {e.kind for e in ledger} == {"ledger-append-failed", "ledger-read-failed"}
    assert all(e.target for e in ledger)
    counted = {kind: n for kind, n in result.counters.items() if kind.startswith("ledger_")}
    assert counted == {
        "ledger_append_failed": sum(e.kind == "ledger-append-failed" for e in ledger),
        "ledger_read_failed": sum(e.kind == "ledger-read-failed" for e in ledger),
    }
    times = [e.time_ms for e in result.faults]
    assert times == sorted(times)
    heal = next(e.time_ms for e in result.faults if e.kind == "heal")
    assert all(e.time_ms <= heal for e in ledger)  # healing stops them


def test_a_faulty_ledger_tells_its_store_of_each_injected_fault() -> None:
    import random

    from engine.ledger_store import LedgerFaults, LedgerStore
    from engine.simulated.faults import InjectedFault, Op
    from engine.storage.ledger import LedgerWriteFailed
    from spec.config import Config

    store = LedgerStore("memory", Config(), rng=random.Random(0), faults=LedgerFaults(append=1.0))
    told: list[InjectedFault] = []
    store.on_fault = told.append
    ledger = store.open("l")
    with pytest.raises(LedgerWriteFailed):
        ledger.append(b"x")
    assert [(f.operation.op, f.operation.ledger) for f in told] == [(Op.APPEND, "l")]


def test_variants_record_the_same_history_on_file_and_memory_ledgers(tmp_path: Path) -> None:
    def spec(ledger: str, data: str | None) -> RunSpec:
        return RunSpec(workload="delayed", seed=5, ops=20, faults=True, ledger=ledger, data_dir=data, **VARIANT)  # type: ignore[arg-type]

    on_file = run(spec("file", str(tmp_path / "one"))).operations
    in_memory = run(spec("memory", None)).operations
    assert [(o.f, o.type, o.value, o.result, o.invoked_at, o.completed_at) for o in on_file] == [
        (o.f, o.type, o.value, o.result, o.invoked_at, o.completed_at) for o in in_memory
    ]


def test_bucket_runs_recover_buckets_from_their_snapshot_ledgers() -> None:
    """The bucket variant is tuned (short ledgers, messages due up to 3 s ahead) so that buckets are
    still live when the broker crashes and come back from their snapshots.  (Seed 1: the delayed
    workload's long receives and last messages moved seed 2's crashes to moments with no live
    bucket; 5 of seeds 0..11 recover one.)"""
    result = run(RunSpec(workload="delayed", seed=1, ops=30, faults=True, delayed_tracker="bucket"))
    recoveries = [op for op in result.operations if op.object.startswith("tracker:") and op.f == "recover"]
    assert any(op.args.get("tracker") == "bucket" and op.args.get("snapshots") for op in recoveries)
    assert check_transactional(result.operations).ok


def test_broker_crashes_on_the_simulated_disk_are_power_cuts_that_recovery_replays() -> None:
    """Issue 20: the simulator's crashes are power cuts.  On the simulated disk every broker crash
    drops or tears what was not synced (the ledger files written behind, what waited for the
    journal's group commit), and the next load replays the journal into them."""
    spec = RunSpec(workload="ctp", seed=3, ops=40, faults=True, ledger="file", disk="sim", group_commit_ms=1)
    result = run(spec)
    counters = result.counters
    assert result.crashes > 0 and counters["journal_power_cuts"] >= result.crashes
    assert counters["journal_power_cut_bytes_lost"] > 0  # unsynced writes really were lost or torn
    assert counters["journal_queued_lost"] > 0  # and changes waiting for a commit (never answered)
    assert counters["journal_recoveries"] > counters["journal_power_cuts"] // 2
    assert counters["journal_replayed"] > 0 and counters["journal_rebuilt"] > 0  # journal replay happened
    assert check_transactional(result.operations).ok
    assert result.metadata()["disk"] == "sim" and result.metadata()["group_commit_ms"] == 1


def test_every_faulty_main_job_history_with_a_crash_replays_its_journal() -> None:
    """The main job's own runs (MAIN_JOB's variants and fault mixes, file ledgers on the simulated
    disk with its 1 ms group commit, as ``txnmodel run`` makes them): every history a broker crash
    hit was a power cut, and the next load recovered the store and replayed its journal."""
    from engine.simulation.workloads import MAIN_JOB

    options = dataclasses.replace(MAIN_JOB, seed=1, histories=2, ops=30, ledger="file", disk="sim", group_commit_ms=1)
    specs = [spec for workload in options.workloads for spec in options.specs(workload, "unused")]
    assert len(specs) == 6 and all(spec.faults and spec.disk == "sim" for spec in specs)
    crashed = 0
    for spec in specs:
        result = run(spec)
        counters = result.counters
        assert result.incomplete is None
        if result.crashes == 0:
            continue
        crashed += 1
        assert counters["journal_power_cuts"] >= result.crashes, (spec.workload, spec.seed, counters)
        assert counters["journal_recoveries"] > 0, (spec.workload, spec.seed, counters)
        assert counters["journal_replayed"] > 0, (spec.workload, spec.seed, counters)
    assert crashed >= 3  # most of them: the fault mixes crash the broker


def test_the_simulated_and_the_real_disk_give_the_same_history_bytes(tmp_path: Path) -> None:
    def spec(disk: str) -> RunSpec:
        data = str(tmp_path / "real") if disk == "real" else None
        # The simulated disk's own faults (EIO) off: a real disk has none to match them.
        return RunSpec(
            workload="multi",
            seed=2,
            ops=20,
            faults=True,
            ledger="file",
            data_dir=data,
            disk=disk,
            group_commit_ms=1,
            fault_rates={"disk_eio": 0},
        )

    on_sim, on_real = run(spec("sim")), run(spec("real"))
    assert on_sim.crashes > 0
    assert [op.to_row() for op in on_sim.operations] == [op.to_row() for op in on_real.operations]


@pytest.mark.parametrize(("workload", "seed"), [("ctp", 5), ("multi", 2), ("multi", 4), ("multi", 5), ("delayed", 4)])
def test_a_disk_error_under_a_cursor_reloads_its_component(workload: str, seed: int) -> None:
    """On the simulated disk with a journal that commits every change (no group commit), an injected
    EIO can fail a cursor's write (a transaction log's or a subscription's, after the machine
    stepped).  That is a failed ledger write like any other: the component reloads from its log.  It
    once escaped the coordinator and the subscription as a ``LedgerWriteFailed`` that ended the run
    (these seeds), and then as an engine failure of a subscription dispatching while it reloaded."""
    options = SimulateOptions(
        seed=seed, workload=workload, ledger="file", disk="sim", faults=True
    )  # simulate's defaults
    (spec,) = options.specs(workload, "")
    result = run(spec)
    assert not result.failures, [f.describe() for f in result.failures]
    assert not result.cut and result.committed > 0
    assert check_transactional(result.operations).ok
