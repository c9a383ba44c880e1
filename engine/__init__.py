"""The engine: the pure machines of :mod:`reference` run on ledgers, clocks, faults and a socket.

Its layers, each importing only those before it:

* :mod:`engine.scheduler` (the deterministic scheduler and its futures) and :mod:`engine.recorder`
  (histories of the machines' steps and the clients' operations);
* :mod:`engine.storage`: managed ledgers in memory and in files, the journal, the real file system,
  the logs the machines write;
* :mod:`engine.simulated`: the simulated substrate, apart from the real one (a disk power cuts can
  tear, faults injected into a ledger);
* :mod:`engine.ledger_store`: where a broker's ledgers live, real or simulated;
* :mod:`engine.delayed`: delayed delivery on the ledgers (PIP-195's bucket snapshots, the shared index);
* :mod:`engine.broker`: the broker built from the machines;
* :mod:`engine.simulation` (seeded workloads under faults) and :mod:`engine.serve` (Pulsar's
  binary protocol on the wall clock).
"""
