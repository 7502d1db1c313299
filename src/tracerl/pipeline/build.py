"""``build_dataset``: spans -> episodes -> rewards -> credit -> ``OUT/transitions-*.parquet`` + manifest.

Every stage but the write is DuckDB SQL over the Parquet files (out of core, every core,
spilling beyond ``--memory-limit``); token arrays are read only once, when the rows are
written, a span file at a time. :func:`analyze` runs every stage but the write
and returns the counts, which is what ``pipeline doctor`` explains. The stages, and the
tables through which they pass their work on, are described in ``src/tracerl/pipeline/README.md``;
the output folder's layout in :mod:`tracerl.pipeline.build_output`.
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa

import tracerl
from tracerl.pipeline import air, buckets, build_output, credit, episodes, judgment_log, log_content, normalize, rewards, selection, source
from tracerl.pipeline.counts import merge, warnings
from tracerl.pipeline.location import locate
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.tables import AFTER_ANALYZE
from tracerl.pipeline.retokenize import Retokenizer
from tracerl.pipeline.writer import WriteTally, dataset_tables, write_dataset
from tracerl.schemas import DATASET_SCHEMA_VERSION, SPANS_SCHEMA_VERSION
from tracerl.schemas import attributes as A

# what a readable footer over unreadable data raises, from DuckDB (often its base Error) or pyarrow;
# mistakes in SQL are not input errors and are not caught
READ_ERRORS = (duckdb.Error, pa.ArrowException, OSError)
SQL_MISTAKES = (duckdb.BinderException, duckdb.CatalogException, duckdb.ParserException)


Progress = Callable[[str, int | None], None]  # (stage description, total rows or None)


def _noop(stage: str, total: int | None) -> None:
    return None


def connect(threads: int | None, memory_limit: str, temp_dir: str | None = None) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(config={"threads": threads or os.cpu_count() or 1, "memory_limit": memory_limit})
    if temp_dir:
        con.execute(f"SET temp_directory = '{temp_dir}'")
    con.execute("SET preserve_insertion_order = false")
    try:
        con.execute("SET enable_progress_bar = false")  # the CLI shows its own progress
    except duckdb.InvalidInputException:
        pass  # in Jupyter without ipywidgets DuckDB refuses to touch the setting; it draws no bar there
    return con


@dataclass
class Analysis:
    """Result of every stage but the write: the connection holding the tables, and the counts."""

    con: duckdb.DuckDBPyConnection
    files: source.SpanFiles
    options: BuildOptions
    rules: list[air.Rule]
    counts: dict[str, Any]

    def inputs(self) -> dict[str, Any]:
        return inputs(self.files, self.options)


def inputs(files: source.SpanFiles, options: BuildOptions) -> dict[str, Any]:
    """The manifest's ``inputs``: what the listing found and the reward files given."""
    return {
        "spans": str(files.location),
        "span_files": len(files.files),
        # as DuckDB reads them: a URI's query or user part (credentials) is not recorded
        "reward_files": files.reward_files + [str(locate(r)) for r in options.rewards],
        "rejected_files": files.rejected,
    }


@dataclass
class Run:
    """What the stages of one analysis share besides the connection: inputs, options, what earlier stages returned."""

    files: source.SpanFiles
    options: BuildOptions
    out: Path | None
    rules: list[air.Rule]
    air_sql: str | None = None
    previously: int = 0  # episodes an earlier incremental build already turned into transitions
    bucket: buckets.Bucket | None = None  # a part of a distributed build: the rows it keeps, the whole's clock

    def keep(self, relation: str) -> str:
        """The condition on ``relation``'s rows (``spans``, ``log_records``, ``late_rewards``, ``judgments``) of this build."""
        return getattr(self.bucket, relation) if self.bucket else "true"


def _late_rewards(con: duckdb.DuckDBPyConnection, run: Run) -> None:
    late = [source.check_rewards_file(con, file) for file in run.options.rewards]
    source.register_late_rewards(con, run.files.reward_files + late, run.keep("late_rewards"))


