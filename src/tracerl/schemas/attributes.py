"""Attribute names of the tracerl contract (ARCHITECTURE.md, "Names", lists them with their meaning).

Every part imports names from here, so a rename is one edit and a typo is an
``AttributeError`` instead of a silently empty column.
"""

from __future__ import annotations

EPISODE_ID = "tracerl.episode.id"
TASK_ID = "tracerl.task.id"
SPLIT = "tracerl.split"
AGENT_NAME = "tracerl.agent.name"  # override; wins over GEN_AI_AGENT_NAME
JUDGE_AGENT = "tracerl.judge"  # the agent name of `tracerl pipeline judge`'s own calls: never policy calls
GEN_AI_AGENT_NAME = "gen_ai.agent.name"

PROMPT_TOKEN_IDS = "tracerl.llm.prompt_token_ids"
COMPLETION_TOKEN_IDS = "tracerl.llm.completion_token_ids"
COMPLETION_LOGPROBS = "tracerl.llm.completion_logprobs"
POLICY_VERSION = "tracerl.policy.version"
# Of an LLM call made through the OpenAI Responses API (src/tracerl/instrumentation/responses_api.py)
# or Anthropic's Messages API (src/tracerl/instrumentation/messages_api.py): LLM_API says which, and
# PREVIOUS_RESPONSE_ID names the response a Responses call continued (its request's
# previous_response_id: the pipeline puts that conversation's earlier turns before the call's input)
LLM_API = "tracerl.llm.api"
LLM_API_RESPONSES = "responses"
LLM_API_MESSAGES = "messages"
PREVIOUS_RESPONSE_ID = "tracerl.llm.previous_response_id"

REWARD_SPAN_NAME = "tracerl.reward"
REWARD_EVENT_NAME = "tracerl.reward"
REWARD_VALUE = "tracerl.reward.value"
REWARD_NAME = "tracerl.reward.name"

EPISODE_SPAN_NAME = "tracerl.episode"
CONTENT_PREFIX = "tracerl.content."  # tracerl attributes under it carry content (policed like messages)
# what capture appends to content it cut at TRACERL_MAX_CONTENT_CHARS (the pipeline counts such calls)
TRUNCATED_MARK = "…[truncated by tracerl]"

# OpenTelemetry GenAI semantic conventions (gen_ai.*)
GEN_AI_SYSTEM = "gen_ai.system"
GEN_AI_PROVIDER_NAME = "gen_ai.provider.name"  # successor of gen_ai.system (semconv 1.37)
GEN_AI_OPERATION = "gen_ai.operation.name"
GEN_AI_REQUEST_MODEL = "gen_ai.request.model"
GEN_AI_RESPONSE_MODEL = "gen_ai.response.model"
GEN_AI_RESPONSE_ID = "gen_ai.response.id"
GEN_AI_INPUT_MESSAGES = "gen_ai.input.messages"
GEN_AI_OUTPUT_MESSAGES = "gen_ai.output.messages"
# GEN_AI_INPUT/OUTPUT_MESSAGES hold JSON: [{"role", "parts": [{"type": "text", "content"} |
# {"type": "tool_call", "id", "name", "arguments"} | {"type": "tool_call_response", "id", "response"}],
# "finish_reason" (output messages)}]; GEN_AI_TOOL_DEFINITIONS [{"type": "function", "name", "description", "parameters"}]
GEN_AI_MESSAGE_PARTS = "parts"
GEN_AI_PART_TYPE = "type"
GEN_AI_TEXT_PART = "text"  # the type of a text part; its text is in "content"
GEN_AI_TOOL_CALL_PART = "tool_call"  # the type of a part that is a tool call
GEN_AI_TOOL_CALL_ARGUMENTS = "arguments"  # field of a tool_call part (a JSON string)
GEN_AI_TOOL_CALL_RESPONSE_PART = "tool_call_response"  # a tool's result sent back to the model; its text is in "response"
GEN_AI_FINISH_REASON = "finish_reason"  # field of an output message: why generation stopped ("stop", "length", ...)
GEN_AI_PROVIDER_OPENAI = "openai"  # gen_ai.provider.name of every OpenAI-compatible API tracerl captures
GEN_AI_PROVIDER_ANTHROPIC = "anthropic"  # ... and of Anthropic's Messages API, whoever serves it
GEN_AI_REASONING_PART = "reasoning"  # a part holding the model's reasoning (Anthropic's thinking block); its text is in "content"
# OTel's switch between conventions: with this value in it, only the latest GenAI names are written
SEMCONV_GEN_AI_LATEST = "gen_ai_latest_experimental"
GEN_AI_TOOL_NAME = "gen_ai.tool.name"
GEN_AI_TOOL_CALL_ID = "gen_ai.tool.call.id"  # of an execute_tool span: the id of the LLM's tool call it runs
GEN_AI_TOOL_CALL_RESULT = "gen_ai.tool.call.result"
GEN_AI_TOOL_CALL_ARGUMENTS_ATTRIBUTE = "gen_ai.tool.call.arguments"  # of an execute_tool span (not a part's field)
GEN_AI_TOOL_DEFINITIONS = "gen_ai.tool.definitions"
GEN_AI_SYSTEM_INSTRUCTIONS = "gen_ai.system_instructions"
# the span event that carries a call's content as attributes (instrumentations whose content goes to events)
GEN_AI_OPERATION_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
# the deprecated per-message events (GenAI before 1.37), as OTLP log records: body {content, tool_calls, id}
GEN_AI_MESSAGE_EVENTS = {"gen_ai.system.message": "system", "gen_ai.user.message": "user",
                         "gen_ai.assistant.message": "assistant", "gen_ai.tool.message": "tool"}
