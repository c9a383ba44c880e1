"""Differential property testing: the same command sequences on the reference and the implementation.

Hypothesis draws a run from the machine's driver (:mod:`conformance.strategies`): a setup, then
steps, each a command or a crash and recovery, chosen from what the reference's state makes
possible.  Every step goes to both sides; the step's answer and every observation the driver names
are compared after it (:func:`spec.conform.expected`, then the vectors' partial-match rule with the
reference's value as the expectation).  The first difference is a :class:`Divergence`, which
Hypothesis shrinks; :func:`minimized` then drops every step whose removal keeps a difference, so
the counterexample is 1-minimal.

An implementation that cannot be talked to any more (it hung, died or broke the protocol) ends the
whole run at once (:class:`Aborted`): shrinking would have to wait out the time limit again and
again, so it is reported with the step it failed at, unshrunk.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import pkgutil
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import hypothesis
from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis import strategies as st
from hypothesis.errors import Flaky

from conformance.implementation import Channel, ImplementationFailed
from conformance.strategies import driver_class
from conformance.strategies.base import Crash, Driver, Observation, Setup, args_of
from reference.conformance import describe_result, matches
from reference.sessions import Machine, Refused
from spec import conform
from spec.result import Err, Ok

__all__ = [
    "Aborted",
    "Divergence",
    "Exchange",
    "Explored",
    "NotDeterministic",
    "explore",
    "minimized",
    "replay",
]

#: At most this many steps of a generated run (``--steps``).
DEFAULT_STEPS = 50
#: A run goes on after each step with probability 1 - 1/CONTINUE (32 steps on average before the
#: cap).  Longer runs meet rarer combinations (a txn with partitions, then a crash); shrinking
#: takes the length off again.
CONTINUE = 32


@dataclass
class Exchange:
    """One step of a run, as both sides answered it."""

    name: str  # the command's name, or "crash" (then ``args`` are recover's)
    args: Mapping[str, Any]
    observations: list[Observation]
    reference: dict[str, Any] = field(default_factory=dict)  # the reference's answer, spelled
    implementation: dict[str, Any] = field(default_factory=dict)
    reference_observed: list[Any] = field(default_factory=list)
    implementation_observed: list[Any] = field(default_factory=list)

    @property
    def is_crash(self) -> bool:
        return self.name == "crash"


@dataclass(frozen=True)
class Difference:
    """Where the two sides first differ: the step, what was compared, both values."""

    step: int
    command: str
    what: str
    expected: Any
    actual: Any

    def __str__(self) -> str:
        where = conform.first_difference(self.expected, self.actual)
        path, mine, theirs = where if where is not None else ("$", self.expected, self.actual)
        at = "" if path == "$" else f" at {path}"
        return (
            f"step {self.step} ({self.command}): {self.what}{at}: the reference has {_spell(mine)}, "
            f"the implementation {_spell(theirs)}"
        )

    @property
    def summary(self) -> str:
        """One short line: which step and what differs."""
        return f"step {self.step} ({self.command}): the {self.what} differs"


class Divergence(Exception):
    """A run on which the implementation answered differently from the reference."""

    def __init__(self, setup: Setup, steps: list[Exchange], difference: Difference) -> None:
        super().__init__(str(difference))
        self.setup = setup
        self.steps = steps
        self.difference = difference


class Aborted(BaseException):  # a BaseException: Hypothesis lets it through at once, unshrunk
    """The implementation could not be talked to any more (``failure``) during ``steps``."""

    def __init__(self, setup: Setup, steps: list[Exchange], failure: ImplementationFailed) -> None:
        super().__init__(str(failure))
        self.setup = setup
        self.steps = steps
        self.failure = failure


class NotDeterministic(Exception):
    """The implementation answered the same run differently on two tries."""


def _spell(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return text if len(text) <= 400 else text[:397] + "..."


# --- one run ----------------------------------------------------------------------------------------


class Source:
    """Where a run's steps come from: a driver drawing them, or a recorded list (a replay)."""

    def next(self, state: Any) -> tuple[str, Mapping[str, Any], object | Crash] | None:
        raise NotImplementedError

    def observations(self, state: Any) -> list[Observation]:
        raise NotImplementedError

    def after(self, step: object | Crash, result: Ok[Any] | Err, state: Any) -> None:
        """Bookkeeping after the reference answered."""


