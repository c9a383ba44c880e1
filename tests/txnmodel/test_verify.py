"""``txnmodel verify``: Spark and the single-process run agree; verify's output, files and exit codes.

One Spark session (local[2]) serves the whole module.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from history_io.files import write_jsonl, write_parquet
from history_io.jepsen import read_verdicts
from invariants.models import random_register_history
from invariants.verify import VerifyOptions
from runners.file_checks import check_files_local
from runners.spark import check_files_spark
from spec.history import OpType
from tests.history_io.test_jepsen import DATA
from tests.invariants.synthetic import generate
from txnmodel.cli import main
from txnmodel.commands.verify import build_parser


def verify_main(argv: list[str]) -> int:
    """``txnmodel verify ARGS`` through the command line's error boundary."""
    return main(["verify", *argv])


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    from runners.spark import spark_session, stop_session

    session = spark_session("local[2]")
    yield session
    stop_session()


def _illegal_register(seed: int) -> list[Any]:
    ops = random_register_history(seed, ops=40, clients=3, history=f"bad-register-{seed}")
    read = next(o for o in ops if o.f == "read" and o.type is OpType.OK)
    return [o if o is not read else dataclasses.replace(o, result="123", _result=None) for o in ops]


def _lost_message(seed: int) -> list[Any]:
    ops = [dataclasses.replace(o, history=f"lost-{seed}") for o in generate(seed)]
    victim = next(o for o in ops if o.f == "receive" and o.returned is not None)
    return [o for o in ops if o is not victim]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("histories")
    good = {f"register-{s}": random_register_history(s, ops=60, clients=4, crash=0.1) for s in range(6)}
    write_parquet(root / "good-1.parquet", dict(list(good.items())[:3]))
    write_parquet(root / "good-2.parquet", dict(list(good.items())[3:]))
    write_parquet(
        root / "txn.parquet",
        {f"txn-{s}": [dataclasses.replace(o, history=f"txn-{s}") for o in generate(s)] for s in range(4)},
    )
    write_parquet(root / "bad" / "illegal.parquet", _illegal_register(1))
    write_parquet(root / "bad" / "lost.parquet", _lost_message(2))
    return root


def _key(rows: list[Any]) -> list[tuple[str, str, str]]:
    return sorted((r.history, r.checker, r.verdict) for r in rows)


def test_spark_and_local_agree(spark: Any, folder: Path) -> None:
    files = sorted(str(p) for p in folder.rglob("*.parquet"))
    options = VerifyOptions()
    on_spark = check_files_spark(files, "parquet", options, spark=spark, progress=False)
    local = check_files_local(files, "parquet", options)
    assert _key(on_spark) == _key(local)
    verdicts = {(h, c): v for h, c, v in _key(local)}
    assert verdicts[("bad-register-1", "linearizability")] == "illegal"
    assert verdicts[("lost-2", "delivery")] == "illegal"  # loss is a delivery anomaly (its group)
    assert all(v == "ok" for (h, _), v in verdicts.items() if h.startswith(("register-", "txn-")))
    # 6 + 1 register histories (linearizability); 4 + 1 transactional ones (transactional, delivery)
    assert len(verdicts) == 7 + 5 * 2


