"""Delayed delivery run on the managed ledgers: the pure trackers of :mod:`reference.delayed` carried out
for a subscription (the PIP-195 bucket snapshots on ledgers, their metrics) and the shared index PIP-195
left unbuilt."""
