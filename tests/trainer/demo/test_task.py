"""The demo's task: only the tool it was given works, and only the true result earns the reward."""

from __future__ import annotations

import pytest

from tracerl.trainer.demo import task as demo_task


def test_demo_task_rewards_only_the_true_result():
    task = demo_task.Task("diff-3-8", "diff", 3, 8)
    assert demo_task.run_tool(" calc ", task) == "5"
    assert demo_task.reward(task, " 5 ") == 1.0 and demo_task.reward(task, "8") == 0.0
    with pytest.raises(demo_task.UnknownToolError, match="unknown tool 'math', use calc"):
        demo_task.run_tool("math", task)
    train, held_out = demo_task.all_tasks(seed=0)
    assert not {t.task_id for t in train} & {t.task_id for t in held_out}
