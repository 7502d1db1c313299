"""Orchestration: what runs training round after round, built on the other parts.

``loop`` runs agents, builds the dataset, trains and publishes in one process (``tracerl demo``,
``python -m examples.X.train``); ``rounds`` runs one scheduled round over the spans a collector
wrote (``tracerl train run``/``loop``/``rollback``/``list``); ``demo`` is the embedded task the
first command trains on. They import the pipeline, training, serving and publishing; nothing in
those parts imports orchestration.
"""
