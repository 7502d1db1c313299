"""The retrieval-QA agent: an ordinary OpenAI Agents SDK program, unaware of training.

One ``Agent`` with one function tool, ``search``, over the task's corpus (a BM25 index in
DuckDB, :mod:`examples.rag.bm25`): it searches, searches again with what the first result
named, and answers in ``<answer>`` tags. The only tracerl calls are the two any agent adds
to be trained: :func:`tracerl.episode` around a task and :func:`tracerl.emit_reward` where
it is scored.

Usage: ``python -m examples.rag.agent TASKS.jsonl`` with ``OPENAI_BASE_URL`` pointing at the
policy endpoint; each task line carries its ``temperature`` and ``seed``. The training loop
runs it under ``tracerl run``, which captures its calls.

``set_tracing_disabled(True)`` is what the SDK's own examples for other model providers do:
run alone, the agent sends no trace to OpenAI. Under ``tracerl run`` that upload is already
replaced by tracerl's trace processor, so tracerl keeps the SDK's tracing on for itself (agent
names, tool spans; it says so at exit) and nothing leaves the machine either way.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys

import duckdb
from agents import Agent, FunctionTool, MaxTurnsExceeded, ModelBehaviorError, ModelSettings, Runner, function_tool, set_tracing_disabled
from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel
from openai import AsyncOpenAI

import tracerl
from examples.rag import task as rag
from tracerl.instrumentation.agent_env import POLICY_MODEL_NAME
from tracerl.schemas import environment as E

AGENT_NAME = "rag"
MAX_TURNS = 4  # LLM calls in one episode: two searches and the answer, and one to spare
MAX_TOKENS = int(os.environ.get(E.AGENT_MAX_TOKENS_ENV, "256"))  # per call: a tool call or a short answer (a larger model may reason first)

set_tracing_disabled(True)


def search_tool(corpus: duckdb.DuckDBPyConnection) -> FunctionTool:
    @function_tool(name_override=rag.TOOL_NAME)
    def search(query: str) -> str:
        """Search the corpus: the best paragraphs for the query, one per line as "title: text"."""
        return rag.search_output(corpus, query)

    return search


def make_agent(client: AsyncOpenAI, model: str, corpus: duckdb.DuckDBPyConnection, temperature: float, seed: int) -> Agent:
    return Agent(
        name=AGENT_NAME,
        instructions=rag.INSTRUCTIONS,
        tools=[search_tool(corpus)],
        model=OpenAIChatCompletionsModel(model=model, openai_client=client),
        model_settings=ModelSettings(temperature=temperature, max_tokens=MAX_TOKENS, extra_args={"seed": seed}),
    )


async def run_episode(agent: Agent, task: dict) -> float:
    with tracerl.episode(task_id=task["task_id"], split=task["split"]):
        try:
            result = await Runner.run(agent, task["question"], max_turns=MAX_TURNS)
            reply = str(result.final_output or "")
        except (MaxTurnsExceeded, ModelBehaviorError):  # no answer within MAX_TURNS, a call to a tool that does not exist
            reply = ""  # nothing to score; anything else (the endpoint failing, a bug) stops the program
        value = rag.reward(reply, task["answers"])
        tracerl.emit_reward(value, name="f1_format")
        return value


async def run_all(lines: list[dict], model: str, concurrency: int) -> list[float]:
    client = AsyncOpenAI(max_retries=2)  # OPENAI_BASE_URL / OPENAI_API_KEY from the environment
    corpora = {path: rag.open_corpus(path) for path in {line["corpus"] for line in lines}}
    limit = asyncio.Semaphore(concurrency)

    async def one(line: dict) -> float:
        agent = make_agent(client, model, corpora[line["corpus"]], line["temperature"], line["seed"])
        async with limit:
            return await run_episode(agent, line)

    try:
        return await asyncio.gather(*(one(line) for line in lines))
    finally:
        for con in corpora.values():
            con.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", help="JSONL file, one task per line (task_id, split, question, answers, corpus, temperature, seed)")
    parser.add_argument("--model", default=POLICY_MODEL_NAME)
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get(E.AGENT_CONCURRENCY_ENV, "8")))
    args = parser.parse_args(argv)
    with open(args.tasks, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    rewards = asyncio.run(run_all(lines, args.model, args.concurrency))
    print(json.dumps({"episodes": len(rewards), "mean_reward": sum(rewards) / max(len(rewards), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
