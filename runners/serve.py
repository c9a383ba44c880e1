"""``serve(...)``: the reference broker on a socket, from Python (tests, notebooks, ``txnmodel serve``).

::

    with serve() as url:                       # pulsar://127.0.0.1:<free port>
        client = pulsar.Client(url)
        ...

The server (:class:`engine.serve.server.PulsarServer`) runs its loop on one background thread;
leaving the block stops it, closes every connection and ledger, and, with ``history=DIR``, writes the
machine-level history of the session to ``DIR/serve.parquet`` for ``txnmodel verify DIR``.  With
``admin_port=`` (0: a free port) Pulsar's admin REST API is served too
(:class:`engine.serve.admin.AdminServer`); :func:`start`'s handle names its URL (``admin_url``).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from engine.serve.admin import AdminServer
from engine.serve.admin_routes import routes
from engine.serve.faults import parse_faults
from engine.serve.server import PulsarServer, ServerOptions
from spec.config import Config

__all__ = ["ServeHandle", "finish", "history_id", "serve", "start", "write_history"]


def history_id() -> str:
    """A session's history id: ``serve-<Unix ms of its start>``."""
    return f"serve-{int(time.time() * 1000)}"


@dataclass
class ServeHandle:
    """A running server: its URL, the server object (touch it only from its own thread) and its thread."""

    server: PulsarServer
    thread: threading.Thread
    history: Path | None = None
    errors: list[BaseException] = field(default_factory=list)
    admin: AdminServer | None = None

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def admin_url(self) -> str:
        """The admin REST API's ``http://HOST:PORT`` (start with ``admin_port=``)."""
        if self.admin is None:
            raise RuntimeError("start the server with admin_port= for the admin API")
        return self.admin.url

    def stop(self) -> None:
        if self.admin is not None:
            self.admin.stop()
        self.server.stop()
        self.thread.join(timeout=30)
        if self.thread.is_alive():
            raise RuntimeError("the serve loop did not stop within 30 s")

    def inject(self, kind: str) -> bool:
        """Inject one component fault now (see :meth:`engine.serve.faults.ServeFaults.inject`):
        False when there was nothing to hit.  The server needs ``faults=`` (``faults={}``: no
        random faults, injection on demand only)."""

        def run(server: PulsarServer) -> bool:
            if server.faults is None:
                raise RuntimeError("start the server with faults= to inject faults")
            return server.faults.inject(kind)

        return bool(self.call(run))

    def heal(self) -> None:
        """Stop injecting faults (a crashed broker restarts)."""
        self.call(lambda server: server.faults.heal() if server.faults is not None else None)

    def fault_events(self) -> list[dict[str, Any]]:
        """The faults injected so far (time, kind, target)."""
        return list(self.call(lambda server: [e.to_json() for e in server.faults.events] if server.faults else []))

    def call(self, action: Any) -> Any:
        """Run ``action(server)`` on the server's thread between two turns of its loop; its result."""
        done = threading.Event()
        box: list[Any] = []

        def hook() -> None:
            self.server.on_tick.remove(hook)
            try:
                box.append(action(self.server))
            except BaseException as exc:  # handed back to the caller
                box.append(exc)
            done.set()

        self.server.on_tick.append(hook)
        self.server.stop_waiting()
        if not done.wait(30):
            raise RuntimeError("the serve loop did not run the call within 30 s")
        if isinstance(box[0], BaseException):
            raise box[0]
        return box[0]


def write_history(server: PulsarServer, directory: Path, *, metadata: dict[str, Any] | None = None) -> Path | None:
    """Write the session's machine-level history as ``directory/<history id>.parquet`` (None: not
    recorded).  The id names the session's start (``serve-<Unix ms>``), so the sessions of a
    restarted server sit side by side in one folder."""
    recorder = server.history.recorder
    if recorder is None:
        return None
    from history_io.files import write_parquet

    if metadata is None:
        metadata = session_metadata(server)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{recorder.history}.parquet"
    write_parquet(path, {recorder.history: recorder.operations()}, metadata=metadata)
    return path


def session_metadata(server: PulsarServer) -> dict[str, Any]:
    """The history file's run metadata: the broker.conf overrides, and the faults injected."""
    from engine.recorder import config_overrides

    faults = server.faults
    run = {
        "workload": "serve",
        "seed": server.options.seed,
        "ledger": server.options.ledger,
        "faults": faults is not None,
        "fault_rates": dict(faults.rates) if faults is not None else {},
        "fault_schedule": [e.to_json() for e in faults.events] if faults is not None else [],
    }
    recorder = server.history.recorder
    assert recorder is not None
    return {"version": 1, "config": config_overrides(server.config), "runs": {recorder.history: run}}


def start(
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    ledger: str = "memory",
    data: str | Path | None = None,
    config: Config | None = None,
    seed: int = 0,
    history: str | Path | None = None,
    faults: str | dict[str, float] | None = None,
    admin_port: int | None = None,
) -> ServeHandle:
    """Start a server on a background thread; stop it with :meth:`ServeHandle.stop` then :func:`finish`.
    ``admin_port``: serve the admin REST API on it too (0: a free port; None: no admin API)."""
    options = ServerOptions(
        host=host,
        port=port,
        ledger=ledger,
        data_dir=None if data is None else str(data),
        config=config if config is not None else Config(transaction_coordinator_enabled=True),
        seed=seed,
        record_history=history is not None,
        history_id=history_id(),
        faults=parse_faults(faults) if isinstance(faults, str) else faults,
    )
    server = PulsarServer(options)
    server.start()
    handle = ServeHandle(server, threading.Thread(target=lambda: None), Path(history) if history else None)
    if admin_port is not None:
        # loopback only: it has no authentication
        handle.admin = AdminServer(server, routes, "127.0.0.1", admin_port)
        try:
            handle.admin.start()
        except OSError:
            server.close()
            raise

    def loop() -> None:
        try:
            server.run()
        except BaseException as exc:  # surfaced by finish()
            handle.errors.append(exc)

    handle.thread = threading.Thread(target=loop, name="txnmodel-serve", daemon=True)
    handle.thread.start()
    return handle


def finish(handle: ServeHandle) -> None:
    """After :meth:`ServeHandle.stop`: close connections and ledgers, write the history."""
    handle.server.close()
    if handle.history is not None:
        write_history(handle.server, handle.history)
    if handle.errors:
        raise handle.errors[0]


@contextlib.contextmanager
def serve(**kwargs: Any) -> Iterator[str]:
    """``with serve(ledger="file", data=DIR, history=OUT) as url: ...``; see :func:`start`."""
    handle = start(**kwargs)
    try:
        yield handle.url
    finally:
        handle.stop()
        finish(handle)
