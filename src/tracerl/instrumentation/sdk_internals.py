"""Every use tracerl makes of OpenTelemetry SDK internals, in one place.

tracerl reaches past the SDK's public API three times, each for a reason measured or
required (``src/tracerl/instrumentation/README.md``, "Three routes"):

* :func:`put_first`: tracerl's span processor must run before the exporting ones, so that
  a flush first waits for the span finisher; the SDK only appends processors, so the
  order is set on its multi-processor's tuple (``TracerProvider._active_span_processor``,
  ``SynchronousMultiSpanProcessor._span_processors`` and ``._lock``).
* :func:`tracer_parts`: the finished-span route builds the ``ReadableSpan`` the SDK would
  have built, from the tracer's sampler, id generator, resource, scope and span limits
  (``Tracer._span_limits``, ``._instrumentation_scope``, ``._is_enabled``,
  ``._tracer_metrics``, and the processors it would call), and hands it only to
  processors whose ``on_start`` and ``_on_ending`` do nothing (:data:`PASSIVE_SDK_PROCESSORS`).
* :func:`filter_attribute_writes`: the content policy holds for every write to a live
  span's attributes, so a secret never enters a span whatever the exporter; the span's map
  (``Span._attributes``, a ``BoundedAttributes``) is given a class that filters
  ``__setitem__`` and ``_set_items`` (what ``Span.set_attributes`` calls).

Each function gives ``None`` or ``False`` when its piece is not there, and its caller takes
the public path (slower, never wrong). :func:`missing_pieces` probes a real provider, tracer
and span for every piece and for the behaviour relied on;
``tests/instrumentation/test_sdk_internals.py`` fails with the SDK's version and the missing
piece when a new release changes one.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol

from opentelemetry.attributes import BoundedAttributes
from opentelemetry.sdk.trace import SpanLimits, SpanProcessor, SynchronousMultiSpanProcessor, Tracer, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

#: The SDK's processors whose ``on_start`` and ``_on_ending`` do nothing: a span handed to
#: them already finished (``on_end`` only) reaches their exporters as the SDK's would.
PASSIVE_SDK_PROCESSORS: frozenset[type[SpanProcessor]] = frozenset({BatchSpanProcessor, SimpleSpanProcessor})


@functools.lru_cache(maxsize=1)
def sdk_version() -> str:
    """The installed opentelemetry-sdk's version (looked up when a message needs it)."""
    return importlib.metadata.version("opentelemetry-sdk")


class SdkInternalsChanged(RuntimeError):
    """The installed opentelemetry-sdk lacks an internal tracerl relies on."""


# ---- the order of a provider's processors ------------------------------------------------


def put_first(provider: TracerProvider, processor: SpanProcessor) -> bool:
    """Register ``processor`` ahead of ``provider``'s other processors; False (nothing
    registered) when the provider's multi-processor is not of the known shape."""
    multi = getattr(provider, "_active_span_processor", None)
    lock = getattr(multi, "_lock", None)
    if not isinstance(getattr(multi, "_span_processors", None), tuple) or lock is None:
        return False
    with lock:
        multi._span_processors = (processor, *multi._span_processors)
    return True


# ---- what a tracer would build a span from -----------------------------------------------


class TracerParts(NamedTuple):
    """What ``Tracer.start_span`` builds a span from, and whom ``Span.end`` hands it to."""

    multi: SynchronousMultiSpanProcessor
    processors: tuple[SpanProcessor, ...]
    sampler: Any
    id_generator: Any
    resource: Any
    instrumentation_info: Any
    instrumentation_scope: Any
    span_limits: SpanLimits
    enabled: bool  # False: the SDK makes non-recording spans (a tracer configurator disabled it)
    counts_spans: bool  # the SDK counts started and ended spans in a meter


def tracer_parts(tracer: Any) -> TracerParts | None:
    """``tracer``'s parts, or None when it is not the SDK's ``Tracer`` of the known shape."""
    if type(tracer) is not Tracer:
        return None
    multi = getattr(tracer, "span_processor", None)
    processors = getattr(multi, "_span_processors", None)
    if type(multi) is not SynchronousMultiSpanProcessor or not isinstance(processors, tuple):
        return None
    try:
        limits, scope = tracer._span_limits, tracer._instrumentation_scope
    except AttributeError:
        return None
    return TracerParts(
        multi=multi,
        processors=processors,
        sampler=tracer.sampler,
        id_generator=tracer.id_generator,
        resource=tracer.resource,
        instrumentation_info=tracer.instrumentation_info,
        instrumentation_scope=scope,
        span_limits=limits,
        # SDKs before tracer configurators disable by handing out no-op tracers instead
        enabled=getattr(tracer, "_is_enabled", lambda: True)(),
        counts_spans=type(getattr(tracer, "_tracer_metrics", None)).__name__ not in ("NoneType", "NoOpTracerMetrics"),
    )


# ---- a filter on every write to a live span's attributes --------------------------------


class AttributeFilter(Protocol):
    def clean(self, key: str, value: object) -> object | None:
        """The value to record for ``key``, or ``None`` to record nothing."""


