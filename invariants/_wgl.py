"""The linearizability search's inner loop (see :mod:`invariants.linearizability`).

Plain Python, and the same file is compiled by Cython when the machine can build it (``make``
does, through ``setup.py``; the build is optional): the ``cython`` annotations below are C types
then, and no-ops in the fallback.  Both give the same verdicts, steps and linearizations
(``tests/invariants/test_linearizability.py`` runs both).  It imports nothing of ours.

:func:`search` checks one part.  ``optional_ops[i]``: op i has an unknown outcome and never
returned, so it may take effect any time after its call or never; ``read_ops[i]``: op i never
changes the state.  It returns ``(verdict, steps, order, blocked, state)``: ``order`` is a
linearization of the required ops (OK) or the longest linearizable prefix found, ``blocked`` the
op that could not be placed (-1: none) and ``state`` the model state after ``order``.

Required ops' calls and returns form a doubly linked list in time order (a call before a return
at the same instant): entry ``2i+1`` is op i's call, ``2i+2`` its return, 0 the head and ``2n+1``
the tail.  Optional ops have a list of their own in call order, head ``n`` and tail ``n+1``.
Lifting an op out of a list and putting it back are the undo of the search: a few relinks.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import Any

try:
    import cython
except ImportError:  # pragma: no cover - Cython is a dependency; this keeps the fallback importable
    from invariants import _cython_stub as cython

__all__ = ["FORCED", "ILLEGAL", "OK", "PLACED", "SLICE", "UNKNOWN_VERDICT", "compiled", "search"]

OK, ILLEGAL, UNKNOWN_VERDICT = 0, 1, 2
SLICE = 1024  # search steps between two yields (deadline checks, parts taking turns)
PLACED, FORCED = 0, -1  # how a required op went on the search stack; an optional op's entry holds a return


def compiled() -> bool:
    """Whether this module runs compiled (Cython) rather than interpreted."""
    return bool(cython.compiled)


def _bits(count: int) -> list[Any]:
    """One bit per op, as Python ints: a linearized set is a bitset of any width (and never a C
    integer, which would overflow past 64 ops)."""
    one: Any = 1
    return [one << k for k in range(count)]


def _all(count: int) -> Any:
    one: Any = 1
    return (one << count) - one


def _fresh(antichains: dict[tuple[int, Any], list[int]], key: tuple[int, Any], used: int) -> bool:
    """Not seen before, nor dominated: the same required ops and state reached with fewer optional
    ops linearized leaves at least every choice this configuration has."""
    known = antichains.get(key)
    if known is None:
        antichains[key] = [used]
        return True
    for old in known:
        if not old & ~used:
            return False
    known[:] = [old for old in known if used & ~old]
    known.append(used)
    return True


def _time_line(required: list[int], calls: list[Any], returns: list[Any], n: int) -> tuple[list[int], list[int]]:
    """The doubly linked list of the required ops' calls and returns in time order (a call before a
    return at the same instant): ``nxt`` and ``prv`` over entries 0 (head) .. ``2n+1`` (tail)."""
    end = 2 * n + 1
    nxt = [0] * (end + 1)
    prv = [0] * (end + 1)
    events = []
    for k in required:
        events.append((calls[k], 0, 2 * k + 1))
        events.append((returns[k], 1, 2 * k + 2))
    events.sort()
    previous = 0
    for _, _, entry in events:
        nxt[previous] = entry
        prv[entry] = previous
        previous = entry
    nxt[previous] = end
    prv[end] = previous
    return nxt, prv


def _optional_line(
    optional: list[bool], reads: list[bool], inputs: list[Any], outputs: list[Any], calls: list[Any], bits: list[Any]
) -> tuple[list[int], list[int], list[int], Any]:
    """The optional ops the search may try, linked in call order (head ``n``, tail ``n+1``); for
    each, the one called just before it with the same input and output (-1: none); and their bits.
    An optional read is never tried: it changes nothing, so it may as well take effect last."""
    n = len(optional)
    head, tail = n, n + 1
    onx = [0] * (n + 2)
    opv = [0] * (n + 2)
    earlier_twin = [-1] * n
    same: dict[tuple[Any, Any], int] = {}
    optmask: Any = 0
    previous = head
    for _, k in sorted((calls[k], k) for k in range(n) if optional[k] and not reads[k]):
        onx[previous] = k
        opv[k] = previous
        previous = k
        optmask |= bits[k]
        try:
            earlier_twin[k] = same.get((inputs[k], outputs[k]), -1)
            same[(inputs[k], outputs[k])] = k
        except TypeError:  # an unhashable input: no twin
            pass
    onx[previous] = tail
    opv[tail] = previous
    return onx, opv, earlier_twin, optmask


@cython.cfunc
def _first(seen: set[tuple[int, Any]], key: tuple[int, Any]) -> cython.bint:
    """Whether ``key`` is new to the memo (and remember it)."""
    if key in seen:
        return False
    seen.add(key)
    return True


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(ret=cython.Py_ssize_t)
def _lift(nxt: list[int], prv: list[int], call: cython.Py_ssize_t) -> None:
    """Take an op's call and return out of the time line."""
    ret = call + 1
    nxt[prv[call]] = nxt[call]
    prv[nxt[call]] = prv[call]
    nxt[prv[ret]] = nxt[ret]
    prv[nxt[ret]] = prv[ret]


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(ret=cython.Py_ssize_t)
def _unlift(nxt: list[int], prv: list[int], call: cython.Py_ssize_t) -> None:
    """Put them back, the return first (the reverse of :func:`_lift`)."""
    ret = call + 1
    nxt[prv[ret]] = ret
    prv[nxt[ret]] = ret
    nxt[prv[call]] = call
    prv[nxt[call]] = call


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _unlink(onx: list[int], opv: list[int], i: cython.Py_ssize_t) -> None:
    onx[opv[i]] = onx[i]
    opv[onx[i]] = opv[i]


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
def _relink(onx: list[int], opv: list[int], i: cython.Py_ssize_t) -> None:
    onx[opv[i]] = i
    opv[onx[i]] = i


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(
    n=cython.Py_ssize_t,
    head=cython.Py_ssize_t,
    tail=cython.Py_ssize_t,
    entry=cython.Py_ssize_t,
    i=cython.Py_ssize_t,
    cursor=cython.Py_ssize_t,
    twin=cython.Py_ssize_t,
    how=cython.Py_ssize_t,
    remaining=cython.Py_ssize_t,
    steps=cython.Py_ssize_t,
    budget=cython.Py_ssize_t,
    slice_mask=cython.Py_ssize_t,
    blocked=cython.Py_ssize_t,
    has_optional=cython.bint,
    accepted=cython.bint,
    new=cython.bint,
    placed=cython.bint,
    nxt=list,
    prv=list,
    onx=list,
    opv=list,
    reads=list,
    optional=list,
    earlier_twin=list,
    stack=list,
    bits=list,
    inputs=list,
    outputs=list,
    calls=list,
    returns=list,
)
def search(
    init: Any,
    step: Callable[[Any, Any, Any], tuple[bool, Any]],
    op_inputs: Sequence[Any],
    op_outputs: Sequence[Any],
    call_times: Sequence[float],
    return_times: Sequence[float],
    optional_ops: Sequence[bool],
    read_ops: Sequence[bool],
    budget: int,
) -> Generator[None, None, tuple[int, int, list[int], int, Any]]:
    """Search one part (see the module docstring); a generator that yields every :data:`SLICE`
    steps and returns ``(verdict, steps, order, blocked, state)``."""
    inputs, outputs, calls, returns = list(op_inputs), list(op_outputs), list(call_times), list(return_times)
    optional, reads = list(optional_ops), list(read_ops)
    n = len(inputs)
    bits = _bits(len(inputs))
    required = [k for k, maybe in enumerate(optional) if not maybe]
    nxt, prv = _time_line(required, calls, returns, n)
    head, tail = n, n + 1
    onx, opv, earlier_twin, optmask = _optional_line(optional, reads, inputs, outputs, calls, bits)
    has_optional = optmask != 0
    reqmask = _all(len(inputs)) & ~optmask
    seen: set[tuple[int, Any]] = set()  # without optional ops: (linearized, state)
    antichains: dict[tuple[int, Any], list[int]] = {}  # with them: (required linearized, state) -> optional sets

    state: Any = init
    linearized = 0
    remaining = len(required)
    steps = 0
    slice_mask = SLICE - 1
    stack = []  # (op, state before it, how it was placed)
    entry = nxt[0]
    cursor = -1  # >= 0: the next optional op to try at the return at ``entry``
    best: list[int] = []
    best_state: Any = init
    blocked = -1
    while remaining:
        steps += 1
        if steps > budget:
            return UNKNOWN_VERDICT, steps, best, -1, best_state
        if not steps & slice_mask:
            yield
        if entry & 1:  # a call: try to linearize it next
            i = entry >> 1
            accepted, after_state = step(state, inputs[i], outputs[i])
            if not accepted:
                entry = nxt[entry]
                continue
            after = linearized | bits[i]
            if has_optional:
                new = _fresh(antichains, (after & reqmask, after_state), after & optmask)
            else:
                new = _first(seen, (after, after_state))
            if new:
                # A read the state satisfies is placed here and nowhere later (FORCED): a read
                # changes nothing, so a linearization that places it later can place it here.
                stack.append((i, state, FORCED if reads[i] else PLACED))
                state = after_state
                linearized = after
                remaining -= 1
                _lift(nxt, prv, entry)
                entry = nxt[0]
                continue
            if not reads[i]:
                entry = nxt[entry]
                continue
            # A satisfied read leads where the search has been already: so does this configuration.
        else:  # a return: its op had to be linearized by now
            if has_optional:  # unless an optional op called by then gets the search past it
                if cursor < 0:
                    cursor = onx[head]
                limit = returns[(entry - 1) >> 1]
                placed = False
                while cursor != tail and calls[cursor] <= limit:
                    i = cursor
                    cursor = onx[i]
                    twin = earlier_twin[i]
                    if twin >= 0 and not linearized & bits[twin]:
                        continue  # of identical optional ops, the earliest first
                    steps += 1
                    accepted, after_state = step(state, inputs[i], outputs[i])
                    if accepted and _fresh(
                        antichains, (linearized & reqmask, after_state), (linearized | bits[i]) & optmask
                    ):
                        stack.append((i, state, entry))
                        state = after_state
                        linearized = linearized | bits[i]
                        _unlink(onx, opv, i)
                        placed = True
                        break
                cursor = -1
                if placed:
                    entry = nxt[0]
                    continue
            if len(stack) > len(best) or blocked < 0:
                best = [frame[0] for frame in stack]
                best_state = state
                blocked = (entry - 1) >> 1
        # This configuration has no way forward: backtrack (past forced reads too).
        while True:
            if not stack:
                return ILLEGAL, steps, best, blocked, best_state
            i, state, how = stack.pop()
            linearized ^= bits[i]
            if optional[i]:  # back at the return it was tried at: the next optional op
                _relink(onx, opv, i)
                entry = how
                cursor = onx[i]
                break
            remaining += 1
            _unlift(nxt, prv, 2 * i + 1)
            if how != FORCED:
                entry = nxt[2 * i + 1]
                break
    return OK, steps, [frame[0] for frame in stack], -1, state
