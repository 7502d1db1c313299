"""The local training loop any agent recipe runs on: ``tracerl demo`` and the ``examples/`` agents."""
