"""The simulated substrate, apart from the real one: a disk that power cuts can tear, and faults injected
into any managed ledger.  Nothing in the broker knows whether it runs on these or on the real thing."""