def test_verify_on_spark_writes_verdicts_and_counterexamples(
    spark: Any, folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    code = verify_main([str(folder), "--out", str(out), "--spark", "--master", "local[2]"])
    printed = capsys.readouterr()
    assert code == 1
    assert "ILLEGAL bad-register-1 [linearizability]" in printed.out and "lost-message" in printed.out
    assert "12 histories" in printed.out
    # progress on stderr: the tasks done out of the total, and the session start before them
    assert re.search(r"verify on Spark \(local\[2\]\) done: (\d+)/\1 tasks", printed.err), printed.err
    assert "== verify: start Spark" in printed.err
    table = pq.read_table(out / "verdicts.parquet").to_pylist()
    assert len(table) == 17 and {r["verdict"] for r in table} == {"ok", "illegal"}
    pages = sorted(p.name for p in (out / "counterexamples").iterdir())
    assert "bad-register-1.linearizability.html" in pages and "lost-2.delivery.txt" in pages
    assert "lost-message" in (out / "counterexamples" / "lost-2.delivery.html").read_text()
    # the report names every counterexample file it wrote, and the index that links them
    for page in pages:
        assert f"counterexample: {out / 'counterexamples' / page}" in printed.out
    assert f"index of every verdict: {out / 'index.html'}" in printed.out


def test_verify_json_on_jepsen_logs(spark: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if not DATA.exists():
        pytest.skip("no Jepsen data")
    logs = tmp_path / "logs"
    logs.mkdir()
    for name in ("etcd_000.log", "etcd_002.log", "etcd_003.log", "etcd_007.log"):
        shutil.copy(DATA / name, logs / name)
    code = verify_main([str(logs), "--format", "jepsen", "--json", "--no-progress", "--out", str(tmp_path / "o")])
    results = json.loads(capsys.readouterr().out)
    assert code == 1 and results["exit_code"] == 1
    got = {r["history"]: r["verdict"] for r in results["histories"]}
    published = read_verdicts(DATA / "VERDICTS.tsv")
    assert got == {name: "ok" if published[f"{name}.log"] else "illegal" for name in got}
    assert set(got.values()) == {"ok", "illegal"}
    assert results["histories"][0]["checkers"]["linearizability"]["model"] == "cas-register"


def test_exit_codes_in_process(folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ["--out", str(tmp_path / "o"), "--local", "--no-progress", "--overwrite"]
    good = tmp_path / "good"
    good.mkdir()
    shutil.copy(folder / "good-1.parquet", good / "a.parquet")
    assert verify_main([str(good), *out]) == 0
    # an --out that holds an earlier run's verdicts is never overwritten silently
    assert verify_main([str(good), *out[:-1]]) == 2
    assert "not empty" in capsys.readouterr().err
    # unknown (budget exhausted) fails the gate unless told otherwise
    assert verify_main([str(good), "--budget", "3", *out]) == 1
    assert verify_main([str(good), "--budget", "3", "--unknown-ok", *out]) == 0
    # bad input: a truncated file, a missing path, an unknown model, a usage error
    data = (folder / "good-2.parquet").read_bytes()
    (good / "b.parquet").write_bytes(data[:100])
    assert verify_main([str(good), *out]) == 2
    assert "not a readable Parquet file" in capsys.readouterr().out
    assert verify_main([str(tmp_path / "missing"), *out]) == 2
    assert verify_main([str(folder), "--model", "nonsense", *out]) == 2
    assert verify_main([str(folder), "--format", "csv"]) == 2


def test_a_history_split_over_two_files_is_bad_input(tmp_path: Path) -> None:
    ops = random_register_history(1, ops=20, clients=2)
    write_parquet(tmp_path / "a.parquet", ops[:10])
    write_jsonl(tmp_path / "b.jsonl", ops)
    write_parquet(tmp_path / "c.parquet", ops[10:])
    assert verify_main([str(tmp_path), "--local", "--no-progress", "--out", str(tmp_path / "o")]) == 2
    assert (
        verify_main(
            [
                str(tmp_path),
                "--local",
                "--no-progress",
                "--group-by-history",
                "--out",
                str(tmp_path / "o"),
                "--overwrite",
            ]
        )
        == 0
    )
    assert (
        verify_main(
            [str(tmp_path / "b.jsonl"), "--format", "jsonl", "--local", "--no-progress", "--out", str(tmp_path / "p")]
        )
        == 0
    )


def test_parser_documents_the_options() -> None:
    text = build_parser().format_help()
    for option in ("--format", "--model", "--master", "--json", "--out", "--budget", "--unknown-ok"):
        assert option in text


def test_a_model_that_raises_is_an_error_not_a_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from invariants import models

    def broken_step(self: Any, state: Any, op_input: Any, op_output: Any) -> Any:
        raise RuntimeError("a bug in the model")

    monkeypatch.setattr(models.CasRegister, "step", broken_step)
    write_parquet(tmp_path / "a.parquet", random_register_history(1, ops=5, clients=1))
    rows = check_files_local([str(tmp_path / "a.parquet")], "parquet", VerifyOptions())
    assert [(r.checker, r.verdict) for r in rows] == [("crash", "error")]
    assert "RuntimeError: a bug in the model" in rows[0].detail
    assert verify_main([str(tmp_path), "--local", "--no-progress", "--out", str(tmp_path / "o")]) == 1


def test_group_by_history_across_files_on_spark(spark: Any, tmp_path: Path) -> None:
    whole = random_register_history(4, ops=40, clients=3, history="split")
    broken = _illegal_register(5)
    write_parquet(tmp_path / "part-0.parquet", {"split": whole[:15], broken[0].history: broken[:20]})
    write_parquet(tmp_path / "part-1.parquet", {"split": whole[15:], broken[0].history: broken[20:]})
    (tmp_path / "part-2.parquet").write_bytes(b"PAR1 not really")
    files = sorted(str(p) for p in tmp_path.glob("*.parquet"))
    on_spark = check_files_spark(files, "parquet", VerifyOptions(), spark=spark, progress=False, group_by_history=True)
    local = check_files_local(files, "parquet", VerifyOptions(), group_by_history=True)
    assert (
        _key(on_spark)
        == _key(local)
        == sorted(
            [
                ("bad-register-5", "linearizability", "illegal"),
                ("part-2.parquet", "input", "bad-input"),
                ("split", "linearizability", "ok"),
            ]
        )
    )
    assert next(r for r in on_spark if r.history == "split").ops == 40


def test_a_large_file_is_split_by_history_and_each_part_reads_only_its_rows(tmp_path: Path) -> None:
    """With fewer files than task slots, a Parquet file becomes several work units, one per group of
    its histories; together they cover every history once, and a unit's read is filtered."""
    from history_io.files import parquet_history_names, read_file
    from runners.file_checks import check_file
    from runners.spark import pack, work_units

    big = {f"h{i}": random_register_history(i, ops=40, clients=4) for i in range(8)}
    big = {name: [dataclasses.replace(op, history=name) for op in ops] for name, ops in big.items()}
    write_parquet(tmp_path / "big.parquet", big)
    small = {"s0": [dataclasses.replace(op, history="s0") for op in random_register_history(99, ops=10, clients=2)]}
    write_parquet(tmp_path / "small.parquet", small)
    files = [str(tmp_path / "big.parquet"), str(tmp_path / "small.parquet")]
    assert parquet_history_names(files[0]) == sorted(big)
    units = work_units(files, "parquet", 6)
    parts = [names for (path, names), _ in units if path == files[0]]
    assert len(parts) > 1 and all(parts)
    assert sorted(name for names in parts for name in names or ()) == sorted(big)
    assert [names for (path, names), _ in units if path == files[1]] == [None]
    assert sorted(u for part in pack(units, 3) for u in part) == sorted(u for u, _ in units)
    first = parts[0]
    assert first is not None
    assert set(read_file(files[0], "parquet", first)) == set(first)
    rows = check_file(files[0], "parquet", VerifyOptions(model="cas-register"), first)
    assert {r.history for r in rows} == set(first) and {r.verdict for r in rows} == {"ok"}
    # Enough files for the slots: whole files, nothing read on the driver.
    assert [names for (_, names), _ in work_units(files, "parquet", 2)] == [None, None]
    with pytest.raises(ValueError, match="Parquet"):
        read_file(files[0], "jsonl", first)


def test_spark_only_where_it_pays(folder: Path, tmp_path: Path) -> None:
    from runners.spark import BREAK_EVEN_OPS, estimate_operations, use_spark

    files = sorted(str(p) for p in folder.rglob("*.parquet"))
    ops = estimate_operations(files, "parquet", 10**9)
    assert ops == sum(pq.ParquetFile(f).metadata.num_rows for f in files)
    assert use_spark(files, "parquet", "local", "spark://h:7077", 8) == (False, "--local")
    assert use_spark(files, "parquet", "spark", None, 1) == (True, "--spark")
    # small: in this process, master or not
    for master in (None, "spark://h:7077"):
        small, why = use_spark(files, "parquet", "auto", master, 2)
        assert not small and f"{ops:,} operations" in why and f"{BREAK_EVEN_OPS:,}" in why
    # large enough: Spark, at the master if one is named; one core and no master stays here
    assert use_spark(files, "parquet", "auto", "spark://h:7077", 1, threshold=ops) == (
        True,
        f"at least {ops:,} operations, --master spark://h:7077",
    )
    assert use_spark(files, "parquet", "auto", None, 1, threshold=ops) == (False, "one core and no --master")
    assert use_spark(files, "parquet", "auto", None, 2, threshold=ops) == (
        True,
        f"at least {ops:,} operations, 2 cores",
    )
    # Jepsen logs: two lines per operation; counting stops once past what decides
    log = tmp_path / "etcd_000.log"
    log.write_text("INFO  jepsen.util - 1\t:invoke\t:read\tnil\nINFO  jepsen.util - 1\t:ok\t:read\tnil\n" * 50)
    assert estimate_operations([str(log)], "jepsen", 10**9) == 50


def test_small_inputs_are_checked_in_this_process_by_default(
    folder: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = verify_main([str(folder / "bad"), "--out", str(tmp_path / "o")])
    assert code == 1 and "verify: in this process (" in capsys.readouterr().err
    assert verify_main([str(folder), "--local", "--master", "local[2]"]) == 2  # --local takes no master
    assert verify_main([str(folder), "--local", "--spark"]) == 2


def test_executors_write_the_verdicts_and_return_them_without_pages(spark: Any, folder: Path, tmp_path: Path) -> None:
    files = sorted(str(p) for p in folder.rglob("*.parquet"))
    out = tmp_path / "o"
    rows = check_files_spark(files, "parquet", VerifyOptions(), spark=spark, progress=False, out=str(out))
    parts = sorted((out / "verdicts.parquet").glob("part-*.parquet"))
    assert len(parts) > 1  # one per task
    table = pq.read_table(out / "verdicts.parquet").to_pylist()
    assert sorted((r["history"], r["checker"], r["verdict"]) for r in table) == _key(rows)
    assert all(r.html is None for r in rows)
    bad = next(r for r in rows if r.history == "bad-register-1")
    assert bad.counterexample and (out / "counterexamples" / "bad-register-1.linearizability.html").exists()
    # A second run into the same folder is refused, and with --overwrite replaces the first: no
    # stale part survives.
    assert verify_main([str(folder / "bad"), "--local", "--no-progress", "--out", str(out)]) == 2
    code = verify_main([str(folder / "bad"), "--local", "--no-progress", "--out", str(out), "--overwrite"])
    assert code == 1 and {r["history"] for r in pq.read_table(out / "verdicts.parquet").to_pylist()} == {
        "bad-register-1",
        "lost-2",
    }


def test_one_spark_session_per_process(spark: Any) -> None:
    """Every phase that asks for the same master gets the session already running."""
    from runners.spark import spark_session

    assert spark_session("local[2]") is spark
    assert spark_session("local[2]") is spark_session("local[2]")


def test_progress_moves_inside_one_history(tmp_path: Path) -> None:
    """One long history is never one step from 0% to 100%: the count moves as its rows are read and
    as each of its checks runs, the check running named (issue 28, item 4)."""
    from runners.file_checks import operations_in
    from views.progress import Phase

    ops = [dataclasses.replace(op, history="long") for op in generate(5, txns_each=60)]
    write_parquet(tmp_path / "long.parquet", ops)
    files = [str(tmp_path / "long.parquet")]
    seen: list[tuple[int, str]] = []
    phase = Phase("verify", None, "operations", 0.0)
    phase._changed = lambda p: seen.append((p.done, p.note))
    phase.set_total(operations_in(files, "parquet"))
    rows = check_files_local(files, "parquet", VerifyOptions(), progress=phase)
    assert {r.verdict for r in rows} == {"ok"}
    assert phase.total == len(ops) and phase.done == len(ops)
    counts = [done for done, _ in seen]
    assert counts == sorted(counts) and len({c for c in counts if 0 < c < len(ops)}) > 10
    notes = {note for _, note in seen}
    assert any(note.startswith("reading") for note in notes)
    assert "long: lost-message" in notes and "long: late-visibility" in notes


def test_a_kafka_workload_history_on_spark_as_in_this_process(spark: Any, tmp_path: Path) -> None:
    """Jepsen's Kafka workload (issue 29) reads and is judged the same on Spark's executors: a clean
    history and one whose send failed yet was polled (G1a)."""
    clean = (
        "{:type :invoke, :f :send, :value [[:send 0 1] [:send 1 2]], :time 0, :process 0}\n"
        "{:type :ok, :f :send, :value [[:send 0 [0 1]] [:send 1 [0 2]]], :time 1, :process 0}\n"
        "{:type :invoke, :f :poll, :value [[:poll]], :time 2, :process 1}\n"
        "{:type :ok, :f :poll, :value [[:poll {0 [[0 1]], 1 [[0 2]]}]], :time 3, :process 1}\n"
    )
    files = []
    for name, text in {"clean": clean, "g1a": clean.replace(":type :ok, :f :send", ":type :fail, :f :send")}.items():
        path = tmp_path / name / "history.edn"
        path.parent.mkdir()
        path.write_text(text)
        files.append(str(path))
    on_spark = check_files_spark(files, "edn", VerifyOptions(), spark=spark, progress=False)
    local = check_files_local(files, "edn", VerifyOptions())
    assert _key(on_spark) == _key(local)
    assert sorted(r.verdict for r in local) == ["illegal", "ok"]
    assert {r.checker for r in local} == {"transactional"}
