"""Arrow schemas of every tracerl table, their versions, and the attribute names.

The schemas are imported on first use (PEP 562), so ``tracerl.schemas.attributes``, the
attribute-name strings, costs no pyarrow: vLLM's environment reads the names alone.
"""

from __future__ import annotations

from tracerl.core.lazy import lazy_attributes

_PUBLIC = {
    "DATASET_SCHEMA": "tracerl.schemas.dataset",
    "DATASET_SCHEMA_VERSION": "tracerl.schemas.dataset",
    "DatasetFolder": "tracerl.schemas.dataset_folder",
    "REWARDS_SCHEMA": "tracerl.schemas.rewards",
    "REWARDS_SCHEMA_VERSION": "tracerl.schemas.rewards",
    "SPANS_SCHEMA": "tracerl.schemas.spans",
    "SPANS_SCHEMA_VERSION": "tracerl.schemas.spans",
    "span_row": "tracerl.schemas.spans",
    "spans_table": "tracerl.schemas.spans",
}
__all__ = sorted(_PUBLIC)
__getattr__ = lazy_attributes(__name__, _PUBLIC)
