"""BFCL's data as the leaderboard ships it, the tools an OpenAI agent sends for it, and the leaderboard's
own checker scoring what comes back: every accepted answer passes, and each way of getting it wrong fails
with the checker's own error type."""

from __future__ import annotations

import copy
import json

import pytest

from tracerl_testing.installed import require_module
from examples.bfcl import task as bfcl

require_module("bfcl_eval", bfcl.INSTALL_HINT)

SIMPLE = bfcl.load_category(bfcl.TRAIN_CATEGORY)
MULTIPLE = bfcl.load_category(bfcl.TRANSFER_CATEGORY)


def openai_calls(calls: list[dict]) -> list[dict]:
    """Calls as the OpenAI client hands them to the agent (the server's parse of the model's text)."""
    return [{"id": f"call_{i}", "type": "function", "function": {"name": bfcl.tool_name(c["name"]), "arguments": json.dumps(c["arguments"])}}
            for i, c in enumerate(calls)]


def test_the_leaderboards_categories_load_whole_with_their_answers():
    assert len(SIMPLE) == 400 and len(MULTIPLE) == 200
    assert all(t.ground_truth and t.question[0]["role"] == "user" for t in SIMPLE + MULTIPLE)
    assert all(len(t.functions) == 1 for t in SIMPLE) and all(len(t.functions) > 1 for t in MULTIPLE)


@pytest.mark.parametrize("tasks", [SIMPLE, MULTIPLE], ids=["simple_python", "multiple"])
def test_every_accepted_answer_passes_the_official_checker(tasks):
    verdicts = [bfcl.verdict(t, openai_calls(bfcl.reference_calls(t))) for t in tasks]
    assert all(v.parsed and v.right_function and v.valid and v.error_type == "" for v in verdicts)


def wrong_answers(task: bfcl.Task) -> dict[str, list[dict]]:
    """The accepted call spoiled one way at a time, each named by the checker's error type it should earn."""
    (call,) = bfcl.reference_calls(task)
    params = task.functions[0]["parameters"]
    spoiled = {"simple_function_checker:wrong_func_name": [{**call, "name": call["name"] + "_v2"}],
               "simple_function_checker:unexpected_param": [{**call, "arguments": {**call["arguments"], "not_a_parameter": 1}}]}
    required = [p for p in params.get("required", []) if p in call["arguments"]]
    if required:
        args = dict(call["arguments"])
        del args[required[0]]
        spoiled["simple_function_checker:missing_required"] = [{**call, "arguments": args}]
    numeric = [p for p, v in call["arguments"].items() if params["properties"][p]["type"] == "integer" and isinstance(v, int)]
    if numeric:
        spoiled["type_error:simple"] = [{**call, "arguments": {**call["arguments"], numeric[0]: "a string"}}]
    return spoiled


def test_each_way_of_getting_a_call_wrong_fails_with_the_checkers_error_type():
    checked = 0
    for task in SIMPLE:
        for error_type, calls in wrong_answers(task).items():
            got = bfcl.verdict(task, openai_calls(calls))
            assert got.parsed and not got.valid and got.error_type == error_type, (task.task_id, calls, got)
            assert got.right_function == (error_type != "simple_function_checker:wrong_func_name")
            checked += 1
    assert checked > 1000  # several hundred questions, each spoiled two to four ways


def test_argument_credit_is_the_share_of_the_arguments_that_matter_the_checker_accepts():
    """--argument-credit's measure over the arguments the answer requires plus those the response gave:
    1 for an accepted answer; one argument spoiled takes its share away; an argument the function lacks
    counts against; leaving out optional arguments earns nothing (a call with no arguments scores 0 when
    any are required); the wrong function earns 0."""
    checked = 0
    for task in SIMPLE[:120]:
        (call,) = bfcl.reference_calls(task)
        accepted = next(iter(task.ground_truth[0].values()))
        required = [a for a, values in accepted.items() if "" not in values]
        judged = len(set(required) | set(call["arguments"]))
        assert bfcl.argument_share(task, openai_calls([call])) == 1.0
        numeric = [p for p, v in call["arguments"].items()
                   if task.functions[0]["parameters"]["properties"][p]["type"] == "integer" and isinstance(v, int)]
        if numeric:
            spoiled = {**call, "arguments": {**call["arguments"], numeric[0]: "a string"}}
            assert bfcl.argument_share(task, openai_calls([spoiled])) == (judged - 1) / judged
            checked += 1
        extra = {**call, "arguments": {**call["arguments"], "not_a_parameter": 1}}
        assert bfcl.argument_share(task, openai_calls([extra])) == judged / (judged + 1)
        if required:
            assert bfcl.argument_share(task, openai_calls([{**call, "arguments": {}}])) == 0.0
        assert bfcl.argument_share(task, openai_calls([{**call, "name": call["name"] + "_v2"}])) == 0.0
        wrong = {**call, "arguments": {p: "a string" if isinstance(v, int) else 123456 for p, v in call["arguments"].items()}}
        assert bfcl.argument_share(task, openai_calls([wrong])) < 1.0
    assert checked > 20