def _processed(con: duckdb.DuckDBPyConnection, run: Run) -> None:
    run.previously = build_output.register_processed(con, run.out, run.options.incremental)


def _processed_counts(con: duckdb.DuckDBPyConnection, run: Run) -> dict[str, Any]:
    return {"episodes": {"already_processed": run.previously}}


def _air(con: duckdb.DuckDBPyConnection, run: Run) -> None:
    run.air_sql = air.air_rewards_sql(con, run.rules)


def _policy_calls(con: duckdb.DuckDBPyConnection, run: Run) -> None:
    o = run.options
    selection.select_policy_calls(con, agents=o.agents, splits=o.splits, policy_versions=o.policy_versions, policies=o.policies)


def _chosen(con: duckdb.DuckDBPyConnection, run: Run) -> None:
    o = run.options
    credit.choose_transitions(con, credit=o.credit, gamma=o.gamma, advantage=o.advantage, retokenize=bool(o.retokenize))


Count = Callable[[duckdb.DuckDBPyConnection, Run], dict[str, Any]]


@dataclass(frozen=True)
class Stage:
    """One step of :func:`analyze`: a function of module ``module`` run on the build's connection.

    It reads and makes exactly the relations that :data:`tracerl.pipeline.tables.RELATIONS`
    names for its module (``tests/pipeline/test_tables.py`` runs each module's stages on a
    connection holding only those inputs, and with each one taken away). ``count``, the
    module's own counts of what it kept and dropped, runs right after it: its part of the
    manifest's counts (:func:`tracerl.pipeline.counts.merge`).
    """

    module: str
    run: Callable[[duckdb.DuckDBPyConnection, Run], None]
    count: Count | None = None
    progress: str | None = None  # what the progress bar says from this stage on

    def apply(self, con: duckdb.DuckDBPyConnection, run: Run) -> dict[str, Any]:
        self.run(con, run)
        return self.count(con, run) if self.count else {}


# the wiring of analyze(): stages in order, each module's relations as tables.py lists them
STAGES: tuple[Stage, ...] = (
    Stage("source", lambda con, run: source.register_raw_spans(con, run.files, run.keep("spans")), lambda con, run: source.counts(run.files)),
    Stage("log_content", lambda con, run: log_content.build_log_content(con, run.files.log_files, run.keep("log_records")),
          lambda con, run: log_content.counts(con)),
    Stage("judgment_log", lambda con, run: judgment_log.register_judgments(con, run.files.judgment_files, run.keep("judgments")),
          lambda con, run: judgment_log.counts(con, run.files.judgment_files)),
    Stage("source", _late_rewards),
    Stage("build_output", _processed, _processed_counts),
    Stage("normalize", lambda con, run: normalize.build_span_meta(con), progress="normalising spans"),
    Stage("normalize", lambda con, run: normalize.build_spans_view(con)),
    Stage("normalize", lambda con, run: normalize.build_llm_calls(con), lambda con, run: normalize.counts(con)),
    Stage("episodes", lambda con, run: episodes.build_episodes(con, run.options.episode_timeout_s, run.bucket and run.bucket.clock_ns),
          lambda con, run: episodes.counts(con)),
    Stage("air", _air, progress="collecting rewards"),
    Stage("rewards", lambda con, run: rewards.build_rewards(con, run.air_sql, run.options.evaluation_rewards, run.options.evaluations),
          lambda con, run: rewards.counts(con)),
    Stage("selection", _policy_calls),
    Stage("selection", lambda con, run: selection.attach_rewards(con, run.options.reward_weights),
          lambda con, run: selection.counts(con, run.options.policies)),
    Stage("credit", _chosen, lambda con, run: credit.counts(con)),
)


