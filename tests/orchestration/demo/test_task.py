"""The demo's task: the word decides which tool is right; only the true result earns the reward."""

from __future__ import annotations

import pytest

from tracerl.orchestration.demo import task as demo_task


def test_the_word_decides_the_tool_and_only_the_true_result_is_rewarded():
    task = demo_task.Task("gap-3-8", "gap", 3, 8)
    assert task.tool == "diff" and task.answer == 5
    assert demo_task.run_tool(" diff ", task) == "5"
    assert demo_task.run_tool("max", task) == "8"  # a real tool, the wrong one: a wrong-looking-right result
    assert demo_task.reward(task, " 5 ") == 1.0 and demo_task.reward(task, "8") == 0.0
    with pytest.raises(demo_task.UnknownToolError, match="unknown tool 'calc', use one of max, min, diff"):
        demo_task.run_tool("calc", task)


def test_held_out_tasks_are_never_trained_on():
    train, held_out = demo_task.all_tasks(seed=0)
    assert not {t.task_id for t in train} & {t.task_id for t in held_out}
    assert {t.word for t in held_out} == set(demo_task.WORDS)  # every skill is tested
