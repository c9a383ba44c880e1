"""What every broker component shares: the lifecycle, written once.

A component (the coordinator service, a partition, a subscription) owns one pure machine's state
and the ledgers it persists to.  The lifecycle is the same for all of them:

* **Step, then record.**  :meth:`Component._advance` steps the machine, adopts the new state at once
  (Pulsar's in-memory structures move before the write completes, too) and reports the step to the
  broker's observer (the machine-level history).  What the step asked for is the component's to
  carry out.
* **Epochs.**  Every load and every crash starts a new epoch.  A callback scheduled in one epoch
  (a timer, a write's completion, a re-run) checks :meth:`Component._current` or
  :meth:`Component._live` first and does nothing in a later one: a crashed component's memory is
  gone, and so are its plans.
* **Reload from durable state.**  When a write a step asked for fails, the machine's memory ran
  ahead of its log: :meth:`Component.reload` crashes the component and asks the broker to load it
  again later (:meth:`BrokerHost.restart_later`), which is what a broker does when it fences or
  unloads a topic or a coordinator whose ledger failed.

* **A failure is a crash.**  A machine's ``step`` never raises (a rejected command is an ``Err``
  value); one that does is a programming error in the machine or its shell.  :meth:`_advance`
  records that step as failed (``UnknownError``, what a broker answers when a handler throws) and
  lets the exception go on to the broker, which contains it (:meth:`Broker.contain
  <engine.broker.broker.Broker.contain>`): the component crashes and is loaded again
  from its durable state, the request it was handling is never answered, and the run lists the
  failure (:class:`ComponentFailure`), so the history is still produced and ``txnmodel simulate``
  still fails loudly.  An exception raised outside a step (the PIP-160 writer in the component's
  log, a dispatch, a command's field check, a load) is recorded by the broker as a ``raised``
  operation on the component's object (:data:`spec.history.RAISED`).

Also here: the futures helpers the components combine writes and answers with, and
:class:`BrokerError`, the exception a failed request's future carries.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from engine.ledger_store import LedgerStore
from engine.recorder import STEP_RAISED, is_recorded, mark_recorded
from engine.scheduler import Future, Simulation
from engine.storage.bufferedwriter_metrics import BufferedWriterMetrics
from engine.storage.ledger import LedgerError, ManagedLedger
from engine.storage.record_log import LogWriteFailed
from reference.conformance import machine_vectors
from spec.config import Config
from spec.envelope import LogKind
from spec.errors import DomainError, error_by_name
from spec.jsonvalues import to_json
from spec.result import Err, Ok
from spec.types import Position

if TYPE_CHECKING:
    from engine.recorder import MachineObserver

__all__ = [
    "STEP_RAISED",
    "BrokerError",
    "BrokerHost",
    "Component",
    "ComponentFailure",
    "Restartable",
    "after",
    "all_of",
    "error_of",
    "fail",
    "is_recorded",
    "mark_recorded",
    "named_error",
    "quiet",
    "read_all",
]

S = TypeVar("S")  # the machine's state
C = TypeVar("C")  # the machine's command union
R = TypeVar("R", bound="Ok[object] | Err")  # the machine's step result
T = TypeVar("T")


class BrokerError(Exception):
    """A request failed with a domain error (its ``name`` is what the history records)."""

    def __init__(self, error: DomainError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(frozen=True)
class ComponentFailure:
    """An exception a broker component raised while handling an event, contained as its crash."""

    time_ms: int
    component: str  # the history's object id of the component that crashed
    error: str  # ``Type: message``
    where: str  # the innermost frame: ``path:line in function``

    def to_json(self) -> dict[str, object]:
        return {"time_ms": self.time_ms, "component": self.component, "error": self.error, "where": self.where}

    def describe(self) -> str:
        return f"{self.component} raised {self.error} ({self.where}) at {self.time_ms} ms"


class Restartable(Protocol):
    """What the broker's restart-later loop needs of a component."""

    @property
    def ready(self) -> bool: ...

    def load(self) -> bool: ...


class BrokerHost(Protocol):
    """What a component needs of the broker that hosts it: the simulation, configuration and
    ledgers, the observer (read at call time: a test may attach one later), the log writers'
    settings, the namespace system topics, the restart-later loop, and who to tell that a
    partition's memory went."""

    sim: Simulation
    config: Config
    store: LedgerStore
    observer: MachineObserver | None
    batching: bool
    writer_metrics: dict[LogKind, BufferedWriterMetrics]
    delayed_async_create: bool
    shared_delayed_index: bool
    # Whether a consumer (by its server-wide id) has asked for messages yet; None: every consumer
    # has (the simulation's consumers take what they are given).
    consumer_asked: Callable[[int], bool] | None

    def restart_later(self, component: Restartable) -> None: ...

    def partition_unloaded(self, name: str) -> None: ...

    def system_topic(self, name: str) -> ManagedLedger: ...

    def write_system_topic(self, name: str, key: str, value: bytes | None) -> Position: ...


