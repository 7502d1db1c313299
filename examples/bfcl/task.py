"""BFCL's questions, the tools an OpenAI-style agent sends for them, and the leaderboard's own verdict.

The Berkeley Function Calling Leaderboard (v4) ships on PyPI as ``bfcl-eval``: its data
(``bfcl_eval/data``: each question with its own function schemas, the accepted answers in
``possible_answer/``) and its checker (``bfcl_eval/eval_checker/ast_eval/ast_checker.py``).
This module reads the data as the leaderboard writes it and scores a call with that checker,
run unchanged (:mod:`examples.bfcl.checker` says how it is imported without the provider SDKs
the wheel declares).

A question is scored from the agent's tool calls, as the leaderboard scores a
function-calling ("FC") model: each call's name and JSON arguments become ``{name: args}``;
the checker decides whether they are one of the accepted answers.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict, dataclass, field, replace
from importlib.util import find_spec
from pathlib import Path
from typing import Any

BFCL_PIN = "bfcl-eval==2026.3.23"
INSTALL_HINT = f"pip install --no-deps {BFCL_PIN}  (its data and checker; --no-deps: the checker needs none of the provider SDKs it declares)"
TRAIN_CATEGORY = "simple_python"  # one function, one call: the category trained on
TRANSFER_CATEGORY = "multiple"  # several functions offered, one to choose: never trained on

# BFCL's type names -> JSON Schema's, as an OpenAI-compatible server takes them (the leaderboard's
# own FC handlers convert the same way: "dict" is an object, Python's float a number, a tuple an array)
JSON_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": "string"}


class BfclDataError(ValueError):
    """A questions file or the installed BFCL data cannot be read; the message names the file and line."""


@dataclass(frozen=True)
class Task:
    """One BFCL question: its conversation's first turn, the functions offered, the accepted answers."""

    task_id: str  # BFCL's id, e.g. "simple_python_12"
    split: str  # "train" or "test"
    category: str  # the file it came from ("simple_python", "multiple", or the user's file's stem)
    question: list[dict]  # the messages of the first turn, OpenAI's shape
    functions: list[dict]  # BFCL's schemas ("type": "dict", dotted names)
    ground_truth: list[dict] = field(default_factory=list)  # [{function_name: {arg: [accepted values]}}]

    def to_json(self) -> dict:
        return asdict(self)


def data_dir() -> Path:
    """The installed leaderboard's data folder; a clear error naming the install when it is missing."""
    spec = find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise BfclDataError(f"the BFCL data is not installed: {INSTALL_HINT}")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _json_lines(path: Path) -> list[dict]:
    rows = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise BfclDataError(f"{path}:{number}: not a JSON line ({exc.msg})") from None
            if not isinstance(row, dict):
                raise BfclDataError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
            rows.append(row)
    return rows


def _task(row: dict, answer: list | None, category: str, where: str) -> Task:
    missing = [key for key in ("id", "question", "function") if key not in row]
    if answer is None:  # a user's file carries the accepted answers on each line
        answer = row.get("ground_truth")
        if "ground_truth" not in row:
            missing.append("ground_truth")
    if missing:
        raise BfclDataError(f"{where}: missing {', '.join(missing)} (BFCL's format: id, question, function, ground_truth)")
    question, functions = row["question"], row["function"]
    if not (isinstance(question, list) and question and isinstance(question[0], list)):
        raise BfclDataError(f"{where}: question must be a list of turns, each a list of messages")
    if not (isinstance(functions, list) and functions and all(isinstance(f, dict) and "name" in f and "parameters" in f for f in functions)):
        raise BfclDataError(f"{where}: function must be a list of schemas, each with a name and parameters")
    if not isinstance(answer, list):
        raise BfclDataError(f"{where}: ground_truth must be a list of {{function_name: {{argument: [accepted values]}}}}")
    return Task(str(row["id"]), "train", category, question[0], functions, answer)


def load_category(category: str) -> list[Task]:
    """Every question of one of the leaderboard's single-turn categories, with its accepted answers."""
    folder = data_dir()
    questions = folder / f"BFCL_v4_{category}.json"
    if not questions.exists():
        known = sorted(p.name[len("BFCL_v4_"):-len(".json")] for p in folder.glob("BFCL_v4_*.json"))
        raise BfclDataError(f"no BFCL category {category!r} in {folder}: one of {', '.join(known)}")
    answers = {row["id"]: row["ground_truth"] for row in _json_lines(folder / "possible_answer" / questions.name)}
    return [_task(row, answers.get(row.get("id")), category, f"{questions}:{number}") for number, row in enumerate(_json_lines(questions), 1)]


def load_file(path: Path) -> list[Task]:
    """A user's own questions in BFCL's format, the accepted answers on each line (``ground_truth``)."""
    if not path.exists():
        raise BfclDataError(f"{path}: no such file (expected JSON lines: id, question, function, ground_truth)")
    return [_task(row, None, path.stem, f"{path}:{number}") for number, row in enumerate(_json_lines(path), 1)]


def function_names(task: Task) -> frozenset[str]:
    return frozenset(f["name"] for f in task.functions)


