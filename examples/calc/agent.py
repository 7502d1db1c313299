"""The calculator agent: an ordinary AutoGen AgentChat program, unaware of training.

An ``AssistantAgent`` with one tool, ``calculator(expression)``: it reads a word problem
and calls the tool, and the tool's result is its answer (AutoGen's tool-call summary,
``reflect_on_tool_use=False``). The paper's agent reflects in a second LLM call that
restates the result (``--reflect-on-tool-use``); the README says why the tiny model does not.
The only tracerl calls are
:func:`tracerl.episode` around a task and :func:`tracerl.emit_reward` once it is scored;
capture is switched on by ``tracerl run``'s environment variables.

Usage: ``python -m examples.calc.agent TASKS.jsonl`` with ``OPENAI_BASE_URL`` pointing at
the policy endpoint; each line is a task (see :class:`examples.calc.task.Task`) with the
``temperature`` and ``seed`` its LLM call uses.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.messages import BaseChatMessage, ToolCallSummaryMessage
from autogen_core import FunctionCall
from autogen_core.model_context import UnboundedChatCompletionContext
from autogen_core.models import (
    AssistantMessage, FunctionExecutionResult, FunctionExecutionResultMessage, LLMMessage, ModelFamily, ModelInfo, UserMessage,
)
from autogen_ext.models.openai import OpenAIChatCompletionClient

import tracerl
from examples.calc.task import EXAMPLES, SYSTEM_PROMPT, Task, calculator, reward, user_message
from tracerl.instrumentation.agent_env import POLICY_MODEL_NAME
from tracerl.schemas import environment as E

AGENT_NAME = "calculator_agent"
# a tool call of a two-number expression is 25 tokens of the tiny model; a real model is given more by the loop's --max-tokens
MAX_TOKENS = int(os.environ.get(E.AGENT_MAX_TOKENS_ENV, "64"))
MODEL_INFO = ModelInfo(vision=False, function_calling=True, json_output=False, family=ModelFamily.UNKNOWN, structured_output=False)


def worked_examples(n: int) -> list[LLMMessage]:
    """``n`` solved problems as earlier turns of the conversation: question, calculator call, result.

    What a user of a small model does first: SmolLM2-135M-Instruct, told about the tool in
    its system turn, called it in 1 of 48 samples; with four solved problems before the
    question it called it in 35 of 48 (examples/calc/README.md). AutoGen keeps them in the
    agent's model context, ahead of the task.
    """
    messages: list[LLMMessage] = []
    for i, (question, expression) in enumerate(EXAMPLES[:n]):
        call_id = f"example_{i}"
        messages += [
            UserMessage(content=question, source="user"),
            AssistantMessage(content=[FunctionCall(id=call_id, name="calculator", arguments=json.dumps({"expression": expression}))], source=AGENT_NAME),
            FunctionExecutionResultMessage(content=[FunctionExecutionResult(content=calculator(expression), name="calculator", call_id=call_id, is_error=False)]),
        ]
    return messages


def final_answer(message: BaseChatMessage) -> str:
    """The agent's answer: the tool's result, or its text when it called no tool; a refused
    expression is no answer (its error message may quote numbers)."""
    if isinstance(message, ToolCallSummaryMessage) and any(r.is_error for r in message.results):
        return ""
    return message.content if isinstance(message.content, str) else ""


async def run_episode(task: Task, temperature: float, seed: int, model: str, reflect: bool = False, examples: int = 0) -> float:
    client = OpenAIChatCompletionClient(
        model=model, base_url=os.environ[E.OPENAI_BASE_URL_ENV], api_key=os.environ.get(E.OPENAI_API_KEY_ENV, "unused"),
        model_info=MODEL_INFO, temperature=temperature, seed=seed, max_tokens=MAX_TOKENS, max_retries=2,
    )
    try:
        with tracerl.episode(task_id=task.task_id, split=task.split):
            # made inside the episode, so AutoGen's create_agent span belongs to it too
            agent = AssistantAgent(
                AGENT_NAME, model_client=client, tools=[calculator], system_message=SYSTEM_PROMPT, reflect_on_tool_use=reflect,
                model_context=UnboundedChatCompletionContext(initial_messages=worked_examples(examples)),
            )
            result = await agent.run(task=user_message(task))
            value = reward(task, final_answer(result.messages[-1]))
            tracerl.emit_reward(value, name="correct")
            return value
    finally:
        await client.close()


async def run_all(lines: list[dict], model: str, concurrency: int, reflect: bool = False, examples: int = 0) -> list[float]:
    gate = asyncio.Semaphore(concurrency)

    async def one(line: dict) -> float:
        line = dict(line)
        temperature, seed = line.pop("temperature"), line.pop("seed")
        async with gate:
            return await run_episode(Task(**line), temperature, seed, model, reflect, examples)

    return await asyncio.gather(*(one(line) for line in lines))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", help="JSONL file, one task per line with its temperature and seed")
    parser.add_argument("--model", default=POLICY_MODEL_NAME)
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get(E.AGENT_CONCURRENCY_ENV, "16")))
    parser.add_argument("--reflect-on-tool-use", action="store_true",
                        help="a second LLM call reads the tool's result and writes the answer (the paper's agent; for a real model)")
    parser.add_argument("--examples", type=int, default=len(EXAMPLES), choices=range(len(EXAMPLES) + 1),
                        help="solved problems shown before each question (0: none, as the recipe's tiny model is run)")
    args = parser.parse_args(argv)
    with open(args.tasks, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    rewards = asyncio.run(run_all(lines, args.model, args.concurrency, args.reflect_on_tool_use, args.examples))
    print(json.dumps({"episodes": len(rewards), "mean_reward": sum(rewards) / max(len(rewards), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
