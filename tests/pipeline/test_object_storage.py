"""The pipeline reads what the collector writes, locally and on S3 (moto in server mode on loopback).

Real collectors receive OTLP spans and commit them, partitioned by hour, under one
prefix; the pipeline lists that prefix once per build and reads exactly that list, so
a file committed while a build runs waits for the next (incremental) build.
"""

from __future__ import annotations

import csv

import pyarrow as pa
import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.pipeline import build_dataset, dataset_table, read_manifest
from tracerl.schemas import attributes as A
from tracerl.schemas import spans_table
from tracerl.core.storage import write_parquet_atomic
from tracerl_testing.loadgen import make_spans
from tracerl_testing.span_builders import chat_episode

SPANS_PER_BATCH = 32  # make_spans: 4 episodes of 8 spans, 2 of them LLM calls with token ids


def _within(root: str, folder: str) -> str:
    """``root/folder``, keeping a URI's ``?query`` (endpoint, region) last."""
    path, sep, query = root.partition("?")
    return f"{path}/{folder}{sep}{query}"


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path) -> str:
    """Where the collectors write: a local folder, or a prefix on the S3 server."""
    if request.param == "local":
        return str(tmp_path / "collected")
    host_port = request.getfixturevalue("s3").removeprefix("http://")
    return f"s3://traces/prod?endpoint_override={host_port}&scheme=http&region=us-east-1"


def _deliver(collector, seed: int) -> dict[str, list[int]]:
    """One batch of an agent's spans through ``collector`` to its store; the prompt token ids of each call by response id."""
    spans = make_spans(SPANS_PER_BATCH, seed=seed, packed=False)
    assert OTLPSpanExporter(endpoint=f"{collector.http_url()}/v1/traces").export(spans) is SpanExportResult.SUCCESS
    collector.collector.flush()
    return {
        s.attributes[A.GEN_AI_RESPONSE_ID]: list(s.attributes[A.PROMPT_TOKEN_IDS])
        for s in spans if A.PROMPT_TOKEN_IDS in s.attributes
    }


def _reward(store: str, episodes: list[str], value: float = 1.0) -> None:
    """Late rewards for ``episodes`` in the store's rewards/ folder (what a grader writes beside the spans)."""
    table = pa.table({"episode_id": episodes, "name": ["graded"] * len(episodes), "value": [value] * len(episodes)})
    write_parquet_atomic(table, _within(store, "rewards"), prefix="rewards")


def _episodes(seed: int) -> list[str]:
    return [f"ep-{seed}-{i}" for i in range(SPANS_PER_BATCH // 8)]


def test_two_collectors_and_several_hours_become_one_dataset(store, start_collector, tmp_path):
    first = start_collector(out=store, wal_dir=tmp_path / "wal-1", grpc=False)
    second = start_collector(out=store, wal_dir=tmp_path / "wal-2", grpc=False)
    prompts = _deliver(first, seed=1) | _deliver(second, seed=2)
    # an earlier hour's file, as a collector wrote it then
    write_parquet_atomic(spans_table(chat_episode("ep-old", task="t")), _within(store, "spans"), prefix="spans",
                         partition="date=2026-01-01/hour=05")
    _reward(store, _episodes(1) + _episodes(2))  # ep-old carries its own reward span

    manifest = build_dataset(store, tmp_path / "out")

    rows = dataset_table(tmp_path / "out").to_pylist()
    assert manifest["inputs"]["span_files"] == 3 and manifest["inputs"]["rejected_files"] == []
    assert "endpoint_override" not in manifest["inputs"]["spans"]  # a URI's query (credentials too) is never recorded
    assert sorted({r["episode_id"] for r in rows}) == sorted(_episodes(1) + _episodes(2) + ["ep-old"])
    by_response = {r["response_id"]: r["prompt_token_ids"] for r in rows if r["episode_id"] != "ep-old"}
    assert by_response == prompts  # every call of both collectors, with its exact token ids
    assert [r["response_token_ids"] for r in rows if r["episode_id"] == "ep-old"] == [[3, 4], [5], [8]]
    assert all(r["return"] == 1.0 for r in rows)


def test_a_file_committed_during_a_build_waits_for_the_next_incremental_build(store, start_collector, tmp_path):
    collector = start_collector(out=store, wal_dir=tmp_path / "wal", grpc=False)
    _reward(store, _episodes(1) + _episodes(2))
    _deliver(collector, seed=1)
    late: dict[str, list[int]] = {}

    def progress(stage: str, total: int | None) -> None:
        if stage.startswith("reading") and not late:  # the files are listed: the collector commits another one
            late.update(_deliver(collector, seed=2))

    first = build_dataset(store, tmp_path / "out", incremental=True, progress=progress)
    assert late, "the collector delivered while the build ran"
    assert first["inputs"]["span_files"] == 1
    assert {r["episode_id"] for r in dataset_table(tmp_path / "out").to_pylist()} == set(_episodes(1))

    second = build_dataset(store, tmp_path / "out", incremental=True)
    rows = dataset_table(tmp_path / "out").to_pylist()
    assert second["counts"]["episodes"]["already_processed"] == len(_episodes(1))
    assert second["counts"]["episodes"]["emitted"] == len(_episodes(2))
    assert second["watermark"]["episodes_processed"] == len(_episodes(1)) + len(_episodes(2))
    assert len(rows) == len({r["response_id"] for r in rows}) == 2 * len(late)  # every call once, none twice
    assert {r["response_id"] for r in rows} >= set(late)


def test_build_dataset_and_sql_commands_take_a_uri(s3, start_collector, tmp_path):
    host_port = s3.removeprefix("http://")
    store = f"s3://traces/cli?endpoint_override={host_port}&scheme=http&region=us-east-1"
    prompts = _deliver(start_collector(out=store, wal_dir=tmp_path / "wal", grpc=False), seed=3)
    graded = pa.table({"episode_id": _episodes(3), "value": [1.0] * len(_episodes(3))})
    query = f"endpoint_override={host_port}&scheme=http&region=us-east-1"
    rewards = f"s3://{write_parquet_atomic(graded, f's3://traces/grades?{query}', prefix='grades')}?{query}"
    runner = CliRunner()

    built = runner.invoke(app, ["pipeline", "build-dataset", "--spans", store, "--rewards", rewards,
                                "--out", str(tmp_path / "out")])
    assert built.exit_code == 0, built.output
    assert f"{len(prompts)} transition(s) from {len(_episodes(3))} episode(s)" in built.output
    assert read_manifest(tmp_path / "out")["inputs"]["reward_files"] == [rewards.partition("?")[0]]  # no query recorded

    query = runner.invoke(app, ["sql", store, "-c", "SELECT count(*) AS calls FROM llm_calls", "--format", "csv"])
    assert query.exit_code == 0, query.output
    assert list(csv.reader(query.output.splitlines())) == [["calls"], [str(len(prompts))]]


def test_an_unknown_uri_scheme_is_a_clear_error(tmp_path):
    result = CliRunner().invoke(app, ["pipeline", "build-dataset", "--spans", "nosuch://bucket/x", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2
    assert "nosuch://bucket/x: pyarrow cannot open this URI" in result.output
