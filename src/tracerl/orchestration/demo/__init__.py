"""``tracerl demo``: the whole loop on one CPU machine, with its agent and its task."""
