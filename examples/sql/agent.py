"""The SQL agent: a LangGraph writer -> checker -> rewriter over SQLite, unaware of training.

Run it as users run theirs, ``tracerl run -- python -m examples.sql.agent TASKS.jsonl``:
capture is switched on by environment variables alone, and each LangGraph node's LLM
calls are named after the node (``writer``, ``checker``, ``rewriter``), which is what
``--agents`` selects. The only tracerl calls are :func:`tracerl.episode` around a task and
:func:`tracerl.emit_reward` where it is scored.

The graph, as in the paper's Spider agent: the writer writes a query from the question
and the schema; the query runs (a LangChain tool, so a SQL error is a system signal the
pipeline turns into an automatic intermediate reward); the checker reads query and result
and says whether it is right; if not, the rewriter writes a new one, which runs in turn
(at most ``--max-rewrites`` times). The reward is the final query's execution match.

``OPENAI_BASE_URL`` points at the policy endpoint; every node calls the model ``--model``
unless the loop trains a policy per agent, which gives each node its policy's model name
(:func:`~tracerl.instrumentation.agent_env.agent_model`). Each task line carries its own
``temperature`` and ``seed`` (held-out evaluation is greedy, training samples).
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, TypedDict

from langchain_core.runnables import RunnableConfig
from langchain_core.tools import InjectedToolArg, tool
from langchain_openai import ChatOpenAI
from langgraph.graph import END, START, StateGraph

import tracerl
from examples.sql.task import (
    MAX_EXAMPLES, VERDICTS, Task, checker_messages, clean_query, execute, result_text, reward, rewriter_messages, schema_link_credit, schema_text,
    writer_messages,
)
from tracerl.instrumentation.agent_env import POLICY_MODEL_NAME, agent_model
from tracerl.schemas import environment as E

NODES = ("writer", "checker", "rewriter")  # the graph's LLM nodes: the agent names its calls carry


class State(TypedDict, total=False):
    question: str
    db_path: str
    schema: str
    query: str
    result: str
    verdict: str
    rewrites: int


@tool
def sql_db_query(query: str, db_path: Annotated[str, InjectedToolArg]) -> str:
    """Run a SQLite query; an error comes back as text, as langchain_community's SQL tool does."""
    try:
        return result_text(execute(db_path, query))
    except sqlite3.Error as error:
        return f"Error: ({type(error).__module__}.{type(error).__name__}) {error}"


def _llm(config: RunnableConfig, node: str) -> ChatOpenAI:
    return config["configurable"]["llms"][node]


def writer(state: State, config: RunnableConfig) -> State:
    examples = config["configurable"]["examples"]
    answer = _llm(config, "writer").invoke(writer_messages(state["question"], state["schema"], examples))
    return {"query": clean_query(answer.content), "rewrites": 0}


def run_query(state: State) -> State:
    return {"result": sql_db_query.invoke({"query": state["query"], "db_path": state["db_path"]})}


def checker(state: State, config: RunnableConfig) -> State:
    messages = checker_messages(state["question"], state["schema"], state["query"], state["result"])
    answer = _llm(config, "checker").invoke(messages, max_tokens=config["configurable"]["verdict_tokens"])
    return {"verdict": answer.content.strip().lower()}


def rewriter(state: State, config: RunnableConfig) -> State:
    answer = _llm(config, "rewriter").invoke(rewriter_messages(state["question"], state["schema"], state["query"], state["result"]))
    return {"query": clean_query(answer.content), "rewrites": state["rewrites"] + 1}


def build_graph(max_rewrites: int):
    """writer -> run_query -> checker -> (rewriter -> run_query -> checker ...) until the checker
    says yes or ``max_rewrites`` rewrites have run (the last rewrite's query is final, unchecked)."""
    graph = StateGraph(State)
    graph.add_node("writer", writer)
    graph.add_node("run_query", run_query)
    graph.add_node("checker", checker)
    graph.add_node("rewriter", rewriter)
    graph.add_edge(START, "writer")
    graph.add_edge("writer", "run_query")
    graph.add_conditional_edges("run_query", lambda s: "checker" if s["rewrites"] < max_rewrites else END, ["checker", END])
    rejected = VERDICTS[1]
    graph.add_conditional_edges("checker", lambda s: "rewriter" if s["verdict"].startswith(rejected) else END, ["rewriter", END])
    graph.add_edge("rewriter", "run_query")
    return graph.compile()


def run_episode(graph, task: Task, llms: dict[str, ChatOpenAI], verdict_tokens: int, examples: int = 0, partial_credit: bool = False) -> float:
    """One episode; its reward: execution match, or with ``partial_credit`` the schema-link credit of a query that misses."""
    with tracerl.episode(task_id=task.task_id, split=task.split):
        state = {"question": task.question, "db_path": task.db_path, "schema": schema_text(task.db_path)}
        configurable = {"llms": llms, "verdict_tokens": verdict_tokens, "examples": examples}
        final = graph.invoke(state, {"configurable": configurable})
        value = reward(task, final["query"])
        tracerl.emit_reward(value, name="execution_match")
        if partial_credit and not value:  # the episode's reward is the sum of its rewards
            credit = schema_link_credit(task, final["query"])
            tracerl.emit_reward(credit, name="schema_link")
            value += credit
        return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tasks", help="JSONL file, one task per line (with its temperature and seed)")
    parser.add_argument("--model", default=POLICY_MODEL_NAME)
    parser.add_argument("--max-rewrites", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=int(os.environ.get(E.AGENT_MAX_TOKENS_ENV, "64")), help="per query the writer or rewriter writes")
    parser.add_argument("--verdict-tokens", type=int, default=2, help="per checker verdict")
    parser.add_argument("--examples", type=int, default=2, choices=range(MAX_EXAMPLES + 1),
                        help="worked examples before the question (a pretrained model writes no SQL without them; "
                             "examples/sql/README.md)")
    parser.add_argument("--partial-credit", action="store_true",
                        help="a query that misses the gold rows earns 0.25 for the gold's table and 0.25 more for its column "
                             "(task.schema_link_credit), emitted as the reward 'schema_link'")
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get(E.AGENT_CONCURRENCY_ENV, "16")))
    args = parser.parse_args(argv)

    with open(args.tasks, encoding="utf-8") as handle:
        lines = [json.loads(line) for line in handle if line.strip()]
    graph = build_graph(args.max_rewrites)

    def run(line: dict) -> float:
        line = dict(line)
        sampling = {"temperature": line.pop("temperature"), "seed": line.pop("seed")}
        llms = {  # OPENAI_BASE_URL / OPENAI_API_KEY from the environment; each node's model: its policy's name
            node: ChatOpenAI(model=agent_model(node, args.model), **sampling, max_tokens=args.max_tokens, max_retries=2, timeout=300)
            for node in NODES
        }
        return run_episode(graph, Task(**line), llms, args.verdict_tokens, args.examples, args.partial_credit)

    with ThreadPoolExecutor(max_workers=args.concurrency) as pool:
        rewards = list(pool.map(run, lines))
    print(json.dumps({"episodes": len(rewards), "mean_reward": sum(rewards) / max(len(rewards), 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
