"""The calculator agent's tasks: word problems whose answer needs the right expression.

Each locally made problem names two numbers and one phrase, and the phrase decides the
operation: ``Ann has 21 pens and buys 3 more.`` needs ``21 + 3``, ``... and sells 3.``
needs ``21 - 3``; three phrases per operation, so what reinforcement learning must teach
is the phrase -> operation mapping (nothing in the prompt spells it out), while the
numbers are copied from the text. A model that picks the operation at random and
copies the numbers is right one time in four.

The same tasks can come from the paper's data set instead: Calc-X (Kadlčík et al.,
2023; ``MU-NLPC/Calc-X`` on Hugging Face, and Agent Lightning's ``examples/calc_x``)
is JSON lines with ``id``, ``question``, ``chain`` (the worked solution with
``<gadget id="calculator">`` calls) and ``result`` (``"15"``, ``"2/3"``, or an option
letter for aqua_rat rows); :func:`load_calcx` reads that.

The reward is 1 when the final answer is the true result: the same number (fractions
and decimals compare as numbers, to :data:`DECIMALS` places, the calculator's precision),
or the same option letter.
"""

from __future__ import annotations

import ast
import math
import operator
import random
import re
from dataclasses import asdict, dataclass
from fractions import Fraction
from pathlib import Path

from examples.data_files import DataFormatError, json_objects

DECIMALS = 4  # the calculator rounds non-integers to this many places; answers compare at this precision
SYSTEM_PROMPT = "Use the calculator on the numbers of the story, then reply with its result."
# solved problems the agent shows a real model before each question (question, calculator expression): one per
# operation, with names, items and phrases that no task uses
EXAMPLES: tuple[tuple[str, str], ...] = (
    ("Tom has 12 cars and gives away 4. How many cars does Tom have left?", "12 - 4"),
    ("Sue has 6 boxes of 8 eggs. How many eggs is that in all?", "6 * 8"),
    ("Max has 14 cards and gets 5 more. How many cards does Max have now?", "14 + 5"),
    ("Lea cuts 36 cakes into 4 trays. How many cakes are on each tray?", "36 / 4"),
)

# operation -> phrases that call for it; {a} and {b} are the story's two numbers, in the order used
PHRASES: dict[str, tuple[str, ...]] = {
    "+": ("{name} has {a} {item} and buys {b} more. How many {item} does {name} have now?",
          "{name} has {a} {item} and finds {b} more. How many {item} does {name} have now?",
          "{name} has {a} {item} and wins {b} more. How many {item} does {name} have now?"),
    "-": ("{name} has {a} {item} and loses {b}. How many {item} does {name} have left?",
          "{name} has {a} {item} and sells {b}. How many {item} does {name} have left?",
          "{name} has {a} {item} and gives away {b}. How many {item} does {name} have left?"),
    "*": ("{name} buys {a} packs of {b} {item}. How many {item} is that in all?",
          "{name} has {a} bags of {b} {item}. How many {item} is that in all?",
          "{name} stacks {a} rows of {b} {item}. How many {item} is that in all?"),
    "/": ("{name} shares {a} {item} among {b} friends. How many {item} does each friend get?",
          "{name} splits {a} {item} into {b} piles. How many {item} are in each pile?",
          "{name} divides {a} {item} into {b} boxes. How many {item} are in each box?"),
}
NAMES = ("Ann", "Ben", "Cara", "Dan", "Eve", "Finn")
ITEMS = ("apples", "pens", "cards", "shells", "stamps", "marbles")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:/\d+)?")


@dataclass(frozen=True)
class Task:
    task_id: str
    question: str
    result: str  # the true answer as Calc-X writes it: "10", "2/3", "0.5" or an option letter "C"
    split: str = "train"

    def to_json(self) -> dict:
        return asdict(self)


class CalculatorError(ValueError):
    """The expression is not arithmetic the calculator evaluates (a tool error the pipeline sees)."""


def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression of numbers, + - * / and parentheses, such as '7 + 3'."""
    # The docstring is the tool's description the model is sent. Arithmetic is exact
    # (fractions); a non-integer result is rounded to DECIMALS places.
    try:
        tree = ast.parse(expression.strip(), mode="eval")
        value = _evaluate(tree.body)
    except (SyntaxError, CalculatorError, ZeroDivisionError) as exc:
        reason = "division by zero" if isinstance(exc, ZeroDivisionError) else "use numbers and + - * / only"
        raise CalculatorError(f"cannot evaluate {expression!r}: {reason}") from None
    return format_number(value)


def _evaluate(node: ast.expr) -> Fraction:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return Fraction(node.value)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _evaluate(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    raise CalculatorError(type(node).__name__)


def format_number(value: Fraction) -> str:
    if value.denominator == 1:
        return str(value.numerator)
    return str(round(float(value), DECIMALS))


def parse_number(text: str) -> Fraction | None:
    """``"10"``, ``"-2.5"``, ``"2/3"`` or Calc-X's ``"2/3 = around 0.666667"`` as a number; None otherwise."""
    text = text.split(" = around ")[0].strip().replace(",", "")
    if not _NUMBER.fullmatch(text):
        return None
    try:
        return Fraction(text)
    except (ValueError, ZeroDivisionError):
        return None


