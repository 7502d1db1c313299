"""The `[frameworks]` extra installs a set in which every framework's tool stack imports.

Each stack is imported in a fresh interpreter, alone, as an agent script would: a package that
another stack's import happened to patch or pre-load cannot hide a broken one. openai-agents
alone pulls mcp 2.x, which removed `mcp.shared.context.RequestContext`, and AutoGen's MCP tools
then fail to import; pyproject pins mcp below 2 for this.
"""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys

import pytest

from tracerl_testing.installed import require

pytestmark = pytest.mark.frameworks

# distribution -> the imports an agent of that framework with tools makes
TOOL_STACKS = {
    "langgraph": [
        "from langgraph.prebuilt import ToolNode, tools_condition",
        "from langchain_core.tools import tool",
        "from langchain_openai import ChatOpenAI",
    ],
    "autogen-ext": [
        "from autogen_ext.tools.mcp import McpWorkbench, StdioServerParams, mcp_server_tools",
        "from autogen_ext.models.openai import OpenAIChatCompletionClient",
        "from autogen_agentchat.agents import AssistantAgent",
        "from autogen_core.tools import FunctionTool",
    ],
    "openai-agents": [
        "from agents import Agent, Runner, function_tool",
        "from agents.mcp import MCPServerStdio, MCPServerStreamableHttp",
    ],
    "agentops": ["import agentops"],
    "anthropic": ["import anthropic", "from anthropic.types import ToolParam, ToolUseBlock, ToolResultBlockParam"],
}


def installed(distribution: str) -> bool:
    try:
        importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@pytest.mark.parametrize("distribution", sorted(TOOL_STACKS))
def test_tool_stack_imports(distribution):
    require(installed(distribution), distribution, "pip install -e '.[frameworks]'")
    code = "\n".join(TOOL_STACKS[distribution])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{distribution}'s tool stack does not import:\n{done.stderr[-2000:]}"
