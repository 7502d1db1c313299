"""benchmarks/bfcl_held_out.py: per round and category, the held-out answers that parse, name the right
function and pass BFCL's checker, read back from the agent's ``bfcl.verdict`` spans."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from examples.bfcl.agent import VERDICT_SPAN
from tracerl.schemas import attributes as A
from tracerl_testing.span_builders import span, write_spans

REPO = Path(__file__).resolve().parents[2]


def verdict(episode: str, category: str, parsed: bool, right: bool, valid: bool, error: str, split: str = "test") -> dict:
    attrs = {A.SPLIT: split, "bfcl.category": category, "bfcl.parsed": parsed, "bfcl.right_function": right, "bfcl.valid": valid,
             "bfcl.error_type": error}
    return span(episode, "verdict", VERDICT_SPAN, 10, 10, task=f"{category}_{episode}", attrs=attrs)


def test_each_round_is_counted_by_category_and_training_episodes_are_left_out(tmp_path):
    run = tmp_path / "rl-seed0"
    write_spans(run / "rounds" / "000" / "data", [
        verdict("a", "simple_python", True, True, True, ""),
        verdict("b", "simple_python", True, False, False, "simple_function_checker:wrong_func_name"),
        verdict("c", "simple_python", False, False, False, "no_call"),
        verdict("d", "multiple", True, True, False, "value_error:string"),
        verdict("e", "simple_python", True, True, True, "", split="train"),
    ])
    done = subprocess.run([sys.executable, "benchmarks/bfcl_held_out.py", str(run), "--json", str(tmp_path / "rows.json")],
                          cwd=REPO, capture_output=True, text=True, check=True)
    assert "| rl-seed0 | 0 | simple_python | 2/3 | 1/3 | 1/3 | wrong_func_name 1, no_call 1 |" in done.stdout
    assert "| rl-seed0 | 0 | multiple | 1/1 | 1/1 | 0/1 | string 1 |" in done.stdout
