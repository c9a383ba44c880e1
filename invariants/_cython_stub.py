"""What :mod:`invariants._wgl` uses of the ``cython`` module, as no-ops, for a Python without Cython."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

compiled = False
Py_ssize_t = int
bint = bool


def _identity(*_args: Any, **_kwargs: Any) -> Callable[[Any], Any]:
    return lambda function: function


locals = _identity
exceptval = _identity
boundscheck = _identity
wraparound = _identity


def cfunc(function: Callable[..., Any]) -> Callable[..., Any]:
    return function


inline = cfunc
cclass = final = cfunc
