"""How work is run: ``verify`` in one process or on Spark, verdicts on disk, the main job over worker
processes, conformance vectors from files, and the reference broker from Python."""
