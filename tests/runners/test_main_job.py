"""The main job's worker processes (``runners.main_job.Pipeline``)."""

from __future__ import annotations

import gc
import os
from pathlib import Path

from runners.main_job import Pipeline


class _Marker:
    """An object in a reference cycle that says, when destroyed, which process destroyed it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.itself = self

    def __del__(self) -> None:
        self.path.write_text(str(os.getpid()))


def _collect() -> int:
    return gc.collect()


def test_forked_workers_leave_what_they_inherit_to_this_process(tmp_path: Path) -> None:
    # Inherited garbage destroyed in a forked worker once hung the suite: an official client's
    # consumer left in a cycle by an earlier test, whose destructor waited for threads the child
    # does not have.  A marker stands in for it here, since its destructor only reports.
    marker = tmp_path / "destroyed-by"
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        _Marker(marker)  # garbage at once, left for a collector
        pipeline = Pipeline(1)
        collected: list[int] = []
        try:
            pipeline.submit("collect", _collect, (), collected.append)
            pipeline.run()
        finally:
            pipeline.close()
        assert collected, "the worker ran its task"
        assert not marker.exists(), f"destroyed in the worker (pid {marker.read_text()})"
    finally:
        if was_enabled:
            gc.enable()
    gc.collect()
    assert marker.read_text() == str(os.getpid())
