"""The embedded span sink: OTel spans straight to Parquet, no server.

Registered as the ``tracerl`` traces exporter (entry point group
``opentelemetry_traces_exporter``), so ``OTEL_TRACES_EXPORTER=tracerl`` selects it with
no code change. Spans become immutable Parquet files under
``$TRACERL_DATA_DIR/spans/date=.../hour=.../``, committed atomically, a few thousand rows
each; ``force_flush`` and ``shutdown`` commit whatever is pending.
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from tracerl.instrumentation.settings import settings
from tracerl.schemas.spans import SPANS_DICTIONARY_COLUMNS, decode_tokens, span_row, spans_table, to_json
from tracerl.schemas.tokens import TokenEncodingError
from tracerl.core.storage import hour_partition, write_parquet_atomic

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
    """Spans to Parquet files of the spans table.

    Spans are converted to rows (one dict of strings and numpy arrays each) the moment the
    span processor hands them over, and committed as one Parquet file per ``max_rows``
    rows, when the oldest row is ``max_delay_s`` old, on ``force_flush`` and on
    ``shutdown``. Converting early lets the SDK's span objects (a dozen garbage-collected
    objects each) die young: a span kept in a processor's queue for seconds is promoted
    through the collector's generations, and every full collection of an agent's process
    (often 10^5 live objects) lands on some LLM call. Files stay large because they no
    longer follow the processor's hand-over rhythm (``settings.PARQUET_HANDOVER_MS``).
    """

    def __init__(
        self, data_dir: str | os.PathLike | None = None, *, max_rows: int = 8192, max_delay_s: float = 5.0
    ) -> None:
        root = Path(data_dir) if data_dir is not None else settings().data_dir
        self.spans_dir = root / "spans"
        self.max_rows = max_rows
        self.max_delay_s = max_delay_s
        self._lock = threading.Lock()
        self._pending: list[dict[str, Any]] = []
        self._timer: threading.Timer | None = None
        self._shutdown = False
        self.files_written = 0
        self.spans_written = 0
        self.spans_rejected = 0
        _exporters.add(self)

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self._shutdown:
            logger.warning("tracerl: ParquetSpanExporter is shut down; %d spans not written", len(spans))
            return SpanExportResult.FAILURE
        rows = self._rows(spans)
        if not rows:
            return SpanExportResult.SUCCESS
        with self._lock:
            self._pending += rows
            if len(self._pending) >= self.max_rows:
                return SpanExportResult.SUCCESS if self._commit() else SpanExportResult.FAILURE
            if self._timer is None:
                self._timer = threading.Timer(self.max_delay_s, self.force_flush)
                self._timer.daemon = True
                self._timer.start()
        return SpanExportResult.SUCCESS

    def _rows(self, spans: Sequence[ReadableSpan]) -> list[dict[str, Any]]:
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
        return rows

    def _commit(self) -> bool:
        """Write what is pending as one file (lock held); on failure it is dropped, loudly."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if not self._pending:
            return True
        table = spans_table(self._pending)
        self._pending = []
        try:
            write_parquet_atomic(
                table, self.spans_dir, prefix="spans", partition=hour_partition(), use_dictionary=list(SPANS_DICTIONARY_COLUMNS)
            )
        except OSError as exc:
            logger.error(
                "tracerl: could not write %d spans under %s: %s (check that TRACERL_DATA_DIR is writable)",
                table.num_rows,
                self.spans_dir,
                exc,
            )
            return False
        self.files_written += 1
        self.spans_written += table.num_rows
        return True

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        with self._lock:
            return self._commit()

    def shutdown(self) -> None:
        with self._lock:
            self._commit()
            self._shutdown = True


# Every exporter alive in this process, for :class:`CommitOnFlush`.
_exporters: weakref.WeakSet[ParquetSpanExporter] = weakref.WeakSet()

def _forget_parent_rows() -> None:
    # A forked child (multiprocessing workers) starts with a copy of the parent's pending
    # rows; the parent writes them, so the child must not write them a second time.
    for exporter in list(_exporters):
        exporter._lock = threading.Lock()
        exporter._pending = []
        exporter._timer = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_parent_rows)


class CommitOnFlush(SpanProcessor):
    """Registered last on a provider: its ``force_flush`` commits what the Parquet
    exporters hold, after the batch processors before it have handed over their spans.
    (The SDK's batch processor does not pass ``force_flush`` on to its exporter.)"""

    def on_end(self, span: ReadableSpan) -> None:
        pass

    def shutdown(self) -> None:
        pass  # each exporter commits in its own shutdown

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        return all([exporter.force_flush(timeout_millis) for exporter in list(_exporters)])
