"""The broker behind Pulsar's binary protocol on the wall clock (``txnmodel serve``), and faults on demand for it.

:mod:`engine.serve.server` puts the parts together and runs the loop; its docstring names the parts.
"""
