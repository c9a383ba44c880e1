"""Automatic mutants of the reference machines: a small AST mutator that swaps one function's code.

Why not mutmut or cosmic-ray.  Both rewrite source files and judge a mutant by one test command
run per mutant in a fresh interpreter (mutmut 3 also rewrites every function into a trampoline,
which puts a call in the hot path of every pure step).  Here a mutant is judged by several layers
-- the machine's tests, its conformance vectors, the proofs, and the engine's histories checked
by the history checkers -- and most of them run in process: the pure-function layout means a
mutant is exactly one function's code, so :func:`applied` compiles the mutated function and
assigns its code object to the live function (``function.__code__``).  Every reference to that
function -- a ``_HANDLERS`` table holding it by value, a method looked up through a class, a
callback the engine stored -- runs the mutant at once, with no file written and no import
repeated, and restoring it is one assignment.  The report runs each mutant in a forked child, so
a mutant that hangs or corrupts state dies with its child.

Operators (``Mutant.operator``), applied to the body of every function and method of a module
(docstrings, annotations, decorators and ``assert`` statements are left alone):

===================  ========================================================================
operator             what changes
===================  ========================================================================
``boundary``         ``<`` and ``<=``, ``>`` and ``>=`` swap (off by one)
``compare``          ``==`` and ``!=``, ``in`` and ``not in``, ``is`` and ``is not`` swap
``boolean``          ``and`` and ``or`` swap; a ``not`` is dropped; an ``if`` condition is negated
                     (the branch flip, :func:`flip_mutants`)
``branch``           the two branches of an ``if``/``else`` or a conditional expression swap
``statement``        an assignment, augmented assignment or expression statement becomes ``pass``
``constant``         an integer ``n`` becomes ``n + 1``; ``True`` and ``False`` swap
===================  ========================================================================

The mutants of a module are numbered in a fixed order (functions in source order, nodes in
depth-first order), so ``machine:index`` names one mutant for good as long as the source does not
change; :func:`sample` draws a seeded sample per machine.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import inspect
import random
import types
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "MACHINE_MODULES",
    "OPERATORS",
    "Mutant",
    "MutationError",
    "applied",
    "enumerate_mutants",
    "flip_mutants",
    "live_function",
    "mutated_code",
    "sample",
    "source_digest",
]

# The machines of reference/ and their modules (spec.machines names them the same way).
MACHINE_MODULES: dict[str, tuple[str, ...]] = {
    "coordinator": ("reference.coordinator",),
    "client": ("reference.client",),
    "buffer": ("reference.buffer",),
    "pending_ack": ("reference.pending_ack",),
    "batched_log": ("reference.batched_log",),
    "delayed": (
        "reference.delayed",
        "reference.delayed_common",
        "reference.delayed_memory",
        "reference.delayed_bucket",
        "reference.delayed_runs",
    ),
}

OPERATORS = ("boundary", "compare", "boolean", "branch", "statement", "constant")

_BOUNDARY: dict[type[ast.cmpop], type[ast.cmpop]] = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt}
_COMPARE: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
_SYMBOL = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.Eq: "==",
    ast.NotEq: "!=",
    ast.In: "in",
    ast.NotIn: "not in",
    ast.Is: "is",
    ast.IsNot: "is not",
}


class MutationError(Exception):
    """A mutant that cannot be applied (its code would need different closure cells, say)."""


@dataclass(frozen=True)
class Mutant:
    """One mutation of one function: ``machine:index`` names it."""

    machine: str
    module: str
    index: int  # its number among the module's mutants
    function: str  # qualified name: ``name`` or ``Class.name``
    ordinal: int  # the node's number in the function's depth-first walk
    detail: int  # which comparator of a chained comparison (0 elsewhere)
    operator: str
    line: int
    before: str
    after: str

    @property
    def id(self) -> str:
        return f"{self.machine}:{self.index}"

    def describe(self) -> str:
        return f"{self.module}.{self.function} line {self.line} ({self.operator}): {self.before} -> {self.after}"

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "machine": self.machine,
            "module": self.module,
            "function": self.function,
            "operator": self.operator,
            "line": self.line,
            "before": self.before,
            "after": self.after,
        }


# --- walking one function's body -------------------------------------------------------------------

_Slot = tuple[ast.AST, str, int | None]  # parent, field, index in the field's list (None: a single node)


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield f"{node.name}.{item.name}", item


def _is_docstring(node: ast.stmt) -> bool:
    return isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)


def _walk(func: ast.FunctionDef | ast.AsyncFunctionDef) -> Iterator[tuple[ast.AST, _Slot]]:
    """Depth-first over the body: every node with the slot that holds it; docstrings, annotations,
    decorators, default values, nested classes and asserts are skipped."""

    def visit(node: ast.AST, slot: _Slot) -> Iterator[tuple[ast.AST, _Slot]]:
        if isinstance(node, ast.Assert | ast.ClassDef):
            return
        yield node, slot
        for name, value in ast.iter_fields(node):
            skipped = ("decorator_list", "returns", "annotation", "type_comment", "args", "type_params")
            if name in skipped and not (name == "args" and isinstance(node, ast.Call)):
                continue
            if isinstance(value, list):
                for i, child in enumerate(value):
                    if isinstance(child, ast.AST) and not (i == 0 and name == "body" and _is_docstring_stmt(child)):
                        yield from visit(child, (node, name, i))
            elif isinstance(value, ast.AST):
                yield from visit(value, (node, name, None))

    def _is_docstring_stmt(child: ast.AST) -> bool:
        return isinstance(child, ast.stmt) and _is_docstring(child)

    for i, stmt in enumerate(func.body):
        if i == 0 and _is_docstring(stmt):
            continue
        yield from visit(stmt, (func, "body", i))


def _candidates(node: ast.AST, slot: _Slot) -> Iterator[tuple[str, int, str, str]]:
    """(operator, detail, before, after) for each mutation of ``node``."""
    if isinstance(node, ast.Compare):
        for j, op in enumerate(node.ops):
            kind = type(op)
            if kind in _BOUNDARY:
                yield "boundary", j, _SYMBOL[kind], _SYMBOL[_BOUNDARY[kind]]
            elif kind in _COMPARE:
                yield "compare", j, _SYMBOL[kind], _SYMBOL[_COMPARE[kind]]
    elif isinstance(node, ast.BoolOp):
        yield (
            "boolean",
            0,
            "and" if isinstance(node.op, ast.And) else "or",
            "or" if isinstance(node.op, ast.And) else "and",
        )
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "boolean", 0, f"not {_text(node.operand)}", _text(node.operand)
    elif isinstance(node, ast.If):
        yield "boolean", 0, f"if {_text(node.test)}", f"if not ({_text(node.test)})"
        if node.orelse:
            yield "branch", 1, "if/else", "else/if"
    elif isinstance(node, ast.IfExp):
        yield "branch", 0, _text(node), f"{_text(node.orelse)} if {_text(node.test)} else {_text(node.body)}"
    elif isinstance(node, ast.Assign | ast.AugAssign | ast.AnnAssign | ast.Expr):
        if not (isinstance(node, ast.AnnAssign) and node.value is None):
            yield "statement", 0, _text(node), "pass"
    elif isinstance(node, ast.Constant) and not _in_fstring(slot):
        if isinstance(node.value, bool):
            yield "constant", 0, repr(node.value), repr(not node.value)
        elif isinstance(node.value, int):
            yield "constant", 0, repr(node.value), repr(node.value + 1)


def _in_fstring(slot: _Slot) -> bool:
    return isinstance(slot[0], ast.JoinedStr | ast.FormattedValue)


def _text(node: ast.AST) -> str:
    text = ast.unparse(node)
    first = text.splitlines()[0] if text else text
    return first if len(first) <= 80 else first[:77] + "..."


def _mutate(node: ast.AST, slot: _Slot, operator: str, detail: int) -> None:
    """Apply one mutation in place (``slot`` holds ``node``)."""
    parent, name, index = slot

    def replace(new: ast.AST) -> None:
        ast.copy_location(new, node)
        if index is None:
            setattr(parent, name, new)
        else:
            getattr(parent, name)[index] = new

    if isinstance(node, ast.Compare):
        kind = type(node.ops[detail])
        node.ops[detail] = (_BOUNDARY if operator == "boundary" else _COMPARE)[kind]()
    elif isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif isinstance(node, ast.UnaryOp):
        replace(node.operand)
    elif isinstance(node, ast.If) and operator == "boolean":
        node.test = ast.copy_location(ast.UnaryOp(op=ast.Not(), operand=node.test), node.test)
    elif isinstance(node, ast.If | ast.IfExp):
        node.body, node.orelse = node.orelse, node.body
    elif operator == "statement":
        replace(ast.Pass())
    elif isinstance(node, ast.Constant) and isinstance(node.value, bool):
        node.value = not node.value
    elif isinstance(node, ast.Constant) and isinstance(node.value, int):
        node.value = node.value + 1
    else:  # pragma: no cover - enumerate and mutate walk the same nodes
        raise MutationError(f"no mutation {operator} for {type(node).__name__}")


# --- the module's mutants ---------------------------------------------------------------------------


def _source(module: str) -> tuple[str, Path]:
    mod = importlib.import_module(module)
    path = Path(inspect.getfile(mod))
    return path.read_text(encoding="utf-8"), path


def source_digest(modules: Sequence[str]) -> str:
    """A digest of the modules' sources: a mutant's number is stable while it is."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(_source(module)[0].encode())
    return digest.hexdigest()[:16]


