"""Hooks into agent frameworks (and httpx), installed when (and only if) they are imported.

Each hook either tells the tracerl span processor which (sub-)agent is running (an
agent-name resolver) or turns the framework's own tracing into OTel spans. AutoGen
needs none: autogen-core opens OTel ``invoke_agent`` spans carrying
``gen_ai.agent.name`` itself, and the processor passes that name down to the LLM calls. Importing a
framework costs seconds, so nothing is imported here: ``wrapt`` post-import hooks fire
when the agent's code imports the framework itself.
"""

from __future__ import annotations

import functools
import importlib
import logging
from collections.abc import Callable
from typing import Any

from wrapt import register_post_import_hook

from tracerl.instrumentation import httpx_hook
from tracerl.instrumentation.processor import add_agent_name_resolver
from tracerl.instrumentation.settings import SDK_DEFAULT, settings

logger = logging.getLogger(__name__)
_installed = False


def install(hook_provider: Callable[[Any], None]) -> None:
    """Register the post-import hooks of every supported framework (idempotent).

    ``hook_provider`` gives a tracer provider that a framework makes itself (agentops) tracerl's
    processor and hooks: :func:`tracerl.instrumentation.setup.install_hooks`, passed in so that
    this module, which setup imports, does not import setup back.
    """
    global _installed
    if _installed:
        return
    _installed = True
    register_post_import_hook(_hook_langchain, "langchain_core.runnables.config")
    register_post_import_hook(_hook_langchain_tools, "langchain_core.callbacks.manager")
    for module in httpx_hook.HTTPX_MODULES:  # LiteLLM's own client, hand-written agents
        register_post_import_hook(httpx_hook.wrap, module)
    register_post_import_hook(_hook_openai_agents, "agents")
    register_post_import_hook(functools.partial(_hook_agentops, hook_provider=hook_provider), "agentops.sdk.core")
    register_post_import_hook(_hook_agentops_exporter, "agentops.sdk.exporters")


# ---- LangChain / LangGraph ------------------------------------------------------------


def _hook_langchain(module) -> None:
    var = module.var_child_runnable_config

    def langgraph_node() -> str | None:
        """The LangGraph node running now; nested graphs give ``outer/inner``."""
        config = var.get()
        if not config:
            return None
        metadata = config.get("metadata") or {}
        node = metadata.get("langgraph_node")
        if node is None:
            return None
        namespace = metadata.get("langgraph_checkpoint_ns") or ""
        path = [part.split(":", 1)[0] for part in namespace.split("|") if part]
        return "/".join(path) if len(path) > 1 else str(node)

    add_agent_name_resolver(langgraph_node)


def _hook_langchain_tools(module) -> None:
    from tracerl.instrumentation import langchain_tools

    langchain_tools.install()


# ---- OpenAI Agents SDK ------------------------------------------------------------------


def _hook_openai_agents(module) -> None:
    if not hasattr(module, "set_trace_processors"):
        return  # a user module that happens to be called `agents`
    from tracerl.instrumentation import capture_stats
    from tracerl.instrumentation.agents_sdk import TRACING_LOST, OTelTraceProcessor, keep_tracing_for_tracerl

    # replaces the default processor, which uploads traces to OpenAI
    module.set_trace_processors([OTelTraceProcessor()])
    api = settings().openai_agents_api
    if api != SDK_DEFAULT:  # the SDK's default is the Responses API (captured too); chat_completions for servers without it
        module.set_default_openai_api(api)
    provider_module = importlib.import_module("agents.tracing.provider")
    if not keep_tracing_for_tracerl(getattr(provider_module, "DefaultTraceProvider", object)):
        capture_stats.STATS.add_note(TRACING_LOST.format(version=getattr(module, "__version__", "?")))


# ---- agentops ---------------------------------------------------------------------------


def _hook_agentops(module, hook_provider: Callable[[Any], None]) -> None:
    """agentops runs its own tracer provider and exporter (``AGENTOPS_EXPORTER_ENDPOINT``,
    which can point at a tracerl collector) and wraps the OpenAI client itself. Its
    provider gets tracerl's processor, for episodes, agent names and the token hook
    (which fills every LLM span of a call: agentops's and OpenLLMetry's alike)."""
    from wrapt import wrap_function_wrapper

    def setup_telemetry(wrapped, instance, args, kwargs):
        provider, meter_provider = wrapped(*args, **kwargs)
        hook_provider(provider)
        return provider, meter_provider

    wrap_function_wrapper(module, "setup_telemetry", setup_telemetry)


def _hook_agentops_exporter(module) -> None:
    """agentops 0.4's exporter sets its auth header through private attributes that
    newer OTLP exporters no longer have (``_session``), so every export fails. When
    they are missing, export with the stock OTLP/HTTP exporter it derives from: same
    endpoint, same encoding, no agentops JWT (a tracerl collector needs none)."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from wrapt import wrap_function_wrapper

    def export(wrapped, instance, args, kwargs):
        if hasattr(instance, "_session"):
            return wrapped(*args, **kwargs)
        return OTLPSpanExporter.export(instance, *args, **kwargs)

    wrap_function_wrapper(module, "AuthenticatedOTLPExporter.export", export)
