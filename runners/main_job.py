"""The main job's work, spread over a few worker processes: proofs, simulations and verifications
at once.

``txnmodel run`` (:mod:`txnmodel.commands.run`) is CPU-bound from end to end, and its parts are
independent until a workload's histories are written: the Z3 proofs of one machine need nothing
from the simulator, and the histories of the ``ctp`` workload can be verified while ``multi``
simulates.  A :class:`Pipeline` keeps every worker busy with whatever is ready: each piece of work
is a *task* of a *phase*; a phase's tasks run in the order they were handed in, a task handed in by
another task's result (a workload's verification, once its histories are written) queues behind
what is already waiting, and the simulations are handed in a few at a time so that such
verifications overtake the simulations not yet started.  What comes back is the task's value and
the CPU seconds it took in its worker; each phase adds up its CPU seconds and its wall time (from
its first task handed in to its last result).

The workers are forked from this process once its modules are imported, so no worker imports the
engine, the checkers or Z3 again.  Every task is a module-level function: the value, not the
function, crosses the process boundary.
"""

from __future__ import annotations

import gc
import multiprocessing
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field
from typing import Any

__all__ = ["PhaseTimes", "Pipeline", "prove_task", "simulate_task", "verify_task"]


@dataclass
class PhaseTimes:
    """What one phase cost: wall seconds from its first task handed in to its last result (phases
    overlap, so these do not add up to the run's), and the CPU seconds of its tasks in the workers
    plus whatever this process spent on it (``own``)."""

    name: str
    started: float | None = None
    ended: float | None = None
    cpu: float = 0.0
    tasks: int = 0

    @property
    def wall(self) -> float:
        return 0.0 if self.started is None or self.ended is None else self.ended - self.started


@dataclass
class _Waiting:
    phase: PhaseTimes
    function: Callable[..., Any]
    args: tuple[Any, ...]
    done: Callable[[Any], None]


@dataclass
class Pipeline:
    """Worker processes and the tasks they run; :meth:`submit` hands a task in, :meth:`run` feeds
    the workers until every task (including those that results handed in) is done."""

    jobs: int
    window: int = 0  # tasks of a throttled phase in the workers' queue at once (0: 2 per worker)
    phases: dict[str, PhaseTimes] = field(default_factory=dict)
    _executor: ProcessPoolExecutor | None = None
    _running: dict[Future[Any], _Waiting] = field(default_factory=dict)
    _throttled: deque[_Waiting] = field(default_factory=deque)

    def __post_init__(self) -> None:
        if self.jobs < 1:
            raise ValueError(f"jobs must be at least 1, got {self.jobs}")
        # Fork: the workers inherit every module this process imported.  What they inherit is not
        # theirs to collect (gc.freeze): a native object of this process in an uncollected cycle (an
        # official client's consumer) would be destroyed in the child, whose copy has none of its
        # threads, and its destructor would wait for them forever.
        self._executor = ProcessPoolExecutor(
            self.jobs, mp_context=multiprocessing.get_context("fork"), initializer=gc.freeze
        )

    def phase(self, name: str) -> PhaseTimes:
        return self.phases.setdefault(name, PhaseTimes(name))

    def submit(
        self, phase: str, function: Callable[..., Any], args: tuple[Any, ...], done: Callable[[Any], None]
    ) -> None:
        """Run ``function(*args)`` in a worker; ``done`` hears its value in this process, in the
        order results arrive.  An exception in the task is raised by :meth:`run`."""
        self._start(_Waiting(self.phase(phase), function, args, done))

    def submit_throttled(
        self, phase: str, function: Callable[..., Any], args: tuple[Any, ...], done: Callable[[Any], None]
    ) -> None:
        """As :meth:`submit`, but the task waits here until fewer than the window's tasks of
        throttled phases are queued, so tasks handed in later by results go ahead of it."""
        times = self.phase(phase)
        if times.started is None:
            times.started = time.perf_counter()
        self._throttled.append(_Waiting(times, function, args, done))
        self._refill()

    def _start(self, task: _Waiting) -> None:
        assert self._executor is not None
        if task.phase.started is None:
            task.phase.started = time.perf_counter()
        self._running[self._executor.submit(_timed, task.function, task.args)] = task

    def _refill(self) -> None:
        window = self.window or 2 * self.jobs
        while self._throttled:
            phase = self._throttled[0].phase
            if sum(1 for task in self._running.values() if task.phase is phase) >= window:
                return
            self._start(self._throttled.popleft())

    def run(self, idle: Callable[[], None] | None = None) -> None:
        """Until every task is done: hand each result to its ``done``.  ``idle`` runs once, in this
        process, while the workers start on the first tasks (work of this process's own)."""
        if idle is not None:
            idle()
        while self._running:
            finished, _ = wait(list(self._running), return_when=FIRST_COMPLETED)
            for future in sorted(finished, key=lambda f: self._running[f].phase.name):
                task = self._running.pop(future)
                value, cpu = future.result()
                task.phase.cpu += cpu
                task.phase.tasks += 1
                task.phase.ended = time.perf_counter()
                task.done(value)
            self._refill()

    def close(self) -> None:
        if self._executor is not None:
            self._executor.shutdown(wait=True, cancel_futures=True)
            self._executor = None


def _timed(function: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, float]:
    """In a worker: the task's value and the CPU seconds it took there."""
    started = time.process_time()
    value = function(*args)
    return value, time.process_time() - started


# -- the tasks ------------------------------------------------------------------------------------


def prove_task(machine: str, rlimit: int) -> list[Any]:
    """Every Z3 proof obligation of one machine: its rows (:class:`proofs.framework.Row`)."""
    from proofs.framework import prove_machine

    return prove_machine(machine, rlimit=rlimit)


def simulate_task(spec: Any) -> tuple[Any, Any]:
    """One seeded history (:func:`engine.simulation.workloads.run`): the run's result without its
    operations, and the operations as a history table (:func:`history_io.files.history_table`),
    which crosses to the parent process several times cheaper than the operations themselves."""
    import dataclasses

    from engine.simulation.workloads import run
    from history_io.files import history_table

    result = run(spec)
    return dataclasses.replace(result, operations=[]), history_table(result.operations)


def verify_task(
    units: Sequence[tuple[str, tuple[str, ...] | None]], out: str, part: str, reproduce: Any = None
) -> list[Any]:
    """Every checker on some histories of the written files; the verdicts are written as part
    ``part`` under ``out`` (:func:`runners.file_checks.check_units`) and come back without their
    HTML pages.  ``reproduce``: :data:`runners.file_checks.Reproduce`, a module-level function."""
    from invariants.verify import VerifyOptions
    from runners.file_checks import check_units

    return check_units(units, "parquet", VerifyOptions(), out, part, reproduce)
