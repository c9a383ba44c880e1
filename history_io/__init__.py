"""Histories in and out: Parquet and JSON Lines (the history contract of :mod:`spec.history`), Jepsen's
``history.edn`` and Jepsen's etcd logs.  Every file here is untrusted input, refused with one line naming
the file, the place and what was expected."""
