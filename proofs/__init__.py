"""Z3 proofs that the invariants hold for every state, not just the ones the tests tried."""
