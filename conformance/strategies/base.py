"""What a machine's driver is: how ``conform`` sets a machine up, picks its next command and observes it.

A driver plays the machine's surroundings for one generated run, as the machine's stateful test
does: the coordinator's driver plays the transaction log and the runner (it remembers the txns
issued, the ends sent to the participants, the re-runs scheduled), the batched log's plays the
managed ledger, the delayed tracker's the dispatcher and the clock.  It draws everything from the
same Hypothesis strategies as the stateful test (the strategies live here, and the tests import
them), reads the reference's state to know what is possible, and names the observations to compare
after every step.  One driver object serves one generated run.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from hypothesis import strategies as st

from reference.conformance import MachineVectors, machine_vectors
from spec.jsonvalues import to_json
from spec.result import Err, Ok

__all__ = ["Crash", "Driver", "Observation", "Rule", "Setup", "args_of", "draw_rule"]

Result = Ok[Any] | Err


@dataclass(frozen=True)
class Setup:
    """How a run starts: broker.conf overrides and the machine's ``init`` values (JSON)."""

    config: Mapping[str, Any] = field(default_factory=dict)
    init: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Crash:
    """The process dies and is loaded again: a ``crash`` then a ``recover`` with ``args``."""

    args: Mapping[str, Any] = field(default_factory=dict)


#: One observation: an observer's name and its arguments (JSON).
Observation = tuple[str, Mapping[str, Any]]

#: A rule's draw: the data to draw from and the reference's state; a command, a crash, or None
#: (nothing to do after all: the driver then draws another rule).
Draw = Callable[[st.DataObject, Any], "object | Crash | None"]


@dataclass(frozen=True)
class Rule:
    """One rule of the driver, as one rule of the stateful test: the command it sends (its name,
    or ``crash``), whether it is possible now, and how its arguments are drawn."""

    command: str
    draw: Draw
    enabled: Callable[[Any], bool] = lambda state: True


def args_of(command: object) -> dict[str, Any]:
    """A command's arguments as the vectors spell them: its fields, without ``@type``."""
    spelled = to_json(command)
    assert isinstance(spelled, dict)
    return {k: v for k, v in spelled.items() if k != "@type"}


def draw_rule(data: st.DataObject, rules: Sequence[Rule]) -> Rule:
    # by index: a strategy over the rules themselves would be cached by their hashes, which are
    # their bound methods' object ids, and the choices would depend on memory addresses
    return rules[data.draw(st.sampled_from(range(len(rules))), label="rule")]


class Driver(ABC):
    """One generated run's surroundings of a machine (subclassed per machine)."""

    machine: ClassVar[str]

    def __init__(self, commands: frozenset[str] | None = None, crashes: bool = True) -> None:
        """``commands``: the commands the implementation supports (None: all); ``crashes``: whether
        it has a crash and recover."""
        adapter = machine_vectors(self.machine)
        assert adapter is not None
        self.adapter: MachineVectors = adapter
        self.supported = commands
        self.crashes = crashes
        self._follow: list[Callable[[Any], object | None]] = []
        self._switched_off: frozenset[int] | None = None

    # --- what each machine says --------------------------------------------------------------

    @abstractmethod
    def setup(self, data: st.DataObject) -> Setup:
        """Draw the run's configuration and initial values."""

    @abstractmethod
    def rules(self) -> Sequence[Rule]:
        """Every rule of the machine (each checks whether it is possible itself)."""

    @abstractmethod
    def observations(self, state: Any) -> list[Observation]:
        """What to observe after a step: every observer, with the arguments that matter now."""

    def after(self, step: object, result: Result, state: Any) -> None:  # noqa: B027 - most drivers keep nothing
        """Bookkeeping of the surroundings after ``step`` answered ``result`` (the reference's)."""

    # --- drawing the next step ---------------------------------------------------------------

    def then(self, *follow: Callable[[Any], object | None]) -> None:
        """Steps that must come next (a rule of several commands): each is called with the state
        before it and gives its command, or None to skip it."""
        self._follow.extend(follow)

    def next(self, data: st.DataObject, state: Any) -> object | Crash:
        """The next step: a follow-up a rule asked for, else a rule drawn among those possible."""
        while self._follow:
            command = self._follow.pop(0)(state)
            if command is not None and self._allowed(command):
                return command
        rules = self.rules()
        if self._switched_off is None:
            self._switched_off = self._swarm(data, len(rules))
        allowed = [r for r in rules if self._rule_allowed(r) and r.enabled(state)]
        possible = [r for i, r in enumerate(rules) if i not in self._switched_off and r in allowed] or allowed
        while possible:
            rule = draw_rule(data, possible)
            chosen = rule.draw(data, state)
            if chosen is not None and self._allowed(chosen):
                return chosen
            possible = [r for r in possible if r is not rule]
        raise RuntimeError(f"no rule of {self.machine} can run in this state")

    @staticmethod
    def _swarm(data: st.DataObject, count: int) -> frozenset[int]:
        """Swarm testing, as Hypothesis's own stateful tests do it: each run switches some rules off
        (none, a quarter, half or three quarters of them on average), so rare combinations of the
        others come up more often; it shrinks towards every rule on."""
        density = data.draw(st.integers(0, 3), label="swarm density")
        if density == 0:
            return frozenset()
        return frozenset(i for i in range(count) if data.draw(st.integers(0, 3), label="rule off") < density)

    def _rule_allowed(self, rule: Rule) -> bool:
        if rule.command == "crash":
            return self.crashes
        return self.supported is None or rule.command in self.supported

    def _allowed(self, command: object) -> bool:
        if isinstance(command, Crash):
            return self.crashes
        return self.supported is None or self.name_of(command) in self.supported

    def name_of(self, command: object) -> str:
        for name, cls in self.adapter.commands.items():
            if type(command) is cls:
                return name
        raise TypeError(f"{type(command).__name__} is not a command of {self.machine}")
