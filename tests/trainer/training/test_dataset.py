"""Reading the dataset `pipeline build-dataset` wrote: its schema version first, then one sample per usable row."""

from __future__ import annotations

import json
import shutil

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tracerl.pipeline import build_dataset, dataset_table
from tracerl.schemas import DATASET_SCHEMA_VERSION
from tracerl.schemas.dataset_folder import MANIFEST_FILE, DatasetVersionError, transition_files
from tracerl.trainer.training.dataset import DatasetError, EmptyDatasetError, read_dataset
from tracerl_testing.span_builders import episode_span, llm_call, reward_span, write_spans


def _episode(ep: str, reward: float | None) -> list[dict]:
    spans = [
        episode_span(ep, 0, 100, task="t1"),
        llm_call(ep, "c1", 1, 10, [1, 2], [3, 4], logprobs=[-0.1, -0.2], version=3),
        llm_call(ep, "c2", 13, 20, [1, 2, 3, 4, 9], [5], version=3),
    ]
    return spans + ([reward_span(ep, "r", 30, reward)] if reward is not None else [])


@pytest.fixture()
def spans_dir(data_dir):
    return write_spans(data_dir, _episode("e1", 1.0) + _episode("e2", 0.0))


@pytest.fixture()
def dataset(spans_dir, tmp_path):
    build_dataset(spans_dir, tmp_path / "dataset")
    return tmp_path / "dataset"


def test_samples_are_the_rows_the_pipeline_wrote(dataset):
    samples, skipped = read_dataset(dataset)
    rows = dataset_table(dataset).to_pylist()
    rows.sort(key=lambda r: (r["prompt_token_ids"], r["response_token_ids"], r["advantage"]))  # content order
    assert skipped == {} and len(samples) == len(rows) == 4
    for sample, row in zip(samples, rows):
        assert sample.prompt_token_ids == row["prompt_token_ids"]
        assert sample.response_token_ids == row["response_token_ids"]
        assert sample.response_logprobs == pytest.approx(row["response_logprobs"])
        assert sample.response_mask == row["response_mask"]
        assert sample.advantage == row["advantage"] and sample.policy_version == 3
    assert sorted(s.advantage for s in samples) == [-1.0, -1.0, 1.0, 1.0]


def test_samples_come_in_the_same_order_whatever_order_the_rows_were_written_in(dataset):
    """The pipeline's row order varies from build to build; the seeded minibatches must not."""
    before, _ = read_dataset(dataset)
    [file] = transition_files(dataset)
    table = pq.read_table(file)
    pq.write_table(table.take(list(reversed(range(table.num_rows)))), file)
    after, _ = read_dataset(dataset)
    assert table.column("episode_id").to_pylist() != pq.read_table(file).column("episode_id").to_pylist()
    assert list(after) == list(before)


def test_a_dataset_of_another_schema_version_is_refused_saying_what_to_run(dataset, spans_dir):
    manifest = json.loads((dataset / MANIFEST_FILE).read_text())
    manifest["schema_version"] = DATASET_SCHEMA_VERSION + 1
    (dataset / MANIFEST_FILE).write_text(json.dumps(manifest))
    with pytest.raises(DatasetVersionError) as caught:
        read_dataset(dataset)
    message = str(caught.value)
    assert str(dataset) in message
    assert f"version {DATASET_SCHEMA_VERSION + 1}" in message and f"version {DATASET_SCHEMA_VERSION}" in message
    # the command to run, with the spans this dataset was built from
    assert f"pipeline build-dataset --spans {manifest['inputs']['spans']} --out {dataset}" in message
    assert manifest["inputs"]["spans"].startswith(str(spans_dir))


def test_transitions_without_a_manifest_are_refused(dataset, tmp_path):
    bare = tmp_path / "bare"
    bare.mkdir()
    for path in transition_files(dataset):
        shutil.copy(path, bare)
    with pytest.raises(DatasetVersionError, match=f"{bare} has no {MANIFEST_FILE}.*build-dataset"):
        read_dataset(bare)


def test_a_file_without_a_column_training_reads_is_named(dataset):
    (path,) = transition_files(dataset)
    pq.write_table(pq.read_table(path).drop_columns(["advantage"]), path)
    with pytest.raises(DatasetError, match=f"{path} has no column 'advantage'"):
        read_dataset(dataset)


