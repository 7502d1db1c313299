"""Training on the transitions dataset: configuration, dataset reading, the torch backend, checkpoints."""
