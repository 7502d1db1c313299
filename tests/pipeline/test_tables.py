"""The registry of relations (src/tracerl/pipeline/tables.py) is what a real build creates and what each stage really reads.

Each module's stages run on a fresh connection holding only the relations the registry lists as
read by that module (copied from a real build); they must run and make what the registry says.
Then each of those inputs is taken away in turn, and the stages must fail for want of it: an
input listed but not read, or a relation read but not listed, fails here, whatever the source
text says.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
from pathlib import Path

import duckdb
import pytest

from tracerl.pipeline import BuildOptions, analyze, build_dataset
from tracerl.pipeline.air import load_rules
from tracerl.pipeline.build import STAGES, Run, connect
from tracerl.pipeline.normalize import MACROS
from tracerl.pipeline.source import PipelineInputError, find_span_files
from tracerl.pipeline.sql import open_views
from tracerl.pipeline.tables import AFTER_ANALYZE, RELATIONS, Relation, markdown
from tracerl.pipeline.writer import WriteTally, dataset_tables
from tracerl.schemas import DATASET_SCHEMA
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, tool_span, write_spans

README = Path(__file__).parents[2] / "src" / "tracerl" / "pipeline" / "README.md"


def _relations(con: duckdb.DuckDBPyConnection) -> dict[str, list[str]]:
    rows = con.sql(
        "SELECT table_name, list(column_name ORDER BY ordinal_position) FROM information_schema.columns GROUP BY 1"
    ).fetchall()
    return dict(rows)


@pytest.fixture
def spans(data_dir, tmp_path):
    rows = [episode_span("e1", 0, 100, task="t"), llm_call("e1", "c1", 1, 10, [1], [2]),
            tool_span("e1", "tool", 11, 12, status="ERROR"), llm_call("e1", "c2", 13, 20, [1, 2, 3], [4], parent="tool"),
            reward_span("e1", "r", 30, 1.0)]
    write_spans(data_dir, rows)
    (tmp_path / "late.csv").write_text("episode_id,value,name,comment\ne1,0.5,user,columns beyond the schema are ignored\n")
    return data_dir


def test_after_analyze_exactly_the_registered_relations_exist_with_their_columns(spans, tmp_path):
    analysis = analyze(spans, BuildOptions(rewards=(str(tmp_path / "late.csv"),), reward_weights={"reward": 1.0}))
    assert analysis.counts["transitions"] == 2  # every stage had rows to work on
    assert _relations(analysis.con) == {r.name: list(r.columns) for r in AFTER_ANALYZE}


def test_an_empty_input_creates_the_same_relations(tmp_path):
    (tmp_path / "spans").mkdir()
    analysis = analyze(tmp_path / "spans", BuildOptions(default_rules=False))
    assert _relations(analysis.con) == {r.name: list(r.columns) for r in AFTER_ANALYZE}


def test_tracerl_sql_adds_transitions_in_the_dataset_columns_before_and_after_a_build(spans):
    expected = {r.name: list(r.columns) for r in AFTER_ANALYZE} | {"transitions": DATASET_SCHEMA.names}
    assert _relations(open_views(spans)) == expected
    build_dataset(spans, spans / "dataset")
    assert _relations(open_views(spans)) == expected


def _run_module(module: str, con: duckdb.DuckDBPyConnection, run: Run) -> None:
    """Every stage of ``module``, in build order (the writer: all its tables)."""
    if module == "writer":
        list(dataset_tables(con, run.files, trajectory=False, tally=WriteTally()))
    for stage in STAGES:
        if stage.module == module:
            stage.apply(con, run)


RUN_IN_ISOLATION = [*dict.fromkeys(stage.module for stage in STAGES), "writer"]


def _inputs(module: str) -> list[Relation]:
    return [r for r in RELATIONS if module in r.read_by and r.made_by != module]


@pytest.fixture
def built(spans, tmp_path):
    """A real analysis, stage by stage: its connection and what the stages shared."""
    options = BuildOptions(rewards=(str(tmp_path / "late.csv"),), reward_weights={"reward": 1.0})
    con = connect(1, "1GB")
    run = Run(files=find_span_files(spans), options=options, out=None, rules=load_rules(None))
    for stage in STAGES:
        stage.apply(con, run)
    return con, run


def _holding(built_con: duckdb.DuckDBPyConnection, relations: list[Relation]) -> duckdb.DuckDBPyConnection:
    """A fresh connection with copies of ``relations`` (tables of the same rows; macros as the build defines them)."""
    con = connect(1, "1GB")
    con.execute(MACROS)
    for macro in {r.name for r in RELATIONS if r.kind == "macro"} - {r.name for r in relations}:
        con.execute(f"DROP MACRO {macro}")
    for relation in relations:
        if relation.kind != "macro":
            con.register("copied", built_con.sql(f"SELECT * FROM {relation.name}").to_arrow_table())
            con.execute(f"CREATE TEMP TABLE {relation.name} AS SELECT * FROM copied")
            con.unregister("copied")
    return con


@pytest.mark.parametrize("module", RUN_IN_ISOLATION)
def test_each_module_reads_exactly_the_relations_listed_and_makes_its_own(module, built):
    built_con, run = built
    inputs = _inputs(module)
    con = _holding(built_con, inputs)
    _run_module(module, con, dataclasses.replace(run))
    made = {r.name for r in RELATIONS if r.made_by == module and not r.scratch}
    assert made <= set(_relations(con)) | {r.name for r in RELATIONS if r.kind == "macro"}
    for missing in inputs:
        con = _holding(built_con, [r for r in inputs if r is not missing])
        with pytest.raises((duckdb.Error, PipelineInputError), match=missing.name):
            _run_module(module, con, dataclasses.replace(run))


@pytest.mark.parametrize("relation", RELATIONS, ids=lambda r: r.name)
def test_readers_outside_the_build_and_makers_name_the_relation(relation):
    """The modules that read the build's connection afterwards (doctor, sql, report, judge) are checked by their text."""

    def source(module: str) -> str:
        return inspect.getsource(importlib.import_module(f"tracerl.pipeline.{module}"))

    made = rf"CREATE OR REPLACE (TEMP )?{relation.kind.upper()} {relation.name}\b|register\(\"{relation.name}\""
    assert re.search(made, source(relation.made_by)), f"{relation.made_by}.py does not create {relation.name}"
    for reader in set(relation.read_by) - set(RUN_IN_ISOLATION):
        assert re.search(rf"\b{relation.name}\b", source(reader)), f"{reader}.py does not read {relation.name}"


def test_the_readme_shows_the_registry():
    text = README.read_text()
    shown = text.split("<!-- relations: python -m tracerl.pipeline.tables -->\n", 1)[1].split("<!-- /relations -->", 1)[0]
    assert shown == markdown(), "src/tracerl/pipeline/README.md is out of date: paste `python -m tracerl.pipeline.tables` there"
