"""One metrics row type for both round drivers: rows written under the local loop's old names read in
today's, and the fields a seed reproduces are told from those that measure the machine."""

from __future__ import annotations

import json
from pathlib import Path

from tracerl.schemas.run_metrics import RENAMED, reproducible, upgraded

COMMITTED = sorted((Path(__file__).resolve().parents[2] / "benchmarks" / "results").glob("**/*metrics.jsonl"))


def test_every_committed_run_reads_in_todays_names():
    assert COMMITTED, "benchmarks/results/ holds the loop's rows of the committed runs"
    for path in COMMITTED:
        for number, line in enumerate(path.read_text().splitlines(), start=1):
            old = json.loads(line)
            row = upgraded(old)
            assert not set(RENAMED) & set(row), f"{path}:{number}"
            if "train_loss" in old:
                assert row["loss"] == old["train_loss"] and row.get("checkpoint_seconds") == old.get("save_seconds")
            assert (row["round"], row["eval_mean_reward"], row["seconds"]) == (old["round"], old["eval_mean_reward"], old["seconds"])


def test_a_row_in_todays_names_reads_as_written_and_each_policys_fields_are_renamed_too():
    today = {"round": 3, "policy_version": 2, "version": 3, "status": "trained", "loss": 0.5, "checkpoint_seconds": 0.1, "seconds": 2.0}
    assert upgraded(today) == today
    old = {"round": 0, "policies": {"writer": {"policy_version": 0, "published_version": 1, "train_loss": 0.1, "save_seconds": 0.2}}}
    assert upgraded(old)["policies"]["writer"] == {"policy_version": 0, "version": 1, "loss": 0.1, "checkpoint_seconds": 0.2}
    set_aside = {"set_aside": True, "round": 2, "episodes": 4, "reason": "every row is too stale", "at": "t"}  # a scheduled round's, before status
    assert upgraded(set_aside)["status"] == "skipped"


def test_what_the_same_seed_reproduces_leaves_out_wall_time_memory_and_speed():
    row = {"round": 1, "loss": 0.5, "seconds": 9.0, "rollout_seconds": 5.0, "peak_memory_bytes": 10, "tokens_per_second": 99.0,
           "checkpoint_bytes": 100, "policies": {"writer": {"loss": 0.4, "train_seconds": 1.0}}}
    assert reproducible(row) == {"round": 1, "loss": 0.5, "checkpoint_bytes": 100, "policies": {"writer": {"loss": 0.4}}}
