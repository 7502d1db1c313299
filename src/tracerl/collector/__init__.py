"""OTLP receiver (HTTP protobuf/JSON and gRPC) writing durable, partitioned Parquet.

Entry points: ``tracerl collector serve`` (:mod:`tracerl.collector.cli`), or
:class:`tracerl.collector.server.CollectorServer` to embed one (``with CollectorServer(...)``
serves in background threads). src/tracerl/collector/README.md maps each module to its one job.
"""