class Drawn(Source):
    def __init__(self, driver: Driver, data: st.DataObject, max_steps: int, observers: frozenset[str] | None) -> None:
        self.driver, self.data, self.max_steps, self.observers = driver, data, max_steps, observers
        self.taken = 0

    def next(self, state: Any) -> tuple[str, Mapping[str, Any], object | Crash] | None:
        if self.taken >= self.max_steps or (
            self.taken and self.data.draw(st.integers(0, CONTINUE - 1), label="more") == 0
        ):
            return None
        self.taken += 1
        step = self.driver.next(self.data, state)
        if isinstance(step, Crash):
            return "crash", dict(step.args), step
        return self.driver.name_of(step), args_of(step), step

    def observations(self, state: Any) -> list[Observation]:
        wanted = self.driver.observations(state)
        return [o for o in wanted if self.observers is None or o[0] in self.observers]

    def after(self, step: object | Crash, result: Ok[Any] | Err, state: Any) -> None:
        self.driver.after(step, result, state)


class Recorded(Source):
    """The steps of an earlier run, with the observations it made after each."""

    def __init__(self, steps: Sequence[Exchange]) -> None:
        self.steps = list(steps)
        self.at = 0

    def next(self, state: Any) -> tuple[str, Mapping[str, Any], object | Crash] | None:
        if self.at >= len(self.steps):
            return None
        step = self.steps[self.at]
        self.at += 1
        return step.name, step.args, Crash(step.args) if step.is_crash else None

    def observations(self, state: Any) -> list[Observation]:
        return self.steps[self.at - 1].observations


def play(machine: str, channel: Channel, setup: Setup, source: Source) -> list[Exchange]:
    """Run ``setup`` then every step ``source`` gives on the reference and on ``channel``; the steps
    (raises :class:`Divergence` at the first difference, :class:`Aborted` when the channel fails,
    with the step it failed at last)."""
    reference = Machine.start(machine, setup.config, setup.init)
    steps: list[Exchange] = []
    try:
        [answer] = channel.exchange([conform.init(setup.config, setup.init)])
        if answer.kind != "ok":
            raise Divergence(setup, [], Difference(0, "init", "init", {"ok": None}, answer.spelled()))
        while (planned := source.next(reference.state)) is not None:
            exchange, requests = _reference_part(reference, source, len(steps), planned)
            steps.append(exchange)
            _implementation_part(channel, exchange, requests)
            difference = _first_difference(len(steps) - 1, exchange)
            if difference is not None:
                raise Divergence(setup, steps, difference)
    except ImplementationFailed as exc:
        raise Aborted(setup, steps, exc) from None
    return steps


def _reference_part(
    reference: Machine, source: Source, index: int, planned: tuple[str, Mapping[str, Any], object | Crash | None]
) -> tuple[Exchange, list[dict[str, Any]]]:
    """The reference's side of one step, and the requests that ask the implementation the same."""
    name, args, step = planned
    where = f"$.steps[{index}]"
    requests: list[dict[str, Any]]
    if name == "crash":
        reference.crash(where)
        result = reference.recover(args, where)
        requests = [conform.crash(), conform.recover(args)]
        step = Crash(args)
    else:
        command = reference.command(name, args, where)
        result = reference.step(command, where)
        step = command if step is None else step
        requests = [conform.step(name, args)]
    source.after(step, result, reference.state)
    observations = source.observations(reference.state)
    exchange = Exchange(name, dict(args), list(observations), describe_result(result))
    exchange.reference_observed = [
        reference.observe(o, a, f"{where}.check[{i}]") for i, (o, a) in enumerate(observations)
    ]
    return exchange, [*requests, *(conform.observe(o, a) for o, a in observations)]


def _implementation_part(channel: Channel, exchange: Exchange, requests: list[dict[str, Any]]) -> None:
    answers = channel.exchange(requests)
    if exchange.is_crash:
        crashed, answers = answers[0], answers[1:]
        if crashed.kind != "ok":
            exchange.implementation = {"crash": crashed.spelled()}
            return
    exchange.implementation = answers[0].spelled()
    exchange.implementation_observed = [a.value if a.kind == "ok" else a.spelled() for a in answers[1:]]


def _first_difference(index: int, exchange: Exchange) -> Difference | None:
    if "crash" in exchange.implementation:
        return Difference(index, "crash", "answer to crash", {"ok": None}, exchange.implementation["crash"])
    want = conform.expected(exchange.reference)
    if not matches(want, exchange.implementation):
        what = "answer to recover" if exchange.is_crash else "result"
        return Difference(index, exchange.name, what, want, exchange.implementation)
    for (observer, args), mine, theirs in zip(
        exchange.observations, exchange.reference_observed, exchange.implementation_observed, strict=True
    ):
        want = conform.expected_value(mine)
        if not matches(want, theirs):
            what = f"observation {observer}({json.dumps(args, separators=(',', ':'))})"
            return Difference(index, exchange.name, what, want, theirs)
    return None


