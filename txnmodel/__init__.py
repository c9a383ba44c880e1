"""The ``txnmodel`` command line.  Thin: every decision lives in spec/, reference/, invariants/
and proofs/."""

__version__ = "0.1.0"
