"""Builders of hand-built span sets for the pipeline's tests: every id, time, token and reward is chosen by the test.

Spans are rows of the spans table (``tracerl.schemas.span_row``) written as a data dir
like the exporter writes one. Times are in microseconds from 0 (ns = us * 1000) so that
orderings read easily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracerl.schemas import attributes as A
from tracerl.schemas import span_row, spans_table
from tracerl.core.storage import write_parquet_atomic


def trace_of(episode: str) -> str:
    return episode.encode().hex().ljust(32, "0")[:32]


def span(episode: str, span_id: str, name: str, start: int, end: int, *, parent: str | None = "root",
         status: str = "OK", status_message: str | None = None, attrs: dict[str, Any] | None = None,
         events: list[dict] | None = None, task: str | None = None, baggage: bool = True, trace: str | None = None) -> dict:
    """One span of ``episode``; episode baggage (id, task, split) is on it unless ``baggage=False``."""
    attributes = dict(attrs or {})
    if baggage:
        attributes.setdefault(A.EPISODE_ID, episode)
        if task is not None:
            attributes.setdefault(A.TASK_ID, task)
        attributes.setdefault(A.SPLIT, "train")
    return span_row(
        trace_id=trace or trace_of(episode), span_id=span_id.ljust(16, "0")[:16],
        parent_span_id=None if parent is None else parent.ljust(16, "0")[:16], name=name, kind="INTERNAL",
        start_time_unix_nano=start * 1000, end_time_unix_nano=end * 1000, status_code=status,
        status_message=status_message, attributes=attributes, events=events or [],
        resource={"service.name": "test-agent"},
    )


def episode_span(episode: str, start: int, end: int, task: str | None = None, **kw) -> dict:
    return span(episode, "root", A.EPISODE_SPAN_NAME, start, end, parent=None, task=task, **kw)


def llm_call(episode: str, span_id: str, start: int, end: int, prompt: list[int], completion: list[int], *,
             logprobs: list[float] | None = None, agent: str | None = None, version: int | None = 1,
             response_id: str | None = None, model: str | None = None, extra: dict | None = None, **kw) -> dict:
    """An LLM call with token ids; ``model``: the model the server answered as (a LoRA adapter's name)."""
    attrs = {
        A.GEN_AI_SYSTEM: "openai", A.GEN_AI_OPERATION: A.GEN_AI_CHAT,
        A.PROMPT_TOKEN_IDS: prompt, A.COMPLETION_TOKEN_IDS: completion,
        A.COMPLETION_LOGPROBS: logprobs if logprobs is not None else [-0.5] * len(completion or []),
        A.GEN_AI_INPUT_MESSAGES: '[{"role":"user","parts":[{"type":"text","content":"q"}]}]',
        A.GEN_AI_OUTPUT_MESSAGES: '[{"role":"assistant","parts":[{"type":"text","content":"a"}]}]',
        **(extra or {}),
    }
    if prompt is None:
        del attrs[A.PROMPT_TOKEN_IDS]
    if completion is None:
        del attrs[A.COMPLETION_TOKEN_IDS], attrs[A.COMPLETION_LOGPROBS]
    if agent is not None:
        attrs[A.AGENT_NAME] = agent
    if version is not None:
        attrs[A.POLICY_VERSION] = version
    if response_id is not None:
        attrs[A.GEN_AI_RESPONSE_ID] = response_id
    if model is not None:
        attrs[A.GEN_AI_RESPONSE_MODEL] = model
    return span(episode, span_id, "chat test-model", start, end, attrs=attrs, **kw)


def reward_span(episode: str, span_id: str, at: int, value: float, name: str | None = None, **kw) -> dict:
    attrs = {A.REWARD_VALUE: value}
    if name:
        attrs[A.REWARD_NAME] = name
    return span(episode, span_id, A.REWARD_SPAN_NAME, at, at, attrs=attrs, **kw)


def tool_span(episode: str, span_id: str, start: int, end: int, tool: str = "calculator", *,
              status: str = "OK", result: str | None = None, **kw) -> dict:
    attrs = {A.GEN_AI_OPERATION: A.GEN_AI_EXECUTE_TOOL, A.GEN_AI_TOOL_NAME: tool}
    if result is not None:
        attrs[A.GEN_AI_TOOL_CALL_RESULT] = result
    return span(episode, span_id, f"execute_tool {tool}", start, end, status=status, attrs=attrs, **kw)


def chat_episode(episode: str, task: str = "t", reward: float = 1.0) -> list[dict]:
    """A finished, rewarded chat episode of three calls: call 2's prompt is call 1's prompt + response +
    a tool's output [9, 9] (trajectory mode merges them); call 3 starts afresh."""
    return [
        episode_span(episode, 0, 1000, task=task),
        llm_call(episode, "c1", 10, 20, [1, 2], [3, 4], logprobs=[-0.1, -0.2]),
        llm_call(episode, "c2", 30, 40, [1, 2, 3, 4, 9, 9], [5], logprobs=[-0.3]),
        llm_call(episode, "c3", 50, 60, [7], [8], logprobs=[-0.4]),
        reward_span(episode, "r", 70, reward),
    ]


def write_spans(folder: Path, rows: list[dict]) -> Path:
    """Write rows as one span file of a data dir ``folder`` (``folder/spans/...``); return ``folder``."""
    write_parquet_atomic(spans_table(rows), folder / "spans", prefix="spans", partition="date=2026-01-01/hour=00")
    return folder
