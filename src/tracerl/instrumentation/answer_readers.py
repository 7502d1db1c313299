"""Other instrumentations in this process that read token ids and log-probs from an LLM answer.

tracerl asks the server for token ids and log-probs and takes out of the answer what the
agent did not ask for (:mod:`~tracerl.instrumentation.request_plan`), so the agent sees what
it would see without tracerl. Another instrumentation may read the same answer after
tracerl and record those fields itself: agentlightning replaces AgentOps' OpenAI answer
handler with one that records ``prompt_token_ids``, ``response_token_ids`` and
``logprobs.content`` on AgentOps' span, and its training reads them from there. Taking them
out would leave it without them, so while such a reader is installed tracerl strips only
what nobody but tracerl asked for: nothing.

Each reader is declared as data: the module and function an instrumentation replaces, and
the package its replacement comes from. Looked up per request (a dictionary lookup and an
attribute read): an instrumentation may be installed after tracerl.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class AnswerReader:
    """An answer handler ``module.function`` that reads token fields when replaced by one from ``replaced_from``."""

    name: str
    module: str
    function: str
    replaced_from: str  # module prefix of the replacement


ANSWER_READERS: tuple[AnswerReader, ...] = (
    # agentlightning 0.3 on AgentOps >= 0.4.16 (instrument_agentops -> _patch_new_agentops)
    AnswerReader("agentlightning (AgentOps' OpenAI wrapper)", "agentops.instrumentation.providers.openai.wrappers.chat",
                 "handle_chat_attributes", "agentlightning."),
    # agentlightning on older AgentOps, which used OpenLLMetry's wrapper (_patch_old_agentops)
    AnswerReader("agentlightning (OpenLLMetry's OpenAI wrapper)", "opentelemetry.instrumentation.openai.shared.chat_wrappers",
                 "_handle_response", "agentlightning."),
)


def installed_reader() -> str | None:
    """The name of an installed instrumentation that reads token fields from answers, or ``None``."""
    for reader in ANSWER_READERS:
        module = sys.modules.get(reader.module)
        handler = getattr(module, reader.function, None) if module is not None else None
        if handler is not None and getattr(handler, "__module__", "").startswith(reader.replaced_from):
            return reader.name
    return None
