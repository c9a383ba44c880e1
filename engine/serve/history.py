"""The machine-level history of a serve session (``txnmodel serve --history``).

Every step and recovery of every machine in the broker is recorded, as in the simulator, through
the broker's :class:`~engine.recorder.MachineObserver`.  A step made while the server handles a
request takes the request's window: it opens when the frame arrives (:meth:`ServeHistory.begin`)
and its steps complete when the answer leaves for the client (:meth:`ServeHistory.answered`); an
answer never sent (a dropped response, a component that is down) leaves them open, as in the
simulation.  Without ``--history`` nothing is recorded and every method does nothing.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

from engine.recorder import HistoryRecorder, MachineObserver, RequestContext
from spec.config import Config

__all__ = ["ServeHistory"]


class ServeHistory:
    """The session's recorder and the observer the broker reports its machines' steps to."""

    def __init__(self, history_id: str, seed: int, config: Config, now: Callable[[], int], *, record: bool) -> None:
        self.recorder: HistoryRecorder | None = None
        self.observer: MachineObserver | None = None
        if record:
            self.recorder = HistoryRecorder(history_id, seed, now)
            processes = itertools.count()
            self.observer = MachineObserver(self.recorder, lambda: next(processes), config)

    def begin(self, sent_at: int) -> RequestContext | None:
        """A request's frame arrived; the steps its handler makes belong to the context returned."""
        if self.observer is None:
            return None
        return self.observer.begin_request(sent_at)

    def end(self) -> None:
        """The request's handler returned (its answer may come later, from a future's callback)."""
        if self.observer is not None:
            self.observer.end_request()

    def answered(self, context: RequestContext | None, success: bool) -> None:
        """The answer to ``context``'s request left for the client: its machine steps complete."""
        if context is not None and self.observer is not None:
            self.observer.answered(context, success)