class _FilteredAttributes(BoundedAttributes):
    """A span's attribute map that passes every write through a filter (the class is made
    per filter by :func:`_filtered_class`; a map becomes one by a class swap, no copy)."""

    _filter: AttributeFilter

    def __setitem__(self, key: str, value: object) -> None:
        cleaned = self._filter.clean(key, value)
        if cleaned is not None:
            super().__setitem__(key, cleaned)

    def _set_items(self, attributes: Mapping[str, object]) -> None:
        # ``Span.set_attributes`` writes through here, not through ``__setitem__``.
        clean = self._filter.clean
        cleaned = {key: kept for key, value in attributes.items() if (kept := clean(key, value)) is not None}
        super()._set_items(cleaned)


@functools.lru_cache(maxsize=8)
def _filtered_class(attribute_filter: AttributeFilter) -> type[_FilteredAttributes]:
    return type("FilteredAttributes", (_FilteredAttributes,), {"_filter": attribute_filter})


def filter_attribute_writes(span: Any, attribute_filter: AttributeFilter) -> bool:
    """Apply ``attribute_filter`` to what a live SDK span holds and to every later write;
    False when the span's attribute map is not the known one (or already filtered)."""
    attributes = getattr(span, "_attributes", None)
    if not isinstance(attributes, BoundedAttributes) or isinstance(attributes, _FilteredAttributes):
        return False
    clean = attribute_filter.clean
    for key, value in list(attributes.items()):
        cleaned = clean(key, value)
        if cleaned is None:
            del attributes[key]
        elif cleaned is not value:
            attributes[key] = cleaned
    attributes.__class__ = _filtered_class(attribute_filter)
    return True


# ---- the probe ---------------------------------------------------------------------------


class _Untouchable:
    """Raises on any use: passed to a method that must do nothing."""

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


class _DropKey:
    def clean(self, key: str, value: object) -> object | None:
        return None if key == "drop" else value


def missing_pieces() -> list[str]:
    """Each internal tracerl relies on that the installed SDK lacks or that behaves
    otherwise, with what uses it (empty: all there)."""
    missing = []
    provider = TracerProvider(shutdown_on_exit=False)
    first, last = SpanProcessor(), SpanProcessor()
    provider.add_span_processor(last)
    if not put_first(provider, first) or getattr(provider._active_span_processor, "_span_processors", None) != (first, last):
        missing.append(
            "TracerProvider._active_span_processor._span_processors (a tuple) and ._lock: tracerl's processor "
            "is put first so that a flush waits for the span finisher (setup.install_hooks)"
        )
    tracer = provider.get_tracer("tracerl.probe")
    for name in ("span_processor", "sampler", "id_generator", "resource", "instrumentation_info",
                 "_span_limits", "_instrumentation_scope"):
        if not hasattr(tracer, name):
            missing.append(f"Tracer.{name}: the finished-span route builds the SDK's span from it (finished_span.emit)")
    if hasattr(provider, "_set_tracer_configurator") and not callable(getattr(tracer, "_is_enabled", None)):
        missing.append("Tracer._is_enabled(): a tracer disabled by a configurator must not get finished spans")
    parts = tracer_parts(tracer)
    if parts is None:
        missing.append("Tracer.span_processor as a SynchronousMultiSpanProcessor with a _span_processors tuple")
    elif parts.counts_spans or not parts.enabled:
        metrics = type(getattr(tracer, "_tracer_metrics", None)).__name__
        missing.append(
            f"Tracer._tracer_metrics is {metrics} with SDK metrics off (expected NoOpTracerMetrics or none): "
            "the finished-span route would never be taken"
        )
    for cls in sorted(PASSIVE_SDK_PROCESSORS, key=lambda c: c.__name__):
        for method in ("on_start", "_on_ending"):
            try:
                getattr(cls, method)(_Untouchable(), _Untouchable())
            except Exception:  # it used its span or itself: it is not passive any more
                missing.append(f"{cls.__name__}.{method} does something: a finished span would skip it")
    try:
        span = tracer.start_span("probe", attributes={"drop": 1, "keep": 1})
    except Exception as exc:  # the SDK's own tracer broken by what changed: say so, probe no further
        missing.append(f"Tracer.start_span fails ({exc!r})")
        return missing
    if not filter_attribute_writes(span, _DropKey()):
        missing.append("Span._attributes (a BoundedAttributes): the content policy filters every write to it")
    else:
        span.set_attribute("drop", 2)
        span.set_attributes({"drop": 3, "also": 4})
        if dict(span.attributes) != {"keep": 1, "also": 4}:
            missing.append(
                "Span.set_attribute/set_attributes writing through BoundedAttributes.__setitem__/_set_items: "
                f"a filtered span kept {dict(span.attributes)}, so the content policy would not hold"
            )
    span.end()
    return missing


def check() -> None:
    """Raise :class:`SdkInternalsChanged` naming the SDK's version and each missing piece."""
    missing = missing_pieces()
    if missing:
        raise SdkInternalsChanged(
            f"opentelemetry-sdk {sdk_version()} changed internals tracerl relies on "
            f"(update src/tracerl/instrumentation/sdk_internals.py): " + "; ".join(missing)
        )
