"""One ``conform`` run: the handshake, the vectors, the property phase, and the counterexample.

:func:`conform` is the whole command without its argument parsing and printing: it returns a
:class:`Report` (``verdict`` is ``pass``, ``differs``, ``vector-failed``, ``implementation-failed``
or ``not-deterministic``) and writes the counterexample's files under ``out/<machine>/``.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from conformance.counterexample import ConformTrace, vector_document
from conformance.differential import (
    DEFAULT_STEPS,
    Aborted,
    Exchange,
    Explored,
    NotDeterministic,
    explore,
    minimized,
)
from conformance.implementation import Channel, ImplementationFailed, ProtocolBroken
from conformance.strategies.base import Setup
from conformance.vectors import VectorOutcome, run_vectors, vector_files
from spec import conform as protocol

__all__ = ["STARTUP_SECONDS", "Options", "Progress", "Report", "Silent", "conform", "load_vectors"]

#: The handshake's time limit: a JVM or an interpreter loading its modules may take a while.
STARTUP_SECONDS = 60.0
DEFAULT_VECTORS = Path(__file__).resolve().parent.parent / "spec" / "vectors"


@dataclass(frozen=True)
class Options:
    machine: str
    implementation: str  # what the report calls it: the command line, say
    seed: int = 0
    examples: int = 100
    max_steps: int = DEFAULT_STEPS
    vectors: Sequence[str] | None = None  # None: spec/vectors/<machine>
    out: Path = Path("out") / "conform"


@dataclass
class Report:
    machine: str
    implementation: str
    verdict: str = "pass"
    message: str = ""
    vectors: list[VectorOutcome] = field(default_factory=list)
    examples: int = 0
    shrinks: int = 0
    steps: int = 0  # the counterexample's length (vector steps: a crash is two)
    files: list[str] = field(default_factory=list)
    skipped_properties: str = ""

    @property
    def passed(self) -> bool:
        return self.verdict == "pass"

    def to_json(self) -> dict[str, Any]:
        vectors = self.vectors
        return {
            "machine": self.machine,
            "implementation": self.implementation,
            "verdict": self.verdict,
            "message": self.message,
            "vectors": {
                "passed": sum(v.passed for v in vectors),
                "failed": sum(not v.passed and not v.skipped for v in vectors),
                "skipped": sum(bool(v.skipped) for v in vectors),
                "results": [v.to_json() for v in vectors],
            },
            "properties": {"examples": self.examples, "shrink_runs": self.shrinks},
            "counterexample": {"steps": self.steps, "files": self.files} if self.files else None,
        }


class Progress(Protocol):
    """What :func:`conform` tells about itself as it goes (the command line shows it)."""

    def vectors(self, total: int) -> Callable[[VectorOutcome], None]:
        """The vectors phase starts; the callable hears each vector's outcome."""

    def runs(self, examples: int) -> Callable[[Explored], None]:
        """The property phase starts; the callable hears of each run."""

    def done(self) -> None:
        """The current phase is over."""


class Silent:
    """No progress at all."""

    def vectors(self, total: int) -> Callable[[VectorOutcome], None]:
        return lambda _: None

    def runs(self, examples: int) -> Callable[[Explored], None]:
        return lambda _: None

    def done(self) -> None:
        pass


def load_vectors(options: Options) -> list[tuple[Path, dict[str, Any]]]:
    """The machine's vector files, read and checked before anything is started (bad ones raise
    :class:`spec.errors.BadVector`)."""
    paths = options.vectors if options.vectors is not None else [str(DEFAULT_VECTORS / options.machine)]
    return vector_files(options.machine, paths)


def conform(
    options: Options,
    channel: Channel,
    progress: Progress | None = None,
    vectors: list[tuple[Path, dict[str, Any]]] | None = None,
) -> Report:
    """Check the implementation on ``channel`` (closed at the end); ``vectors`` as
    :func:`load_vectors` reads them (read here when not given)."""
    progress = progress or Silent()
    report = Report(options.machine, options.implementation)
    try:
        files = load_vectors(options) if vectors is None else vectors
        hello = _handshake(channel, options.machine)
        report.implementation = hello.implementation or options.implementation
        _vectors_phase(files, channel, hello, report, progress)
        _property_phase(options, channel, hello, report, progress)
    except ImplementationFailed as exc:
        report.verdict, report.message = "implementation-failed", str(exc)
    finally:
        channel.close()
    return report


