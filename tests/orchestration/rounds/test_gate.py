"""The gate: a checkpoint whose held-out reward (the user's eval command) is worse than the served policy's by more than the margin is not published."""

from __future__ import annotations

import httpx

from tracerl.orchestration.registry import PolicyRegistry
from tracerl.trainer.serving.app import running_server

# a user's evaluation: here every newer version scores worse (1.0, 0.5, 0.0, ...), read from the checkpoint itself
EVAL = """
import json, pathlib, sys
manifest = pathlib.Path(sys.argv[1]) / "tracerl_checkpoint.json"
version = json.loads(manifest.read_text())["policy_version"] if manifest.exists() else 0
print("evaluating", sys.argv[1])
print(1.0 - 0.5 * version)
"""


def test_a_worse_checkpoint_is_held_back_recorded_and_the_next_round_trains_from_the_served_one(tmp_path, capture, round_config, tracerl, tiny_checkpoint):
    (tmp_path / "eval.py").write_text(EVAL)
    capture(4)
    with running_server(tiny_checkpoint) as server:
        config = round_config(endpoint=server.base_url, eval_command="python eval.py {checkpoint}", gate_margin=0.2)
        done = tracerl("train", "run", "--config", str(config))
        assert done.returncode == 6, done.stderr
        assert done.summary["status"] == "held" and "published" not in done.summary
        assert done.summary["gate"] == {"eval_reward": 0.5, "current_eval_reward": 1.0, "margin": 0.2, "held": True}
        assert httpx.get(f"{server.url}/health").json()["policy_version"] == 0  # still the base

        capture(4)
        lenient = tracerl("train", "run", "--config", str(config), "--gate-margin", "1.0")
        assert lenient.returncode == 0 and lenient.summary["status"] == "trained"
        assert (lenient.summary["version"], lenient.summary["parent"]) == (2, 0)  # trained from the served base, not from 1
        assert httpx.get(f"{server.url}/health").json()["policy_version"] == 2

    held, trained = PolicyRegistry(tmp_path / "state").entries()[1:]
    assert held["gate"]["held"] and held["published"] == [] and len(held["episodes"]) == 4  # its episodes are not trained again
    assert trained["eval_reward"] == 0.0 and trained["gate"]["current_eval_reward"] == 1.0 and len(trained["episodes"]) == 4
