"""Switching capture on: :func:`instrument` in code, :class:`TracerlInstrumentor` by env.

Both paths end in :func:`install_hooks`: the tracerl span processor on the tracer
provider, the exact-token hook on the OpenAI SDK, OpenLLMetry's OpenAI instrumentation
and the framework hooks. Under ``opentelemetry-instrument`` (and ``tracerl run``) the
OTel distro builds the provider and its exporters from ``OTEL_*`` variables and then
loads every ``opentelemetry_instrumentor`` entry point, tracerl's among them.
"""

from __future__ import annotations

import logging
import os
import weakref
from collections.abc import Collection
from typing import Any

from opentelemetry import baggage, context, trace
from opentelemetry.instrumentation.instrumentor import BaseInstrumentor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter

from tracerl.instrumentation import frameworks, openai_hook, run_summary, sdk_internals, span_finisher
from tracerl.instrumentation.parquet_exporter import CommitOnFlush, ParquetSpanExporter
from tracerl.instrumentation.processor import TracerlSpanProcessor
from tracerl.instrumentation.settings import PARQUET_HANDOVER_MS, Settings, settings
from tracerl.schemas import attributes as A
from tracerl.schemas import environment as E

logger = logging.getLogger(__name__)

_hooked_providers: weakref.WeakSet[TracerProvider] = weakref.WeakSet()


def install_hooks(provider: Any) -> None:
    """Add tracerl's processor and hooks to ``provider`` (idempotent)."""
    current = settings()
    # OpenLLMetry reads its own switch; keep it in line with tracerl's.
    if os.environ.get(E.CAPTURE_CONTENT_ENV) and E.TRACELOOP_TRACE_CONTENT_ENV not in os.environ:
        os.environ[E.TRACELOOP_TRACE_CONTENT_ENV] = "true" if current.capture_content else "false"
    if isinstance(provider, TracerProvider):
        if provider not in _hooked_providers:
            _add_first(provider, TracerlSpanProcessor(current))
            provider.add_span_processor(CommitOnFlush())
            _hooked_providers.add(provider)
    else:
        logger.warning(
            "tracerl: the global tracer provider is %s, not the OTel SDK's; episode attributes "
            "will not be stamped on spans",
            type(provider).__name__,
        )
    openai_hook.install()
    frameworks.install(install_hooks)
    run_summary.register()
    _propagate_process_episode(current)


def _processor(exporter: SpanExporter | None, data_dir: str | os.PathLike | None) -> BatchSpanProcessor:
    exporter = exporter or ParquetSpanExporter(data_dir)
    if isinstance(exporter, ParquetSpanExporter):
        return BatchSpanProcessor(exporter, schedule_delay_millis=PARQUET_HANDOVER_MS)
    return BatchSpanProcessor(exporter)


def _add_first(provider: TracerProvider, processor: TracerlSpanProcessor) -> None:
    """Register ``processor`` ahead of the provider's other processors.

    Its ``force_flush``/``shutdown`` finish the LLM-call spans deferred off the calling
    thread, which must happen before the exporting processors flush. Should the SDK's
    internals for that order change (:func:`sdk_internals.put_first`), the span finisher
    runs each job on the calling thread rather than risking spans ended after a flush.
    """
    if sdk_internals.put_first(provider, processor):
        return
    provider.add_span_processor(processor)
    span_finisher.FINISHER.synchronous = True
    logger.warning(
        "tracerl: opentelemetry-sdk %s does not let tracerl's span processor go first; LLM-call spans "
        "are made on the agent's thread (slower, nothing lost)",
        sdk_internals.sdk_version(),
    )


def _propagate_process_episode(current: Settings) -> None:
    """Put the episode of `tracerl run --task-id` in baggage, so that it also reaches
    the processes this one calls (the processor stamps it on local spans either way)."""
    values = {A.EPISODE_ID: current.episode_id, A.TASK_ID: current.task_id, A.SPLIT: current.split}
    values = {k: v for k, v in values.items() if v}
    if not values or baggage.get_baggage(A.EPISODE_ID):
        return
    ctx = context.get_current()
    for key, value in values.items():
        ctx = baggage.set_baggage(key, value, ctx)
    context.attach(ctx)  # for the life of the process: never detached


def instrument(
    *,
    data_dir: str | os.PathLike | None = None,
    exporter: SpanExporter | None = None,
    service_name: str | None = None,
) -> TracerProvider:
    """Switch capture on in this process and return the tracer provider.

    With no global SDK provider yet, one is made that writes spans to Parquet under
    ``data_dir`` (default ``$TRACERL_DATA_DIR`` or ``./tracerl-data``) or to
    ``exporter``; an existing SDK provider (``opentelemetry-instrument``) is kept and
    only gets tracerl's processor. OpenAI client calls are captured with exact tokens,
    as tracerl's own LLM-call spans (``TRACERL_LLM_SPANS=openllmetry``: OpenLLMetry's).
    """
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        attrs = {"service.name": service_name} if service_name else {}
        provider = TracerProvider(resource=Resource.create(attrs))
        provider.add_span_processor(_processor(exporter, data_dir))
        trace.set_tracer_provider(provider)
        provider = trace.get_tracer_provider()
    elif exporter is not None or data_dir is not None:
        provider.add_span_processor(_processor(exporter, data_dir))
    install_hooks(provider)
    if settings().llm_spans == "openllmetry":
        _instrument_openai()
    return provider


def _instrument_openai() -> None:
    try:
        from opentelemetry.instrumentation.openai import OpenAIInstrumentor
    except ImportError:
        logger.warning("tracerl: opentelemetry-instrumentation-openai is not installed; LLM spans are minimal")
        return
    instrumentor = OpenAIInstrumentor()
    if not instrumentor.is_instrumented_by_opentelemetry:
        instrumentor.instrument()


class TracerlInstrumentor(BaseInstrumentor):
    """Entry point ``opentelemetry_instrumentor: tracerl`` for ``opentelemetry-instrument``."""

    def instrumentation_dependencies(self) -> Collection[str]:
        return ()

    def _instrument(self, **kwargs: Any) -> None:
        install_hooks(kwargs.get("tracer_provider") or trace.get_tracer_provider())

    def _uninstrument(self, **kwargs: Any) -> None:
        """The hooks stay for the life of the process (they are cheap when idle)."""
