"""``build_dataset``: spans -> episodes -> rewards -> credit -> ``OUT/transitions-*.parquet`` + manifest.

The heavy lifting happens in DuckDB over the Parquet files (out of core, both cores);
credit assignment runs in Polars on the light per-call table; token arrays are read
only once, when the rows are written. :func:`analyze` runs every stage but the write
and returns the counts, which is what ``pipeline doctor`` explains.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq

import tracerl
from tracerl.pipeline import air, episodes, normalize, rewards, selection, source
from tracerl.pipeline.credit import assign_credit
from tracerl.pipeline.writer import dataset_tables, write_dataset
from tracerl.schemas import DATASET_SCHEMA, DATASET_SCHEMA_VERSION, SPANS_SCHEMA_VERSION
from tracerl.storage import write_parquet_atomic

# what a readable footer over unreadable data raises, from DuckDB (often its base Error) or pyarrow;
# mistakes in SQL are not input errors and are not caught
_READ_ERRORS = (duckdb.Error, pa.ArrowException, OSError)
_SQL_MISTAKES = (duckdb.BinderException, duckdb.CatalogException, duckdb.ParserException)
STATE_DIR = "state"  # OUT/state/episodes-*.parquet: episodes already turned into transitions
EXPORTS = ("openrlhf", "hf")


@dataclass(frozen=True)
class BuildOptions:
    """Every knob of a build; the manifest records them so a dataset can be rebuilt."""

    credit: str = "identical"
    gamma: float = 1.0
    advantage: str = "grpo"
    agents: str | None = None
    splits: tuple[str, ...] = ()
    policy_versions: str | None = None
    rewards: tuple[str, ...] = ()
    reward_weights: dict[str, float] = field(default_factory=dict)
    rules: str | None = None
    default_rules: bool = True
    episode_timeout_s: float = 3600.0
    trajectory: bool = False
    incremental: bool = False
    exports: tuple[str, ...] = ()
    threads: int | None = None
    memory_limit: str = "3GB"

    def __post_init__(self) -> None:
        unknown = set(self.exports) - set(EXPORTS)
        if unknown:
            raise source.PipelineInputError(f"unknown export(s) {', '.join(sorted(unknown))}: choose from {', '.join(EXPORTS)}")


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
        return {
            "spans": str(self.files.root),
            "span_files": len(self.files.files),
            "reward_files": self.files.reward_files + list(self.options.rewards),
            "rejected_files": self.files.rejected,
        }


def _processed_view(con: duckdb.DuckDBPyConnection, out: Path | None, incremental: bool) -> int:
    files = source.parquet_files(out / STATE_DIR) if (incremental and out and (out / STATE_DIR).is_dir()) else []
    if files:
        con.execute(
            f"CREATE OR REPLACE VIEW processed AS SELECT DISTINCT episode_id FROM read_parquet({source.sql_list([str(f) for f in files])})"
        )
    else:
        con.execute("CREATE OR REPLACE VIEW processed AS SELECT NULL::VARCHAR AS episode_id WHERE false")
    return con.execute("SELECT count(*) FROM processed").fetchall()[0][0]


def analyze(
    spans: str | os.PathLike, options: BuildOptions, *, out: Path | None = None,
    progress: Progress = _noop, temp_dir: str | None = None,
) -> Analysis:
    """Run normalisation, episodes, rewards, selection and credit; count what happened at each stage."""
    files = source.find_span_files(spans)
    con = connect(options.threads, options.memory_limit, temp_dir)
    progress(f"reading {len(files.files)} span file(s)", None)
    source.register_raw_spans(con, files.files)
    for file in options.rewards:
        source.check_rewards_file(con, file)
    source.register_late_rewards(con, files.reward_files + list(options.rewards))
    previously = _processed_view(con, out, options.incremental)
    progress("normalising spans", None)
    normalize.build_span_meta(con)
    normalize.build_spans_view(con)
    normalize.build_llm_calls(con)
    episodes.build_episodes(con, options.episode_timeout_s)
    rules = air.load_rules(options.rules, defaults=options.default_rules)
    progress("collecting rewards", None)
    rewards.build_rewards(con, air.air_rewards_sql(con, rules))
    selection.select_policy_calls(
        con, agents=options.agents, splits=options.splits, policy_versions=options.policy_versions
    )
    selection.attach_rewards(con, options.reward_weights)
    _choose(con, options)
    counts = _counts(con, files, previously)
    return Analysis(con=con, files=files, options=options, rules=rules, counts=counts)


def _choose(con: duckdb.DuckDBPyConnection, options: BuildOptions) -> None:
    """Table ``chosen``: policy calls of rewarded episodes with token ids, credit assigned."""
    con.execute(
        """
        CREATE OR REPLACE TEMP TABLE rewarded_episodes AS
        SELECT DISTINCT episode_id FROM attached_rewards
        WHERE source IN ('span', 'event', 'late') AND weight <> 0
        """
    )
    calls = con.sql(
        """
        SELECT p.episode_id, p.task_id, p.split, p.agent_name, p.step, p.policy_version, p.trace_id, p.span_id,
               p.response_id, p.file_index, p.file_row, p.content_layout, p.has_tokens,
               coalesce(r.reward, 0.0) AS reward
        FROM policy_calls p
        JOIN rewarded_episodes USING (episode_id)
        LEFT JOIN (SELECT episode_id, step, sum(value * weight) AS reward FROM attached_rewards GROUP BY ALL) r
            USING (episode_id, step)
        """
    ).pl()
    if calls.is_empty():
        calls = calls.with_columns(pl.lit(None, pl.Float64).alias("return"), pl.lit(None, pl.Float64).alias("advantage"))
    else:
        calls = assign_credit(calls, credit=options.credit, gamma=options.gamma, advantage=options.advantage)
    con.register("credited", calls.to_arrow())
    con.execute("CREATE OR REPLACE TEMP TABLE chosen AS SELECT * FROM credited WHERE has_tokens")
    con.unregister("credited")


def _grouped(con: duckdb.DuckDBPyConnection, sql: str) -> dict[str, int]:
    return {str(k): int(v) for k, v in con.execute(sql).fetchall()}


def _counts(con: duckdb.DuckDBPyConnection, files: source.SpanFiles, previously: int) -> dict[str, Any]:
    one = lambda sql: con.execute(sql).fetchall()[0][0]  # noqa: E731
    skipped_calls = _grouped(con, "SELECT excluded, count(*) FROM call_status WHERE excluded IS NOT NULL GROUP BY 1")
    no_reward_calls = one("SELECT count(*) FROM policy_calls WHERE episode_id NOT IN (SELECT episode_id FROM rewarded_episodes)")
    no_tokens = one(
        "SELECT count(*) FROM policy_calls WHERE NOT has_tokens AND episode_id IN (SELECT episode_id FROM rewarded_episodes)"
    )
    if no_reward_calls:
        skipped_calls["episode_no_reward"] = no_reward_calls
    if no_tokens:
        skipped_calls["no_token_ids"] = no_tokens
    return {
        "files": {"read": len(files.files), "rejected": len(files.rejected), "reward_files": len(files.reward_files)},
        "spans": {
            "rows": one("SELECT count(*) FROM raw_spans"),
            "distinct": one("SELECT count(*) FROM span_meta"),
            "content_layouts": _grouped(con, "SELECT content_layout, count(*) FROM llm_calls GROUP BY 1 ORDER BY 1"),
        },
        "episodes": {
            "total": one("SELECT count(*) FROM episodes"),
            "finished": one("SELECT count(*) FROM episodes WHERE finished"),
            "pending": one("SELECT count(*) FROM episodes WHERE pending"),
            "truncated": one("SELECT count(*) FROM episodes WHERE truncated AND episode_id IN (SELECT episode_id FROM chosen)"),
            "without_llm_calls": one("SELECT count(*) FROM episodes WHERE episode_id NOT IN (SELECT episode_id FROM llm_calls)"),
            "with_policy_calls": one("SELECT count(DISTINCT episode_id) FROM policy_calls"),
            "without_reward": one(
                "SELECT count(DISTINCT episode_id) FROM policy_calls WHERE episode_id NOT IN (SELECT episode_id FROM rewarded_episodes)"
            ),
            "already_processed": previously,
            "emitted": one("SELECT count(DISTINCT episode_id) FROM chosen"),
        },
        "llm_calls": {
            "total": one("SELECT count(*) FROM llm_calls"),
            "merged_duplicates": one("SELECT coalesce(sum(copies - 1), 0) FROM llm_calls"),
            "policy_calls": one("SELECT count(*) FROM policy_calls"),
            "by_agent": _grouped(
                con, "SELECT coalesce(agent_name, '(none)'), count(*) FROM llm_calls GROUP BY 1 ORDER BY 2 DESC, 1 LIMIT 20"
            ),
            "skipped": dict(sorted(skipped_calls.items())),
        },
        "rewards": {
            "by_source": _grouped(con, "SELECT source, count(*) FROM rewards GROUP BY 1 ORDER BY 1"),
            "by_name": _grouped(con, "SELECT name, count(*) FROM rewards GROUP BY 1 ORDER BY 1"),
            "without_value": one("SELECT count(*) FROM rewards WHERE value IS NULL"),
            "unmatched_episode": one("SELECT count(*) FROM rewards WHERE episode_id IS NULL"),
            "episode_without_policy_calls": one(
                "SELECT count(*) FROM rewards WHERE value IS NOT NULL AND episode_id IS NOT NULL "
                "AND episode_id NOT IN (SELECT episode_id FROM policy_calls)"
            ),
            "ignored_by_weights": one("SELECT count(*) FROM attached_rewards WHERE weight = 0"),
        },
        "transitions": one("SELECT count(*) FROM chosen"),
    }


def _clear_previous(out: Path, previous: set[Path]) -> None:
    """A full (non-incremental) build replaces the dataset it found in ``out`` (once the new one is written)."""
    for old in previous:
        old.unlink()
    for sub in (STATE_DIR, *EXPORTS):
        if (out / sub).is_dir():
            shutil.rmtree(out / sub)


def build_dataset(
    spans: str | os.PathLike, out: str | os.PathLike, *, progress: Progress | None = None,
    on_rows: Callable[[int], None] | None = None, **options: Any,
) -> dict[str, Any]:
    """Build the dataset of ``spans`` (a data dir or a spans folder) into ``out``; return the manifest.

    ``options`` are the fields of :class:`BuildOptions`. Raises
    :class:`~tracerl.pipeline.source.PipelineInputError` when the input cannot be read at
    all; anything partially unreadable is skipped and counted in the manifest.
    """
    opts = BuildOptions(**options)
    out_dir = Path(out)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.time()
    progress = progress or _noop
    previous = set(out_dir.glob("transitions-*.parquet"))
    with tempfile.TemporaryDirectory(prefix=".duckdb-", dir=out_dir) as tmp:
        try:
            analysis = analyze(spans, opts, out=out_dir, progress=progress, temp_dir=tmp)
            con = analysis.con
            progress("writing transitions", analysis.counts["transitions"])
            dropped: Counter = Counter()
            paths, rows = write_dataset(
                dataset_tables(con, analysis.files.files, trajectory=opts.trajectory, skipped=dropped),
                str(out_dir), on_rows or (lambda n: None),
            )
        except _READ_ERRORS as exc:
            if isinstance(exc, _SQL_MISTAKES):
                raise
            # a file whose footer is fine but whose data is not: keep the previous dataset intact
            for partial in set(out_dir.glob("transitions-*.parquet")) - previous:
                partial.unlink()
            raise source.PipelineInputError(f"reading the span files failed ({exc}); {out_dir} was left as it was") from exc
        if not opts.incremental:
            _clear_previous(out_dir, previous)
        episodes_done = con.sql("SELECT DISTINCT episode_id FROM chosen ORDER BY 1").to_arrow_table()
        if episodes_done.num_rows:
            write_parquet_atomic(episodes_done, out_dir / STATE_DIR, prefix="episodes")
        clock = con.execute("SELECT max(end_ns) FROM span_meta").fetchall()[0][0]
        con.close()
    exported = {}
    if opts.exports:
        from tracerl.pipeline.exports import export

        progress("exporting", None)
        exported = export(out_dir, opts.exports)
    counts = analysis.counts
    skipped = counts["llm_calls"]["skipped"]
    for reason, n in dropped.items():
        skipped[reason] = skipped.get(reason, 0) + n
        counts["transitions"] -= n
    counts["llm_calls"]["skipped"] = dict(sorted(skipped.items()))
    counts["rows_written"] = rows
    manifest = {
        "tracerl_version": tracerl.__version__,
        "schema_version": DATASET_SCHEMA_VERSION,
        "spans_schema_version": SPANS_SCHEMA_VERSION,
        "created_unix": round(started, 3),
        "seconds": round(time.time() - started, 3),
        "inputs": analysis.inputs(),
        "parameters": {**asdict(replace(opts, threads=None)), "air_rules": air.rules_as_dicts(analysis.rules)},
        "watermark": {
            "data_clock_unix_nano": clock,
            "episode_timeout_s": opts.episode_timeout_s,
            "episodes_processed": counts["episodes"]["already_processed"] + episodes_done.num_rows,
            "state": STATE_DIR,
        },
        "counts": counts,
        "outputs": {"files": [os.path.basename(p) for p in paths], "exports": exported},
    }
    manifest["warnings"] = warnings(manifest["inputs"], counts)
    text = json.dumps(manifest, indent=2)
    (out_dir / "manifest.json").write_text(text + "\n")
    return json.loads(text)  # exactly what a reader of the file sees (tuples become lists)


def warnings(inputs: dict[str, Any], c: dict[str, Any]) -> list[str]:
    """Plain-language reasons why data did not become transitions (shown by the CLI and doctor)."""
    notes = []
    if not inputs["span_files"]:
        notes.append(f"no readable span files under {inputs['spans']}")
    for rejected in inputs["rejected_files"]:
        notes.append(f"skipped file {rejected['file']}: {rejected['reason']}")
    if inputs["span_files"] and not c["llm_calls"]["total"]:
        notes.append("no LLM calls found: spans need token ids or gen_ai/OpenLLMetry/OpenInference LLM attributes")
    labels = {
        "no_token_ids": "LLM call(s) without prompt/completion token ids (serve with token ids returned, e.g. vLLM return_token_ids)",
        "agent_filter": "LLM call(s) excluded by --agents",
        "policy_version_filter": "LLM call(s) excluded by --policy-versions",
        "split_filter": "LLM call(s) excluded by --split",
        "episode_pending": "LLM call(s) in episodes that have not finished yet (held back until they end or time out)",
        "episode_no_reward": "LLM call(s) in episodes with no reward (emit tracerl.reward or pass --rewards)",
        "already_processed": "LLM call(s) in episodes an earlier incremental run already processed",
    }
    for reason, n in c["llm_calls"]["skipped"].items():
        notes.append(f"{n} {labels.get(reason, reason)}")
    r = c["rewards"]
    if r["unmatched_episode"]:
        notes.append(f"{r['unmatched_episode']} reward(s) name an episode, trace or response not found in the spans")
    if r["without_value"]:
        notes.append(f"{r['without_value']} reward(s) without a numeric tracerl.reward.value")
    if r["ignored_by_weights"]:
        notes.append(f"{r['ignored_by_weights']} reward(s) ignored: their name has no --reward-weight")
    if c["episodes"]["truncated"]:
        notes.append(f"{c['episodes']['truncated']} episode(s) never finished and were processed after the timeout (truncated)")
    return notes


def read_manifest(out: str | os.PathLike) -> dict[str, Any]:
    return json.loads((Path(out) / "manifest.json").read_text())


def dataset_table(out: str | os.PathLike) -> pa.Table:
    """All transitions of a dataset folder in (episode, step) order (for tests and small tools)."""
    files = sorted(Path(out).glob("transitions-*.parquet"))
    if not files:
        return DATASET_SCHEMA.empty_table()
    table = pa.concat_tables(pq.read_table(f) for f in files)
    return table.sort_by([("episode_id", "ascending"), ("step", "ascending")])
