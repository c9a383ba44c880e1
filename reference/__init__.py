"""Pure reference machines: ``step(state, command) -> (state, result)`` over immutable values.

No module here (outside ``reference/engine/``) does I/O, reads a clock, draws a random number or
mutates shared state.  See ``docs/design.md``.
"""
