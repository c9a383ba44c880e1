"""Tools for developing txnmodel itself: automatic mutants of the machines and the rules a workload reaches."""
