"""The history checkers' model of a history is millions of small objects without reference cycles
(reference counts free it): a cyclic collection while it grows walks the whole heap again and again,
which for a history of a million rows cost a third of the checks' time and made it grow faster than
the operations (issue 28's ``benchmarks/verify_scale.py``).  Each checker's entry point builds its
model inside :func:`without_cyclic_gc`.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["without_cyclic_gc"]


@contextmanager
def without_cyclic_gc() -> Iterator[None]:
    """No cyclic garbage collection inside (nested uses included): the collector is switched back on
    on the way out only if it was on on the way in; garbage of a cycle made inside, if any, waits
    for its next run."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