def analyze(
    spans: str | os.PathLike | source.SpanFiles, options: BuildOptions, *, out: Path | None = None,
    progress: Progress = _noop, temp_dir: str | None = None, bucket: buckets.Bucket | None = None,
) -> Analysis:
    """Run every stage but the write (1 to 9 of src/tracerl/pipeline/README.md) in one DuckDB connection; count what each kept.

    The connection holds the relations of :data:`tracerl.pipeline.tables.RELATIONS` that
    outlive their stage; ``doctor`` and ``tracerl sql`` read them, ``build_dataset`` writes
    the ``chosen`` rows. ``spans``: a data dir, a spans folder, or the files a listing found;
    ``bucket``: the part of them this build keeps (:mod:`tracerl.pipeline.buckets`).
    """
    files = spans if isinstance(spans, source.SpanFiles) else source.find_span_files(spans)
    con = connect(options.threads, options.memory_limit, temp_dir)
    if bucket is not None:
        bucket.register(con)
    run = Run(files=files, options=options, out=out, rules=air.load_rules(options.rules, defaults=options.default_rules), bucket=bucket)
    progress(f"reading {len(files.files)} span file(s)", None)
    parts = []
    for stage in STAGES:
        if stage.progress:
            progress(stage.progress, None)
        parts.append(stage.apply(con, run))
    return Analysis(con=con, files=files, options=options, rules=run.rules, counts=merge(parts))


def _keep_only_what_the_writer_reads(con: duckdb.DuckDBPyConnection) -> None:
    """Drop the relations the write does not read: their memory goes back before the token arrays arrive."""
    for relation in reversed(AFTER_ANALYZE):  # views before the tables they read
        if "writer" not in relation.read_by:
            con.execute(f"DROP {relation.kind.upper()} {relation.name}")


@dataclass
class Written:
    """What one write left: the transitions files, and the counts and inputs its manifest reports."""

    paths: list[str]
    counts: dict[str, Any]  # every stage's, the write's merged in, and rows_written
    inputs: dict[str, Any]
    rules: list[air.Rule]
    clock_ns: int | None  # the latest span end read: the watermark's data clock


@contextmanager
def reading_spans(then: str, undo: Callable[[], None] = lambda: None) -> Iterator[None]:
    """Data that fails to read (a file whose footer is fine but whose data is not) is the input's fault:
    ``undo`` what was written, and raise :class:`~tracerl.pipeline.source.PipelineInputError` saying so and ``then``.
    Mistakes in SQL are not input errors and pass through."""
    try:
        yield
    except READ_ERRORS as exc:
        if isinstance(exc, SQL_MISTAKES):
            raise
        undo()
        raise source.PipelineInputError(f"reading the span files failed ({exc}); {then}") from exc


def write_transitions(
    spans: str | os.PathLike | source.SpanFiles, into: Path, opts: BuildOptions, *, processed_from: Path | None,
    progress: Progress = _noop, on_rows: Callable[[int], None] | None = None, retokenizer: Retokenizer | None = None,
    bucket: buckets.Bucket | None = None, on_analysis: Callable[[Analysis], None] | None = None,
) -> Written:
    """Analyze ``spans`` and write the chosen calls as ``into/transitions-*.parquet``.

    ``processed_from``: the dataset whose episodes an incremental build skips. ``on_analysis``: given the
    analysis before the write drops what it does not read (the report's figures are taken there, so a
    round's report does not analyze the spans a second time). A read that fails
    midway removes what this write committed and raises :class:`~tracerl.pipeline.source.PipelineInputError`,
    so the folder holds what it held before.
    """
    before = set(build_output.transition_files(into))

    def undo() -> None:  # keep the previous dataset intact
        for partial in set(build_output.transition_files(into)) - before:
            partial.unlink()

    with tempfile.TemporaryDirectory(prefix=".duckdb-", dir=into) as tmp:
        with reading_spans(f"{into} was left as it was", undo):
            analysis = analyze(spans, opts, out=processed_from, progress=progress, temp_dir=tmp, bucket=bucket)
            if on_analysis:
                on_analysis(analysis)
            con = analysis.con
            clock = con.execute("SELECT max(end_ns) FROM span_meta").fetchall()[0][0]
            _keep_only_what_the_writer_reads(con)
            progress("writing transitions", analysis.counts["transitions"])
            tally = WriteTally()
            paths, rows = write_dataset(
                dataset_tables(con, analysis.files, trajectory=opts.trajectory, tally=tally, retokenizer=retokenizer),
                str(into), on_rows or (lambda n: None),
            )
        con.close()
    # what the write dropped or rebuilt joins the counts of the stages before it
    written = {"skipped": dict(tally.skipped), "retokenized": tally.retokenized,
               "retokenized_from_text": tally.retokenized_from_text}
    if tally.chains:  # Responses API calls whose input the writer completed from the conversation's earlier turns
        written["response_chains"] = dict(tally.chains)
    counts = merge([analysis.counts, {"llm_calls": written,
                                      "transitions": analysis.counts["transitions"] - sum(tally.skipped.values())}])
    counts["rows_written"] = rows
    return Written(paths=paths, counts=counts, inputs=analysis.inputs(), rules=analysis.rules, clock_ns=clock)