def test_a_retyped_column_is_named(dataset):
    (path,) = transition_files(dataset)
    table = pq.read_table(path)
    index = table.schema.get_field_index("advantage")
    pq.write_table(table.set_column(index, "advantage", table.column("advantage").cast(pa.string())), path)
    with pytest.raises(DatasetError, match=r"'advantage' is string, the dataset schema says double"):
        read_dataset(dataset)


def test_a_dataset_without_transitions_repeats_the_builds_warnings(data_dir, tmp_path):
    data = write_spans(data_dir, _episode("e1", None))  # no reward: nothing to learn from
    build_dataset(data, tmp_path / "dataset")
    with pytest.raises(EmptyDatasetError, match="holds no transitions.*no reward"):
        read_dataset(tmp_path / "dataset")


def test_no_dataset_at_all_says_what_to_run(tmp_path):
    with pytest.raises(EmptyDatasetError, match="build-dataset"):
        read_dataset(tmp_path / "nowhere")


def test_unusable_rows_are_counted_and_an_all_unusable_dataset_refused(tmp_path, write_dataset):
    row = {"prompt_token_ids": [1], "response_token_ids": [2, 3], "response_logprobs": [-0.5], "advantage": 1.0}
    samples, skipped = read_dataset(write_dataset(tmp_path / "a", [row, {**row, "response_token_ids": []}]))
    assert len(samples) == 1 and samples[0].response_logprobs is None
    assert skipped == {"empty response": 1, "logprobs of wrong length (ignored)": 1}
    with pytest.raises(EmptyDatasetError, match="empty response"):
        read_dataset(write_dataset(tmp_path / "b", [{**row, "response_token_ids": []}]))


def test_a_dataset_whose_every_row_is_too_stale_says_so_apart_from_other_empty_datasets(tmp_path, write_dataset):
    """A scheduled round sets such a round aside instead of failing on it every run (rounds/round.py)."""
    from tracerl.trainer.training.dataset import StaleDatasetError

    write_dataset(tmp_path / "ds", [{"prompt_token_ids": [5, 6], "response_token_ids": [7], "response_logprobs": None, "advantage": 1.0}] * 2)
    with pytest.raises(StaleDatasetError, match="every row is more than 2 policy versions old"):
        read_dataset(tmp_path / "ds", max_policy_lag=2, policy_version=10)  # the rows say version 0
    assert len(read_dataset(tmp_path / "ds", max_policy_lag=2, policy_version=2)[0]) == 2


def test_content_order_compares_ids_as_lists_do(tmp_path, write_dataset):
    """Rows are sorted as Arrow columns, by each list's ids element by element (a prefix first), then advantage
    and policy version: the order Python's sort of the rows' lists gives."""
    import random

    rng = random.Random(0)
    rows = []
    for _ in range(60):
        prompt = [rng.choice([0, 1, 255, 256, 70_000, 2**31 - 1]) for _ in range(rng.randrange(1, 4))]
        rows.append({"prompt_token_ids": prompt, "response_token_ids": [rng.randrange(3)], "response_logprobs": None,
                     "advantage": rng.choice([-1.0, 0.5, 1.0]), "policy_version": rng.choice([None, 0, 2])})
    samples, _ = read_dataset(write_dataset(tmp_path / "ds", rows))
    key = lambda r: (r["prompt_token_ids"], r["response_token_ids"], r["advantage"], -1 if r["policy_version"] is None else r["policy_version"])  # noqa: E731
    assert [(s.prompt_token_ids, s.response_token_ids, s.advantage, s.policy_version) for s in samples] == [
        (r["prompt_token_ids"], r["response_token_ids"], r["advantage"], r["policy_version"]) for r in sorted(rows, key=key)]


def test_a_mask_not_as_long_as_its_response_is_named(tmp_path, write_dataset):
    row = {"prompt_token_ids": [1], "response_token_ids": [2, 3], "response_logprobs": None, "advantage": 1.0, "response_mask": [1]}
    with pytest.raises(DatasetError, match="1 row\\(s\\) have a response_mask not as long as their response \\(1 values for 2 tokens\\)"):
        read_dataset(write_dataset(tmp_path / "ds", [row]))


def test_a_policy_with_no_rows_is_named(dataset):
    with pytest.raises(EmptyDatasetError, match="holds no usable transition of policy 'nobody'"):
        read_dataset(dataset, policy="nobody")
