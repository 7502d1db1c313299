"""The demo's agent task: pick the calculator tool the question asks for, call it, answer.

It is the paper's Calc-X experiment shrunk to what a tiny model learns on two CPU
cores in minutes. Each episode makes two LLM calls with a tool call between them:

1. the policy reads ``task: <word> <a> <b>`` and answers ``<word> <tool>``: it
   restates what was asked, then names a tool (a thought, then an action, as ReAct
   agents do). Which tool is right depends on the word (``larger`` needs ``max``,
   ``smaller`` ``min``, ``gap`` ``diff``): the skill reinforcement learning must
   teach, and nothing in the prompt spells it out;
2. the agent runs the named tool. A tool that exists returns its result, right or
   wrong for the task; a name that does not exist is a tool error (a system signal
   the pipeline turns into an automatic intermediate reward) whose message the policy
   then sees instead of a result;
3. the policy reads the tool's output and gives the final answer.

The reward is 1 when the answer equals the true result. The two calls belong to two
sub-agents (``tool_picker``, ``answerer``, as OTel GenAI ``invoke_agent`` spans), and the
demo trains the tool picker only (``--agents tool_picker``, the paper's selective
optimisation): the answerer copies, and under identical credit a faithful copy of a
wrong tool's result is punished (trained too, one seed in three unlearned copying after
``max``, 1.00 -> 0.37, and its held-out reward fell). The answerer's copies are replayed
each round instead (the recipe's ``format_replay``). ``benchmarks/credit_assignment.py``
trains both calls and compares credit assignments on exactly this.

The starting policy knows the format (restate the word, name one of the tool names it
has seen, copy the result) but its tool preferences are arbitrary (see the recipe's warm
start), so it succeeds about one time in four.

Why the restatement: a starting policy taught to pick a tool at random whatever the
input learns to ignore the input, and a two-layer model then never finds the word again
(measured: its tool probabilities were the same for every word to three decimals after
eight rounds). With the word restated just before it, the tool is chosen at the position of
the word itself, as a real model reads its own reasoning.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import asdict, dataclass

TOOLS: dict[str, Callable[[int, int], int]] = {"max": max, "min": min, "diff": lambda a, b: abs(a - b)}
WORDS = {"larger": "max", "smaller": "min", "gap": "diff"}  # the word in a task -> the tool it needs
# A name weak models reach for that is no tool here: calling it is a tool error.
MISSING_TOOL = "calc"
SYSTEM_PROMPT = "tools: " + " ".join(TOOLS)
# The agent's two sub-agents (OTel ``gen_ai.agent.name``): the first call picks the tool, the second answers.
TOOL_PICKER, ANSWERER = "tool_picker", "answerer"


class UnknownToolError(ValueError):
    """The policy named a tool that does not exist."""


@dataclass(frozen=True)
class Task:
    task_id: str
    word: str
    a: int
    b: int
    split: str = "train"

    @property
    def tool(self) -> str:
        return WORDS[self.word]

    @property
    def answer(self) -> int:  # single digits: the answer is one token
        return TOOLS[self.tool](self.a, self.b)

    def to_json(self) -> dict:
        return asdict(self)


def all_tasks(seed: int = 0, eval_fraction: float = 0.2) -> tuple[list[Task], list[Task]]:
    """Every (word, a, b) with a, b in 0..9, split into train and held-out tasks at random."""
    rng = random.Random(seed)
    triples = [(word, a, b) for word in WORDS for a in range(10) for b in range(10)]
    rng.shuffle(triples)
    n_eval = int(len(triples) * eval_fraction)
    held_out = [Task(f"{w}-{a}-{b}", w, a, b, "test") for w, a, b in triples[:n_eval]]
    train = [Task(f"{w}-{a}-{b}", w, a, b, "train") for w, a, b in triples[n_eval:]]
    return train, held_out


def first_messages(task: Task) -> list[dict]:
    return [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": f"task: {task.word} {task.a} {task.b}"},
    ]


def tool_turn(word: str, tool: str) -> str:
    """The first turn's text: the word restated, then the tool."""
    return f"{word} {tool}"


def tool_named(turn: str) -> str:
    """The tool a first turn names: its last word."""
    words = turn.split()
    return words[-1] if words else ""


def run_tool(name: str, task: Task) -> str:
    tool = TOOLS.get(name.strip())
    if tool is None:
        raise UnknownToolError(f"unknown tool {name.strip()!r}, use one of {', '.join(TOOLS)}")
    return str(tool(task.a, task.b))


def second_messages(task: Task, tool_choice: str, tool_output: str) -> list[dict]:
    return first_messages(task) + [
        {"role": "assistant", "content": tool_choice},
        {"role": "tool", "content": tool_output, "tool_call_id": "call_0"},
    ]


def reward(task: Task, final_answer: str) -> float:
    return 1.0 if final_answer.strip() == str(task.answer) else 0.0
