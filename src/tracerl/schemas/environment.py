"""Every environment variable tracerl reads or sets, in one table (as OpenTelemetry's
``opentelemetry.sdk.environment_variables`` keeps the SDK's), tracerl's own and other projects'.

Capture is switched on by variables alone, and the loop hands its agents their endpoint, data
dir and limits the same way: a name written twice can drift, so every module takes its names
from here (tests/schemas/test_environment.py rejects a variable's name spelled anywhere else,
whatever its prefix: at ``os.environ``, ``os.getenv``, an ``env`` mapping or a subprocess's ``env=``).
"""

from __future__ import annotations

# ---- capture (read in the agent's process: tracerl.instrumentation.settings) -------------------
DATA_DIR_ENV = "TRACERL_DATA_DIR"  # where the in-process Parquet exporter writes (default ./tracerl-data)
TOKEN_ENCODING_ENV = "TRACERL_TOKEN_ENCODING"  # array | packed
TOKEN_CAPTURE_ENV = "TRACERL_TOKEN_CAPTURE"  # auto | on | off
CAPTURE_CONTENT_ENV = "TRACERL_CAPTURE_CONTENT"  # true | false
MAX_CONTENT_CHARS_ENV = "TRACERL_MAX_CONTENT_CHARS"
REDACT_ENV = "TRACERL_REDACT"  # "module:function", called on every captured content string
EPISODE_ID_ENV = "TRACERL_EPISODE_ID"  # process-wide episode (set by `tracerl run --task-id`)
TASK_ID_ENV = "TRACERL_TASK_ID"
SPLIT_ENV = "TRACERL_SPLIT"
AGENT_NAME_ENV = "TRACERL_AGENT_NAME"
# Who makes the LLM-call spans: tracerl's own (light, the default) or OpenLLMetry's
# (richer attributes, about 5 ms of CPU per sync call: measured in benchmarks/).
LLM_SPANS_ENV = "TRACERL_LLM_SPANS"  # tracerl | openllmetry
RUN_SUMMARY_ENV = "TRACERL_RUN_SUMMARY"  # set by `tracerl run`: print the counts at exit
# chat_completions: the OpenAI Agents SDK sends Chat Completions instead of its default, the
# Responses API (both are captured; for servers that serve Chat Completions only); unset: the SDK's own default is left alone
OPENAI_AGENTS_API_ENV = "TRACERL_OPENAI_AGENTS_API"

# ---- the loop's agents (set by the loop, read by the agent programs) ----------------------------
AGENT_CONCURRENCY_ENV = "TRACERL_AGENT_CONCURRENCY"  # how many episodes an agent program runs at once
AGENT_MAX_TOKENS_ENV = "TRACERL_AGENT_MAX_TOKENS"  # max_tokens per LLM call (a real model needs more than the tiny one)
# with several policies (--policy), each agent's model name: "writer=writer,rewriter=writer,checker=checker"
AGENT_MODELS_ENV = "TRACERL_AGENT_MODELS"

# ---- commands and servers ---------------------------------------------------------------------
CACHE_DIR_ENV = "TRACERL_CACHE_DIR"  # converted GGUFs, tiny models, pip downloads (default ~/.cache/tracerl)
VLLM_PYTHON_ENV = "TRACERL_VLLM_PYTHON"  # the python of a venv holding vLLM (its pins conflict with the trainers')
COLLECTOR_TOKEN_ENV = "TRACERL_COLLECTOR_TOKEN"  # `collector serve --auth-token`
JUDGE_URL_ENV = "TRACERL_JUDGE_URL"  # `pipeline judge --judge-url`
JUDGE_MODEL_ENV = "TRACERL_JUDGE_MODEL"
JUDGE_API_KEY_ENV = "TRACERL_JUDGE_API_KEY"
GATE_CHECKPOINT_ENV = "TRACERL_CHECKPOINT"  # a round's evaluation command: the checkpoint it evaluates
GATE_POLICY_ENV = "TRACERL_POLICY"  # ... and which policy it is, where the state holds several

