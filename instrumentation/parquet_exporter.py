"""The embedded span sink: OTel spans straight to Parquet, no server.

Registered as the ``tracerl`` traces exporter (entry point group
``opentelemetry_traces_exporter``), so ``OTEL_TRACES_EXPORTER=tracerl`` selects it with
no code change. Each batch handed over by the span processor becomes one immutable
Parquet file under ``$TRACERL_DATA_DIR/spans/date=.../hour=.../``; nothing is buffered
between batches, so ``force_flush`` and ``shutdown`` have nothing to lose.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tracerl.instrumentation.settings import settings
from tracerl.schemas.spans import decode_tokens, span_row, spans_table, to_json
from tracerl.schemas.tokens import TokenEncodingError
from tracerl.storage import hour_partition, write_parquet_atomic

logger = logging.getLogger(__name__)


def _hex(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def readable_span_row(span: ReadableSpan, resource_json: str | None = None) -> dict[str, Any]:
    """One row of the spans table for an SDK span (raises TokenEncodingError if corrupt).

    ``resource_json``, if given, is ``to_json`` of the span's resource attributes: a
    batch's spans share one resource, so :meth:`ParquetSpanExporter.export` encodes it once.
    """
    ctx = span.context
    parent = span.parent
    status = span.status
    scope = span.instrumentation_scope
    attributes = dict(span.attributes or {})
    try:
        # typed numpy arrays, as the collector stores them: Arrow builds the list columns
        # without a Python int per token, and a bad id rejects this span, not the batch
        decode_tokens(attributes)
    except TokenEncodingError as exc:
        raise TokenEncodingError(f"span {_hex(ctx.span_id, 16)} ({span.name!r}): {exc}") from exc
    return span_row(
        trace_id=_hex(ctx.trace_id, 32),
        span_id=_hex(ctx.span_id, 16),
        parent_span_id=_hex(parent.span_id, 16) if parent is not None else None,
        name=span.name,
        kind=span.kind.name,
        start_time_unix_nano=span.start_time or 0,
        end_time_unix_nano=span.end_time or span.start_time or 0,
        status_code=status.status_code.name,
        status_message=status.description,
        attributes=attributes,
        events=[
            {"name": e.name, "time_unix_nano": e.timestamp, "attributes": dict(e.attributes or {})}
            for e in span.events
        ],
        links=[
            {
                "trace_id": _hex(link.context.trace_id, 32),
                "span_id": _hex(link.context.span_id, 16),
                "attributes": dict(link.attributes or {}),
            }
            for link in span.links
        ],
        resource=span.resource.attributes if span.resource is not None else {},
        resource_json=resource_json,
        scope_name=scope.name if scope is not None else None,
        scope_version=scope.version if scope is not None else None,
    )


class ParquetSpanExporter(SpanExporter):
    """Write every exported batch of spans as one Parquet file of the spans table."""

    def __init__(self, data_dir: str | os.PathLike | None = None) -> None:
        root = Path(data_dir) if data_dir is not None else settings().data_dir
        self.spans_dir = root / "spans"
        self._lock = threading.Lock()
        self._shutdown = False
        self.files_written = 0
        self.spans_written = 0
        self.spans_rejected = 0

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            logger.warning("tracerl: ParquetSpanExporter is shut down; %d spans not written", len(spans))
            return SpanExportResult.FAILURE
        rows = []
        resources: dict[int, str | None] = {}  # id(resource) -> its JSON, for this batch
        for span in spans:
            resource = span.resource
            if id(resource) not in resources:
                resources[id(resource)] = to_json(dict(resource.attributes)) if resource is not None else None
            try:
                rows.append(readable_span_row(span, resources[id(resource)]))
            except TokenEncodingError as exc:
                self.spans_rejected += 1
                logger.warning("tracerl: span not written, its token attributes are corrupt: %s", exc)
        if not rows:
            return SpanExportResult.SUCCESS
        try:
            with self._lock:
                write_parquet_atomic(spans_table(rows), self.spans_dir, prefix="spans", partition=hour_partition())
                self.files_written += 1
                self.spans_written += len(rows)
        except OSError as exc:
            logger.error(
                "tracerl: could not write %d spans under %s: %s (check that TRACERL_DATA_DIR is writable)",
                len(rows),
                self.spans_dir,
                exc,
            )
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return True  # every export() is already durable

    def shutdown(self) -> None:
        self._shutdown = True