def replay(machine: str, channel: Channel, setup: Setup, steps: Sequence[Exchange]) -> Divergence | None:
    """Run recorded steps again; the divergence they still show, or None.  A step list the reference
    refuses (a removed step made a later one impossible) shows nothing."""
    try:
        play(machine, channel, setup, Recorded(steps))
    except Divergence as found:
        return found
    except Refused:
        return None
    return None


def minimized(machine: str, channel: Channel, found: Divergence, *, budget: int = 400) -> Divergence:
    """Drop steps while a difference remains (at most ``budget`` replays): a 1-minimal run."""
    best = found
    changed = True
    while changed and budget > 0:
        changed = False
        for index in reversed(range(len(best.steps))):
            if budget <= 0 or index >= len(best.steps):
                break
            budget -= 1
            candidate = best.steps[:index] + best.steps[index + 1 :]
            if not candidate:
                continue
            again = replay(machine, channel, best.setup, candidate)
            if again is not None:
                best, changed = again, True
    return best


# --- the property -----------------------------------------------------------------------------------


@dataclass
class Explored:
    """What :func:`explore` did: the runs tried, and the divergence found (minimal), if any."""

    examples: int = 0
    shrinks: int = 0
    divergence: Divergence | None = None


def explore(
    machine: str,
    channel: Channel,
    hello: conform.Hello,
    *,
    seed: int,
    examples: int,
    max_steps: int = DEFAULT_STEPS,
    on_run: Callable[[Explored], None] = lambda _: None,
) -> Explored:
    """Generate ``examples`` runs (seeded) and compare both sides on each; shrink the first
    divergence.  Raises :class:`Aborted` when the implementation fails, :class:`NotDeterministic`
    when a failing run does not fail again."""
    make = driver_class(machine)
    explored = Explored()

    @settings(
        max_examples=examples,
        database=None,
        deadline=None,
        derandomize=False,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate, Phase.shrink),
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    @hypothesis.given(st.data())
    def property_holds(data: st.DataObject) -> None:
        if explored.divergence is None:
            explored.examples += 1
        else:
            explored.shrinks += 1
        on_run(explored)
        driver = make(hello.commands, hello.crash)
        setup = driver.setup(data)
        try:
            play(machine, channel, setup, Drawn(driver, data, max_steps, hello.observers))
        except Divergence as found:
            if explored.divergence is None or len(found.steps) <= len(explored.divergence.steps):
                explored.divergence = found
            raise

    try:
        with _constants_of_the_reference():
            hypothesis.seed(seed)(property_holds)()
    except Divergence as found:
        explored.divergence = found
    except Flaky as exc:
        raise NotDeterministic(str(exc).splitlines()[0] if str(exc) else "flaky") from None
    return explored


@contextlib.contextmanager
def _constants_of_the_reference() -> Iterator[None]:
    """Hypothesis mixes into what it draws the constants of every "local" module the process has
    imported so far (``hypothesis.internal.conjecture.providers``), so the same seed would draw
    different runs in a process that happened to import other modules.  For the duration of a
    ``conform`` run the pool is fixed to the constants of ``reference/`` (boundary values worth
    drawing: 100, the tick; 1000, the retry interval ...), which depend on the sources alone.
    Should Hypothesis's internals differ, the run goes on without the fix."""
    try:
        from hypothesis.internal.conjecture import providers
        from hypothesis.internal.constants_ast import Constants, constants_from_module
        from hypothesis.internal.floats import float_to_int
        from sortedcontainers import SortedSet

        import reference

        found = Constants()
        for module in sorted(m.name for m in pkgutil.iter_modules(reference.__path__)):
            found |= constants_from_module(importlib.import_module(f"reference.{module}"))
        fixed = Constants(
            integers=SortedSet(found.integers),
            floats=SortedSet(found.floats, key=float_to_int),
            bytes=SortedSet(found.bytes),
            strings=SortedSet(found.strings),
        )
        original = providers._get_local_constants
    except (ImportError, AttributeError, TypeError):
        yield
        return
    providers._get_local_constants = lambda: fixed
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        yield
    finally:
        providers._get_local_constants = original
        providers.CONSTANTS_CACHE.cache.clear()
