"""The same spans give the same dataset bit for bit, whatever ``--duckdb-threads``.

DuckDB adds the rows of a parallel aggregate or window aggregate in the order its threads
reach them, and a float sum's last bit depends on that order: before the sums were ordered,
the advantages below differed between a 1-thread and a 2-thread build in 7,040 of 12,000 rows
(GRPO's group means and stds), 4,565 (RLOO's group sums) and all 12,000 (the batch mean), and a
few per-step rewards and discounted returns differed too. The spans are big enough for DuckDB to split the work (3,000 episodes in
375 task groups, 12,000 transitions, in 15 span files), with rewards that are not small
integers: a fractional outcome reward per episode and three late rewards each on its last call.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from tracerl.pipeline import build_dataset, dataset_table
from tracerl.schemas import REWARDS_SCHEMA
from tracerl_testing.synthetic_spans import episode_id, generate, write

EPISODES = 3000
LATE_PER_EPISODE = 3


@pytest.fixture(scope="module")
def spans(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("deterministic") / "data"
    rng = np.random.default_rng(7)
    table = generate(EPISODES, calls=4, group_size=8, seed=7)
    column = table.schema.get_field_index("reward_value")
    fractional = pc.if_else(pc.is_valid(table["reward_value"]), pa.array(rng.random(table.num_rows)), None)
    write(table.set_column(column, "reward_value", fractional), data, spans_per_file=2000)
    late = pa.table({
        "episode_id": [episode_id(e) for e in range(EPISODES) for _ in range(LATE_PER_EPISODE)],
        "name": ["bonus"] * (EPISODES * LATE_PER_EPISODE),
        "value": rng.normal(size=EPISODES * LATE_PER_EPISODE) / 7,
    }, schema=pa.schema([REWARDS_SCHEMA.field(name) for name in ("episode_id", "name", "value")]))
    (data / "rewards").mkdir()
    pq.write_table(late, data / "rewards" / "late.parquet")
    return data


def differences(a: pa.Table, b: pa.Table) -> dict[str, int | str]:
    """Each column of ``b`` that is not ``a``'s: floats compared bit for bit (the rows that differ), others whole."""
    assert a.schema.equals(b.schema) and a.num_rows == b.num_rows
    found: dict[str, int | str] = {}
    for name in a.column_names:
        x, y = a[name], b[name]
        if pa.types.is_floating(x.type):
            bits = np.dtype(f"int{x.type.bit_width}")
            left = x.to_numpy(zero_copy_only=False).view(bits)
            right = y.to_numpy(zero_copy_only=False).view(bits)
            nulls = pc.not_equal(x.is_null(), y.is_null()).to_numpy(zero_copy_only=False)
            rows = int(((left != right) | nulls).sum())
            if rows:
                found[name] = rows
        elif not x.equals(y):
            found[name] = "differs"
    return found


@pytest.mark.parametrize("options", [
    {},  # identical credit, GRPO: group means and population stds
    {"credit": "discounted", "gamma": 0.9, "advantage": "rloo"},  # per-step returns, group sums
    {"advantage": "batch"},  # one mean over every episode
], ids=["identical-grpo", "discounted-rloo", "batch"])
def test_the_same_spans_give_the_same_dataset_bit_for_bit_whatever_the_threads(spans, tmp_path, options):
    first = None
    for run, threads in enumerate((1, 2, 4, 1, 2, 4)):
        out = tmp_path / f"run{run}-threads{threads}"
        manifest = build_dataset(spans, out, threads=threads, **options)
        table = dataset_table(out)
        if first is None:
            first = table, manifest
            assert table.num_rows == EPISODES * 4 and manifest["counts"]["task_groups"]["total"] == EPISODES // 8
            continue
        assert differences(first[0], table) == {}, f"threads={threads}, run {run}"
        assert manifest["counts"] == first[1]["counts"]
