"""The calculator agent's task: the phrase decides the operation, the calculator refuses what is not arithmetic,
only the true result earns the reward, and Calc-X files are read as the data set writes them."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

from examples.calc import task as calc
from examples.data_files import DataFormatError

DATA = Path(__file__).parent / "data"


def operation_of(question: str) -> str:
    """The operation whose phrase the question was written from (exactly one matches)."""
    (op,) = [op for op, phrases in calc.PHRASES.items() for phrase in phrases if re.fullmatch(_pattern(phrase), question)]
    return op


def _pattern(phrase: str) -> str:
    return re.escape(phrase).replace(r"\{name\}", r"\w+").replace(r"\{item\}", r"\w+").replace(r"\{a\}", r"\d+").replace(r"\{b\}", r"\d+")


def test_the_phrase_decides_the_operation_and_the_numbers_come_from_the_text():
    train, held_out = calc.local_tasks(seed=0)
    for t in train + held_out:
        a, b = calc.story_numbers(t.question)
        assert calc.calculator(f"{a} {operation_of(t.question)} {b}") == t.result
    assert {operation_of(t.question) for t in held_out} == set(calc.PHRASES)  # every operation is tested


def test_held_out_problems_never_share_operation_and_numbers_with_training():
    train, held_out = calc.local_tasks(seed=3)
    assert len(train) == 2000 and len(held_out) == 200
    key = lambda t: (operation_of(t.question), *calc.story_numbers(t.question))
    assert not {key(t) for t in train} & {key(t) for t in held_out}
    assert calc.local_tasks(seed=3) == (train, held_out)  # seeded


def test_the_numbers_say_nothing_about_the_operation_and_quotients_are_hard_to_guess():
    train, held_out = calc.local_tasks(seed=0)
    pairs: dict[str, set] = {op: set() for op in calc.PHRASES}
    for t in train + held_out:
        pairs[operation_of(t.question)].add(tuple(int(n) for n in calc.story_numbers(t.question)))
    pool = set(calc.number_pairs())
    assert all(seen <= pool and len(seen) > 0.9 * len(pool) for seen in pairs.values())  # one pool for every operation
    quotients = Counter(t.result for t in train + held_out if operation_of(t.question) == "/")
    assert set(quotients) == {str(q) for q in range(2, 10)} and max(quotients.values()) < 0.2 * sum(quotients.values())


def test_the_calculator_evaluates_arithmetic_exactly_and_refuses_anything_else():
    assert calc.calculator("7 + 3") == "10"
    assert calc.calculator(" (12 - 2) / 4 ") == "2.5"
    assert calc.calculator("2 / 3") == "0.6667"
    assert calc.calculator("-3 * 4") == "-12"
    for bad, reason in [("7 apples", "use numbers"), ("2 ** 8", "use numbers"), ("__import__('os')", "use numbers"), ("1 / 0", "division by zero"), ("", "use numbers")]:
        with pytest.raises(calc.CalculatorError, match=reason):
            calc.calculator(bad)


def test_only_the_true_result_is_rewarded():
    task = calc.Task("t", "Ann has 7 pens and buys 3 more.", "10")
    assert calc.reward(task, "10") == 1.0 and calc.reward(task, " The answer is 10.") == 1.0
    assert calc.reward(task, "10.0") == 1.0 and calc.reward(task, "4") == 0.0 and calc.reward(task, "ten") == 0.0
    assert calc.reward(task, "7 + 3 = 11") == 0.0  # the last number is the answer
    fraction = calc.Task("t", "q", "2/3")
    assert calc.reward(fraction, "0.6667") == 1.0 and calc.reward(fraction, "2/3") == 1.0 and calc.reward(fraction, "0.67") == 0.0
    option = calc.Task("t", "q", "B")
    assert calc.reward(option, "B") == 1.0 and calc.reward(option, "(b)") == 1.0 and calc.reward(option, "C") == 0.0


def test_calcx_lines_become_tasks_split_into_train_and_held_out():
    train, held_out = calc.load_calcx(DATA / "calcx_sample.jsonl", seed=0)
    assert len(train) == 4 and len(held_out) == 1
    assert {t.split for t in train} == {"train"} and held_out[0].split == "test"
    by_id = {t.task_id: t for t in train + held_out}
    assert by_id["ape210k__00384263"].result == "2/3" and by_id["aqua_rat__r54xvzEL3O9nU60t"].result == "B"
    assert by_id["gsm8k__aBcDeFgHiJ"].question == "Tom buys 3 packs of 12 pens. How many pens does he have?"


@pytest.mark.parametrize(
    "line, message",
    [
        ("{not json", "line 2: not JSON"),
        ('["a list"]', "line 2: a list, expected a JSON object"),
        ('{"id": "x", "question": "q"}', "line 2: field\\(s\\) result missing"),
        ('{"id": "x", "question": "", "result": "1"}', "line 2: field\\(s\\) question missing"),
        ('{"id": "x", "question": "q", "result": "seven"}', "line 2: result 'seven' is neither a number"),
    ],
)
def test_a_bad_calcx_line_is_named_with_its_file_and_line(tmp_path, line, message):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "ok", "question": "q", "result": "1"}\n' + line + "\n")
    with pytest.raises(DataFormatError, match=f"bad.jsonl, {message}"):
        calc.load_calcx(path)


def test_the_word_before_the_second_number_is_found_in_every_story():
    """The warm start restates it; which operation it asks for is left to reinforcement learning."""
    assert calc.word_before_second_number("Ann has 7 pens and buys 3 more.") == "buys"
    assert calc.word_before_second_number("Ben buys 7 packs of 3 pens.") == "of"
    assert calc.word_before_second_number("How many degrees of 75° can form a right angle?") is None
    train, held_out = calc.local_tasks(seed=0)
    words = {operation_of(t.question): set() for t in train}
    for t in train + held_out:
        words[operation_of(t.question)].add(calc.word_before_second_number(t.question))
    assert all(words[a].isdisjoint(words[b]) for a in words for b in words if a != b)  # the word decides the operation
