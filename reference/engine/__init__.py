"""The imperative shell: runs the pure machines on in-memory and file ledgers, with clocks,
faults and history recording.  The only place in ``reference`` that touches files, time and
threads."""
