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


@cython.final
@cython.cclass
class _Search:
    """One part's search under way: what it reads (the ops, the read index), what it relinks (the
    three lines), the configurations it has been at, and where it is (the ops placed, on ``stack``
    with the state before each and how it was placed; the state and set they reach; the entry of
    the time line it is at).  Each step of :func:`search` is one method, a C call when compiled."""

    step: Callable[[Any, Any, Any], tuple[bool, Any]]
    inputs: list[Any]
    outputs: list[Any]
    calls: list[Any]
    returns: list[Any]
    optional: list[bool]
    reads: list[bool]
    bits: list[Any]
    by_state: dict[Any, list[int]]
    anytime: list[int]
    earlier_twin: list[int]
    n: cython.Py_ssize_t
    nxt: list[int]  # the time line
    prv: list[int]
    rnx: list[int]  # the returns line
    rpv: list[int]
    onx: list[int]  # the optional ops' line
    opv: list[int]
    has_optional: cython.bint
    reqmask: Any
    optmask: Any
    seen: set[tuple[int, Any]]  # without optional ops: (linearized, state)
    antichains: dict[tuple[int, Any], list[int]]  # with them: (required linearized, state) -> optional sets
    state: Any
    linearized: Any
    remaining: cython.Py_ssize_t
    steps: cython.Py_ssize_t
    stack: list[tuple[int, Any, int]]
    entry: cython.Py_ssize_t
    scan: cython.bint  # at a new configuration: first a read the state satisfies
    cursor: cython.Py_ssize_t  # >= 0: the next optional op to try at the return at ``entry``
    best: list[int]
    best_state: Any
    blocked: cython.Py_ssize_t

    def __init__(
        self,
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
    ) -> None:
        self.step = step
        self.inputs, self.outputs = list(op_inputs), list(op_outputs)
        self.calls, self.returns = list(call_times), list(return_times)
        self.optional, self.reads = list(optional_ops), [witness is not not_read for witness in witnesses]
        self.n = len(self.inputs)
        self.bits = _bits(self.n)
        required = [k for k, maybe in enumerate(self.optional) if not maybe]
        self.nxt, self.prv = _time_line(required, self.reads, self.calls, self.returns, self.n)
        self.rnx, self.rpv = _returns_line(required, self.returns, self.n)
        self.by_state, self.anytime = _read_index(required, self.reads, list(witnesses), self.calls, any_state)
        self.onx, self.opv, self.earlier_twin, self.optmask = _optional_line(
            self.optional, self.reads, self.inputs, self.outputs, self.calls, self.bits
        )
        self.has_optional = self.optmask != 0
        self.reqmask = _all(self.n) & ~self.optmask
        self.seen = set()
        self.antichains = {}
        self.state = init
        self.linearized = 0
        self.remaining = len(required)
        self.steps = 0
        self.stack = []
        self.entry = self.nxt[0]
        self.scan = True
        self.cursor = -1
        self.best = []  # the longest linearizable prefix found, the state after it, the op it blocks
        self.best_state = init
        self.blocked = -1

    @cython.cfunc
    @cython.exceptval(-1, check=True)
    @cython.locals(i=cython.Py_ssize_t)
    def place_read(self) -> cython.bint:
        """At a new configuration: place at once a read called by now (by the first return to come)
        that the state satisfies, or else go to the head of the time line.  False: the read leads
        where the search has been already, and so does this configuration (backtrack)."""
        self.scan = False
        i = _read_to_place(
            self.by_state.get(self.state),
            self.anytime,
            self.linearized,
            self.bits,
            self.calls,
            self.returns[self.rnx[self.n]],
        )
        if i < 0:
            self.entry = self.nxt[0]
            return True
        _confirm_read(self.step, self.state, self.inputs[i], self.outputs[i])
        after = self.linearized | self.bits[i]
        if not self.new(after, self.state):
            return False
        self.stack.append((i, self.state, FORCED))  # placed here and nowhere later
        self.linearized = after
        self.remaining -= 1
        self.take(i, True)
        self.scan = True
        return True

    @cython.cfunc
    @cython.locals(i=cython.Py_ssize_t, accepted=cython.bint)
    def try_call(self) -> None:
        """At a call: linearize its op next if the model accepts it there and that is a new
        configuration; else go on along the time line."""
        i = self.entry >> 1
        accepted, after_state = self.step(self.state, self.inputs[i], self.outputs[i])
        if accepted:
            after = self.linearized | self.bits[i]
            if self.new(after, after_state):
                self.stack.append((i, self.state, PLACED))
                self.state, self.linearized = after_state, after
                self.remaining -= 1
                self.take(i, False)
                self.scan = True
                return
        self.entry = self.nxt[self.entry]

    @cython.cfunc
    @cython.exceptval(-1, check=True)
    @cython.locals(i=cython.Py_ssize_t, accepted=cython.bint)
    def pass_return(self) -> cython.bint:
        """At a return, whose op had to be linearized by now: get past it with an optional op called
        by then (the next one not tried here yet), or else note the longest prefix so far and the op
        that could not be placed.  False: no way past (backtrack)."""
        if self.has_optional:
            limit = self.returns[(self.entry - 1) >> 1]
            i = _optional_to_try(
                self.onx,
                self.onx[self.n] if self.cursor < 0 else self.cursor,
                self.n + 1,
                self.calls,
                limit,
                self.earlier_twin,
                self.linearized,
                self.bits,
            )
            while i >= 0:
                self.steps += 1
                accepted, after_state = self.step(self.state, self.inputs[i], self.outputs[i])
                if accepted and self.new(self.linearized | self.bits[i], after_state):
                    break
                i = _optional_to_try(
                    self.onx, self.onx[i], self.n + 1, self.calls, limit, self.earlier_twin, self.linearized, self.bits
                )
            self.cursor = -1
            if i >= 0:
                self.stack.append((i, self.state, self.entry))
                self.state, self.linearized = after_state, self.linearized | self.bits[i]
                self.unlink(i)
                self.scan = True
                return True
        if len(self.stack) > len(self.best) or self.blocked < 0:
            self.best = [frame[0] for frame in self.stack]
            self.best_state = self.state
            self.blocked = (self.entry - 1) >> 1
        return False

    @cython.cfunc
    @cython.exceptval(-1, check=True)
    @cython.locals(i=cython.Py_ssize_t, how=cython.Py_ssize_t)
    def backtrack(self) -> cython.bint:
        """Undo the ops placed last (reads placed at once too) until one leaves something to try:
        an optional op, the next optional op at the return it was tried at; a required op, the
        entries after its call.  False: nothing is left to undo."""
        while self.stack:
            i, self.state, how = self.stack.pop()
            self.linearized ^= self.bits[i]
            if self.optional[i]:
                self.relink(i)
                self.entry = how
                self.cursor = self.onx[i]
                return True
            self.remaining += 1
            self.give_back(i, self.reads[i])
            if how != FORCED:
                self.entry = self.nxt[2 * i + 1]
                return True
        return False

    @cython.cfunc
    @cython.exceptval(-1, check=True)
    def new(self, after: Any, state: Any) -> cython.bint:
        """Whether the search has not been at this configuration (``after`` linearized, the model in
        ``state``), and remember it: exactly (in ``seen``) when the part has no optional op, up to
        dominance (:func:`_fresh`) when it has some."""
        if self.has_optional:
            return _fresh(self.antichains, (after & self.reqmask, state), after & self.optmask)
        key = (after, state)
        if key in self.seen:
            return False
        self.seen.add(key)
        return True

    @cython.cfunc
    @cython.boundscheck(False)
    @cython.wraparound(False)
    @cython.locals(call=cython.Py_ssize_t, ret=cython.Py_ssize_t)
    def take(self, i: cython.Py_ssize_t, read: cython.bint) -> None:
        """Take op i out of the lists: its call (a read has none there) and return from the time line,
        its return from the returns line."""
        call = 2 * i + 1
        ret = call + 1
        if not read:
            self.nxt[self.prv[call]] = self.nxt[call]
            self.prv[self.nxt[call]] = self.prv[call]
        self.nxt[self.prv[ret]] = self.nxt[ret]
        self.prv[self.nxt[ret]] = self.prv[ret]
        self.rnx[self.rpv[i]] = self.rnx[i]
        self.rpv[self.rnx[i]] = self.rpv[i]

    @cython.cfunc
    @cython.boundscheck(False)
    @cython.wraparound(False)
    @cython.locals(call=cython.Py_ssize_t, ret=cython.Py_ssize_t)
    def give_back(self, i: cython.Py_ssize_t, read: cython.bint) -> None:
        """Put op i back where :meth:`take` took it from, in the reverse order."""
        call = 2 * i + 1
        ret = call + 1
        self.rnx[self.rpv[i]] = i
        self.rpv[self.rnx[i]] = i
        self.nxt[self.prv[ret]] = ret
        self.prv[self.nxt[ret]] = ret
        if not read:
            self.nxt[self.prv[call]] = call
            self.prv[self.nxt[call]] = call

    @cython.cfunc
    @cython.boundscheck(False)
    @cython.wraparound(False)
    def unlink(self, i: cython.Py_ssize_t) -> None:
        """Take optional op i out of its line while it is placed."""
        self.onx[self.opv[i]] = self.onx[i]
        self.opv[self.onx[i]] = self.opv[i]

    @cython.cfunc
    @cython.boundscheck(False)
    @cython.wraparound(False)
    def relink(self, i: cython.Py_ssize_t) -> None:
        """Put optional op i back where :meth:`unlink` took it from."""
        self.onx[self.opv[i]] = i
        self.opv[self.onx[i]] = i


@cython.boundscheck(False)
@cython.wraparound(False)
@cython.locals(s=_Search, budget=cython.Py_ssize_t, slice_mask=cython.Py_ssize_t)
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
    steps and returns ``(verdict, steps, order, blocked, state)``.  Each step looks at where the
    search is: at a new configuration, a read the state satisfies is placed at once; at a call, its
    op is tried next; at a return, an optional op may get the search past it.  A configuration with
    no way forward is backtracked."""
    s = _Search(
        init, step, op_inputs, op_outputs, call_times, return_times, optional_ops, witnesses, not_read, any_state
    )
    slice_mask = SLICE - 1
    while s.remaining:
        s.steps += 1
        if s.steps > budget:
            return UNKNOWN_VERDICT, s.steps, s.best, -1, s.best_state
        if not s.steps & slice_mask:
            yield
        if s.scan:
            if s.place_read():
                continue
        elif s.entry & 1:
            s.try_call()
            continue
        elif s.pass_return():
            continue
        if not s.backtrack():
            return ILLEGAL, s.steps, s.best, s.blocked, s.best_state
    return OK, s.steps, [frame[0] for frame in s.stack], -1, s.state
