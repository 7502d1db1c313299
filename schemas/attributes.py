"""Attribute names of the tracerl contract (DESIGN.md, "Attribute contract").

Every part imports names from here, so a rename is one edit and a typo is an
``AttributeError`` instead of a silently empty column.
"""

from __future__ import annotations

EPISODE_ID = "tracerl.episode.id"
TASK_ID = "tracerl.task.id"
SPLIT = "tracerl.split"
AGENT_NAME = "tracerl.agent.name"  # override; wins over GEN_AI_AGENT_NAME
GEN_AI_AGENT_NAME = "gen_ai.agent.name"

PROMPT_TOKEN_IDS = "tracerl.llm.prompt_token_ids"
COMPLETION_TOKEN_IDS = "tracerl.llm.completion_token_ids"
COMPLETION_LOGPROBS = "tracerl.llm.completion_logprobs"
POLICY_VERSION = "tracerl.policy.version"

REWARD_SPAN_NAME = "tracerl.reward"
REWARD_EVENT_NAME = "tracerl.reward"
REWARD_VALUE = "tracerl.reward.value"
REWARD_NAME = "tracerl.reward.name"

EPISODE_SPAN_NAME = "tracerl.episode"

GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"

# Episode-level attributes travel as W3C baggage so that every span of an episode,
# in any process, carries them (see tracerl.instrumentation).
BAGGAGE_KEYS = (EPISODE_ID, TASK_ID, SPLIT, AGENT_NAME)

# Token-id attributes are the bulk of a span; they live in promoted columns of the
# spans table and are not repeated in its lossless attribute JSON.
TOKEN_ATTRIBUTES = (PROMPT_TOKEN_IDS, COMPLETION_TOKEN_IDS, COMPLETION_LOGPROBS)

# Response fields of vLLM (and of tracerl's own server) that carry exact tokens.
VLLM_PROMPT_TOKEN_IDS_FIELD = "prompt_token_ids"  # top level of a response
VLLM_CHOICE_TOKEN_IDS_FIELD = "token_ids"  # on each choice
POLICY_VERSION_FIELD = "policy_version"  # tracerl server: top level of a response
POLICY_VERSION_HEADER = "x-tracerl-policy-version"

# Set on an LLM call that has no exact token ids, with the reason (the pipeline counts
# these calls as skipped instead of guessing tokens).
TOKEN_IDS_MISSING = "tracerl.llm.token_ids_missing"
