"""Where the machines' records and a topic's entries live: the managed-ledger interface, the in-memory
and file ledgers (their bytes on disk, recovery, the journal, the store many ledgers share), the real
file system, the logs the machines write on a ledger, and read-only decoding of a store (``inspect``)."""
