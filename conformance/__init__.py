"""``txnmodel conform``: an implementation in any language checked against the reference.

The implementation is a child process speaking the conformance protocol (:mod:`spec.conform`,
``docs/spec/conform.md``) for one machine.  ``conform`` runs the machine's vectors through it, then
generates command sequences from the machine's stateful-test strategies (:mod:`conformance.strategies`),
runs each on the reference and on the implementation, compares every answer and observation, and
shrinks the first difference to a vector file and a viewer page (``docs/conform.md``).
"""
