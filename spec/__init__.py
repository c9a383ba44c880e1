"""txnmodel's vocabulary: types, commands, errors, config defaults, wire formats, numbered rules.

Imports nothing of ours.  See ``docs/spec/overview.md`` for the map.
"""