def build_dataset(
    spans: str | os.PathLike, out: str | os.PathLike, *, progress: Progress | None = None,
    on_rows: Callable[[int], None] | None = None, on_analysis: Callable[[Analysis], None] | None = None, **options: Any,
) -> dict[str, Any]:
    """Build the dataset of ``spans`` (a data dir or a spans folder) into ``out``; return the manifest.

    ``options`` are the fields of :class:`BuildOptions`. Raises
    :class:`~tracerl.pipeline.source.PipelineInputError` when the input cannot be read at
    all; anything partially unreadable is skipped and counted in the manifest.
    ``tracerl.pipeline.ray_build.build_dataset_on_ray`` builds the same dataset on a Ray cluster.
    """
    opts = BuildOptions(**options)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    progress = progress or _noop
    previous = set(build_output.transition_files(out_dir))
    retokenizer = Retokenizer(opts.retokenize) if opts.retokenize else None  # a bad folder fails before any work
    written = write_transitions(spans, out_dir, opts, processed_from=out_dir, progress=progress, on_rows=on_rows, retokenizer=retokenizer,
                                on_analysis=on_analysis)
    if not opts.incremental:
        build_output.clear_previous(out_dir, previous)
    return finish(out_dir, opts, written, started, progress)


def finish(out_dir: Path, opts: BuildOptions, written: Written, started: float, progress: Progress = _noop,
           engine: dict[str, Any] | None = None) -> dict[str, Any]:
    """The exports (when asked) and the manifest of a dataset whose transitions are written; return the manifest."""
    exported = {}
    if opts.exports:
        from tracerl.pipeline.exports import export

        progress("exporting", None)
        exported = export(out_dir, opts)
    counts = written.counts
    manifest = {
        "tracerl_version": tracerl.__version__,
        A.DATASET_MANIFEST_SCHEMA_VERSION: DATASET_SCHEMA_VERSION,
        "spans_schema_version": SPANS_SCHEMA_VERSION,
        "created_unix": round(started, 3),
        "seconds": round(time.time() - started, 3),
        "inputs": written.inputs,
        "parameters": {**asdict(replace(opts, threads=None)), "air_rules": air.rules_as_dicts(written.rules)},
        "watermark": {
            "data_clock_unix_nano": written.clock_ns,
            "episode_timeout_s": opts.episode_timeout_s,
            # the episodes in the dataset's files, which incremental builds skip
            "episodes_processed": counts["episodes"]["already_processed"] + build_output.episode_count(written.paths),
        },
        "counts": counts,
        "outputs": {"files": [os.path.basename(p) for p in written.paths], "exports": exported},
    }
    if engine:
        manifest["engine"] = engine
    manifest["warnings"] = warnings(manifest["inputs"], counts, opts)
    return build_output.write_manifest(out_dir, manifest)