GEN_AI_CHOICE_EVENT = "gen_ai.choice"  # body {index, finish_reason, message: {content, tool_calls}}
# The evaluation event: a verdict on a GenAI operation (an evaluator's, or `tracerl pipeline judge`'s).
# Names as OpenTelemetry semantic conventions v1.41.0 define them (docs/gen-ai/gen-ai-events.md,
# model/gen-ai/events.yaml and model/gen-ai/registry.yaml of open-telemetry/semantic-conventions; the
# GenAI conventions have since moved to open-telemetry/semantic-conventions-genai, same names):
# event `gen_ai.evaluation.result`, "SHOULD be parented to GenAI operation span being evaluated when
# possible or set `gen_ai.response.id` when span id is not available"; attributes gen_ai.evaluation.name
# (string, required), gen_ai.evaluation.score.value (double, conditionally required "if applicable"),
# gen_ai.evaluation.score.label (string, conditionally required "if applicable"),
# gen_ai.evaluation.explanation (string, recommended), gen_ai.response.id (recommended "when available"),
# error.type (conditionally required "if the operation ended in an error"). Status: development.
# As a log record (the Logs/Events API: event_name, the evaluated span's trace and span id on the record)
# or as a span event on the evaluated span (span.add_event): the pipeline reads both
# (src/tracerl/pipeline/rewards.py); a score value is a reward named by gen_ai.evaluation.name.
GEN_AI_EVALUATION_RESULT_EVENT = "gen_ai.evaluation.result"
GEN_AI_EVALUATION_NAME = "gen_ai.evaluation.name"
GEN_AI_EVALUATION_SCORE_VALUE = "gen_ai.evaluation.score.value"
GEN_AI_EVALUATION_SCORE_LABEL = "gen_ai.evaluation.score.label"
GEN_AI_EVALUATION_EXPLANATION = "gen_ai.evaluation.explanation"
# the instrumentation scope of the evaluation events `tracerl pipeline judge --evaluation-events` writes:
# the pipeline never reads them as rewards (the judge's rewards file, rewards/NAME.parquet, holds them)
JUDGE_EVENTS_SCOPE = "tracerl.pipeline.judge"
GEN_AI_REQUEST_TEMPERATURE = "gen_ai.request.temperature"
GEN_AI_REQUEST_TOP_P = "gen_ai.request.top_p"
GEN_AI_REQUEST_MAX_TOKENS = "gen_ai.request.max_tokens"
GEN_AI_REQUEST_SEED = "gen_ai.request.seed"
GEN_AI_REQUEST_TOP_K = "gen_ai.request.top_k"
GEN_AI_REQUEST_STOP_SEQUENCES = "gen_ai.request.stop_sequences"
GEN_AI_IS_STREAMING = "gen_ai.is_streaming"  # not (yet) in the conventions; what tracerl's LLM spans record
GEN_AI_RESPONSE_FINISH_REASONS = "gen_ai.response.finish_reasons"
GEN_AI_USAGE_INPUT_TOKENS = "gen_ai.usage.input_tokens"
GEN_AI_USAGE_OUTPUT_TOKENS = "gen_ai.usage.output_tokens"
# GEN_AI_OPERATION values
GEN_AI_CHAT = "chat"
GEN_AI_TEXT_COMPLETION = "text_completion"
GEN_AI_INVOKE_AGENT = "invoke_agent"
GEN_AI_EXECUTE_TOOL = "execute_tool"
# the operations (GEN_AI_OPERATION, OPENLLMETRY_REQUEST_TYPE, AGENTOPS_REQUEST_TYPE) of an LLM call
LLM_OPERATIONS = (GEN_AI_CHAT, "completion", GEN_AI_TEXT_COMPLETION, "generate_content")

