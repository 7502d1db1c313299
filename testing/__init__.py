"""Tools for tracerl's tests and benchmarks, kept apart from the product packages.

Nothing under ``tracerl.*`` imports this package: it holds loopback servers that script an
OpenAI-compatible answer, load generators for the collector and similar test equipment,
in the way ``opentelemetry-test-utils`` sits beside the OpenTelemetry SDK.
"""
