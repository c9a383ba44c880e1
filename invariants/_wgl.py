"""The linearizability search's inner loop (see :mod:`invariants.linearizability`).

Plain Python, and the same file is compiled by Cython when the machine can build it (``make``
does, through ``setup.py``; the build is optional): the ``cython`` annotations below are C types
then, and no-ops in the fallback.  Both give the same verdicts, steps and linearizations
(``tests/invariants/test_linearizability.py`` runs both).  It imports nothing of ours.

:func:`search` checks one part.  ``optional_ops[i]``: op i has an unknown outcome and never
returned, so it may take effect any time after its call or never.  ``witnesses[i]``: for a read
(an op that never changes the state), the one state it accepts, or ``any_state`` when it accepts
every state; ``not_read`` for any other op.  Reads are not tried one by one: at each configuration
a read called by then that the current state satisfies is looked up by that state and placed at
once (nowhere later: a linearization placing it later can place it there).  It returns
``(verdict, steps, order, blocked, state)``: ``order`` is a linearization of the required ops
(OK) or the longest linearizable prefix found, ``blocked`` the op that could not be placed (-1:
none) and ``state`` the model state after ``order``.

Required ops' calls (a read's excepted) and returns form a doubly linked list in time order (a
call before a return at the same instant): entry ``2i+1`` is op i's call, ``2i+2`` its return, 0
the head and ``2n+1`` the tail.  Their returns alone form a second list in time order (head ``n``,
tail ``n+1``), whose head is the first return still to come.  Optional ops have a list of their
own in call order, head ``n`` and tail ``n+1``.
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


@cython.cfunc
def _fresh(antichains: dict[tuple[int, Any], list[int]], key: tuple[int, Any], used: int) -> cython.bint:
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


def _time_line(
    required: list[int], reads: list[bool], calls: list[Any], returns: list[Any], n: int
) -> tuple[list[int], list[int]]:
    """The doubly linked list of the required ops' calls (but a read's) and returns in time order (a
    call before a return at the same instant): ``nxt`` and ``prv`` over entries 0 (head) ..
    ``2n+1`` (tail)."""
    end = 2 * n + 1
    nxt = [0] * (end + 1)
    prv = [0] * (end + 1)
    events = []
    for k in required:
        if not reads[k]:
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


def _returns_line(required: list[int], returns: list[Any], n: int) -> tuple[list[int], list[int]]:
    """The required ops linked in return order (head ``n``, tail ``n+1``)."""
    rnx = [0] * (n + 2)
    rpv = [0] * (n + 2)
    previous = n
    for _, k in sorted((returns[k], k) for k in required):
        rnx[previous] = k
        rpv[k] = previous
        previous = k
    rnx[previous] = n + 1
    rpv[n + 1] = previous
    return rnx, rpv


def _read_index(
    required: list[int], reads: list[bool], witnesses: list[Any], calls: list[Any], any_state: Any
) -> tuple[dict[Any, list[int]], list[int]]:
    """The required reads by the state they accept, and those accepting any state, in call order."""
    by_state: dict[Any, list[int]] = {}
    anytime: list[int] = []
    for _, k in sorted((calls[k], k) for k in required if reads[k]):
        if witnesses[k] is any_state:
            anytime.append(k)
        else:
            by_state.setdefault(witnesses[k], []).append(k)
    return by_state, anytime


@cython.cfunc
@cython.locals(r=cython.Py_ssize_t)
def _satisfied(candidates: list[int] | None, linearized: Any, bits: list[Any], calls: list[Any], limit: Any) -> int:
    """The first read of ``candidates`` (in call order) not placed yet and called by ``limit``; -1: none."""
    if candidates is None:
        return -1
    for r in candidates:
        if calls[r] > limit:
            return -1
        if not linearized & bits[r]:
            return r
    return -1


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
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(call=cython.Py_ssize_t, ret=cython.Py_ssize_t)
def _take(
    nxt: list[int], prv: list[int], rnx: list[int], rpv: list[int], i: cython.Py_ssize_t, read: cython.bint
) -> None:
    """Take op i out of the lists: its call (a read has none there) and return from the time line,
    its return from the returns line."""
    call = 2 * i + 1
    ret = call + 1
    if not read:
        nxt[prv[call]] = nxt[call]
        prv[nxt[call]] = prv[call]
    nxt[prv[ret]] = nxt[ret]
    prv[nxt[ret]] = prv[ret]
    rnx[rpv[i]] = rnx[i]
    rpv[rnx[i]] = rpv[i]


@cython.cfunc
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(call=cython.Py_ssize_t, ret=cython.Py_ssize_t)
def _give_back(
    nxt: list[int], prv: list[int], rnx: list[int], rpv: list[int], i: cython.Py_ssize_t, read: cython.bint
) -> None:
    """Put op i back where :func:`_take` took it from, in the reverse order."""
    call = 2 * i + 1
    ret = call + 1
    rnx[rpv[i]] = i
    rpv[rnx[i]] = i
    nxt[prv[ret]] = ret
    prv[nxt[ret]] = ret
    if not read:
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


@cython.cfunc
@cython.inline
def _new(
    seen: set[tuple[int, Any]],
    antichains: dict[tuple[int, Any], list[int]],
    has_optional: cython.bint,
    after: Any,
    state: Any,
    reqmask: Any,
    optmask: Any,
) -> cython.bint:
    """Whether the search has not been at this configuration (``after`` linearized, the model in
    ``state``), and remember it: exactly (in ``seen``) when the part has no optional op, up to
    dominance (:func:`_fresh`) when it has some."""
    if has_optional:
        return _fresh(antichains, (after & reqmask, state), after & optmask)
    key = (after, state)
    if key in seen:
        return False
    seen.add(key)
    return True


@cython.cfunc
@cython.inline
@cython.locals(i=cython.Py_ssize_t)
def _read_to_place(
    by_state: list[int] | None, anytime: list[int], linearized: Any, bits: list[Any], calls: list[Any], limit: Any
) -> cython.Py_ssize_t:
    """The read to place at once (-1: none): called by ``limit`` and not placed yet, the first of
    those accepting the current state (``by_state``), else of those accepting any state."""
    i = _satisfied(by_state, linearized, bits, calls, limit)
    return i if i >= 0 else _satisfied(anytime, linearized, bits, calls, limit)


@cython.cfunc
def _confirm_read(step: Callable[[Any, Any, Any], tuple[bool, Any]], state: Any, op_input: Any, op_output: Any) -> None:
    """A read placed by the state it accepts must be accepted there by the model's ``step`` too, and
    leave the state as it is (the very object): otherwise the model's ``read_state`` is wrong."""
    accepted, after_state = step(state, op_input, op_output)
    if not accepted or after_state is not state:
        raise ValueError(f"the model's read_state disagrees with its step on {op_input!r}")


