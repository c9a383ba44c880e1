"""Predicates over states and histories, stated once and reused by the Hypothesis tests, the Z3
proofs and the bulk (Spark) checker."""