def split_by_function(tasks: list[Task], seed: int, held_out: int) -> tuple[list[Task], list[Task]]:
    """About ``held_out`` questions for testing, chosen so that none of their functions occurs in a training question.

    Functions are drawn in a seeded order and their questions go to the held-out side until it
    holds ``held_out``; a question sharing any function with that side goes with it. What is
    learned must then transfer to functions never trained on.
    """
    names = sorted({name for task in tasks for name in function_names(task)})
    random.Random(seed).shuffle(names)
    chosen: set[str] = set()
    test: list[Task] = []
    for name in names:
        if len(test) >= held_out:
            break
        chosen.add(name)
        test = [t for t in tasks if function_names(t) & chosen]
    train = [t for t in tasks if not function_names(t) & chosen]
    return [replace(t, split="train") for t in train], [replace(t, split="test") for t in test]


def tool_name(name: str) -> str:
    """A function's name as an OpenAI tool may spell it (``^[a-zA-Z0-9_-]{1,64}$``): dots become underscores,
    as the leaderboard's own FC handlers send them (its checker maps them back)."""
    return re.sub(r"\.", "_", name)


def _json_schema(schema: Any) -> Any:
    if isinstance(schema, dict):
        converted = {key: _json_schema(value) for key, value in schema.items()}
        if isinstance(schema.get("type"), str):
            converted["type"] = JSON_SCHEMA_TYPES.get(schema["type"], schema["type"])
        return converted
    if isinstance(schema, list):
        return [_json_schema(value) for value in schema]
    return schema


def openai_tools(task: Task) -> list[dict]:
    """The question's functions as the ``tools`` of a chat completion request."""
    return [
        {"type": "function", "function": {"name": tool_name(f["name"]), "description": f.get("description", ""),
                                          "parameters": _json_schema(f["parameters"])}}
        for f in task.functions
    ]


def decoded_calls(tool_calls: list[dict]) -> list[dict] | None:
    """The response's tool calls as the checker reads a model's output, ``[{name: {arg: value}}]``; None when
    there is none, or an argument string is not a JSON object (the call did not parse)."""
    decoded = []
    for call in tool_calls:
        function = call.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except json.JSONDecodeError:
            return None
        if not isinstance(arguments, dict):
            return None
        decoded.append({str(function.get("name", "")): arguments})
    return decoded or None


@dataclass(frozen=True)
class Verdict:
    """What a response got: calls that parse, the right function(s) named, and the leaderboard's verdict."""

    parsed: bool
    right_function: bool
    valid: bool  # the official checker's verdict: the reward
    error_type: str  # the checker's error type ("" when valid; "no_call" when nothing parsed)


def verdict(task: Task, tool_calls: list[dict]) -> Verdict:
    """Score ``tool_calls`` (OpenAI's shape, as the server parsed them) with the leaderboard's checker."""
    from examples.bfcl.checker import check

    calls = decoded_calls(tool_calls)
    if calls is None:
        return Verdict(False, False, False, "no_call")
    expected = {tool_name(name) for answer in task.ground_truth for name in answer}
    right = {name for call in calls for name in call} == expected
    result = check(task, calls)
    return Verdict(True, right, bool(result["valid"]), "" if result["valid"] else str(result.get("error_type", "")))


def argument_share(task: Task, tool_calls: list[dict]) -> float:
    """The share of the arguments that matter which BFCL's checker accepts, judged one at a time.

    The arguments that matter: those the accepted answer requires (no ``""`` among its values) and
    those the response gave. An optional argument left out is neither right nor wrong, so leaving
    everything out earns nothing (an earlier share counted omitted optional arguments as right, and
    the policy learned to call the function with no arguments); an argument the function does not
    have is wrong. For each: the accepted answer with that one argument as the response gave it (or
    left out) goes to the leaderboard's own checker; it passes iff the response got that argument
    right, so the share follows the checker's rules (types, string normalisation) with no second set
    of rules to drift from them. 0 unless the response is one call of the one expected function."""
    from examples.bfcl.checker import check

    calls = decoded_calls(tool_calls)
    if calls is None or len(calls) != 1 or len(task.ground_truth) != 1:
        return 0.0
    (name, given), = calls[0].items()
    (expected,) = reference_calls(task)
    if name != tool_name(expected["name"]):
        return 0.0
    (accepted,) = task.ground_truth[0].values()
    required = {a for a, values in accepted.items() if not (isinstance(values, list) and "" in values)}
    judged = sorted(required | set(given))
    right = 0
    for argument in judged:
        if argument not in accepted:
            continue
        trial = {k: v for k, v in expected["arguments"].items() if k != argument}
        if argument in given:
            trial[argument] = given[argument]
        right += bool(check(task, [{name: trial}])["valid"])
    return right / len(judged) if judged else float(check(task, [{name: given}])["valid"])


def _accepted(values: Any) -> Any:
    """The first accepted value of an argument (BFCL lists them; ``""`` marks it optional), nested
    dicts and lists of dicts resolved the same way; ``_OMIT`` when only omission is accepted."""
    chosen = next((v for v in values if v != ""), _OMIT) if isinstance(values, list) else values
    if isinstance(chosen, dict):
        return {key: value for key, value in ((k, _accepted(v)) for k, v in chosen.items()) if value is not _OMIT}
    if isinstance(chosen, list) and chosen and all(isinstance(item, dict) for item in chosen):
        return [_accepted([item]) for item in chosen]
    return chosen


_OMIT = object()


def reference_calls(task: Task) -> list[dict]:
    """One accepted answer, as calls ``[{"name": ..., "arguments": {...}}]``: the worked examples' calls."""
    calls = []
    for answer in task.ground_truth:
        for name, arguments in answer.items():
            calls.append({"name": name, "arguments": {k: v for k, v in ((k, _accepted(v)) for k, v in arguments.items()) if v is not _OMIT}})
    return calls
