"""The drivers: what they generate is what the reference takes, spelled so that it decodes back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance.strategies import MACHINES, driver_class
from conformance.strategies.base import Crash, args_of
from reference.sessions import Machine
from tests.conform.conftest import ROOT


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_every_generated_step_decodes_back_and_every_observation_is_answerable(machine: str) -> None:
    make = driver_class(machine)

    @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def runs(data: st.DataObject) -> None:
        driver = make()
        setup = driver.setup(data)
        reference = Machine.start(machine, setup.config, setup.init)
        for index in range(20):
            where = f"$.steps[{index}]"
            step = driver.next(data, reference.state)
            if isinstance(step, Crash):
                assert reference.can_crash
                reference.crash(where)
                result = reference.recover(step.args, where)
            else:
                name = driver.name_of(step)
                decoded = reference.command(name, args_of(step), where)
                assert decoded == step, f"{name}: {args_of(step)} decodes to {decoded!r}"
                result = reference.step(decoded, where)
            driver.after(step, result, reference.state)
            for observer, args in driver.observations(reference.state):
                reference.observe(observer, args, f"{where}.check")

    runs()


def test_a_driver_sends_only_what_the_implementation_supports() -> None:
    make = driver_class("coordinator")

    @settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.data())
    def runs(data: st.DataObject) -> None:
        driver = make(frozenset({"new_txn", "end_txn"}), crashes=False)
        setup = driver.setup(data)
        reference = Machine.start("coordinator", setup.config, setup.init)
        for _ in range(15):
            step = driver.next(data, reference.state)
            assert not isinstance(step, Crash)
            assert driver.name_of(step) in {"new_txn", "end_txn"}
            result = reference.step(step, "$")
            driver.after(step, result, reference.state)

    runs()


@pytest.mark.parametrize("machine", sorted(MACHINES))
def test_the_stateful_tests_draw_from_the_same_strategies(machine: str) -> None:
    """One home for the strategies: each machine's stateful test imports them from conformance."""
    tree = ast.parse((ROOT / "tests" / machine / "test_stateful.py").read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert "conformance.strategies" in imported or f"conformance.strategies.{machine}" in imported
    assert not (Path(ROOT) / "tests" / machine / "strategies.py").exists()
