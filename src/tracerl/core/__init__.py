"""The ground floor: what every part builds on (Parquet storage, loopback servers, chat templates, lazy
imports, the extras' messages) and imports nothing of the parts above it."""