def enumerate_mutants(machine: str, module: str | None = None, source: str | None = None) -> list[Mutant]:
    """Every mutant of ``machine``'s modules (or of ``module`` alone), in a fixed order."""
    modules = (module,) if module is not None else MACHINE_MODULES[machine]
    out: list[Mutant] = []
    for name in modules:
        text = source if source is not None else _source(name)[0]
        tree = ast.parse(text)
        for qualname, func in _functions(tree):
            for ordinal, (node, slot) in enumerate(_walk(func)):
                for operator, detail, before, after in _candidates(node, slot):
                    line = getattr(node, "lineno", func.lineno)
                    out.append(
                        Mutant(machine, name, len(out), qualname, ordinal, detail, operator, line, before, after)
                    )
    return out


def flip_mutants(machine: str) -> list[Mutant]:
    """The branch-flip mutants of ``machine``: every ``if`` and ``elif`` with its condition negated
    (the ``boolean`` operator's ``if not (...)``), so each evaluation takes the other arm.  The same
    mutants, with the same numbers, as :func:`enumerate_mutants` gives; ``line`` is the statement's
    line, which is where coverage.py's branch arcs start (``benchmarks/branch_reach.py``)."""
    return [m for m in enumerate_mutants(machine) if m.operator == "boolean" and m.before.startswith("if ")]


