"""The broker behind Pulsar's binary protocol on the wall clock (``txnmodel serve``), and faults on demand for it."""
