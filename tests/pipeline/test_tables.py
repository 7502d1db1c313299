"""The registry of tables and views (pipeline/tables.py) is what a real build creates, and what the README shows."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import duckdb
import pytest

from tracerl.pipeline import BuildOptions, analyze, build_dataset
from tracerl.pipeline.sql import open_views
from tracerl.pipeline.tables import AFTER_ANALYZE, RELATIONS, markdown
from tracerl.schemas import DATASET_SCHEMA
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, tool_span, write_spans

README = Path(__file__).parents[2] / "pipeline" / "README.md"


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


@pytest.mark.parametrize("relation", RELATIONS, ids=lambda r: r.name)
def test_each_relation_is_made_and_read_where_the_registry_says(relation):
    def source(module: str) -> str:
        return inspect.getsource(importlib.import_module(f"tracerl.pipeline.{module}"))

    made = rf"CREATE OR REPLACE (TEMP )?{relation.kind.upper()} {relation.name}\b|register\(\"{relation.name}\""
    assert re.search(made, source(relation.made_by)), f"{relation.made_by}.py does not create {relation.name}"
    for reader in relation.read_by:
        assert re.search(rf"\b{relation.name}\b", source(reader)), f"{reader}.py does not read {relation.name}"


def test_the_readme_shows_the_registry():
    text = README.read_text()
    shown = text.split("<!-- relations: python -m tracerl.pipeline.tables -->\n", 1)[1].split("<!-- /relations -->", 1)[0]
    assert shown == markdown(), "pipeline/README.md is out of date: paste `python -m tracerl.pipeline.tables` there"
