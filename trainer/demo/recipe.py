"""``tracerl demo``'s recipe: the calculator agent of :mod:`.task`, and the format its starting policy learns."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from tracerl.trainer.demo import task as demo_task
from tracerl.trainer.loop.config import LoopConfig
from tracerl.trainer.loop.recipe import AgentRecipe, FormatExample, Task, WarmStartStage


def tasks(seed: int, data: Path | None) -> tuple[list[Task], list[Task]]:
    if data is not None:
        raise ValueError("the demo makes its own tasks; --data is for the examples/ agents")
    train, held_out = demo_task.all_tasks(seed)
    return [t.to_json() for t in train], [t.to_json() for t in held_out]


def warm_start(train: list[Task], seed: int, n: int = 1500) -> list[WarmStartStage]:
    """Teach the format, not the task: name a tool at random, then copy what it returned.

    Tool turns name each of the three tools or the missing one uniformly, whatever the
    word says; answer turns copy the tool's result (after a tool error they guess a digit).
    Copying is taught first, until learned: mixed with the deliberately random tool turns
    from the start, the tiny model does not find the copy mechanism within this budget.
    """
    rng = random.Random(seed)
    tool_turns, copies, guesses = [], [], []
    for _ in range(n):
        task = demo_task.Task(**rng.choice(train))
        tool = rng.choice((*demo_task.TOOLS, demo_task.MISSING_TOOL))
        tool_turns.append(FormatExample(demo_task.first_messages(task), tool))
        try:
            output = demo_task.run_tool(tool, task)
            copies.append(FormatExample(demo_task.second_messages(task, tool, output), output))
        except demo_task.UnknownToolError as exc:
            output = f"error: {exc}"
            guesses.append(FormatExample(demo_task.second_messages(task, tool, output), str(rng.randint(0, 9))))
    return [WarmStartStage(copies, max_epochs=12), WarmStartStage(tool_turns + copies + guesses, max_epochs=1)]


DEMO = AgentRecipe(
    name="demo",
    title="tracerl demo: calculator agent, tiny model",
    agent_argv=(sys.executable, "-m", "tracerl.trainer.demo.agent"),
    tasks=tasks,
    warm_start=warm_start,
    tokenizer_corpus=(),  # the tiny model's own corpus covers the demo's words: vLLM can start on the base model
    version=1,
    defaults=LoopConfig(out=Path("runs/demo")),
)
