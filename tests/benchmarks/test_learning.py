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


def test_a_mean_rise_a_hair_under_the_bar_misses_it_and_the_line_shows_by_how_much(tmp_path: Path):
    """BFCL's committed rows: +0.073, +0.150, +0.075 (mean +0.0994) beside a falling control."""
    for seed, (start, end) in enumerate(((1 / 41, 4 / 41), (0.0, 0.15), (0.1, 0.175))):
        _write_run(tmp_path, f"rl-seed{seed}", [start, end])
        _write_run(tmp_path, f"shuffled-seed{seed}", [start, start / 2])
    line = _verdict(tmp_path)
    assert "mean rise +0.099 >= 0.10 NO" in line and "all > 0 yes" in line and line.endswith("MISSES the bar"), line


def test_rises_without_a_control_run_miss_the_bar_and_say_why(tmp_path: Path):
    for seed, end in enumerate((0.50, 0.55, 0.60)):
        _write_run(tmp_path, f"rl-seed{seed}", [0.1, 0.3, end])
    line = _verdict(tmp_path)
    assert "no control run NO" in line and line.endswith("MISSES the bar"), line


def test_the_same_rises_beside_a_flat_control_meet_it(tmp_path: Path):
    for seed, end in enumerate((0.50, 0.55, 0.60)):
        _write_run(tmp_path, f"rl-seed{seed}", [0.1, 0.3, end])
        _write_run(tmp_path, f"shuffled-seed{seed}", [0.1, 0.1, 0.1])
    line = _verdict(tmp_path)
    assert "control +0.000: rl >= 2x yes" in line and line.endswith("MEETS the bar"), line
