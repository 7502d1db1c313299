"""The calculator agent: an ordinary AutoGen AgentChat program, unaware of training.

An ``AssistantAgent`` with one tool, ``calculator(expression)``. It reads a word problem,
calls the tool (first LLM call), and with ``reflect_on_tool_use=True`` a second LLM
call reads the tool's result and gives the final answer, as Agent Lightning's Calc-X
agent does. The only tracerl calls are :func:`tracerl.episode` around a task and
:func:`tracerl.emit_reward` once it is scored; capture is switched on by ``tracerl run``'s
environment variables.

Usage: ``python -m examples.calc.agent TASKS.jsonl`` with ``OPENAI_BASE_URL`` pointing at
the policy endpoint; each line is a task (see :class:`examples.calc.task.Task`) with the
``temperature`` and ``seed`` its LLM calls use.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from autogen_agentchat.agents import AssistantAgent
from autogen_core.models import ModelFamily, ModelInfo
from autogen_ext.models.openai import OpenAIChatCompletionClient

import tracerl
from examples.calc.task import SYSTEM_PROMPT, Task, calculator, reward, user_message
from tracerl.trainer.loop.recipe import AGENT_CONCURRENCY_ENV, POLICY_MODEL_NAME

AGENT_NAME = "calculator_agent"
MAX_TOKENS = 48  # a tool call of a two-number expression is about 30 tokens of the tiny model
MODEL_INFO = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False)


async def run_episode(task: Task, temperature: float, seed: int, model: str) -> float:
    client = OpenAIChatCompletionClient(
        model=model, base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ.get("OPENAI_API_KEY", "unused"),
        model_info=MODEL_INFO, temperature=temperature, seed=seed, max_tokens=MAX_TOKENS, max_retries=2,
    )
    agent = AssistantAgent(
        AGENT_NAME, model_client=client, tools=[calculator], system_message=SYSTEM_PROMPT, reflect_on_tool_use=True,
    )
    try:
        with tracerl.episode(task_id=task.task_id, split=task.split):
            result = await agent.run(task=user_message(task))
            final = result.messages[-1]
            value = reward(task, final.content if isinstance(final.content, str) else "")
            tracerl.emit_reward(value, name="correct")
            return value
    finally:
        await client.close()


async def run_all(lines: list[dict], model: str, concurrency: int) -> list[float]:
    gate = asyncio.Semaphore(concurrency)

    async def one(line: dict) -> float:
        line = dict(line)
        temperature, seed = line.pop("temperature"), line.pop("seed")
        async with gate:
            return await run_episode(Task(**line), temperature, seed, model)

    return await asyncio.gather(*(one(line) for line in lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", help="JSONL file, one task per line with its temperature and seed")
    parser.add_argument("--model", default=POLICY_MODEL_NAME)
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get(AGENT_CONCURRENCY_ENV, "16")))
    args = parser.parse_args(argv)
    with open(args.tasks, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    rewards = asyncio.run(run_all(lines, args.model, args.concurrency))
    print(json.dumps({"episodes": len(rewards), "mean_reward": sum(rewards) / max(len(rewards), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