def test_a_response_without_calls_or_with_arguments_that_are_not_json_does_not_parse():
    task = SIMPLE[0]
    assert bfcl.verdict(task, []) == bfcl.Verdict(False, False, False, "no_call")
    garbled = [{"id": "c", "type": "function", "function": {"name": "calculate_triangle_area", "arguments": '{"base": 10,'}}]
    assert bfcl.verdict(task, garbled) == bfcl.Verdict(False, False, False, "no_call")
    a_list = [{"id": "c", "type": "function", "function": {"name": "calculate_triangle_area", "arguments": "[10, 5]"}}]
    assert not bfcl.verdict(task, a_list).parsed


def test_choosing_the_wrong_function_among_several_fails_and_calling_two_is_the_wrong_count():
    task = next(t for t in MULTIPLE if len({f["name"] for f in t.functions}) > 1)
    (call,) = bfcl.reference_calls(task)
    other = next(f["name"] for f in task.functions if f["name"] != call["name"])
    assert not bfcl.verdict(task, openai_calls([{**call, "name": other}])).valid
    twice = bfcl.verdict(task, openai_calls([call, call]))
    assert twice.error_type == "multiple_function_checker:wrong_count" and not twice.valid


def test_tools_are_json_schema_with_dots_replaced_and_the_checker_maps_them_back():
    dotted = next(t for t in SIMPLE if "." in t.functions[0]["name"])
    (tool,) = bfcl.openai_tools(dotted)
    assert "." not in tool["function"]["name"] and tool["function"]["parameters"]["type"] == "object"
    floats = next(t for t in SIMPLE if any(p["type"] == "float" for p in t.functions[0]["parameters"]["properties"].values()))
    assert "float" not in json.dumps(bfcl.openai_tools(floats)) and '"number"' in json.dumps(bfcl.openai_tools(floats))
    assert bfcl.verdict(dotted, openai_calls(bfcl.reference_calls(dotted))).valid


def test_held_out_questions_offer_no_function_a_training_question_offers():
    train, test = bfcl.split_by_function(SIMPLE, seed=0, held_out=40)
    assert 40 <= len(test) <= 45 and len(train) + len(test) == len(SIMPLE)
    assert not {n for t in train for n in bfcl.function_names(t)} & {n for t in test for n in bfcl.function_names(t)}
    assert {t.split for t in train} == {"train"} and {t.split for t in test} == {"test"}
    assert bfcl.split_by_function(SIMPLE, seed=0, held_out=40) == (train, test)  # the seed decides
    assert bfcl.split_by_function(SIMPLE, seed=1, held_out=40)[1] != test


def test_a_users_own_file_in_bfcls_format_loads_and_bad_lines_are_named(tmp_path):
    mine = tmp_path / "mine.jsonl"
    row = {"id": "mine_0", "question": [[{"role": "user", "content": "Weather in Oslo?"}]],
           "function": [{"name": "weather.get", "description": "d", "parameters": {"type": "dict", "properties": {"city": {"type": "string"}}, "required": ["city"]}}],
           "ground_truth": [{"weather.get": {"city": ["Oslo"]}}]}
    mine.write_text(json.dumps(row) + "\n")
    (task,) = bfcl.load_file(mine)
    assert task.category == "mine" and bfcl.verdict(task, openai_calls([{"name": "weather.get", "arguments": {"city": "oslo"}}])).valid
    bad = copy.deepcopy(row)
    del bad["ground_truth"]
    mine.write_text(json.dumps(row) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(bfcl.BfclDataError, match=r"mine.jsonl:2: missing ground_truth"):
        bfcl.load_file(mine)
    mine.write_text(json.dumps(row) + "\nnot json\n")
    with pytest.raises(bfcl.BfclDataError, match=r"mine.jsonl:2: not a JSON line"):
        bfcl.load_file(mine)
    with pytest.raises(bfcl.BfclDataError, match="no such file"):
        bfcl.load_file(tmp_path / "absent.jsonl")
    with pytest.raises(bfcl.BfclDataError, match="no BFCL category 'simple_cobol'"):
        bfcl.load_category("simple_cobol")


def test_the_rewards_for_a_failed_check_pay_what_each_says():
    from examples.bfcl.agent import reward

    passed, right_function, wrong = bfcl.Verdict(True, True, True, ""), bfcl.Verdict(True, True, False, "x"), bfcl.Verdict(True, False, False, "y")
    assert [reward(v, False) for v in (passed, right_function, wrong)] == [1.0, 0.0, 0.0]
    assert [reward(v, True) for v in (passed, right_function, wrong)] == [1.0, 0.5, 0.0]
    assert [reward(v, False, 0.5) for v in (passed, right_function, wrong)] == [1.0, 0.55, 0.0]
    assert reward(right_function, False, 0.0) == 0.2  # the right function with every argument wrong: the function's share only
    assert reward(right_function, False, 0.99) < 1.0  # no failed check earns what a pass earns
