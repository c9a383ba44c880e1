"""Transcripts: every one agrees with its JSON vector and is what the reference prints now; the
format reads back as the JSON it spells; ``txnmodel vectors transcript`` reports a changed line
with its file and line, and ``--rewrite`` puts it right."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from reference.sessions import replay_vector
from reference.transcripts import (
    Transcript,
    TranscriptError,
    disagreements,
    parse_value,
    read_transcript,
    render_transcript,
    spell,
)
from runners.transcripts import DEFAULT_TRANSCRIPTS, check_transcripts, transcript_path
from runners.vectors import load_vector
from spec.machines import MACHINES
from spec.rules import RULES_DIR, parse_rules
from txnmodel.cli import main
from txnmodel.common import DEFAULT_VECTORS

VECTORS = sorted(DEFAULT_VECTORS.rglob("*.json"))
# A small vector with a result value, effects, an error and an observer check.
SAMPLE = DEFAULT_VECTORS / "coordinator" / "edge-add-after-end-logs-then-deletes.json"
SAMPLE_WITH_CHECK = DEFAULT_VECTORS / "delayed" / "c25-contains-message.json"


def _transcript_of(vector: Path) -> Path:
    data = load_vector(vector)
    return transcript_path(DEFAULT_TRANSCRIPTS, data["machine"], data["id"])


# -- Every transcript and its vector ------------------------------------------------------------


@pytest.mark.parametrize("vector", VECTORS, ids=lambda p: p.stem)
def test_transcript_agrees_with_its_vector_and_the_reference(vector: Path) -> None:
    data = load_vector(vector)
    path = transcript_path(DEFAULT_TRANSCRIPTS, data["machine"], data["id"])
    text = path.read_text(encoding="utf-8")
    transcript = read_transcript(text)
    # read back, not rendered again: the same commands and arguments in order, every expectation met
    assert disagreements(data, transcript) == []
    outcomes = replay_vector(data, where=str(vector))
    steps = transcript.blocks[-len(outcomes) :]
    for block, outcome in zip(steps, outcomes, strict=True):
        assert block.result == outcome.result, f"{path}:{block.line}"
        assert [c.value for c in block.checks] == [o.observed for o in outcome.observations], f"{path}:{block.line}"
    assert text == render_transcript(data, outcomes), f"{path} is not what the reference prints; --rewrite it"


def test_every_vector_has_one_transcript_and_no_transcript_lacks_a_vector() -> None:
    expected = {_transcript_of(v) for v in VECTORS}
    found = set(DEFAULT_TRANSCRIPTS.rglob("*.txt"))
    assert found == expected
    assert len(found) == len(VECTORS) >= 154


def test_every_machine_and_every_rules_page_has_transcripts() -> None:
    machines = {p.parent.name for p in DEFAULT_TRANSCRIPTS.rglob("*.txt")}
    assert machines == {info.name for info in MACHINES}
    covered = {rule for v in VECTORS for rule in load_vector(v).get("rules", [])}
    for page in sorted(RULES_DIR.glob("*.md")):
        rules = {r.id for r in parse_rules(page.read_text(encoding="utf-8"), page.stem)}
        if rules:
            assert rules & covered, f"no transcript shows a rule of {page.name}"


# -- The value spelling -------------------------------------------------------------------------

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["COMMITTED", "true", "null", "a b", "0x12", "-", "x.y-z", "", "Ok("]),
    lambda inner: (
        st.lists(inner, max_size=5)
        | st.dictionaries(st.text(max_size=6) | st.sampled_from(["@type", "@bytes", "name"]), inner, max_size=4)
        | st.builds(
            lambda kind, fields: {"@type": kind, **fields},
            st.sampled_from(["Ok", "Position", "a b"]),
            st.dictionaries(st.sampled_from(["txn_id", "status", "@x"]), inner, max_size=3),
        )
        | st.builds(lambda hex_: {"@bytes": hex_}, st.sampled_from(["", "0a0b", "ABCD", "abc", "zz"]))
    ),
    max_leaves=20,
)


@given(_JSON, st.integers(min_value=1, max_value=120))
def test_every_json_value_reads_back_as_itself(value: Any, room: int) -> None:
    assert parse_value(spell(value, room=room)) == value


@pytest.mark.parametrize(
    "value,spelled",
    [
        ([0, 7], "[0,7]"),
        ({"@type": "Position", "ledger_id": 3}, "Position(ledger_id=3)"),
        ("COMMITTED", "COMMITTED"),
        ("true", '"true"'),
        ("a b", '"a b"'),
        ({"@bytes": "0a0b"}, "0x0a0b"),
        ({"@bytes": "ABCD"}, '{"@bytes"=ABCD}'),
        ({"@bytes": "0AB"}, '{"@bytes"="0AB"}'),
        ({"position": [0, 3], "ack_set": [15]}, "{position=[0,3], ack_set=[15]}"),
        ([["t", "s"], ["u", "v"]], "[[t,s], [u,v]]"),
        (None, "null"),
        (-1, "-1"),
    ],
)
def test_spellings(value: Any, spelled: str) -> None:
    assert spell(value) == spelled
    assert parse_value(spelled) == value


def test_long_values_break_one_item_a_line() -> None:
    record = {"@type": "Record", **{f"field_{i}": i for i in range(12)}}
    text = spell({"@type": "AppendRecord", "record_id": 0, "record": record}, room=60)
    assert text.splitlines()[0] == "AppendRecord("
    assert all(len(line) <= 100 for line in text.splitlines())
    assert parse_value(text)["record"] == record


@pytest.mark.parametrize(
    "text,line,fragment",
    [
        ("[0,\n1", 2, "after an item"),
        ("Ok(a=1, a=2)", 1, "given twice"),
        ("12ab", 1, "runs into a word"),
        ('"open', 1, "does not end"),
        ("[1] 2", 1, "end of the value"),
        ("x.y(a=1)", 1, "not a type name"),
    ],
)
def test_bad_values_name_their_line(text: str, line: int, fragment: str) -> None:
    with pytest.raises(TranscriptError) as info:
        parse_value(text)
    assert info.value.line == line and fragment in info.value.message


# -- Reading transcripts and checking them against the vector -----------------------------------


def _sample() -> tuple[dict[str, Any], str]:
    data = load_vector(SAMPLE_WITH_CHECK)
    return data, render_transcript(data, replay_vector(data, where=str(SAMPLE_WITH_CHECK)))


def _replace(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


def _line_of(text: str, fragment: str) -> int:
    return next(i for i, line in enumerate(text.split("\n"), 1) if fragment in line)


@pytest.mark.parametrize(
    "old,new,fragment,at",
    [
        ("add_message ledger_id=2", "add_message ledger_id=9", "arguments", "ledger_id=9"),
        ("get_scheduled_messages", "get_next_message", "is get_next_message", "get_next_message"),
        ("ok [[1,1]]", "ok [[1,2]]", "expects result", "get_scheduled_messages"),
        ("entry_id=1 -> false", "entry_id=1 -> true", "expects false", "entry_id=1 -> true\n\nadd_message ledger_id=3"),
        ("check contains_message ledger_id=1 entry_id=1 -> true\n", "", "0 checks", "deliver_at=10"),
        ("TickTimeMillis=1", "TickTimeMillis=2", "config", "TickTimeMillis=2"),
        ("init delayed", "init coordinator", "init", "init coordinator"),
    ],
)
def test_a_transcript_that_says_otherwise_disagrees_at_its_line(old: str, new: str, fragment: str, at: str) -> None:
    data, text = _sample()
    changed = _replace(text, old, new)
    problems = disagreements(data, read_transcript(changed))
    assert problems and fragment in problems[0], problems
    line = changed[: changed.index(at)].count("\n") + 1
    assert problems[0].startswith(f"line {line}:"), problems


def test_a_missing_step_disagrees() -> None:
    data, text = _sample()
    blocks = text.split("\n\n")
    problems = disagreements(data, read_transcript("\n\n".join(blocks[:-1]) + "\n"))
    assert any("steps, but the vector has" in p for p in problems)


def test_the_reader_sees_comments_commands_results_effects_and_checks() -> None:
    data, text = _sample()
    transcript: Transcript = read_transcript(text)
    assert transcript.comments[0].startswith("c25-contains-message (delayed):")
    config, init, first = transcript.blocks[:3]
    assert (config.command, dict(config.args)) == ("config", {"delayedDeliveryTickTimeMillis": 1})
    assert (init.command, init.positional) == ("init", ("delayed",))
    assert first.command == "add_message" and dict(first.args) == data["steps"][0]["args"]
    assert first.result == {"ok": True, "effects": [{"@type": "ScheduleTimer", "target": 10, "delay_ms": 10}]}
    [check] = first.checks
    assert (check.observe, dict(check.args), check.value) == ("contains_message", {"ledger_id": 1, "entry_id": 1}, True)
    assert check.line == _line_of(text, "check contains_message")


@pytest.mark.parametrize(
    "old,new,fragment,at",
    [
        ("----\nok true\neffect", "ok true\neffect", "expected ----", "ok true\neffect"),
        ("ok [[1,1]]", "done [[1,1]]", "expected ok or error", "done"),
        ("effect CancelTimer()", "effect", "expected a value", "effect\n"),
        ("ok [[1,1]]", "ok [[1,1]] extra", "end of the line", "extra"),
        ("add_message ledger_id=2 entry_id=2", "add_message ledger_id=2 ledger_id=2", "given twice", "ledger_id=2 "),
    ],
)
def test_text_that_is_not_a_transcript_names_its_line(old: str, new: str, fragment: str, at: str) -> None:
    _, text = _sample()
    changed = _replace(text, old, new)
    with pytest.raises(TranscriptError) as info:
        read_transcript(changed)
    assert fragment in info.value.message
    assert info.value.line == changed[: changed.index(at)].count("\n") + 1


def test_an_effect_after_a_check_is_refused() -> None:
    _, text = _sample()
    changed = _replace(text, "check contains_message ledger_id=1 entry_id=1 -> false", "check x -> 1\neffect Y()")
    with pytest.raises(TranscriptError, match="effects come first"):
        read_transcript(changed)


# -- txnmodel vectors transcript ----------------------------------------------------------------


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    """One vector in a folder of its own, and an empty transcripts folder."""
    vectors = tmp_path / "vectors" / "coordinator"
    vectors.mkdir(parents=True)
    shutil.copy(SAMPLE, vectors / SAMPLE.name)
    return vectors / SAMPLE.name, tmp_path / "transcripts"


def _run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["vectors", "transcript", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_rewrite_writes_what_check_then_accepts(tree: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    vector, folder = tree
    code, out, _ = _run(capsys, "--transcripts", str(folder), str(vector))
    assert code == 1 and "missing; --rewrite writes it" in out
    code, out, _ = _run(capsys, "--rewrite", "--transcripts", str(folder), str(vector))
    written = folder / "coordinator" / f"{SAMPLE.stem}.txt"
    assert code == 0 and f"written {written}" in out
    assert written.read_text(encoding="utf-8") == _transcript_of(SAMPLE).read_text(encoding="utf-8")
    code, out, _ = _run(capsys, "--transcripts", str(folder), str(vector))
    assert code == 0 and "1 same" in out


def test_a_changed_line_is_reported_with_its_file_and_line_and_rewrite_fixes_it(
    tree: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    vector, folder = tree
    assert _run(capsys, "--rewrite", "--transcripts", str(folder), str(vector))[0] == 0
    written = folder / "coordinator" / f"{SAMPLE.stem}.txt"
    good = written.read_text(encoding="utf-8")
    changed = _replace(good, "\nok COMMITTING\n", "\nok COMMITTED\n")
    written.write_text(changed, encoding="utf-8")
    line = _line_of(changed, "ok COMMITTED")
    code, out, _ = _run(capsys, "--transcripts", str(folder), str(vector))
    assert code == 1
    assert f"{written}:{line}: differs from what the reference prints" in out
    assert "-ok COMMITTED" in out and "+ok COMMITTING" in out and "1 differs" in out
    code, out, _ = _run(capsys, "--rewrite", "--transcripts", str(folder), str(vector))
    assert code == 0 and "1 written" in out
    assert written.read_text(encoding="utf-8") == good
    assert _run(capsys, "--transcripts", str(folder), str(vector))[0] == 0


def test_a_transcript_that_is_not_one_is_bad_input_naming_file_and_line(
    tree: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    vector, folder = tree
    assert _run(capsys, "--rewrite", "--transcripts", str(folder), str(vector))[0] == 0
    written = folder / "coordinator" / f"{SAMPLE.stem}.txt"
    broken = _replace(written.read_text(encoding="utf-8"), "\nok COMMITTING\n", "\nok [COMMITTING\neffect")
    written.write_text(broken, encoding="utf-8")
    code, _, err = _run(capsys, "--transcripts", str(folder), str(vector))
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert f"{written}:{_line_of(broken, 'ok [COMMITTING') + 1}:" in err
    written.write_bytes(b"# \xff\n")
    code, _, err = _run(capsys, "--transcripts", str(folder), str(vector))
    assert code == 2 and "not UTF-8" in err and "line 1" in err
    # a rewrite does not read what it replaces
    assert _run(capsys, "--rewrite", "--transcripts", str(folder), str(vector))[0] == 0


def test_bad_vectors_leave_the_transcripts_alone(tree: tuple[Path, Path], capsys: pytest.CaptureFixture[str]) -> None:
    vector, folder = tree
    data = json.loads(vector.read_text(encoding="utf-8"))
    data["id"] = "another"
    data["steps"][0]["command"] = "teleport"
    (vector.parent / "another.json").write_text(json.dumps(data), encoding="utf-8")
    code, _, err = _run(capsys, "--rewrite", "--transcripts", str(folder), str(vector.parent))
    assert code == 2 and "another.json" in err and "teleport" in err
    assert not folder.exists()


def test_without_paths_stale_transcripts_are_reported_and_removed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stale = tmp_path / "coordinator" / "gone.txt"
    stale.parent.mkdir()
    stale.write_text("# a vector that was renamed\n", encoding="utf-8")
    code, out, _ = _run(capsys, "--rewrite", "--transcripts", str(tmp_path))
    assert code == 0 and f"removed {stale}" in out and f"{len(VECTORS)} written" in out
    assert not stale.exists()
    stale.write_text("# again\n", encoding="utf-8")
    code, out, _ = _run(capsys, "--transcripts", str(tmp_path))
    assert code == 1 and f"{stale}: no vector has this id" in out and f"{len(VECTORS)} same" in out


def test_check_transcripts_reports_each_file(tree: tuple[Path, Path]) -> None:
    vector, folder = tree
    [written] = check_transcripts([vector], folder, rewrite=True)
    assert written.status == "written" and written.passed
    [same] = check_transcripts([vector], folder)
    assert same.status == "same" and same.path == written.path


def test_the_command_explains_itself(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vectors", "transcript", "--help"]) == 0
    out = capsys.readouterr().out
    assert "usage: txnmodel vectors transcript" in out and "--rewrite" in out


def test_the_docs_excerpt_is_a_real_transcript() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "spec" / "vectors.md").read_text(encoding="utf-8")
    section = page[page.index("## Transcripts") :]
    source = section[section.index("From `") + len("From `") :].split("`", 1)[0]
    excerpt = section[section.index("```text\n") + len("```text\n") :].split("```", 1)[0]
    transcript = (Path(__file__).resolve().parents[2] / source).read_text(encoding="utf-8")
    assert excerpt.strip() and f"\n{excerpt}" in transcript