@cython.cfunc
@cython.inline
@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(twin=cython.Py_ssize_t)
def _optional_to_try(
    onx: list[int],
    cursor: cython.Py_ssize_t,
    tail: cython.Py_ssize_t,
    calls: list[Any],
    limit: Any,
    earlier_twin: list[int],
    linearized: Any,
    bits: list[Any],
) -> cython.Py_ssize_t:
    """From ``cursor`` on along the optional ops' line, the first called by ``limit`` that is not the
    later twin of an op still unplaced (of identical optional ops, the earliest first); -1: none."""
    while cursor != tail and calls[cursor] <= limit:
        twin = earlier_twin[cursor]
        if twin < 0 or linearized & bits[twin]:
            return cursor
        cursor = onx[cursor]
    return -1


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(
    n=cython.Py_ssize_t,
    head=cython.Py_ssize_t,
    tail=cython.Py_ssize_t,
    entry=cython.Py_ssize_t,
    i=cython.Py_ssize_t,
    cursor=cython.Py_ssize_t,
    scan=cython.bint,
    how=cython.Py_ssize_t,
    remaining=cython.Py_ssize_t,
    steps=cython.Py_ssize_t,
    budget=cython.Py_ssize_t,
    slice_mask=cython.Py_ssize_t,
    blocked=cython.Py_ssize_t,
    has_optional=cython.bint,
    accepted=cython.bint,
    nxt=list,
    prv=list,
    onx=list,
    opv=list,
    rnx=list,
    rpv=list,
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
    witnesses: Sequence[Any],
    not_read: Any,
    any_state: Any,
    budget: int,
) -> Generator[None, None, tuple[int, int, list[int], int, Any]]:
    """Search one part (see the module docstring); a generator that yields every :data:`SLICE`
    steps and returns ``(verdict, steps, order, blocked, state)``."""
    inputs, outputs, calls, returns = list(op_inputs), list(op_outputs), list(call_times), list(return_times)
    optional, reads = list(optional_ops), [witness is not not_read for witness in witnesses]
    n = len(inputs)
    bits = _bits(len(inputs))
    required = [k for k, maybe in enumerate(optional) if not maybe]
    nxt, prv = _time_line(required, reads, calls, returns, n)
    rnx, rpv = _returns_line(required, returns, n)
    by_state, anytime = _read_index(required, reads, list(witnesses), calls, any_state)
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
    scan = True  # at a new configuration: first a read the state satisfies
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
        if scan:  # a read called by now (by the first return to come) that the state satisfies?
            scan = False
            i = _read_to_place(by_state.get(state), anytime, linearized, bits, calls, returns[rnx[n]])
            if i < 0:
                entry = nxt[0]
                continue
            _confirm_read(step, state, inputs[i], outputs[i])
            after = linearized | bits[i]
            if _new(seen, antichains, has_optional, after, state, reqmask, optmask):
                stack.append((i, state, FORCED))  # placed here and nowhere later
                linearized = after
                remaining -= 1
                _take(nxt, prv, rnx, rpv, i, True)
                scan = True
                continue
            # it leads where the search has been already: so does this configuration (backtrack)
        elif entry & 1:  # a call: try to linearize it next
            i = entry >> 1
            accepted, after_state = step(state, inputs[i], outputs[i])
            if accepted:
                after = linearized | bits[i]
                if _new(seen, antichains, has_optional, after, after_state, reqmask, optmask):
                    stack.append((i, state, PLACED))
                    state, linearized = after_state, after
                    remaining -= 1
                    _take(nxt, prv, rnx, rpv, i, False)
                    scan = True
                    continue
            entry = nxt[entry]
            continue
        else:  # a return: its op had to be linearized by now
            if has_optional:  # unless an optional op called by then gets the search past it
                limit = returns[(entry - 1) >> 1]
                i = _optional_to_try(
                    onx, onx[head] if cursor < 0 else cursor, tail, calls, limit, earlier_twin, linearized, bits
                )
                while i >= 0:
                    steps += 1
                    accepted, after_state = step(state, inputs[i], outputs[i])
                    if accepted and _new(seen, antichains, True, linearized | bits[i], after_state, reqmask, optmask):
                        break
                    i = _optional_to_try(onx, onx[i], tail, calls, limit, earlier_twin, linearized, bits)
                cursor = -1
                if i >= 0:
                    stack.append((i, state, entry))
                    state, linearized = after_state, linearized | bits[i]
                    _unlink(onx, opv, i)
                    scan = True
                    continue
            if len(stack) > len(best) or blocked < 0:
                best = [frame[0] for frame in stack]
                best_state = state
                blocked = (entry - 1) >> 1
        # This configuration has no way forward: backtrack (past reads placed at once too).
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
            _give_back(nxt, prv, rnx, rpv, i, reads[i])
            if how != FORCED:
                entry = nxt[2 * i + 1]
                break
    return OK, steps, [frame[0] for frame in stack], -1, state