class Component(Generic[S, C, R]):
    """The shared lifecycle of a component over one machine (see the module docstring).

    A subclass names its machine (``machine``: the history's machine name), its history object
    (``obj``), how its machine steps (:meth:`_machine_step`, which must look the machine's ``step``
    up at call time: the known-bug catalogue patches machine modules), how it loads and crashes."""

    machine: str

    def __init__(self, host: BrokerHost) -> None:
        self.host = host
        self.sim = host.sim
        self.config = host.config
        self.state: S | None = None
        self._epoch = 0

    @property
    def ready(self) -> bool:
        return self.state is not None

    @property
    def obj(self) -> str:
        """The history's object id of this component."""
        raise NotImplementedError

    def load(self) -> bool:
        raise NotImplementedError

    def crash(self) -> None:
        raise NotImplementedError

    def within(self, call: Callable[[], T]) -> T:
        """``call`` run as this component's own work: a query of its machine, or a fault done to
        it from outside a request.  Its frame puts the component on the stack, so what ``call``
        raises is contained as this component raising it (:meth:`Broker.contain` crashes the
        innermost component on the stack), not taken for the simulator's own bug."""
        return call()

    def query(self, name: str, **args: object) -> object:
        """Ask the machine's ``VECTORS`` observer ``name`` about the current state, as this
        component's own work (:meth:`within`), and record the answer as a query row
        (:data:`spec.history.QUERY`): the checker asks the same observer of the state the recorded
        steps built, so an answer the state does not give is flagged at its row.  The observer is
        looked up at call time, as :meth:`_machine_step` looks up ``step``."""
        assert self.state is not None
        state = self.state
        vectors = machine_vectors(self.machine)
        assert vectors is not None, self.machine
        observe = vectors.observers[name]
        answer = self.within(lambda: observe(state, **args))
        observer = self.host.observer
        if observer is not None:
            observer.queried(
                self.obj, self.machine, name, {key: to_json(value) for key, value in args.items()}, to_json(answer)
            )
        return answer

    # -- step, then record ------------------------------------------------------------------------

    def _machine_step(self, state: S, command: C) -> tuple[S, R]:
        raise NotImplementedError

    def _advance(self, command: C) -> R:
        """Step the machine on the current state, adopt the new state, and record the step."""
        assert self.state is not None
        try:
            self.state, result = self._machine_step(self.state, command)
        except Exception as exc:
            self._observe_failed_step(command)
            mark_recorded(exc)
            raise
        self._observe_step(command, result)
        return result

    def _observe_step(self, command: C, result: R) -> None:
        """Tell the machine-level recorder (if any) about one step of the machine."""
        observer = self.host.observer
        if observer is not None:
            observer.stepped(self.obj, self.machine, command, result)

    def _observe_failed_step(self, command: C) -> None:
        """Tell the recorder that stepping ``command`` raised (see the module docstring)."""
        observer = self.host.observer
        if observer is not None:
            observer.failed(self.obj, self.machine, command, STEP_RAISED)

    def _observe_recovery(self, inputs: dict[str, object]) -> None:
        """Tell the recorder what the component's recovery read (values spelled as JSON here)."""
        observer = self.host.observer
        if observer is not None:
            observer.recovered(self.obj, self.machine, {key: to_json(value) for key, value in inputs.items()})

    def _observe_crash(self) -> None:
        observer = self.host.observer
        if observer is not None:
            observer.crashed(self.obj)

    # -- epochs -----------------------------------------------------------------------------------

    def _new_epoch(self) -> int:
        """A load or a crash: every callback of the epoch before is void from now on."""
        self._epoch += 1
        return self._epoch

    def _current(self, epoch: int) -> bool:
        """No load or crash happened since ``epoch`` (a write's completion checks this)."""
        return epoch == self._epoch

    def _live(self, epoch: int) -> bool:
        """Still ``epoch``, and loaded (a timer or a re-run checks this)."""
        return epoch == self._epoch and self.state is not None

    def _while_live(self, epoch: int, action: Callable[[], None]) -> Callable[[], None]:
        """``action``, to run later only if the component is still live in ``epoch``."""

        def guarded() -> None:
            if self._live(epoch):
                action()

        return guarded

    # -- reload from durable state ----------------------------------------------------------------

    def reload(self) -> None:
        """A write failed: the machine's memory ran ahead of its log.  Crash, and load again later."""
        self.crash()
        self.host.restart_later(self)


# --------------------------------------------------------------------------------------------
# Futures


def fail(error: DomainError) -> Future[T]:
    """A request's answer that already failed with ``error``."""
    future: Future[T] = Future()
    future.set_exception(BrokerError(error))
    return future


def error_of(exc: BaseException) -> DomainError:
    """The domain error a failed write or request carries."""
    if isinstance(exc, BrokerError):
        return exc.error
    if isinstance(exc, LogWriteFailed):
        return exc.error
    if isinstance(exc, LedgerError):
        return exc.domain_error()
    raise exc


def named_error(name: str) -> DomainError:
    return error_by_name(name)(name)


def all_of(futures: Sequence[Future[None]]) -> Future[None]:
    """Completes when every future did; fails with the first failure (in list order)."""
    out: Future[None] = Future()
    remaining = [len(futures)]
    if not futures:
        out.set_result(None)
        return out

    def one(_: Future[None]) -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            failed = next((f.error for f in futures if f.error is not None), None)
            if failed is not None:
                out.set_exception(failed)
            else:
                out.set_result(None)

    for future in futures:
        future.add_done_callback(one)
    return out


def after(writes: Future[None], action: Callable[[], None]) -> None:
    """Run ``action`` once ``writes`` succeeded (at once if they already did); never if they failed."""
    if writes.done and writes.error is None:
        action()
    else:
        writes.add_done_callback(lambda w: action() if w.error is None else None)


def quiet(future: Future[T]) -> Future[None]:
    """A future that completes (successfully) when ``future`` does, whatever its outcome."""
    out: Future[None] = Future()
    future.add_done_callback(lambda _: out.set_result(None))
    return out


def read_all(ledger: ManagedLedger) -> list[tuple[Position, bytes]]:
    """Every entry a managed ledger holds, in order."""
    infos = ledger.ledgers()
    if not infos:
        return []
    return [(e.position, e.data) for e in ledger.read(Position(infos[0].ledger_id, 0), 1 << 62)]
