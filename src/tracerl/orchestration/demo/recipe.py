"""``tracerl demo``'s recipe: the calculator agent of :mod:`.task`, and the format its starting policy learns."""

from __future__ import annotations

import random
import sys
from pathlib import Path

from tracerl.orchestration.demo import task as demo_task
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.recipe import AgentRecipe, FormatExample, Task, WarmStartStage


def tasks(seed: int, data: Path | None) -> tuple[list[Task], list[Task]]:
    if data is not None:
        raise ValueError("the demo makes its own tasks; --data is for the examples/ agents")
    train, held_out = demo_task.all_tasks(seed)
    return [t.to_json() for t in train], [t.to_json() for t in held_out]


def warm_start(train: list[Task], seed: int, n: int = 1500) -> list[WarmStartStage]:
    """Teach the format, not the task: restate the word, name a tool by an arbitrary preference, copy its result.

    Each word gets its own preference over the four tool names (three real, one missing),
    drawn at random per seed, as a pretrained model has opinions unrelated to this task.
    The preference must depend on the word: a starting policy taught one preference for
    every word learns to ignore the word, and a two-layer model never finds it again
    under RL (measured: its tool probabilities stayed the same for every word to two
    decimals after eight rounds). Answer turns copy the tool's result.

    The two copying skills (the word into the first turn, the result into the answer) are
    taught first, until learned; mixed with the tool turns from the start the tiny model
    does not find them. The copies are weighted up in the mixed stage: a copy worn down to
    ~0.85 erodes further under RL, where a faithful copy of a wrong tool's result is punished.
    """
    rng = random.Random(seed)
    names = (*demo_task.TOOLS, demo_task.MISSING_TOOL)
    preference = {word: [0.2 + rng.random() for _ in names] for word in demo_task.WORDS}
    tool_turns, restatements, copies = [], [], []
    for _ in range(n):
        task = demo_task.Task(**rng.choice(train))
        tool = rng.choices(names, weights=preference[task.word])[0]
        turn = demo_task.tool_turn(task.word, tool)
        tool_turns.append(FormatExample(demo_task.first_messages(task), turn))
        restatements.append(FormatExample(demo_task.first_messages(task), task.word, ends_turn=False))
        if tool in demo_task.TOOLS:
            output = demo_task.run_tool(tool, task)
            copies.append(FormatExample(demo_task.second_messages(task, turn, output), output))
    return [
        WarmStartStage(copies, max_epochs=20, stop_below_loss=0.01),
        WarmStartStage(restatements + copies, max_epochs=20, stop_below_loss=0.01),
        WarmStartStage(tool_turns + 3 * copies, max_epochs=2, stop_below_loss=0.0),
    ]


def answer_copies(train: list[Task], seed: int, n: int = 256) -> list[FormatExample]:
    """Answer turns that copy a real tool's result: what training the tool picker must not wear down.

    Measured without them: after four rounds that taught the tool picker, the untrained
    answerer restated a word and named a tool instead of copying (copy probability
    1.00 -> 0.05), and held-out reward fell from 1.00 to 0.
    """
    rng = random.Random(seed + 1)
    examples = []
    for _ in range(n):
        task = demo_task.Task(**rng.choice(train))
        tool = rng.choice(tuple(demo_task.TOOLS))
        turn = demo_task.tool_turn(task.word, tool)
        output = demo_task.run_tool(tool, task)
        examples.append(FormatExample(demo_task.second_messages(task, turn, output), output))
    return examples


DEMO = AgentRecipe(
    name="demo",
    title="tracerl demo: calculator agent, tiny model",
    agent_argv=(sys.executable, "-m", "tracerl.orchestration.demo.agent"),
    tasks=tasks,
    warm_start=warm_start,
    format_replay=answer_copies,
    tokenizer_corpus=(),  # the tiny model's own corpus covers the demo's words: vLLM can start on the base model
    version=9,
    # lr 5e-4: at 1e-3 Adam's first steps (size ~lr whatever the gradient) moved one seed's
    # policy by KL 2 in one round: the tool turn stopped ending and held-out reward fell to 0
    defaults=LocalConfig(out=Path("runs/demo"), rounds=10, agents=demo_task.TOOL_PICKER, tiny_learning_rate=5e-4),
)
