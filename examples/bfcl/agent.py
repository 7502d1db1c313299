"""The function-calling agent: the plain OpenAI client with ``tools=``, one BFCL question an episode.

It sends the question with its functions as tools, reads the tool calls the server parsed
out of the answer, and scores them with the Berkeley Function Calling Leaderboard's own
checker (:func:`examples.bfcl.task.verdict`): the reward is 1 when the leaderboard would
count the answer right, else 0. Before the question it shows a few solved questions (other
functions, never the question's own) as earlier turns, what a user of a small model does
first (``--examples 0``: none), their functions listed after the question's (:func:`offered_tools`). The only tracerl calls are :func:`tracerl.episode`
around a question and :func:`tracerl.emit_reward`; capture is switched on by ``tracerl run``'s
environment variables. The verdict's parts (did the calls parse, did they name the right
function, the checker's error type) go on a span of their own, ``bfcl.verdict``, which
``benchmarks/bfcl_held_out.py`` reads back from the traces.

Usage: ``python -m examples.bfcl.agent TASKS.jsonl`` with ``OPENAI_BASE_URL`` pointing at the
policy endpoint; each line is a task (:class:`examples.bfcl.task.Task`, plus ``examples``) with
the ``temperature`` and ``seed`` its call uses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from dataclasses import replace

from openai import AsyncOpenAI
from opentelemetry import trace

import tracerl
from examples.bfcl.task import Task, Verdict, argument_share, function_names, openai_tools, tool_name, verdict
from tracerl.instrumentation.agent_env import POLICY_MODEL_NAME
from tracerl.schemas import environment as E

# a call of a few arguments is 30-80 tokens; a model that repeats a name until the limit is cut off here
MAX_TOKENS = int(os.environ.get(E.AGENT_MAX_TOKENS_ENV, "128"))
VERDICT_SPAN = "bfcl.verdict"


def worked_turns(examples: list[dict], n: int) -> list[dict]:
    """``n`` solved questions as earlier turns: the question, then the assistant's call of its function.

    No tool results follow the calls: BFCL scores the call, and a made-up result teaches a small
    model to write one (SmolLM2 shown ``<tool_response>`` turns answered with ``<tool_response>``
    blocks, never a call: 0 of 100 held-out questions).
    """
    messages: list[dict] = []
    for i, example in enumerate(examples[:n]):
        calls = [{"id": f"example_{i}_{j}", "type": "function",
                  "function": {"name": tool_name(call["name"]), "arguments": json.dumps(call["arguments"])}}
                 for j, call in enumerate(example["calls"])]
        messages += [*example["question"], {"role": "assistant", "content": None, "tool_calls": calls}]
    return messages


def offered_tools(task: Task, examples: list[dict]) -> list[dict]:
    """The question's functions, then those of the worked examples shown before it: the conversation's tool set.

    The examples' calls then name functions the model can see listed, which is what they
    demonstrate; with only the question's own functions listed, SmolLM2 made up a name for
    the call in most answers (seed 0: 3 of 40 held-out answers named the function, 6 of 40 with
    the examples' functions listed; at temperature 0.6, 5 then 12 of 96 training samples).
    The examples' functions are never the answer, so they are distractors for the checker.
    """
    seen = function_names(task)
    extra = [f for example in examples for f in example["functions"] if f["name"] not in seen]
    return openai_tools(replace(task, functions=[*task.functions, *extra]))


def reward(got: Verdict, partial_credit: bool, argument_share: float | None = None) -> float:
    """1 when BFCL's checker passes the calls. For calls that name the right function(s) but fail the
    check: with ``partial_credit``, 0.5; with ``argument_share`` (``--argument-credit``), 0.2 plus 0.7 x
    the share of the arguments that matter the checker accepts, so that naming the function (what the
    small model must learn first) is paid a little and each right argument most of what the pass needs
    (0.5 for the function alone was climbed without the passes following). The held-out measure is the
    verdict alone (the ``bfcl.verdict`` span)."""
    if got.valid:
        return 1.0
    if not got.right_function:
        return 0.0
    if argument_share is not None:
        return 0.2 + 0.7 * argument_share
    return 0.5 if partial_credit else 0.0


async def run_episode(
    client: AsyncOpenAI, task: Task, examples: list[dict], temperature: float, seed: int, model: str, shown: int, partial_credit: bool,
    argument_credit: bool = False,
) -> float:
    with tracerl.episode(task_id=task.task_id, split=task.split):
        response = await client.chat.completions.create(
            model=model, messages=[*worked_turns(examples, shown), *task.question], tools=offered_tools(task, examples[:shown]),
            temperature=temperature, seed=seed, max_tokens=MAX_TOKENS,
        )
        message = response.choices[0].message
        calls = [call.model_dump() for call in message.tool_calls or []]
        got = verdict(task, calls)
        attributes = {"bfcl.category": task.category, "bfcl.parsed": got.parsed, "bfcl.right_function": got.right_function,
                      "bfcl.valid": got.valid, "bfcl.error_type": got.error_type}
        trace.get_tracer("examples.bfcl").start_span(VERDICT_SPAN, attributes=attributes).end()
        value = reward(got, partial_credit, argument_share(task, calls) if argument_credit else None)
        tracerl.emit_reward(value, name="bfcl")
        return value


async def run_all(lines: list[dict], model: str, concurrency: int, shown: int, partial_credit: bool = False,
                  argument_credit: bool = False) -> list[float]:
    gate = asyncio.Semaphore(concurrency)
    client = AsyncOpenAI(base_url=os.environ[E.OPENAI_BASE_URL_ENV], api_key=os.environ.get(E.OPENAI_API_KEY_ENV, "unused"), max_retries=2)

    async def one(line: dict) -> float:
        line = dict(line)
        temperature, seed, examples = line.pop("temperature"), line.pop("seed"), line.pop("examples", [])
        async with gate:
            return await run_episode(client, Task(**line), examples, temperature, seed, model, shown, partial_credit, argument_credit)

    try:
        return await asyncio.gather(*(one(line) for line in lines))
    finally:
        await client.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", help="JSONL file, one task per line with its temperature and seed")
    parser.add_argument("--model", default=POLICY_MODEL_NAME)
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get(E.AGENT_CONCURRENCY_ENV, "16")))
    parser.add_argument("--examples", type=int, default=2, help="solved questions shown before each question (0: none)")
    parser.add_argument("--partial-credit", action="store_true",
                        help="0.5 for calls that name the right function but fail the check (a signal while passes are rare)")
    parser.add_argument("--argument-credit", action="store_true",
                        help="instead: 0.2 for the right function plus 0.7 x the share of its arguments BFCL's checker accepts")
    args = parser.parse_args(argv)
    if args.partial_credit and args.argument_credit:
        parser.error("--partial-credit and --argument-credit are two rewards for a failed check: give one")
    with open(args.tasks, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    rewards = asyncio.run(run_all(lines, args.model, args.concurrency, args.examples, args.partial_credit, args.argument_credit))
    print(json.dumps({"episodes": len(rewards), "mean_reward": sum(rewards) / max(len(rewards), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
