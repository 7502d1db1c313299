"""benchmarks/learning.py's verdict: a learning claim meets the bar only against a control that ran."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _write_run(folder: Path, run: str, held_out: list[float]) -> None:
    rows = [{"round": rnd, "eval_mean_reward": value, "train_mean_reward": value, "seconds": 1.0} for rnd, value in enumerate(held_out)]
    (folder / f"{run}-metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def _verdict(folder: Path) -> str:
    done = subprocess.run([sys.executable, str(REPO / "benchmarks" / "learning.py"), "--from", str(folder)],
                          capture_output=True, text=True, check=True, cwd=REPO)
    return next(line for line in done.stdout.splitlines() if line.startswith("rl: mean rise"))


def test_rises_without_a_control_run_miss_the_bar_and_say_why(tmp_path: Path):
    for seed, end in enumerate((0.50, 0.55, 0.60)):
        _write_run(tmp_path, f"rl-seed{seed}", [0.1, 0.3, end])
    line = _verdict(tmp_path)
    assert "no control run" in line and line.endswith("MISSES the bar"), line


def test_the_same_rises_beside_a_flat_control_meet_it(tmp_path: Path):
    for seed, end in enumerate((0.50, 0.55, 0.60)):
        _write_run(tmp_path, f"rl-seed{seed}", [0.1, 0.3, end])
        _write_run(tmp_path, f"shuffled-seed{seed}", [0.1, 0.1, 0.1])
    line = _verdict(tmp_path)
    assert "control +0.00" in line and line.endswith("MEETS the bar"), line
