"""Pure reference machines: ``step(state, command) -> (state, result)`` over immutable values.

No module here does I/O, reads a clock, draws a random number or mutates shared state; the engine
that runs them on ledgers is :mod:`engine`.  See ``docs/design.md``.
"""
