"""Real agent frameworks, captured by environment alone (`tracerl run`), against a
vLLM-like server on loopback: one LLM-call span per call, the (sub-)agent that made
it, and token ids equal to what the server returned."""

from __future__ import annotations

import time

import pytest

from tracerl_testing.installed import require_module

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]

FRAMEWORKS_HOW = "pip install -e '.[frameworks]'"

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

    transitions = captured.build(episode_id)[0]
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
    require_module("langgraph", FRAMEWORKS_HOW)
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
    require_module("agents", FRAMEWORKS_HOW)
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


# The SDK's own examples/basic/hello_world.py as its users copy it: the default model and the
# default API (Responses), the endpoint from OPENAI_BASE_URL
AGENTS_SDK_HELLO_WORLD = """
    import asyncio

    from agents import Agent, Runner


    async def main():
        agent = Agent(
            name="Assistant",
            instructions="You only respond in haikus.",
        )

        result = await Runner.run(agent, "Tell me about recursion in programming.")
        print(result.final_output)


    if __name__ == "__main__":
        asyncio.run(main())
"""


def test_an_unchanged_agents_sdk_example_is_captured_when_capture_switches_it_to_chat_completions(captured, server):
    require_module("agents", FRAMEWORKS_HOW)
    done = captured.tracerl_run(AGENTS_SDK_HELLO_WORLD, "--episode-id", "ep-hello", TRACERL_OPENAI_AGENTS_API="chat_completions")
    assert done.returncode == 0, done.stderr[-3000:]
    check_calls(captured, server, ["Assistant"], "ep-hello")


# The SDK on its default API (Responses), captured into transitions: tests/instrumentation/test_responses_capture.py


@pytest.mark.parametrize("switch_off", ["set_tracing_disabled(True)", "os.environ['OPENAI_AGENTS_DISABLE_TRACING'] = '1'"])
def test_agents_sdk_tracing_switched_off_keeps_agent_names_and_tool_spans(captured, server, switch_off):
    require_module("agents", FRAMEWORKS_HOW)
    done = captured.tracerl_run(
        f"""
        import asyncio, os
        from openai import AsyncOpenAI
        from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
        from agents.models.openai_chatcompletions import OpenAIChatCompletionsModel

        {switch_off}  # as the SDK's model-provider examples do

        @function_tool
        def lookup(q: str) -> str:
            "Look q up."
            return "42"

        model = OpenAIChatCompletionsModel(model="m", openai_client=AsyncOpenAI(base_url=os.environ["BASE_URL"]))
        agent = Agent(name="solver", instructions="Solve.", model=model, tools=[lookup])
        asyncio.run(Runner.run(agent, "6*7?", run_config=RunConfig(tracing_disabled=True)))
        """,
        "--episode-id", "ep-untraced",
    )
    assert done.returncode == 0, done.stderr
    check_calls(captured, server, ["solver", "solver"], "ep-untraced")
    assert "execute_tool lookup" in [r["name"] for r in captured.rows()]
    assert "tracerl kept it on for its own trace processor" in done.stderr


def test_autogen_agent_names_from_autogen_core_spans(captured, server):
    require_module("autogen_agentchat", FRAMEWORKS_HOW)
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
    (tool,) = [r for r in captured.rows() if r["name"] == "execute_tool lookup"]  # autogen-core's own tool span
    assert '"gen_ai.tool.call.id"' in tool["attributes"] and tool["agent_name"] == "researcher"


def test_agentops_spans_reach_a_tracerl_collector_with_exact_tokens(captured, server, collector, tmp_path, parquet_spans):
    require_module("agentops", FRAMEWORKS_HOW)
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


