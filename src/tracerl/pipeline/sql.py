"""SQL analysis of a data folder: DuckDB views over spans, LLM calls, episodes, rewards, transitions.

The views are the pipeline's own tables (the same SQL that builds datasets), so what a
query shows is what ``build-dataset`` sees:

- ``spans``: every span (deduplicated), all columns, with the resolved ``episode_id``
  and the ``is_llm``/``is_tool`` flags; ``attr(attributes, 'key')`` reads an attribute;
- ``llm_calls``: one row per LLM call (merged by response id), with agent, layout, tokens;
- ``episodes``: task, split, bounds, ``finished``/``pending``/``truncated``;
- ``rewards``: every reward (span, event, late, ``air``) with the time it refers to;
- ``transitions``: the dataset rows if a dataset folder is given (or ``DATA/dataset``
  holds one), else the policy calls that would become transitions, with credit assigned,
  in the dataset's columns (token arrays and messages NULL: only a build reads them).
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from tracerl.pipeline.build import analyze
from tracerl.pipeline.build_output import transition_files
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.source import PipelineInputError
from tracerl.pipeline.sql_text import empty_select, sql_list
from tracerl.schemas import DATASET_SCHEMA
from tracerl.schemas import attributes as A

VIEWS = ("spans", "llm_calls", "episodes", "rewards", "transitions")

EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Mean reward and episode count per task",
     "SELECT e.task_id, count(*) AS episodes, avg(r.value) AS mean_reward\n"
     "FROM episodes e JOIN rewards r USING (episode_id)\n"
     "WHERE r.source <> 'air' GROUP BY 1 ORDER BY 2 DESC"),
    ("LLM calls per agent, and how many carry token ids",
     "SELECT agent_name, count(*) AS calls, count(*) FILTER (WHERE has_tokens) AS with_tokens\n"
     "FROM llm_calls GROUP BY 1 ORDER BY 2 DESC"),
    ("Automatic intermediate rewards by rule",
     "SELECT name, count(*) AS hits, sum(value) AS total FROM rewards WHERE source = 'air' GROUP BY 1"),
    ("Tool spans that failed, with their message",
     f"SELECT episode_id, attr(attributes, '{A.GEN_AI_TOOL_NAME}') AS tool, status_message\n"
     "FROM spans WHERE is_tool AND status_code = 'ERROR'"),
    ("Slowest LLM calls",
     "SELECT episode_id, agent_name, (end_ns - start_ns) / 1e6 AS ms FROM llm_calls ORDER BY ms DESC LIMIT 10"),
    ("Return and advantage spread per task",
     'SELECT task_id, count(*) AS transitions, avg("return") AS mean_return, stddev_pop(advantage) AS adv_std\n'
     "FROM transitions GROUP BY 1 ORDER BY 1"),
    ("Episodes that have not finished yet",
     "SELECT episode_id, task_id, n_spans, end_ns FROM episodes WHERE pending"),
)


def open_views(data: str | os.PathLike, dataset: str | os.PathLike | None = None,
               options: BuildOptions | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the views of :data:`VIEWS` over the data folder ``data``."""
    analysis = analyze(data, options or BuildOptions())
    con = analysis.con
    if dataset:
        folder = Path(dataset)
    else:  # a data dir on the local disk may hold its dataset; one on object storage is read, never written
        folder = Path(data) / "dataset" if analysis.files.location.is_local else None
    files = [str(f) for f in transition_files(folder)] if folder else []
    if dataset and not files:
        raise PipelineInputError(f"no {A.DATASET_FILES_GLOB} in {folder}: build a dataset there first")
    if files:
        con.execute(f"CREATE OR REPLACE VIEW transitions AS SELECT * FROM read_parquet({sql_list(files)})")
    else:  # the dataset's columns; token arrays and messages are read from the span files only by a build
        chosen = {column[0] for column in con.sql("SELECT * FROM chosen LIMIT 0").description}
        known = ", ".join(f'"{name}"' for name in DATASET_SCHEMA.names if name in chosen)
        con.execute(
            f"CREATE OR REPLACE VIEW transitions AS {empty_select(DATASET_SCHEMA)} UNION ALL BY NAME SELECT {known} FROM chosen"
        )
    return con
