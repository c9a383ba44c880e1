"""Seeded runs of the broker: the client over the simulated broker, and the named workloads under a fault
schedule that ``txnmodel simulate`` and the main job run."""