SQL_AGENT = """
    import os, sqlite3
    from typing import Annotated, TypedDict
    from langchain_core.tools import ToolException, tool
    from langchain_openai import ChatOpenAI
    from langgraph.graph import END, START, StateGraph
    from langgraph.graph.message import add_messages
    from langgraph.prebuilt import ToolNode, tools_condition

    db = sqlite3.connect(":memory:", check_same_thread=False)  # ToolNode runs tools on a thread pool
    db.execute("CREATE TABLE orders (id INTEGER, total REAL)")

    @tool
    def sql_db_query(query: str) -> str:
        "Run a SQL query; an error comes back as text (as langchain_community's SQL tool does)."
        try:
            return str(db.execute(query).fetchall())
        except sqlite3.Error as error:
            return f"Error: ({type(error).__module__}.{type(error).__name__}) {error}"

    @tool
    def sql_db_schema(table: str) -> str:
        "The schema of a table; raises when the table does not exist."
        return str(db.execute(f"SELECT * FROM {table}").description)

    @tool
    def sql_db_list_tables(prefix: str) -> str:
        "The tables whose name starts with prefix; a ToolException the tool turns into its answer."
        raise ToolException(f"no table starts with {prefix!r}")

    sql_db_list_tables.handle_tool_error = True
    tools = [sql_db_query, sql_db_schema, sql_db_list_tables]
    llm = ChatOpenAI(model="m", base_url=os.environ["BASE_URL"]).bind_tools(tools)

    class State(TypedDict):
        messages: Annotated[list, add_messages]

    def write_query(state):
        return {"messages": [llm.invoke(state["messages"])]}

    graph = StateGraph(State)
    graph.add_node("write_query", write_query)
    graph.add_node("tools", ToolNode(tools, handle_tool_errors=True))
    graph.add_edge(START, "write_query")
    graph.add_conditional_edges("write_query", tools_condition)
    graph.add_edge("tools", "write_query")
    result = graph.compile().invoke({"messages": [("user", "total of all orders?")]})
    print("ANSWER", result["messages"][-1].content)
    """


def test_langgraph_tool_runs_are_execute_tool_spans_and_the_sql_and_tool_error_rules_fire(captured, server):
    require_module("langgraph", FRAMEWORKS_HOW)
    import json

    from tracerl.schemas import attributes as A

    out = run_ok(captured, SQL_AGENT, "--task-id", "sql-1", "--episode-id", "ep-sql")
    assert "ANSWER done after 7 messages" in out
    query_call, *_ = calls = captured.llm_calls()
    assert [r["agent_name"] for r in calls] == ["write_query"] * 4
    assert [r["completion_token_ids"] for r in calls] == [c.token_ids for c in server.calls]
    tools = {r["name"]: r for r in captured.rows() if r["name"].startswith("execute_tool ")}
    query, schema, listing = (tools[f"execute_tool {name}"] for name in ("sql_db_query", "sql_db_schema", "sql_db_list_tables"))
    query_attributes, schema_attributes = json.loads(query["attributes"]), json.loads(schema["attributes"])
    asked = json.loads(query_call["attributes"])[A.GEN_AI_OUTPUT_MESSAGES]
    assert query_attributes[A.GEN_AI_OPERATION] == A.GEN_AI_EXECUTE_TOOL
    assert query_attributes[A.GEN_AI_TOOL_CALL_ID] in asked  # the LLM's tool call it ran
    assert json.loads(query_attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS_ATTRIBUTE]) == {"query": "x"}
    assert query_attributes[A.GEN_AI_TOOL_CALL_RESULT] == 'Error: (sqlite3.OperationalError) near "x": syntax error'
    assert query["status_code"] == "UNSET" and query["episode_id"] == "ep-sql"
    assert (schema["status_code"], schema_attributes[A.ERROR_TYPE]) == ("ERROR", "sqlite3.OperationalError")
    assert schema["status_message"] == "OperationalError: no such table: x"  # raised, handled by ToolNode
    assert (listing["status_code"], listing["status_message"]) == ("ERROR", "no table starts with 'x'")  # handled by the tool

    transitions, manifest = captured.build("ep-sql")
    assert manifest["counts"]["rewards"]["by_name"] == {"air.sql_error": 1, "air.tool_error": 2, "grade": 1}
    # each penalty lands on the call that asked for the tool; the grade on the last call
    assert [t["reward"] for t in transitions] == pytest.approx([-0.1, -0.1, -0.1, 1.0])