def sample(mutants: Sequence[Mutant], per_machine: int, seed: int) -> list[Mutant]:
    """A seeded sample of ``per_machine`` mutants of each machine (all of them when fewer)."""
    rng = random.Random(seed)
    by_machine: dict[str, list[Mutant]] = {}
    for m in mutants:
        by_machine.setdefault(m.machine, []).append(m)
    chosen: list[Mutant] = []
    for machine in sorted(by_machine):
        group = by_machine[machine]
        chosen += sorted(rng.sample(group, min(per_machine, len(group))), key=lambda m: m.index)
    return chosen


def _find_code(code: types.CodeType, qualname: str, line: int) -> types.CodeType | None:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            if const.co_qualname == qualname and const.co_firstlineno == line:
                return const
            found = _find_code(const, qualname, line)
            if found is not None:
                return found
    return None


def live_function(mutant: Mutant) -> types.FunctionType:
    """The function object the mutant's code goes into (a method's, a property's getter)."""
    mod = importlib.import_module(mutant.module)
    holder: Any = mod
    *outer, name = mutant.function.split(".")
    for part in outer:
        holder = getattr(holder, part)
    raw = inspect.getattr_static(holder, name) if outer else getattr(holder, name)
    if isinstance(raw, staticmethod | classmethod):
        raw = raw.__func__
    elif isinstance(raw, property):
        raw = raw.fget
    raw = inspect.unwrap(raw)
    if not isinstance(raw, types.FunctionType):
        raise MutationError(f"{mutant.module}.{mutant.function} is not a plain function ({type(raw).__name__})")
    return raw


def mutated_code(mutant: Mutant, source: str | None = None) -> types.CodeType:
    """The code object of the mutated function."""
    text, path = _source(mutant.module)
    if source is not None:
        text = source
    tree = ast.parse(text)
    func = dict(_functions(tree)).get(mutant.function)
    if func is None:
        raise MutationError(f"{mutant.function} is not in {mutant.module}")
    for ordinal, (node, slot) in enumerate(_walk(func)):
        if ordinal == mutant.ordinal:
            _mutate(node, slot, mutant.operator, mutant.detail)
            break
    else:
        raise MutationError(f"{mutant.id}: node {mutant.ordinal} not found in {mutant.function}")
    ast.fix_missing_locations(tree)
    module_code = compile(tree, str(path), "exec")
    code = _find_code(module_code, mutant.function, func.lineno)
    if code is None:
        # Decorated functions start at their first decorator's line in some Python versions.
        code = next(
            (c for c in _codes(module_code) if c.co_qualname == mutant.function),
            None,
        )
    if code is None:
        raise MutationError(f"{mutant.id}: no code object for {mutant.function}")
    return code


def _codes(code: types.CodeType) -> Iterator[types.CodeType]:
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            yield const
            yield from _codes(const)


@contextlib.contextmanager
def applied(mutant: Mutant) -> Iterator[types.FunctionType]:
    """Run ``mutant``: the live function's code is swapped for the mutated one, then restored."""
    func = live_function(mutant)
    code = mutated_code(mutant)
    if code.co_freevars != func.__code__.co_freevars:
        raise MutationError(f"{mutant.id}: the mutated code needs other closure cells")
    original = func.__code__
    func.__code__ = code
    try:
        yield func
    finally:
        func.__code__ = original


def install(spec: str) -> Callable[[], None]:
    """Apply the mutant named ``machine:index`` until the returned undo is called, even when the
    caller drops it (a generator-based context manager that is garbage-collected restores itself,
    so the swap here is done without one)."""
    machine, _, index = spec.partition(":")
    mutant = enumerate_mutants(machine)[int(index)]
    func = live_function(mutant)
    code = mutated_code(mutant)
    if code.co_freevars != func.__code__.co_freevars:
        raise MutationError(f"{mutant.id}: the mutated code needs other closure cells")
    original = func.__code__
    func.__code__ = code

    def undo() -> None:
        func.__code__ = original

    return undo
