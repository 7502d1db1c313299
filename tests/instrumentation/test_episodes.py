"""Episodes, rewards and agent names land on every span, in this process and across
processes (W3C trace context + baggage)."""

from __future__ import annotations

import pytest
from opentelemetry import context, propagate, trace

import tracerl
from tracerl.schemas import attributes as A


def by_name(spans) -> dict:
    return {s.name: s for s in spans.get_finished_spans()}


def test_every_span_inside_an_episode_carries_its_attributes(spans):
    tracer = trace.get_tracer("agent")
    with tracerl.episode(task_id="t-1", split="train") as ep:
        with tracer.start_as_current_span("step"):
            tracer.start_span("tool").end()
    tracer.start_span("after").end()

    got = by_name(spans)
    for name in (A.EPISODE_SPAN_NAME, "step", "tool"):
        attrs = got[name].attributes
        assert (attrs[A.EPISODE_ID], attrs[A.TASK_ID], attrs[A.SPLIT]) == (ep.episode_id, "t-1", "train"), name
    assert A.EPISODE_ID not in got["after"].attributes
    assert ep.trace_id == format(got["tool"].context.trace_id, "032x")


def test_episode_ids_are_fresh_unless_given(spans):
    with tracerl.episode(task_id="t") as first, tracerl.episode(task_id="t") as second:
        pass
    with tracerl.episode(episode_id="mine") as given:
        pass
    assert first.episode_id != second.episode_id and given.episode_id == "mine"


def test_emit_reward_is_a_reward_span_inside_the_episode(spans):
    with tracerl.episode(task_id="t-2") as ep:
        tracerl.emit_reward(0.5, name="partial")
        tracerl.emit_reward(1)
    rewards = [s for s in spans.get_finished_spans() if s.name == A.REWARD_SPAN_NAME]
    assert [(s.attributes[A.REWARD_VALUE], s.attributes[A.REWARD_NAME]) for s in rewards] == [(0.5, "partial"), (1.0, "reward")]
    assert {s.attributes[A.EPISODE_ID] for s in rewards} == {ep.episode_id}


def test_a_reward_that_is_not_a_number_is_refused_with_its_value():
    with pytest.raises(TypeError, match="'high'"):
        tracerl.emit_reward("high")


def test_agent_names_come_from_the_override_or_the_parent_span(spans):
    tracer = trace.get_tracer("agent")
    with tracer.start_as_current_span("invoke_agent", attributes={A.GEN_AI_AGENT_NAME: "researcher"}):
        tracer.start_span("llm-call").end()
    with tracerl.agent("critic"):
        tracer.start_span("override").end()
    got = by_name(spans)
    assert got["llm-call"].attributes[A.GEN_AI_AGENT_NAME] == "researcher"
    assert got["override"].attributes[A.AGENT_NAME] == "critic"


def test_episode_context_crosses_a_process_boundary_as_w3c_headers(spans):
    """What an instrumented HTTP client sends and an instrumented server reads back."""
    with tracerl.episode(task_id="t-3", split="val") as ep:
        headers: dict[str, str] = {}
        propagate.inject(headers)
    assert "traceparent" in headers and A.EPISODE_ID in headers["baggage"]

    token = context.attach(propagate.extract(headers))  # the "other process"
    try:
        trace.get_tracer("tool-server").start_span("tool").end()
    finally:
        context.detach(token)
    tool = by_name(spans)["tool"]
    assert tool.attributes[A.EPISODE_ID] == ep.episode_id and tool.attributes[A.SPLIT] == "val"
    assert format(tool.context.trace_id, "032x") == ep.trace_id
