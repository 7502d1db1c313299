"""Spans -> episodes -> training transitions (DuckDB, out of core).

``build_dataset(spans, out, **options)`` is the one entry point; see
:class:`tracerl.pipeline.options.BuildOptions` for the options and ``pipeline doctor``
for why data did not become transitions.
"""

from tracerl.pipeline.build import analyze, build_dataset
from tracerl.pipeline.build_output import dataset_table, read_manifest
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.source import PipelineInputError

__all__ = ["BuildOptions", "PipelineInputError", "analyze", "build_dataset", "dataset_table", "read_manifest"]
