"""A transactional Pulsar client that speaks the binary protocol itself (the official Python client has
no transactions)."""
