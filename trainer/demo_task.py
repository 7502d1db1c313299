"""The demo's agent task: pick a calculator tool, call it, read its result, answer.

It is the paper's Calc-X experiment shrunk to what a tiny model learns on two CPU
cores in minutes. Each episode makes two LLM calls with a tool call between them:

1. the policy reads ``task: <op> <a> <b>`` and names a tool;
2. the agent runs that tool (an unknown name is a tool error, a system signal the
   pipeline can turn into an automatic intermediate reward);
3. the policy reads the tool's result and gives the final answer.

The reward is 1 when the answer equals the true result. Solving the task means
choosing the tool the task names and copying its result: both learnable, neither
known to the starting policy, which is warm-started only on the *format*.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass

# Results stay single digits, so the answer is one token to copy.
TOOLS: dict[str, Callable[[int, int], int]] = {
    "max": max,
    "min": min,
    "diff": lambda a, b: abs(a - b),
}
SYSTEM_PROMPT = "tools: " + " ".join(TOOLS)


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
    def answer(self) -> int:
        return TOOLS[self.op](self.a, self.b)

    def to_json(self) -> dict:
        return asdict(self)


def all_tasks(seed: int = 0, eval_fraction: float = 0.2) -> tuple[list[Task], list[Task]]:
    """Every (op, a, b) with a, b in 0..9, split into train and held-out tasks at random."""
    rng = random.Random(seed)
    pairs = [(op, a, b) for op in TOOLS for a in range(10) for b in range(10)]
    rng.shuffle(pairs)
    n_eval = int(len(pairs) * eval_fraction)
    held_out = [Task(f"{op}-{a}-{b}", op, a, b, "test") for op, a, b in pairs[:n_eval]]
    train = [Task(f"{op}-{a}-{b}", op, a, b, "train") for op, a, b in pairs[n_eval:]]
    return train, held_out


def first_messages(task: Task) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"task: {task.op} {task.a} {task.b}"},
    ]


def run_tool(name: str, task: Task) -> str:
    tool = TOOLS.get(name.strip())
    if tool is None:
        raise UnknownToolError(f"unknown tool {name.strip()!r}; tools are {', '.join(TOOLS)}")
    return str(tool(task.a, task.b))


def second_messages(task: Task, tool_choice: str, tool_result: str) -> list[dict]:
    return first_messages(task) + [
        {"role": "assistant", "content": tool_choice},
        {"role": "tool", "content": tool_result, "tool_call_id": "call_0"},
    ]


def reward(task: Task, final_answer: str) -> float:
    return 1.0 if final_answer.strip() == str(task.answer) else 0.0


def format_examples(tasks: list[Task], n: int, seed: int = 0) -> tuple[list[tuple[list[dict], str]], list[tuple[list[dict], str]]]:
    """(messages, target) pairs teaching the format, not the task: tool turns and answer turns.

    The tool is chosen uniformly at random, whatever the task asks; the answer copies
    the tool's result. So the starting policy calls the right tool one time in three,
    and choosing it from the task is left to reinforcement learning.
    """
    rng = random.Random(seed)
    tool_turns, answer_turns = [], []
    for _ in range(n):
        task = rng.choice(tasks)
        tool = rng.choice(list(TOOLS))
        result = run_tool(tool, task)
        tool_turns.append((first_messages(task), tool))
        answer_turns.append((second_messages(task, tool, result), result))
    return tool_turns, answer_turns
