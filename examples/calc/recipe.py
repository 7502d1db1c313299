"""The calculator agent's recipe: its tasks, the format its starting policy learns, its loop defaults.

The messages below are the ones AutoGen's ``AssistantAgent`` sends for one problem; the
tests compare the prompts rendered from them with the prompt token ids captured from a
real run of the agent.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Iterator
from pathlib import Path

from examples.calc import task as calc
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.recipe import AgentRecipe, FormatExample, Task, WarmStartStage
from tracerl.trainer.serving import tool_parser

OPERATIONS = tuple(calc.PHRASES)


def tasks(seed: int, data: Path | None) -> tuple[list[Task], list[Task]]:
    train, held_out = calc.load_calcx(data, seed=seed) if data is not None else calc.local_tasks(seed)
    return [t.to_json() for t in train], [t.to_json() for t in held_out]


def tool_call(expression: str) -> dict:
    """The calculator call in OpenAI's shape, as the server parses it out of the model's text."""
    return {"id": "call_0", "type": "function", "function": {"name": "calculator", "arguments": json.dumps({"expression": expression})}}


def first_messages(task: calc.Task) -> list[dict]:
    return [
        {"role": "system", "content": calc.SYSTEM_PROMPT},
        {"role": "user", "content": calc.user_message(task), "name": "user"},
    ]


def drawn_problems(train: list[Task], rng: random.Random, n: int) -> Iterator[tuple[calc.Task, str, str, str]]:
    """``n`` training problems drawn with ``rng``: each with its two numbers and the word restated before its call.

    A generator, so a caller's own draws (the operator) interleave with these as they are made.
    """
    candidates = [calc.Task(**t) for t in train if calc.word_before_second_number(t["question"])]
    for _ in range(n):
        task = rng.choice(candidates)
        a, b = calc.story_numbers(task.question)[:2]
        yield task, a, b, calc.word_before_second_number(task.question)


def warm_start(train: list[Task], seed: int, n: int = 1500) -> list[WarmStartStage]:
    """Teach the format, not the task: restate a word, then call the calculator on the story's two numbers with a random operation.

    The word restated is the one just before the second number, whatever the operation
    (the hermes format lets text precede a tool call; AutoGen keeps it as the call's
    thought). Like the demo's restated word, it puts the word the operation depends on at
    a fixed distance before the operator, where a 2-layer model finds it; the warm start
    draws the operator at random, so what it should be is left to reinforcement learning.
    """
    rng = random.Random(seed)
    calls = []
    for task, a, b, word in drawn_problems(train, rng, n):
        call = tool_parser.render([tool_call(f"{a} {rng.choice(OPERATIONS)} {b}")])
        calls.append(FormatExample(first_messages(task), word + call))
    # 8 epochs at 3e-3 (loss 0.051, the floor ln(4) / 27 of the random operator): at the loop's
    # 1e-3 in 8 epochs, or stopped at the floor after 4, the format broke under RL
    return [WarmStartStage(calls, max_epochs=8, stop_below_loss=0.0, learning_rate=3e-3)]


def calls_begun(train: list[Task], seed: int, n: int = 256) -> list[FormatExample]:
    """The start of a call, up to the first number: the format each round replays, not the operation.

    Identical credit punishes every token of a wrong call alike, the ones that make it a call
    included; without this replay, two of three seeds had stopped calling the calculator for
    13-20 of 100 held-out problems by round 8 (answering a number without it, always wrong).
    """
    examples = []
    for task, a, b, word in drawn_problems(train, random.Random(seed + 1), n):
        call = tool_parser.render([tool_call(f"{a} + {b}")])
        begun = call[: call.index(f"{a} + {b}") + len(a)]
        examples.append(FormatExample(first_messages(task), word + begun, ends_turn=False))
    return examples


def _tokenizer_corpus() -> tuple[str, ...]:
    """The words of the stories and the tool call's text, so that each costs a token or a few."""
    numbers = [str(i) for i in range(100)]
    stories = [phrase.format(name=name, a=7, b=3, item=item) for phrases in calc.PHRASES.values() for phrase in phrases
               for name, item in zip(calc.NAMES, calc.ITEMS)]
    calls = [tool_parser.render([tool_call(f"{a} {op} {b}")]) for op in OPERATIONS for a, b in ((12, 3), (7, 45))]
    return (calc.SYSTEM_PROMPT, *stories * 2, *calls * 4, *[" ".join(numbers), *numbers] * 3)


RECIPE = AgentRecipe(
    name="calc",
    title="Calc-X agent (AutoGen)",
    agent_argv=(sys.executable, "-m", "examples.calc.agent"),
    tasks=tasks,
    warm_start=warm_start,
    format_replay=calls_begun,
    tokenizer_corpus=_tokenizer_corpus(),
    tiny_agent_args=("--examples", "0"),
    sends_tools=True,
    version=8,
    defaults=LocalConfig(out=Path("runs/calc"), rounds=8, tasks_per_round=32, group_size=4, eval_tasks=100, tool_call_parser="hermes"),
)
