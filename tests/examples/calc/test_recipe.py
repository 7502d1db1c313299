"""The calculator recipe teaches the format only: the operator of every warm-start call is drawn at
random, whatever the phrase, and what each round replays stops before the operator."""

from __future__ import annotations

import json
import re
from collections import Counter

from examples.calc import task as calc
from examples.calc.recipe import calls_begun, tasks, warm_start
from tracerl.trainer.serving import tool_parser


# the word before the second number decides the operation ("buys" -> +, "among" -> /)
OPERATION_OF_WORD = {phrase.split("{b}")[0].split()[-1]: op for op, phrases in calc.PHRASES.items() for phrase in phrases}


def user_question(messages: list[dict]) -> str:
    return next(m["content"] for m in messages if m["role"] == "user")


def test_warm_start_calls_the_calculator_on_the_storys_numbers_with_a_random_operator_on_training_problems_only():
    train, held_out = tasks(0, None)
    held_out_questions = {t["question"] for t in held_out}
    operators: dict[str, Counter] = {}
    for example in warm_start(train, seed=0, n=800)[0].examples:
        question = user_question(example.messages)
        assert question not in held_out_questions
        word = calc.word_before_second_number(question)
        assert example.target.startswith(word + "<tool_call>")
        parsed = tool_parser.parse(example.target)
        [call] = parsed.tool_calls
        assert parsed.content == word and call["function"]["name"] == "calculator"
        a, op, b = re.fullmatch(r"(\d+) ([-+*/]) (\d+)", json.loads(call["function"]["arguments"])["expression"]).groups()
        assert [a, b] == calc.story_numbers(question)
        operators.setdefault(OPERATION_OF_WORD[word], Counter())[op] += 1
    # whatever the operation the phrase asks for, each of the four operators is written
    assert all(set(counts) == set(calc.PHRASES) and min(counts.values()) > 0.1 * sum(counts.values()) for counts in operators.values())


def test_each_round_replays_the_start_of_a_call_up_to_its_first_number_never_the_operator():
    train, _ = tasks(0, None)
    for example in calls_begun(train, seed=0):
        question = user_question(example.messages)
        assert not example.ends_turn
        assert example.target.endswith(f'"expression": "{calc.story_numbers(question)[0]}')
        assert not re.search(r"[-+*/]", example.target.split('"expression": "')[1])