# ---- other projects' variables tracerl reads or sets -------------------------------------------
OTEL_SERVICE_NAME_ENV = "OTEL_SERVICE_NAME"
OTEL_TRACES_EXPORTER_ENV = "OTEL_TRACES_EXPORTER"
OTEL_METRICS_EXPORTER_ENV = "OTEL_METRICS_EXPORTER"
OTEL_LOGS_EXPORTER_ENV = "OTEL_LOGS_EXPORTER"
OTEL_EXPORTER_OTLP_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_ENDPOINT"
OTEL_EXPORTER_OTLP_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_PROTOCOL"
OTEL_EXPORTER_OTLP_TRACES_ENDPOINT_ENV = "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"
OTEL_EXPORTER_OTLP_TRACES_PROTOCOL_ENV = "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"
OTEL_BSP_SCHEDULE_DELAY_ENV = "OTEL_BSP_SCHEDULE_DELAY"
OTEL_DISABLED_INSTRUMENTATIONS_ENV = "OTEL_PYTHON_DISABLED_INSTRUMENTATIONS"
# OTel's switch between conventions: with this value in it, only the latest GenAI names are written
SEMCONV_STABILITY_OPT_IN_ENV = "OTEL_SEMCONV_STABILITY_OPT_IN"
TRACELOOP_TRACE_CONTENT_ENV = "TRACELOOP_TRACE_CONTENT"  # OpenLLMetry's content switch
OPENAI_BASE_URL_ENV = "OPENAI_BASE_URL"  # where an agent's OpenAI client sends its calls
OPENAI_API_KEY_ENV = "OPENAI_API_KEY"
VLLM_CPU_KVCACHE_SPACE_ENV = "VLLM_CPU_KVCACHE_SPACE"  # GiB of KV cache of the CPU vLLM
VLLM_SERVER_DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"  # vLLM's /collective_rpc and sleep endpoints (weight reloads)
VLLM_RUNTIME_LORA_ENV = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
RAY_ADDRESS_ENV = "RAY_ADDRESS"  # `build-dataset --engine ray`: the cluster (unset: a local Ray)
# set to "0" before a local Ray starts: Ray's announced next default (tasks asking no GPU keep the
# device variables as they are), without the warning it prints until then
RAY_ACCEL_OVERRIDE_ENV = "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO"
PYTHONPATH_ENV = "PYTHONPATH"  # `tracerl run` puts the auto-instrumentation hook first, so every Python child captures
PATH_ENV = "PATH"  # where `tracerl run` looks up its command, in the environment it hands it

# ---- a training job's place (torch.distributed's launchers set them; training/device.py reads them and,
# for a process started alone, sets them: rank 0 of 1 on loopback) -------------------------------
RANK_ENV = "RANK"
WORLD_SIZE_ENV = "WORLD_SIZE"
LOCAL_RANK_ENV = "LOCAL_RANK"  # the GPU of this process on its node; -1 on CPU, for DeepSpeed's CUDA-only calls
MASTER_ADDR_ENV = "MASTER_ADDR"  # the rendezvous store's host and port
MASTER_PORT_ENV = "MASTER_PORT"
DS_ACCELERATOR_ENV = "DS_ACCELERATOR"  # set to "cpu" before DeepSpeed is imported on a machine without a GPU

# ---- experiment trackers' own variables (`--report-to`), read so a team's settings apply unchanged ----
MLFLOW_TRACKING_URI_ENV = "MLFLOW_TRACKING_URI"  # the store (unset: MLflow's SQLite default, which needs full mlflow)
MLFLOW_EXPERIMENT_NAME_ENV = "MLFLOW_EXPERIMENT_NAME"  # default tracerl
MLFLOW_RUN_ID_ENV = "MLFLOW_RUN_ID"  # log into that run
WANDB_PROJECT_ENV = "WANDB_PROJECT"  # default tracerl
WANDB_DIR_ENV = "WANDB_DIR"  # where its files go (default: the run's folder)
TRACKIO_PROJECT_ENV = "TRACKIO_PROJECT"  # default tracerl
