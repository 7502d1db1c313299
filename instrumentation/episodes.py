"""The episode API: :func:`episode`, :func:`emit_reward`, :func:`agent`.

An episode is one run of an agent on one task. Its attributes are put in W3C baggage
(copied onto every span by the tracerl span processor, in this process and in any
process the context is propagated to) and it is also a span, ``tracerl.episode``, so a
trace viewer shows the run as one tree.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from opentelemetry import baggage, context, trace

from tracerl.schemas import attributes as A

_TRACER_NAME = "tracerl"


@dataclass(frozen=True)
class Episode:
    episode_id: str
    task_id: str | None
    split: str | None
    trace_id: str


@contextmanager
def _with_baggage(values: dict[str, str]) -> Iterator[None]:
    ctx = context.get_current()
    for key, value in values.items():
        ctx = baggage.set_baggage(key, value, ctx)
    token = context.attach(ctx)
    try:
        yield
    finally:
        context.detach(token)


@contextmanager
def episode(
    task_id: str | None = None,
    split: str | None = None,
    *,
    episode_id: str | None = None,
    agent_name: str | None = None,
) -> Iterator[Episode]:
    """Mark everything inside the block as one episode of ``task_id``.

    ``split`` is ``train``, ``val`` or ``test``; ``episode_id`` defaults to a fresh
    random id; ``agent_name`` overrides the agent name of every call inside.
    """
    values = {A.EPISODE_ID: episode_id or uuid.uuid4().hex}
    if task_id is not None:
        values[A.TASK_ID] = str(task_id)
    if split is not None:
        values[A.SPLIT] = str(split)
    if agent_name is not None:
        values[A.AGENT_NAME] = str(agent_name)
    tracer = trace.get_tracer(_TRACER_NAME)
    with _with_baggage(values), tracer.start_as_current_span(A.EPISODE_SPAN_NAME, attributes=values) as span:
        yield Episode(
            episode_id=values[A.EPISODE_ID],
            task_id=values.get(A.TASK_ID),
            split=values.get(A.SPLIT),
            trace_id=format(span.get_span_context().trace_id, "032x"),
        )


def emit_reward(value: float, name: str = "reward") -> None:
    """Record a reward in the current episode as a ``tracerl.reward`` span.

    The pipeline attaches it to the right LLM call by time; call it as often as there
    are rewards (a final score, a partial credit, a penalty).
    """
    try:
        number = float(value)
    except (TypeError, ValueError) as exc:
        raise TypeError(f"emit_reward: value must be a number, got {value!r}") from exc
    tracer = trace.get_tracer(_TRACER_NAME)
    attributes = {A.REWARD_VALUE: number, A.REWARD_NAME: str(name)}
    tracer.start_span(A.REWARD_SPAN_NAME, attributes=attributes).end()


@contextmanager
def agent(name: str) -> Iterator[None]:
    """Attribute every LLM call inside the block to the (sub-)agent ``name``."""
    with _with_baggage({A.AGENT_NAME: str(name)}):
        yield
