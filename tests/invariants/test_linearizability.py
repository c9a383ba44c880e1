"""The Wing-Gong-Lowe checker, the generic models and the reference-machine adapter."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from invariants.linearizability import NOT_A_READ, UNKNOWN, Verdict, check_history, check_object
from invariants.models import CasRegister, KeyValue, MachineModel, model_by_name, random_register_history
from spec.config import Config
from spec.errors import InvalidTxnStatus, TransactionNotFound
from spec.history import BadHistory, Operation, OpType, make_operation, object_id
from spec.result import Err, Ok
from spec.types import TxnStatus

R = object_id("register", "x")


def reg(
    index: int,
    process: int,
    f: str,
    value: Any,
    result: Any,
    at: int,
    done: int | None,
    kind: OpType = OpType.OK,
    obj: str = R,
) -> Operation:
    return make_operation("h", index, process, kind, f, obj, value, result, invoked_at=at, completed_at=done)


def verdict(ops: list[Operation], model: Any = None, **kw: Any) -> Verdict:
    return check_history(model or CasRegister(), ops, **kw).verdict


def test_sequential_and_concurrent_registers() -> None:
    ok = [reg(0, 0, "write", 1, None, 0, 1), reg(1, 1, "read", None, 1, 2, 3)]
    assert verdict(ok) is Verdict.OK
    stale = [reg(0, 0, "write", 1, None, 0, 1), reg(1, 1, "read", None, None, 2, 3)]
    assert verdict(stale) is Verdict.ILLEGAL
    # a read overlapping the write may see either value
    overlapping = [
        reg(0, 0, "write", 1, None, 0, 5),
        reg(1, 1, "read", None, None, 2, 3),
        reg(2, 2, "read", None, 1, 2, 4),
    ]
    assert verdict(overlapping) is Verdict.OK


def test_intervals_are_closed() -> None:
    # the read is invoked at the instant the write returns: they overlap, so nil is fine
    ops = [reg(0, 0, "write", 1, None, 0, 2), reg(1, 1, "read", None, None, 2, 3)]
    assert verdict(ops) is Verdict.OK


def test_info_may_take_effect_any_time_after_invocation_or_never() -> None:
    write = reg(0, 0, "write", 1, None, 0, 1, OpType.INFO)
    late = [write, reg(1, 1, "read", None, None, 5, 6), reg(2, 1, "read", None, 1, 10, 11)]
    assert verdict(late) is Verdict.OK  # took effect between the reads
    never = [write, reg(1, 1, "read", None, None, 5, 6)]
    assert verdict(never) is Verdict.OK
    back = [write, reg(1, 1, "read", None, 1, 5, 6), reg(2, 1, "read", None, None, 10, 11)]
    assert verdict(back) is Verdict.ILLEGAL  # once visible it cannot un-happen
    before = [reg(0, 1, "read", None, 1, 0, 1), reg(1, 0, "write", 1, None, 2, 3, OpType.INFO)]
    assert verdict(before) is Verdict.ILLEGAL  # not before its invocation


def test_cas_outcomes() -> None:
    ops = [
        reg(0, 0, "write", 1, None, 0, 1),
        reg(1, 0, "cas", [1, 2], None, 2, 3),
        reg(2, 1, "cas", [1, 3], None, 4, 5, OpType.FAIL),
        reg(3, 1, "read", None, 2, 6, 7),
    ]
    assert verdict(ops) is Verdict.OK
    wrong_fail = [*ops[:2], reg(2, 1, "cas", [2, 3], None, 4, 5, OpType.FAIL)]
    assert verdict(wrong_fail) is Verdict.ILLEGAL


def test_budget_gives_unknown() -> None:
    ops = random_register_history(7, ops=60, clients=8, crash=0.2)
    result = check_history(CasRegister(), ops, step_budget=5)
    assert result.verdict is Verdict.UNKNOWN
    assert "budget" in result.objects[0].reason


def test_split_per_object_and_stop_at_the_first_illegal() -> None:
    ops = random_register_history(3, ops=80, clients=4, keys=3)
    assert verdict(ops) is Verdict.OK
    first = next(o for o in ops if o.f == "read" and o.object == object_id("register", "1") and o.type is OpType.OK)
    broken = [o if o is not first else dataclasses.replace(o, result="99", _result=None) for o in ops]
    result = check_history(CasRegister(), broken)
    assert result.verdict is Verdict.ILLEGAL
    assert result.failing() is not None and result.failing().object == object_id("register", "1")  # type: ignore
    assert {o.verdict for o in result.objects} <= {Verdict.OK, Verdict.ILLEGAL, Verdict.SKIPPED}
    assert len(result.objects) == 3


@given(st.integers(0, 10_000), st.integers(1, 60), st.integers(1, 6), st.sampled_from([0.0, 0.1, 0.3]))
def test_simulated_registers_are_linearizable(seed: int, n: int, clients: int, crash: float) -> None:
    ops = random_register_history(seed, ops=n, clients=clients, crash=crash)
    result = check_history(CasRegister(), ops)
    assert result.verdict is Verdict.OK
    assert sorted(result.objects[0].linearization) == [o.index for o in ops]


@given(st.integers(0, 10_000), st.integers(2, 40), st.integers(1, 4))
def test_a_read_of_a_value_never_written_is_caught(seed: int, n: int, clients: int) -> None:
    ops = random_register_history(seed, ops=n, clients=clients)
    reads = [o for o in ops if o.f == "read" and o.type is OpType.OK]
    if not reads:
        return
    broken = [o if o is not reads[-1] else dataclasses.replace(o, result="1000", _result=None) for o in ops]
    assert verdict(broken) is Verdict.ILLEGAL


def test_the_linearization_respects_real_time() -> None:
    ops = random_register_history(11, ops=40, clients=3)
    order = check_history(CasRegister(), ops).objects[0].linearization
    by_index = {o.index: o for o in ops}
    for earlier, later in itertools.pairwise(order):
        # no op placed later may have returned before an op placed earlier was invoked
        assert not (by_index[later].return_time < by_index[earlier].invoked_at)


def test_key_value_model() -> None:
    k1, k2 = object_id("key", "1"), object_id("key", "2")
    ops = [
        reg(0, 0, "put", "a", None, 0, 1, obj=k1),
        reg(1, 1, "append", "b", None, 0, 1, obj=k1),
        reg(2, 2, "put", "z", None, 0, 1, obj=k2),
        reg(3, 0, "get", None, "ab", 2, 3, obj=k1),
        reg(4, 2, "get", None, "z", 2, 3, obj=k2),
    ]
    assert verdict(ops, KeyValue()) is Verdict.OK
    bad = [*ops[:3], reg(3, 0, "get", None, "ba", 2, 3, obj=k1)]
    assert verdict(bad, KeyValue()) is Verdict.ILLEGAL
    with pytest.raises(BadHistory, match="not 'read'"):
        check_history(KeyValue(), [reg(0, 0, "read", None, None, 0, 1, obj=k1)])


def test_models_by_name() -> None:
    assert model_by_name("register").name == "cas-register"
    assert model_by_name("kv").name == "kv"
    with pytest.raises(KeyError, match="unknown model"):
        model_by_name("no-such-model")


# --- the reference-machine adapter, on a small machine of the tests' own -----------------------------


@dataclass(frozen=True)
class Txn:
    """The machine's state: one transaction's status."""

    status: TxnStatus


@dataclass(frozen=True)
class EndTxn:
    action: TxnStatus


@dataclass(frozen=True)
class GetStatus:
    pass


def txn_step(state: Txn, command: Any) -> tuple[Txn, Ok[Any] | Err]:
    from spec.types import can_transition

    if isinstance(command, GetStatus):
        return state, Ok(state.status)
    if state.status.is_terminal:
        return state, Err(TransactionNotFound("finished"))
    if not can_transition(state.status, command.action):
        return state, Err(InvalidTxnStatus(f"{state.status.name} -> {command.action.name}"))
    return Txn(command.action), Ok(None)


COMMANDS: Mapping[str, type] = {"end_txn": EndTxn, "get_status": GetStatus}
C = object_id("coordinator", 0)


def machine() -> MachineModel:
    return MachineModel("toy-txn", Txn(TxnStatus.OPEN), txn_step, COMMANDS)


def m(
    index: int,
    process: int,
    f: str,
    value: Any,
    result: Any,
    at: int,
    done: int | None,
    kind: OpType = OpType.OK,
    error: str | None = None,
) -> Operation:
    return make_operation("h", index, process, kind, f, C, value, result, invoked_at=at, completed_at=done, error=error)


def test_adapter_accepts_what_step_returns() -> None:
    ops = [
        m(0, 0, "end_txn", {"action": "COMMITTING"}, None, 0, 1),
        m(1, 1, "get_status", {}, "COMMITTING", 2, 3),
        m(2, 0, "end_txn", {"action": "COMMITTED"}, None, 4, 5),
        m(3, 1, "end_txn", {"action": "ABORTING"}, None, 6, 7, OpType.FAIL, "TransactionNotFound"),
    ]
    assert verdict(ops, machine()) is Verdict.OK


def test_adapter_orders_concurrent_commands_by_their_results() -> None:
    # two concurrent status reads bracket a transition: only one order explains both
    ops = [
        m(0, 0, "end_txn", {"action": "ABORTING"}, None, 0, 10),
        m(1, 1, "get_status", {}, "ABORTING", 1, 2),
        m(2, 2, "get_status", {}, "OPEN", 1, 3),
    ]
    assert verdict(ops, machine()) is Verdict.OK
    ops.append(m(3, 1, "get_status", {}, "OPEN", 4, 5))  # back to OPEN after ABORTING was seen: impossible
    assert verdict(ops, machine()) is Verdict.ILLEGAL


def test_adapter_checks_error_names_and_results() -> None:
    wrong_error = [m(0, 0, "end_txn", {"action": "COMMITTED"}, None, 0, 1, OpType.FAIL, "TransactionNotFound")]
    assert verdict(wrong_error, machine()) is Verdict.ILLEGAL  # the machine says InvalidTxnStatus
    right_error = [dataclasses.replace(wrong_error[0], error="InvalidTxnStatus")]
    assert verdict(right_error, machine()) is Verdict.OK
    wrong_result = [m(0, 1, "get_status", {}, "ABORTED", 0, 1)]
    assert verdict(wrong_result, machine()) is Verdict.ILLEGAL
    ok_claimed_for_a_rejection = [m(0, 0, "end_txn", {"action": "COMMITTED"}, None, 0, 1)]
    assert verdict(ok_claimed_for_a_rejection, machine()) is Verdict.ILLEGAL


def test_adapter_unknown_and_unsent_operations() -> None:
    info = [
        m(0, 0, "end_txn", {"action": "ABORTING"}, None, 0, 1, OpType.INFO),
        m(1, 1, "get_status", {}, "ABORTING", 5, 6),
    ]
    assert verdict(info, machine()) is Verdict.OK
    unsent = [
        m(0, 0, "end_txn", {"action": "ABORTING"}, None, 0, 1, OpType.FAIL),
        m(1, 1, "get_status", {}, "OPEN", 5, 6),
    ]
    assert verdict(unsent, machine()) is Verdict.OK  # failed before reaching the machine: no effect
    assert machine().decode(info[0])[1] is UNKNOWN


def test_adapter_rejects_unknown_commands_and_bad_arguments() -> None:
    with pytest.raises(BadHistory, match="no command 'begin'"):
        check_object(machine(), [m(0, 0, "begin", {}, None, 0, 1)])
    with pytest.raises(BadHistory, match="not a EndTxn") as info:
        check_object(machine(), [m(4, 0, "end_txn", {"action": "SOMETIMES"}, None, 0, 1)])
    assert info.value.row == 4 and info.value.column == "value"


def test_adapter_from_a_vectors_table() -> None:
    from reference.conformance import MachineVectors

    vectors = MachineVectors(
        "toy-txn", lambda config, init: Txn(TxnStatus[init.get("status", "OPEN")]), txn_step, COMMANDS
    )
    model = MachineModel.from_vectors(vectors, Config(), {"status": "COMMITTING"})
    assert verdict([m(0, 0, "get_status", {}, "COMMITTING", 0, 1)], model) is Verdict.OK


# --- the search against a brute-force oracle, compiled and interpreted ------------------------------


def _plain_search_module() -> Any:
    """``invariants/_wgl.py`` loaded from source, as plain Python whether or not a build exists."""
    import importlib.util
    from pathlib import Path

    import invariants.linearizability as lin

    source = Path(lin.__file__).with_name("_wgl.py")
    spec = importlib.util.spec_from_file_location("invariants._wgl_plain_for_tests", source)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert not module.compiled()
    return module


PLAIN = _plain_search_module()


def _oracle(model: Any, ops: list[Operation]) -> bool:
    """Linearizable by enumeration: some order of the operations respects real time (an op goes
    next only if it was invoked before every op not yet placed returned) and the model accepts it;
    an op of unknown outcome that never returned may be left out."""
    decoded = [model.decode(op) for op in ops]
    optional = [d[1] is UNKNOWN and op.return_time == float("inf") for op, d in zip(ops, decoded, strict=True)]

    def extend(state: Any, left: frozenset[int]) -> bool:
        if all(optional[i] for i in left):
            return True
        deadline = min(ops[i].return_time for i in left)
        for i in left:
            if ops[i].invoked_at <= deadline:
                accepted, after = model.step(state, *decoded[i])
                if accepted and extend(after, left - {i}):
                    return True
        return False

    return extend(model.init(), frozenset(range(len(ops))))


@st.composite
def _small_register_histories(draw: st.DrawFn) -> list[Operation]:
    seed = draw(st.integers(0, 100_000))
    ops = random_register_history(
        seed,
        ops=draw(st.integers(1, 8)),
        clients=draw(st.integers(1, 4)),
        crash=draw(st.sampled_from([0.0, 0.3, 0.6])),
        values=3,
    )
    if draw(st.booleans()):  # perturb one completed op's output: often (not always) illegal
        done = [o for o in ops if o.type is OpType.OK and o.f == "read"]
        if done:
            victim = draw(st.sampled_from(done))
            ops = [
                o if o is not victim else dataclasses.replace(o, result=str(draw(st.integers(0, 2))), _result=None)
                for o in ops
            ]
    return ops


@pytest.mark.parametrize("implementation", ["built", "plain"])
@given(ops=_small_register_histories())
def test_the_search_agrees_with_enumeration(implementation: str, ops: list[Operation]) -> None:
    import invariants.linearizability as lin

    saved = lin._wgl
    lin._wgl = PLAIN if implementation == "plain" else saved
    try:
        got = check_object(CasRegister(), ops).verdict
    finally:
        lin._wgl = saved
    assert got is (Verdict.OK if _oracle(CasRegister(), ops) else Verdict.ILLEGAL)


def test_the_built_search_is_the_compiled_one_when_it_could_be_built() -> None:
    """``make`` builds it wherever a C compiler and Python's headers are; elsewhere the plain module
    is what runs (and the tests above check it gives the same results)."""
    import shutil
    import sysconfig
    from pathlib import Path

    import invariants.linearizability as lin

    buildable = shutil.which(sysconfig.get_config_var("CC").split()[0] if sysconfig.get_config_var("CC") else "cc")
    headers = Path(sysconfig.get_paths()["include"], "Python.h").exists()
    if buildable and headers:
        assert lin._wgl.compiled(), "invariants/_wgl.py is not compiled (or older than its build): run make build"
    else:
        assert not lin._wgl.compiled()


@given(st.integers(0, 10_000), st.integers(1, 80), st.integers(1, 8), st.sampled_from([0.0, 0.1, 0.3]))
def test_built_and_plain_searches_give_the_same_results(seed: int, n: int, clients: int, crash: float) -> None:
    """Same verdict, steps, linearization and blocked operation, on legal and broken histories."""
    import invariants.linearizability as lin

    ops = random_register_history(seed, ops=n, clients=clients, crash=crash, values=3)
    reads = [o for o in ops if o.f == "read" and o.type is OpType.OK]
    if reads and seed % 2:
        ops = [o if o is not reads[-1] else dataclasses.replace(o, result="7", _result=None) for o in ops]
    built = check_object(CasRegister(), ops)
    saved = lin._wgl
    lin._wgl = PLAIN
    try:
        plain = check_object(CasRegister(), ops)
    finally:
        lin._wgl = saved
    assert (plain.verdict, plain.steps, plain.linearization, plain.blocked) == (
        built.verdict,
        built.steps,
        built.linearization,
        built.blocked,
    )


class _ReadStateLies(CasRegister):
    """Says every read accepts the initial state, which its own ``step`` denies for a read of 1."""

    def read_state(self, op_input: Any, op_output: Any) -> Any:
        return NOT_A_READ if op_input[0] != "read" else None


@pytest.mark.parametrize("implementation", ["built", "plain"])
def test_a_read_state_that_disagrees_with_step_is_reported(implementation: str) -> None:
    import invariants.linearizability as lin

    ops = [reg(0, 0, "read", None, 1, 0, 1)]
    assert check_object(CasRegister(), ops).verdict is Verdict.ILLEGAL  # the honest model: a plain no
    saved = lin._wgl
    lin._wgl = PLAIN if implementation == "plain" else saved
    try:
        with pytest.raises(ValueError, match="read_state disagrees with its step on \\('read',\\)"):
            check_object(_ReadStateLies(), ops)
    finally:
        lin._wgl = saved


def test_without_cython_the_search_runs_on_the_stub(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where Cython is not installed, ``invariants/_wgl.py`` takes its decorators from
    ``invariants/_cython_stub.py``: it has every one the search uses, and the results are the same."""
    import builtins
    import importlib.util
    from pathlib import Path

    import invariants._cython_stub as stub
    import invariants.linearizability as lin

    real_import = builtins.__import__

    def no_cython(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "cython":
            raise ImportError("no module named 'cython' (this test)")
        return real_import(name, *args, **kwargs)

    spec = importlib.util.spec_from_file_location("invariants._wgl_on_stub", Path(lin.__file__).with_name("_wgl.py"))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setattr(builtins, "__import__", no_cython)
    spec.loader.exec_module(module)
    monkeypatch.undo()
    assert module.cython is stub and not module.compiled()
    ops = random_register_history(7, ops=40, clients=4, crash=0.3, values=3)
    results = []
    for implementation in (module, PLAIN):
        saved, lin._wgl = lin._wgl, implementation
        try:
            found = check_object(CasRegister(), ops)
        finally:
            lin._wgl = saved
        results.append((found.verdict, found.steps, found.linearization, found.blocked))
    assert results[0] == results[1]


class _Witnessed(CasRegister):
    """A register whose recorder vouches for an order (``witness_order``): here, index order."""

    def witness_order(self, ops: list[Operation]) -> list[int]:
        return sorted(range(len(ops)), key=lambda i: ops[i].index)


def test_a_witness_the_model_accepts_is_the_linearization() -> None:
    # 24 writes at one instant and reads between them: the witness decides in one pass.
    ops = [reg(i, i, "write", i, None, 5, 5) for i in range(24)] + [reg(24, 30, "read", None, 23, 5, 5)]
    result = check_object(_Witnessed(), ops)
    assert result.verdict is Verdict.OK and result.steps == len(ops)
    assert list(result.linearization) == list(range(25))


def test_a_witness_that_does_not_fit_leaves_the_verdict_to_the_search() -> None:
    # index order breaks real time (op 1 returned before op 0 was called): the search finds 1, 0.
    ops = [reg(0, 0, "write", 1, None, 5, 6), reg(1, 1, "write", 2, None, 0, 1), reg(2, 2, "read", None, 1, 7, 8)]
    result = check_object(_Witnessed(), ops)
    assert result.verdict is Verdict.OK and list(result.linearization) == [1, 0, 2]
    # the model rejects the witness (the read sees the other write), and so does every order
    bad = [reg(0, 0, "write", 1, None, 0, 1), reg(1, 1, "write", 2, None, 2, 3), reg(2, 2, "read", None, 1, 4, 5)]
    assert check_object(_Witnessed(), bad).verdict is Verdict.ILLEGAL
    # rejected in index order, accepted in another that real time allows
    swapped = [reg(0, 0, "write", 1, None, 0, 5), reg(1, 1, "write", 2, None, 0, 5), reg(2, 2, "read", None, 1, 6, 7)]
    assert check_object(_Witnessed(), swapped).verdict is Verdict.OK
