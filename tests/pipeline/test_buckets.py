"""What decides a bucket: traces that share an id go together, and buckets are runs of the files' order."""

from __future__ import annotations

import pyarrow as pa

from tracerl.pipeline.buckets import KEYS_SCHEMA, TASK_SEEN, TASK_UNSEEN, plan


def keys(rows: list[tuple[str, str, int, int]]) -> pa.Table:
    """Rows of (trace, key, spans, first file) as the plan's first pass gives them (every trace ends at 0)."""
    return pa.table({"trace_id": [r[0] for r in rows], "key": [r[1] for r in rows], "spans": [r[2] for r in rows],
                     "end_ns": [0] * len(rows), "first_file": [r[3] for r in rows]}, schema=KEYS_SCHEMA)


def bucket_of(result, key: str) -> int:
    return dict(zip(*result.keys.select(["key", "bucket"]).to_pydict().values()))[key]


def test_traces_sharing_a_task_an_episode_or_a_response_id_share_a_bucket():
    found = keys([
        ("a", "a", 10, 0), ("a", "task-1", 10, 0),
        ("b", "b", 10, 3), ("b", "task-1", 10, 3),          # a's task group, written much later
        ("c", "c", 10, 1), ("c", "ep-c", 10, 1),
        ("d", "d", 10, 2), ("d", "ep-c", 10, 2),            # c's episode, in a second trace
        ("e", "e", 10, 2), ("e", "resp-9", 10, 2),
        ("f", "f", 10, 4), ("f", "resp-9", 10, 4),          # a gateway's copy of e's call
    ])
    result = plan([found], buckets=3)
    for first, second in (("a", "b"), ("c", "d"), ("e", "f")):
        assert bucket_of(result, first) == bucket_of(result, second)
    assert sorted(result.spans) == [20, 20, 20] and sum(result.spans) == 60


def test_episodes_without_a_task_are_one_group_unless_a_chunk_saw_their_task():
    found = keys([
        ("x", "x", 5, 0), ("x", TASK_UNSEEN + "ep-x", 5, 0),
        ("y", "y", 5, 9), ("y", TASK_UNSEEN + "ep-y", 5, 9),  # no task anywhere: x's group
        ("z", "z", 5, 5), ("z", TASK_UNSEEN + "ep-z", 5, 5),
    ])
    # another chunk (files from 6 on) saw z's episode with its task
    seen_elsewhere = keys([("z", "z", 5, 6), ("z", TASK_SEEN + "ep-z", 5, 6), ("z", "task-7", 5, 6)])
    result = plan([found, seen_elsewhere], buckets=2)
    assert bucket_of(result, "x") == bucket_of(result, "y") == bucket_of(result, "")
    assert bucket_of(result, "z") != bucket_of(result, "x")
    assert not any(k.startswith("\x1f") for k in result.keys.column("key").to_pylist())  # the marks are not keys
    assert sum(result.spans) == 20  # z counted once per chunk it lies in


def test_buckets_are_runs_of_the_files_order_of_about_equal_spans():
    found = keys([(f"t{i}", f"t{i}", 10, i // 2) for i in range(8)])  # two traces a file, none linked
    result = plan([found], buckets=4)
    assert [bucket_of(result, f"t{i}") for i in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert result.spans == [20, 20, 20, 20]