def _handshake(channel: Channel, machine: str) -> protocol.Hello:
    [answer] = channel.exchange([protocol.hello(machine)], timeout=STARTUP_SECONDS)
    try:
        return protocol.check_hello(answer, machine)
    except protocol.ProtocolError as exc:
        raise ProtocolBroken(f"the answer to hello: {exc}") from None


def _vectors_phase(
    files: list[tuple[Path, dict[str, Any]]],
    channel: Channel,
    hello: protocol.Hello,
    report: Report,
    progress: Progress,
) -> None:
    try:
        report.vectors = run_vectors(channel, hello, files, progress.vectors(len(files)))
    finally:
        progress.done()
    failed = [v for v in report.vectors if not v.passed and not v.skipped]
    if failed:
        report.verdict = "vector-failed"
        first = failed[0]
        report.message = f"{len(failed)} vector(s) failed; the first: {first.vector_id}: {first.mismatch}"


def _property_phase(
    options: Options, channel: Channel, hello: protocol.Hello, report: Report, progress: Progress
) -> None:
    explored = Explored()
    try:
        explored = explore(
            options.machine,
            channel,
            hello,
            seed=options.seed,
            examples=options.examples,
            max_steps=options.max_steps,
            on_run=progress.runs(options.examples),
        )
    except Aborted as aborted:
        report.verdict, report.message = "implementation-failed", str(aborted.failure)
        report.examples = explored.examples
        failure = str(aborted.failure)
        at = (
            f"step {len(aborted.steps) - 1}: the implementation failed"
            if aborted.steps
            else "the implementation failed"
        )
        _write(options, report, aborted.setup, aborted.steps, at, failure, shrunk=False)
        return
    except NotDeterministic as exc:
        report.verdict = "not-deterministic"
        report.message = f"the implementation answered the same run differently on two tries ({exc})"
        return
    finally:
        progress.done()
    report.examples, report.shrinks = explored.examples, explored.shrinks
    found = explored.divergence
    if found is None:
        return
    found = minimized(options.machine, channel, found)
    difference = f"the implementation differs from the reference at {found.difference}"
    if report.verdict == "pass":
        report.verdict, report.message = "differs", difference
    else:
        report.message += f"; and in a generated run, {difference}"
    _write(options, report, found.setup, found.steps, found.difference.summary, str(found.difference), shrunk=True)


def _write(
    options: Options,
    report: Report,
    setup: Setup,
    steps: Sequence[Exchange],
    what: str,
    detail: str,
    *,
    shrunk: bool,
) -> None:
    """The counterexample's vector, trace and page under ``out/<machine>/``."""
    from views.trace import trace_page

    folder = options.out / options.machine
    folder.mkdir(parents=True, exist_ok=True)
    command = (
        f"txnmodel conform --machine {options.machine} --seed {options.seed} "
        f"--impl {shlex.quote(options.implementation)}"
    )
    vector = vector_document(
        options.machine,
        setup,
        steps,
        vector_id=f"conform-{options.machine.replace('_', '-')}-seed-{options.seed}",
        description=f"Found by txnmodel conform against {report.implementation}: {what}",
        source=command,
    )
    report.steps = len(vector["steps"])  # 0: the implementation refused the setup itself
    trace = ConformTrace.of(
        options.machine,
        steps,
        what,
        f"{detail}. "
        + (
            "Shrunk: every step is needed for the difference. "
            if shrunk
            else "Not shrunk (the implementation failed). "
        )
        + f"Reproduce: {command}",
        {"seed": options.seed, "examples": options.examples, "steps": options.max_steps},
        setup,
    )
    written = {
        "vector.json": json.dumps(vector, indent=2) + "\n",
        "trace.json": json.dumps(trace.to_json(), indent=1) + "\n",
        "trace.html": trace_page(trace),
    }
    if not steps:
        del written["vector.json"]  # a vector has at least one step; the trace says what init got
    for name, text in written.items():
        (folder / name).write_text(text, encoding="utf-8")
        report.files.append(str(folder / name))
