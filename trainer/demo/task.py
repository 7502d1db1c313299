"""The demo's agent task: call the calculator tool, read its result, answer.

It is the paper's Calc-X experiment shrunk to what a tiny model learns on two CPU
cores in minutes. Each episode makes two LLM calls with a tool call between them:

1. the policy reads ``task: <op> <a> <b>`` and names the tool to call;
2. the agent runs it: only ``calc`` exists, any other name is a tool error (a system
   signal the pipeline turns into an automatic intermediate reward) whose message
   the policy then sees instead of a result;
3. the policy reads the tool's output and gives the final answer.

The reward is 1 when the answer equals the true result. The starting policy copies
results well but names a tool that does not exist two times in three, as weak
instruct models do; calling the tool it was given is what training must teach.
A wrong tool never yields a correct-looking result, so under the paper's identical
credit the answer turn is never punished for copying a result faithfully.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass

OPERATIONS: dict[str, Callable[[int, int], int]] = {
    "max": max,
    "min": min,
    "diff": lambda a, b: abs(a - b),
}
TOOL_NAME = "calc"
# Names a weak model reaches for instead of the tool it was given.
WRONG_TOOL_NAMES = ("math", "compute")
SYSTEM_PROMPT = f"tools: {TOOL_NAME}"
Example = tuple[list[dict], str]  # (messages, target completion)


class UnknownToolError(ValueError):
    """The policy named a tool that does not exist."""


@dataclass(frozen=True)
class Task:
    task_id: str
    op: str
    a: int
    b: int
    split: str = "train"

    @property
    def answer(self) -> int:  # single digits: the answer is one token
        return OPERATIONS[self.op](self.a, self.b)

    def to_json(self) -> dict:
        return asdict(self)


def all_tasks(seed: int = 0, eval_fraction: float = 0.2) -> tuple[list[Task], list[Task]]:
    """Every (op, a, b) with a, b in 0..9, split into train and held-out tasks at random."""
    rng = random.Random(seed)
    triples = [(op, a, b) for op in OPERATIONS for a in range(10) for b in range(10)]
    rng.shuffle(triples)
    n_eval = int(len(triples) * eval_fraction)
    held_out = [Task(f"{op}-{a}-{b}", op, a, b, "test") for op, a, b in triples[:n_eval]]
    train = [Task(f"{op}-{a}-{b}", op, a, b, "train") for op, a, b in triples[n_eval:]]
    return train, held_out


def first_messages(task: Task) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"task: {task.op} {task.a} {task.b}"},
    ]


def run_tool(name: str, task: Task) -> str:
    if name.strip() != TOOL_NAME:
        raise UnknownToolError(f"unknown tool {name.strip()!r}, use {TOOL_NAME}")
    return str(task.answer)


def second_messages(task: Task, tool_choice: str, tool_output: str) -> list[dict]:
    return first_messages(task) + [
        {"role": "assistant", "content": tool_choice},
        {"role": "tool", "content": tool_output, "tool_call_id": "call_0"},
    ]


def reward(task: Task, final_answer: str) -> float:
    return 1.0 if final_answer.strip() == str(task.answer) else 0.0


def format_examples(tasks: list[Task], n: int, seed: int = 0) -> tuple[list[Example], list[Example]]:
    """Warm-start examples that teach the format, not the task: tool turns and answer turns.

    Tool turns name ``calc`` or one of :data:`WRONG_TOOL_NAMES` uniformly, whatever
    the prompt says; answer turns copy the tool's result (after a tool error they
    guess a digit). So the starting policy succeeds about one time in three.
    """
    rng = random.Random(seed)
    tool_turns: list[Example] = []
    answer_turns: list[Example] = []
    for _ in range(n):
        task = rng.choice(tasks)
        tool = rng.choice((TOOL_NAME, *WRONG_TOOL_NAMES))
        try:
            output, answer = run_tool(tool, task), str(task.answer)
        except UnknownToolError as exc:
            output, answer = f"error: {exc}", str(rng.randint(0, 9))
        tool_turns.append((first_messages(task), tool))
        answer_turns.append((second_messages(task, tool, output), answer))
    return tool_turns, answer_turns