# Episode-level attributes travel as W3C baggage so that every span of an episode,
# in any process, carries them (see tracerl.instrumentation).
BAGGAGE_KEYS = (EPISODE_ID, TASK_ID, SPLIT, AGENT_NAME)

# Response fields of vLLM (and of tracerl's own server) that carry exact tokens, and the
# request field that asks for them.
VLLM_RETURN_TOKEN_IDS_FIELD = "return_token_ids"  # request: true adds the two fields below
VLLM_PROMPT_TOKEN_IDS_FIELD = "prompt_token_ids"  # top level of a response
VLLM_CHOICE_TOKEN_IDS_FIELD = "token_ids"  # on each choice
POLICY_VERSION_FIELD = "policy_version"  # tracerl server: top level of a response
# Anthropic's Messages API has no token fields; tracerl serve answers a request with return_token_ids
# (and logprobs: true) with PROMPT_TOKEN_IDS, CHOICE_TOKEN_IDS and this (chat's {"content": [...]})
# at the top level of the message (of the message_delta event when streamed)
MESSAGES_LOGPROBS_FIELD = "logprobs"
# The instrumentation scope of the span the Anthropic SDK (2.x) makes around each of its calls
# (anthropic._tracing): a parent of tracerl's LLM-call span, not that span (its content is metadata only)
ANTHROPIC_SDK_SCOPE = "com.anthropic.sdk.python"
POLICY_VERSION_HEADER = "x-tracerl-policy-version"

# HTTP headers and gRPC metadata keys, lower case (how HTTP/2 and gRPC carry them; HTTP/1.1
# readers compare them case-insensitively)
AUTHORIZATION_HEADER = "authorization"  # "Bearer <token>", over HTTP and as gRPC metadata
CONTENT_TYPE_HEADER = "content-type"
CONTENT_ENCODING_HEADER = "content-encoding"
CONTENT_LENGTH_HEADER = "content-length"
RETRY_AFTER_HEADER = "retry-after"  # seconds; OTLP exporters wait that long after a 429/503
GRPC_STATUS_DETAILS_KEY = "grpc-status-details-bin"  # trailing metadata: a google.rpc.Status

# tracerl gateway: an episode-scoped base URL is GATEWAY/<GATEWAY_EPISODE_PATH>/<token>/v1, the
# token being the episode's W3C trace context and baggage (src/tracerl/instrumentation/episodes.py), for
# agents whose HTTP client sends no trace headers
GATEWAY_EPISODE_PATH = "e"
# tracerl serve: POST BASE_URL/load_weights {"path", "version"} swaps in a checkpoint (src/tracerl/trainer/publish.py)
LOAD_WEIGHTS_PATH = "/load_weights"

# Arrow schema metadata of every tracerl table, kept in each of its Parquet files
TABLE_METADATA_KEY = "tracerl.table"  # spans, logs, rewards, dataset
SCHEMA_VERSION_METADATA_KEY = "tracerl.schema_version"  # the table's schema version, as text

# Set on an LLM call that has no exact token ids, with the reason (the pipeline counts
# these calls as skipped instead of guessing tokens).
TOKEN_IDS_MISSING = "tracerl.llm.token_ids_missing"
# On an HTTP client span of a POST to an LLM endpoint (.../chat/completions, .../completions):
# "captured" when an LLM hook made the call's span (the HTTP span is its transport, counted
# apart by doctor), "unrecognised" when none did (no LLM-call span, no token ids: doctor names it)
HTTP_LLM_REQUEST = "tracerl.http.llm_request"
HTTP_LLM_REQUEST_CAPTURED = "captured"
HTTP_LLM_REQUEST_UNRECOGNISED = "unrecognised"

