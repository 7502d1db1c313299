"""The demo's agent: an ordinary OpenAI-client program, unaware of training.

It is run the way users run theirs, ``tracerl run -- python -m
tracerl.orchestration.demo.agent ...``, so capture is switched on by environment
variables alone. The only tracerl calls are the two any agent adds to be trained:
:func:`tracerl.episode` around a task and :func:`tracerl.emit_reward` at its end.

Usage: ``python -m tracerl.orchestration.demo.agent TASKS.jsonl [--temperature T]``, with
``OPENAI_BASE_URL`` pointing at the policy endpoint. Each task line may carry its
own ``temperature`` (held-out evaluation is greedy, training samples).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

from openai import OpenAI
from opentelemetry import trace
from opentelemetry.trace import Status, StatusCode

import tracerl
from tracerl.instrumentation.agent_env import POLICY_MODEL_NAME
from tracerl.schemas import attributes as A
from tracerl.orchestration.demo.task import ANSWERER, TOOL_PICKER, Task, UnknownToolError, first_messages, reward, run_tool, second_messages, tool_named
from tracerl.schemas import environment as E

tracer = trace.get_tracer("tracerl.orchestration.demo.agent")


@contextmanager
def sub_agent(name: str) -> Iterator[None]:
    """An OTel GenAI ``invoke_agent`` span: the calls inside belong to agent ``name`` (what ``--agents`` selects)."""
    with tracer.start_as_current_span(f"{A.GEN_AI_INVOKE_AGENT} {name}") as span:
        span.set_attribute(A.GEN_AI_OPERATION, A.GEN_AI_INVOKE_AGENT)
        span.set_attribute(A.GEN_AI_AGENT_NAME, name)
        yield


def run_episode(client: OpenAI, model: str, task: Task, temperature: float, seed: int) -> float:
    with tracerl.episode(task_id=task.task_id, split=task.split):
        with sub_agent(TOOL_PICKER):
            first = client.chat.completions.create(
                model=model, messages=first_messages(task), max_tokens=8, temperature=temperature, seed=seed
            )
        tool_choice = first.choices[0].message.content or ""
        tool = tool_named(tool_choice)
        with tracer.start_as_current_span("execute_tool calculator") as span:
            span.set_attribute(A.GEN_AI_OPERATION, A.GEN_AI_EXECUTE_TOOL)
            span.set_attribute(A.GEN_AI_TOOL_NAME, tool)
            try:
                tool_result = run_tool(tool, task)
            except UnknownToolError as exc:
                span.record_exception(exc)
                span.set_status(Status(StatusCode.ERROR, str(exc)))
                tool_result = f"error: {exc}"
        with sub_agent(ANSWERER):
            second = client.chat.completions.create(
                model=model,
                messages=second_messages(task, tool_choice, tool_result),
                max_tokens=4,
                temperature=temperature,
                seed=seed + 1,
            )
        value = reward(task, second.choices[0].message.content or "")
        tracerl.emit_reward(value, name="correct")
        return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", help="JSONL file, one task per line")
    parser.add_argument("--model", default=POLICY_MODEL_NAME)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get(E.AGENT_CONCURRENCY_ENV, "16")))
    args = parser.parse_args(argv)

    with open(args.tasks, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    jobs = []
    for i, line in enumerate(lines):
        temperature = line.pop("temperature", args.temperature)
        seed = line.pop("seed", i)
        jobs.append((Task(**line), temperature, seed))

    client = OpenAI(max_retries=2)  # OPENAI_BASE_URL / OPENAI_API_KEY from the environment
    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        rewards = list(pool.map(lambda job: run_episode(client, args.model, *job), jobs))
    print(json.dumps({"episodes": len(rewards), "mean_reward": sum(rewards) / max(len(rewards), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
