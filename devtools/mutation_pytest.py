"""A pytest plugin that runs the suite against one automatic mutant (``devtools.mutation``).

``TXNMODEL_MUTANT=machine:index python -m pytest -p devtools.mutation_pytest tests/<machine>``:
the mutant is applied before collection and stays for the whole session.  Used by
``benchmarks/mutation_report.py``; without the variable the plugin does nothing.
"""

from __future__ import annotations

import os

import pytest


def pytest_configure(config: pytest.Config) -> None:
    spec = os.environ.get("TXNMODEL_MUTANT")
    if spec:
        from devtools.mutation import install

        install(spec)