# The dataset folder `pipeline build-dataset` writes and the trainer reads (src/tracerl/pipeline/README.md).
# Only the transitions are Parquet and visible: the manifest is a dot-file, which pyarrow.dataset,
# pandas and Hugging Face `datasets` skip when they read the folder.
DATASET_FILES_GLOB = "transitions-*.parquet"
TOKEN_SOURCE_SERVED = "served"  # the dataset's token_source: ids the server sampled, captured on the span
TOKEN_SOURCE_RETOKENIZED = "retokenized"  # ids rebuilt from the messages (build-dataset --retokenize)
DATASET_MANIFEST_FILE = ".manifest.json"
DATASET_MANIFEST_SCHEMA_VERSION = "schema_version"  # key of the manifest: the rows' DATASET_SCHEMA_VERSION

# A training run's metrics, one JSON line per round: the loop and scheduled rounds write it,
# `tracerl report --runs` reads it. A round set aside (nothing in it could be trained on) is a
# row with RUN_METRICS_SET_ASIDE true and its reason; it made no policy version.
RUN_METRICS_FILE = "metrics.jsonl"
RUN_METRICS_SET_ASIDE = "set_aside"

# OpenTelemetry general semantic conventions
SERVICE_NAME = "service.name"  # resource attribute
SERVICE_INSTANCE_ID = "service.instance.id"  # resource attribute; the SDK makes a random one per process
EVENT_NAME = "event.name"  # log record attribute, the older place of LogRecord.event_name
ERROR_TYPE = "error.type"
HTTP_RESPONSE_STATUS_CODE = "http.response.status_code"
# An HTTP client span's request (current names, then the older ones the httpx/requests
# instrumentations still write by default); error.type plus the span's status description
# (the server's message) is how a failed LLM call's span says why it failed
HTTP_REQUEST_METHOD = "http.request.method"
URL_FULL = "url.full"
HTTP_METHOD_OLD = "http.method"
HTTP_URL_OLD = "http.url"
DB_SYSTEM = "db.system"
DB_SYSTEM_NAME = "db.system.name"  # successor of db.system

# OpenLLMetry (traceloop): messages flattened one attribute per field,
# OPENLLMETRY_PROMPTS.{i}.role / .content, OPENLLMETRY_COMPLETIONS.{i}.tool_calls.{j}.arguments
OPENLLMETRY_PROMPTS = "gen_ai.prompt"
OPENLLMETRY_COMPLETIONS = "gen_ai.completion"
OPENLLMETRY_TOOL_CALLS = "tool_calls"  # under a flattened message
OPENLLMETRY_TOOL_CALL_ID = "id"  # under a flattened tool call
OPENLLMETRY_TOOL_CALL_NAME = "name"
OPENLLMETRY_TOOL_CALL_ARGUMENTS = "arguments"
OPENLLMETRY_REQUEST_TYPE = "llm.request.type"  # chat, completion, embedding...
TRACELOOP_SPAN_KIND = "traceloop.span.kind"  # workflow, task, agent, tool
TRACELOOP_ENTITY_INPUT = "traceloop.entity.input"
TRACELOOP_ENTITY_OUTPUT = "traceloop.entity.output"
OPENLLMETRY_LEGACY_PROMPTS = "llm.prompts"  # older layouts' prompt and completion content
OPENLLMETRY_LEGACY_COMPLETIONS = "llm.completions"

# OpenInference (Arize): messages flattened one attribute per field under a "message." level,
# OPENINFERENCE_INPUT_MESSAGES.{i}.message.role,
# OPENINFERENCE_OUTPUT_MESSAGES.{i}.message.tool_calls.{j}.tool_call.function.arguments
OPENINFERENCE_SPAN_KIND = "openinference.span.kind"  # LLM, TOOL, CHAIN, AGENT...
OPENINFERENCE_INPUT_MESSAGES = "llm.input_messages"
OPENINFERENCE_OUTPUT_MESSAGES = "llm.output_messages"
OPENINFERENCE_MESSAGE = "message"  # the level under each flattened message index
OPENINFERENCE_MESSAGE_TOOL_CALLS = "tool_calls"  # under OPENINFERENCE_MESSAGE
OPENINFERENCE_TOOL_CALL_ID = "tool_call.id"  # under a flattened tool call
OPENINFERENCE_TOOL_CALL_NAME = "tool_call.function.name"
OPENINFERENCE_TOOL_CALL_ARGUMENTS = "tool_call.function.arguments"
OPENINFERENCE_INPUT_VALUE = "input.value"
OPENINFERENCE_OUTPUT_VALUE = "output.value"

