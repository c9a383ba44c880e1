"""The outcome of one step of a machine: ``Ok`` with a value, or ``Err`` with a domain error.

Both carry the *effects* the step asks its runner to carry out (log records to append or delete,
markers to write, messages to send, timers to arm).  Effects are plain frozen values defined by
each machine; the engine is the only place that performs them.  An ``Err`` may carry effects too,
because Pulsar sometimes persists before it checks (the coordinator's log-before-check writes a
record and deletes it again when the check fails).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

from spec.errors import DomainError

__all__ = ["Effect", "Err", "Ok", "Result"]

V = TypeVar("V", covariant=True)


@dataclass(frozen=True, slots=True)
class Effect:
    """Base class of every effect value."""


@dataclass(frozen=True, slots=True, init=False)
class Ok(Generic[V]):
    value: V
    effects: tuple[Effect, ...] = ()

    def __init__(self, value: V, effects: tuple[Effect, ...] = ()) -> None:
        # Written out (the dataclass's sets each field through object.__setattr__): every step
        # of every machine makes one.
        _set_ok_value(self, value)
        _set_ok_effects(self, effects)

    @property
    def ok(self) -> bool:
        return True


@dataclass(frozen=True, slots=True)
class Err:
    error: DomainError
    effects: tuple[Effect, ...] = ()

    def __post_init__(self) -> None:
        # The error is what a broker answers on the wire (its ``server_error``): anything else is a
        # machine's programming error no broker could answer with.  Raised here, inside the step,
        # so a runner contains it as the step raising instead of handing it on to a client.
        if not isinstance(self.error, DomainError):
            raise TypeError(f"Err needs a DomainError, got {type(self.error).__name__}: {self.error!r:.80}")

    @property
    def ok(self) -> bool:
        return False


# the slots' own setters, which a frozen dataclass's __setattr__ does not guard
_set_ok_value = Ok.__dict__["value"].__set__
_set_ok_effects = Ok.__dict__["effects"].__set__


Result = Ok[object] | Err
