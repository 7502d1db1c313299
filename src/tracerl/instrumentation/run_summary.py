"""What a captured process says when it exits: where its spans went and what its LLM calls became.

Warnings (calls without token ids, failed calls, LLM requests no hook recognised,
capture a framework hook could not do) are logged whenever capture is on; the one-line
summary of counts is printed by processes ``tracerl run`` started
(``TRACERL_RUN_SUMMARY``), one line per captured Python process.
"""

from __future__ import annotations

import atexit
import logging
import os
import sys

from tracerl.instrumentation import capture_stats, span_finisher
from tracerl.instrumentation.settings import settings
from tracerl.schemas import environment as E

logger = logging.getLogger(__name__)
_registered = False


def register() -> None:
    """Say it at exit (once per process)."""
    global _registered
    if not _registered:
        atexit.register(report)
        _registered = True


def destination() -> str:
    """Where this process's spans go, as the OTel environment configures the exporter."""
    exporter = os.environ.get(E.OTEL_TRACES_EXPORTER_ENV, "")
    if exporter == "tracerl":
        return str(settings().spans_dir)
    endpoint = os.environ.get(E.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT_ENV) or os.environ.get(E.OTEL_EXPORTER_OTLP_ENDPOINT_ENV)
    return f"the {exporter or 'configured'} exporter" + (f" ({endpoint})" if endpoint else "")


def report() -> None:
    span_finisher.drain()  # the counts of calls whose spans are still being finished
    stats = capture_stats.STATS
    if os.environ.get(E.RUN_SUMMARY_ENV):
        print(f"{stats.summary(destination())} [pid {os.getpid()}]", file=sys.stderr, flush=True)
    warnings = stats.report()
    if warnings:
        logger.warning(warnings)