def _option(text: str) -> str | None:
    letter = re.sub(r"[\s()]", "", text)
    return letter.upper() if len(letter) == 1 and letter.isalpha() else None


def reward(task: Task, final_answer: str) -> float:
    """1.0 when the last number (or, for an option task, the last option letter) of the answer is the true one."""
    gold_option = _option(task.result)
    if gold_option is not None:
        letters = re.findall(r"\b([A-Ea-e])\b", final_answer)
        return 1.0 if letters and letters[-1].upper() == gold_option else 0.0
    gold = parse_number(task.result)
    numbers = _NUMBER.findall(final_answer.replace(",", ""))
    if gold is None or not numbers:
        return 0.0
    answer = parse_number(numbers[-1])
    return 1.0 if answer is not None and math.isclose(answer, gold, rel_tol=0, abs_tol=10**-DECIMALS) else 0.0


def story_numbers(question: str) -> list[str]:
    """The numbers of a question, in order, as written."""
    return _NUMBER.findall(question)


def word_before_second_number(question: str) -> str | None:
    """The word just before the question's second number (``buys`` in *Ann has 7 pens and buys 3 more.*), if any."""
    words = question.split()
    numbers = [i for i, w in enumerate(words) if _NUMBER.fullmatch(w.strip(".,"))]
    return words[numbers[1] - 1] if len(numbers) >= 2 and numbers[1] > 0 else None


def number_pairs() -> list[tuple[int, int]]:
    """The (a, b) every operation draws from: ``a = b * q`` with ``b`` and ``q`` in 2..9.

    One pool for all four operations, so the numbers say nothing about the operation, only
    the phrase does; every quotient is exact, and there are eight of them (2..9), so an
    answer guessed without the calculator is rarely right (with quotients of 2-4 only, one
    seed learned to write a digit for every division and was right 13 times in 31).
    """
    return [(b * q, b) for b in range(2, 10) for q in range(2, 10)]


def local_tasks(seed: int = 0, n_train: int = 2000, n_held_out: int = 200, held_out_fraction: float = 0.2) -> tuple[list[Task], list[Task]]:
    """Seeded problems; a held-out problem's (operation, a, b) never occurs in training, under any phrase.

    Each operation holds out ``held_out_fraction`` of the number pairs (its own draw), so
    every operation is tested; problems pick the operation uniformly, then a pair of its
    split, a phrase, a name and an item.
    """
    rng = random.Random(seed)
    pairs: dict[str, dict[str, list[tuple[int, int]]]] = {}
    for op in PHRASES:
        shuffled = number_pairs()
        rng.shuffle(shuffled)
        cut = max(1, round(len(shuffled) * held_out_fraction))
        pairs[op] = {"test": shuffled[:cut], "train": shuffled[cut:]}

    def problems(split: str, n: int) -> list[Task]:
        out = []
        for i in range(n):
            op = rng.choice(tuple(PHRASES))
            a, b = rng.choice(pairs[op][split])
            question = rng.choice(PHRASES[op]).format(name=rng.choice(NAMES), a=a, b=b, item=rng.choice(ITEMS))
            out.append(Task(f"calc-{split}-{i}", question, calculator(f"{a} {op} {b}"), split))
        return out

    return problems("train", n_train), problems("test", n_held_out)


def load_calcx(path: Path, held_out_fraction: float = 0.2, seed: int = 0) -> tuple[list[Task], list[Task]]:
    """Tasks from a Calc-X JSON-lines file, split at random (seeded) into training and held-out ones.

    Reads ``id``, ``question`` and ``result`` of each line (``chain`` and the other fields
    are the data set's own worked solutions, not shown to the agent).
    """
    tasks: list[Task] = []
    for where, row in json_objects(path, "Calc-X", "id, question and result"):
        missing = [key for key in ("id", "question", "result") if not isinstance(row.get(key), str) or not row[key].strip()]
        if missing:
            raise DataFormatError(f"{where}: field(s) {', '.join(missing)} missing or not a non-empty string (Calc-X rows have id, question, chain, result)")
        if parse_number(row["result"]) is None and _option(row["result"]) is None:
            raise DataFormatError(f"{where}: result {row['result']!r} is neither a number (10, 2.5, 2/3) nor an option letter")
        tasks.append(Task(row["id"], row["question"], row["result"]))
    if len(tasks) < 2:
        raise DataFormatError(f"{path}: {len(tasks)} task(s); at least 2 are needed to keep some held out")
    order = list(range(len(tasks)))
    random.Random(seed).shuffle(order)
    n_held_out = max(1, int(len(tasks) * held_out_fraction))
    held_out = [Task(**{**tasks[i].to_json(), "split": "test"}) for i in order[:n_held_out]]
    train = [tasks[i] for i in order[n_held_out:]]
    return train, held_out


def user_message(task: Task) -> str:
    return task.question
