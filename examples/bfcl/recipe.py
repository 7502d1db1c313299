"""The function-calling agent's recipe: BFCL's questions split by function, the worked examples, the loop's defaults.

Training questions come from the leaderboard's ``simple_python`` category (one function, one
call); the held-out ones ask for functions no training question offers
(:func:`examples.bfcl.task.split_by_function`), followed by ``multiple`` questions (several
functions offered, one to choose, a category never trained on) that share no function with
training either. ``--data FILE`` takes a user's own questions in BFCL's format instead (then
held out the same way, without ``multiple``). The agent's reward is the leaderboard's
verdict (with ``--agent-args=--partial-credit``, plus 0.5 for naming the right function), and
:func:`held_out_passes`, the primary measure, counts the held-out ``simple_python`` passes alone.

No tiny model is built for this recipe: a model learns BFCL from its pretraining and the
worked examples, not from a warm start (``--model`` is required).
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import replace
from pathlib import Path

from examples.bfcl import task as bfcl
from tracerl.orchestration.local.config import LocalConfig
from tracerl.orchestration.local.recipe import AgentRecipe, SkillCount, Task

HELD_OUT = 40  # simple_python questions whose functions are never trained on (a quarter of a smaller --data file);
# a function's questions all go one way, so the held-out side may hold a few more (the default --eval-tasks leaves room)
TRANSFER = 16  # multiple questions, held out after them
EXAMPLES = 2  # worked examples drawn from the training questions (and then never trained on)
EXAMPLE_MAX_CHARS = 700  # a worked example's functions, as JSON: short ones, so the prompt stays short


def worked_examples(train: list[bfcl.Task], seed: int) -> list[bfcl.Task]:
    """``EXAMPLES`` training questions with short schemas and calls, drawn with the seed."""
    short = [t for t in train if len(json.dumps(t.functions)) <= EXAMPLE_MAX_CHARS and len(t.ground_truth) == 1]
    return random.Random(seed + 7).sample(short, EXAMPLES)


def split(questions: list[bfcl.Task], transfer: list[bfcl.Task], seed: int) -> tuple[list[Task], list[Task]]:
    """Training and held-out task lines, each carrying the worked examples; ``transfer`` questions sharing a
    function with training are dropped, the rest (up to ``TRANSFER``) held out after the split's own."""
    train, held_out = bfcl.split_by_function(questions, seed, min(HELD_OUT, len(questions) // 4))
    examples = worked_examples(train, seed)
    train = [t for t in train if t not in examples]
    trained = {name for t in train for name in bfcl.function_names(t)}
    unseen = [t for t in transfer if not bfcl.function_names(t) & trained]
    held_out += [replace(t, split="test") for t in random.Random(seed).sample(unseen, min(TRANSFER, len(unseen)))]
    shown = [{"question": t.question, "functions": t.functions, "calls": bfcl.reference_calls(t)} for t in examples]
    return [{**t.to_json(), "examples": shown} for t in train], [{**t.to_json(), "examples": shown} for t in held_out]


def tasks(seed: int, data: Path | None) -> tuple[list[Task], list[Task]]:
    if data is not None:
        return split(bfcl.load_file(Path(data)), [], seed)
    return split(bfcl.load_category(bfcl.TRAIN_CATEGORY), bfcl.load_category(bfcl.TRANSFER_CATEGORY), seed)


def verdicts(spans: Path) -> list[dict]:
    """Every held-out episode's verdict in a round's spans: task id, category, parsed, right function, valid, error type."""
    from tracerl.pipeline.source import raw_spans_of

    with raw_spans_of(spans) as con:
        rows = con.sql("SELECT task_id, attributes FROM raw_spans WHERE split = 'test' AND name = 'bfcl.verdict' ORDER BY task_id").fetchall()
    out = []
    for task_id, attributes in rows:
        values = json.loads(attributes)
        out.append({"task_id": task_id, **{key.removeprefix("bfcl."): value for key, value in values.items() if key.startswith("bfcl.")}})
    return out


def _simple(spans: Path) -> list[dict]:
    return [v for v in verdicts(spans) if v["category"] == bfcl.TRAIN_CATEGORY]


def held_out_passes(spans: Path) -> SkillCount:
    """The primary measure: held-out ``simple_python`` questions (functions never trained on) that BFCL's checker passes."""
    primary = _simple(spans)
    return SkillCount("BFCL's checker passes the call (simple_python, functions never trained on)", sum(v["valid"] for v in primary), len(primary))


def held_out_right_function(spans: Path) -> SkillCount:
    """Held-out ``simple_python`` answers whose calls parse and name the question's function (passing or not)."""
    primary = _simple(spans)
    return SkillCount("the call parses and names the offered function", sum(v["right_function"] for v in primary), len(primary))


RECIPE = AgentRecipe(
    name="bfcl",
    title="BFCL function calling (OpenAI client), held-out functions",
    agent_argv=(sys.executable, "-m", "examples.bfcl.agent"),
    tasks=tasks,
    sends_tools=True,
    held_out_skill=held_out_right_function,
    held_out_primary=held_out_passes,
    defaults=LocalConfig(out=Path("runs/bfcl"), rounds=3, tasks_per_round=8, group_size=4, eval_tasks=HELD_OUT + 8 + TRANSFER,
                         tool_call_parser="hermes", max_tokens=128, drop_zero_advantage=True, concurrency=32),
)