# agentops
AGENTOPS_SPAN_KIND = "agentops.span.kind"  # llm, tool, agent...
AGENTOPS_REQUEST_TYPE = "gen_ai.request.type"  # agentops' older layout of OPENLLMETRY_REQUEST_TYPE
AGENTOPS_AGENT_KIND = "agent"  # the AGENTOPS_SPAN_KIND of an @agent span; its OPERATION_NAME is the agent's name
AGENTOPS_OPERATION_NAME = "operation.name"
AGENTOPS_TASK_OUTPUT = "agentops.task.output"  # JSON text of an @operation/@task's return value
AGENTOPS_ENTITY_OUTPUT = "agentops.entity.output"  # the same, in older agentops

# Agent Lightning (the benchmarks' peer): its store keeps only spans whose resource names a
# rollout and attempt it started
AGENTLIGHTNING_ROLLOUT_ID = "agentlightning.rollout_id"  # on the resource (a span's own attribute wins)
AGENTLIGHTNING_ATTEMPT_ID = "agentlightning.attempt_id"
# token ids and log-probs its patched agentops writes on an LLM-call span
AGENTLIGHTNING_PROMPT_TOKEN_IDS = "prompt_token_ids"  # array of ints
AGENTLIGHTNING_RESPONSE_TOKEN_IDS = "response_token_ids"
AGENTLIGHTNING_LOGPROBS_CONTENT = "logprobs.content"  # JSON text of OpenAI's choice.logprobs.content
# rewards: emit_reward writes an annotation span with AGENTLIGHTNING_REWARD.{n}.name / .value
# (n = 0 is the primary reward); the deprecated @reward decorator writes AGENTOPS_TASK_OUTPUT =
# {"type": "reward", "value": v}; agentlightning 0.2 wrote a numeric AGENTLIGHTNING_LEGACY_REWARD
AGENTLIGHTNING_ANNOTATION_SPAN_NAME = "agentlightning.annotation"
AGENTLIGHTNING_REWARD = "agentlightning.reward"
AGENTLIGHTNING_REWARD_DIMENSION_NAME = "name"
AGENTLIGHTNING_REWARD_DIMENSION_VALUE = "value"
AGENTLIGHTNING_LEGACY_REWARD = "reward"
AGENTLIGHTNING_REWARD_OUTPUT_TYPE = "reward"  # the "type" of a reward output
AGENTLIGHTNING_SPAN_NAME_PREFIX = "agentlightning."  # its own spans: annotation, message, object, operation...
# the attributes agentlightning's adapter reads an agent's name from (besides AGENTOPS_AGENT_KIND spans)
OPENAI_AGENTS_AGENT_NAME = "agent.name"  # the OpenAI Agents SDK, as agentops records it
AUTOGEN_RECIPIENT_AGENT_TYPE = "recipient_agent_type"
LANGCHAIN_CHAIN_TYPE = "langchain.chain.type"
AGENT_FRAMEWORK_EXECUTOR_ID = "executor.id"

# OpenAI Agents SDK: its span data, as tracerl's trace processor names it on OTel spans
# (src/tracerl/instrumentation/agents_sdk.py)
OPENAI_AGENTS_TRACE_ID = "openai_agents.trace_id"
OPENAI_AGENTS_TOOLS = "openai_agents.tools"
OPENAI_AGENTS_HANDOFFS = "openai_agents.handoffs"
OPENAI_AGENTS_HANDOFF_FROM = "openai_agents.handoff.from"
OPENAI_AGENTS_HANDOFF_TO = "openai_agents.handoff.to"
OPENAI_AGENTS_GUARDRAIL_TRIGGERED = "openai_agents.guardrail.triggered"
OPENAI_AGENTS_OUTPUT_TYPE = "openai_agents.output_type"
OPENAI_AGENTS_DATA = "openai_agents.data"
