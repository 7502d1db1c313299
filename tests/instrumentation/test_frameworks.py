"""Real agent frameworks, captured by environment alone (`tracerl run`), against a
vLLM-like server on loopback: one LLM-call span per call, the (sub-)agent that made
it, and token ids equal to what the server returned."""

from __future__ import annotations

import time

import pytest

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]

MODEL_INFO = '{"vision": False, "function_calling": True, "json_output": False, "family": "unknown", "structured_output": False}'


def check_calls(captured, server, agents: list[str], episode_id: str) -> list[dict]:
    """Every server call has exactly one span and one training transition, in order,
    with the agent that made it and the exact tokens the server returned."""
    calls = captured.llm_calls()
    assert len(calls) == len(server.calls), [c["name"] for c in calls]
    for row, truth in zip(calls, server.calls):
        assert row["prompt_token_ids"] == truth.prompt_token_ids
        assert row["completion_token_ids"] == truth.token_ids
        assert row["completion_logprobs"] == pytest.approx(truth.logprobs)
        assert row["policy_version"] == 7 and row["episode_id"] == episode_id
    assert [r["agent_name"] for r in calls] == agents

    transitions = captured.dataset(episode_id, reward=1.0)
    assert [t["agent_name"] for t in transitions] == agents
    for transition, truth in zip(transitions, server.calls):
        assert transition["prompt_token_ids"] == truth.prompt_token_ids
        assert transition["response_token_ids"] == truth.token_ids
        assert transition["episode_id"] == episode_id and transition["return"] == 1.0
    return calls


def run_ok(captured, source: str, *options: str) -> str:
    done = captured.tracerl_run(source, *options)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_langgraph_nodes_name_the_calls_made_with_langchain(captured, server):
    pytest.importorskip("langgraph")
    out = run_ok(
        captured,
        """
        import os
        from typing import TypedDict
        from langchain_core.tools import tool
        from langchain_openai import ChatOpenAI
        from langgraph.graph import END, START, StateGraph

        llm = ChatOpenAI(model="m", base_url=os.environ["BASE_URL"])

        @tool
        def lookup(q: str) -> str:
            "Look q up."
            return "42"

        class State(TypedDict):
            question: str
            plan: str
            answer: str

        def planner(state):
            return {"plan": llm.invoke("plan: " + state["question"]).content}

        def solver(state):
            llm.bind_tools([lookup]).invoke("solve: " + state["plan"])
            return {"answer": "".join(c.content for c in llm.stream("final answer"))}

        graph = StateGraph(State)
        graph.add_node("planner", planner)
        graph.add_node("solver", solver)
        graph.add_edge(START, "planner")
        graph.add_edge("planner", "solver")
        graph.add_edge("solver", END)
        print("ANSWER", graph.compile().invoke({"question": "6*7?"})["answer"])
        """,
        "--task-id", "lg-1", "--episode-id", "ep-langgraph",
    )
    assert "ANSWER done after 1 messages" in out
    calls = check_calls(captured, server, ["planner", "solver", "solver"], "ep-langgraph")
    assert server.calls[2].request["stream"] is True
    assert {r["task_id"] for r in calls} == {"lg-1"}


def test_openai_agents_sdk_agent_names_and_no_upload_to_openai(captured, server):
    pytest.importorskip("agents")
    out = run_ok(
        captured,
        """
        import asyncio, os
        from openai import AsyncOpenAI
        from agents import Agent, Runner, function_tool, set_default_openai_api, set_default_openai_client

        set_default_openai_client(AsyncOpenAI(base_url=os.environ["BASE_URL"]))
        set_default_openai_api("chat_completions")

        @function_tool
        def lookup(q: str) -> str:
            "Look q up."
            return "42"

        solver = Agent(name="solver", instructions="Solve.", model="m", tools=[lookup])
        triage = Agent(name="triage", instructions="Route.", model="m", handoffs=[solver])
        result = asyncio.run(Runner.run(triage, "6*7?"))
        from agents.tracing import get_trace_provider
        print("PROCESSORS", [type(p).__name__ for p in get_trace_provider()._multi_processor._processors])
        print("LAST", result.last_agent.name)
        """,
        "--episode-id", "ep-agents-sdk",
    )
    assert "PROCESSORS ['OTelTraceProcessor']" in out  # the default OpenAI uploader is gone
    assert "LAST solver" in out
    check_calls(captured, server, ["triage", "solver", "solver"], "ep-agents-sdk")
    names = [r["name"] for r in captured.rows()]
    assert "invoke_agent triage" in names and "execute_tool lookup" in names
    assert "handoff triage -> solver" in names


def test_autogen_agent_names_from_autogen_core_spans(captured, server):
    pytest.importorskip("autogen_agentchat")
    out = run_ok(
        captured,
        f"""
        import asyncio, os
        from autogen_agentchat.agents import AssistantAgent
        from autogen_agentchat.conditions import MaxMessageTermination
        from autogen_agentchat.teams import RoundRobinGroupChat
        from autogen_ext.models.openai import OpenAIChatCompletionClient

        client = OpenAIChatCompletionClient(model="m", base_url=os.environ["BASE_URL"], api_key="sk-x", model_info={MODEL_INFO})

        async def lookup(q: str) -> str:
            "Look q up."
            return "42"

        researcher = AssistantAgent("researcher", model_client=client, tools=[lookup])
        writer = AssistantAgent("writer", model_client=client, model_client_stream=True)
        team = RoundRobinGroupChat([researcher, writer], termination_condition=MaxMessageTermination(4))
        result = asyncio.run(team.run(task="6*7?"))
        print("SOURCES", [m.source for m in result.messages])
        """,
        "--episode-id", "ep-autogen",
    )
    assert "'writer'" in out
    check_calls(captured, server, ["researcher", "writer", "researcher"], "ep-autogen")
    assert server.calls[1].request["stream"] is True


def test_agentops_spans_reach_a_tracerl_collector_with_exact_tokens(captured, server, collector, tmp_path, parquet_spans):
    pytest.importorskip("agentops")
    source = """
        import os, agentops, openai
        agentops.init(auto_start_session=True)  # no API key: nothing goes to agentops.ai
        client = openai.OpenAI(base_url=os.environ["BASE_URL"])
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
        stream = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
        print("STREAMED", "".join(c.choices[0].delta.content or "" for c in stream if c.choices))
        """
    done = captured.tracerl_run(source, "--task-id", "ao-1", AGENTOPS_EXPORTER_ENDPOINT=f"{collector.http_url()}/v1/traces")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "STREAMED done after 1 messages" in done.stdout
    deadline = time.monotonic() + 30
    while len(calls := [r for r in parquet_spans(tmp_path / "collected") if r["request_model"]]) < 2:
        assert time.monotonic() < deadline, "agentops spans did not reach the collector"
        time.sleep(0.2)
    assert [r["scope_name"] for r in calls] == ["openai", "openai"]  # agentops's own LLM spans
    for row, truth in zip(calls, server.calls):
        assert row["prompt_token_ids"] == truth.prompt_token_ids
        assert row["completion_token_ids"] == truth.token_ids
        assert row["task_id"] == "ao-1" and row["episode_id"]
