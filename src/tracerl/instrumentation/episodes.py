"""The episode API: :func:`episode`, :func:`emit_reward`, :func:`agent`.

An episode is one run of an agent on one task. Its attributes are put in W3C baggage
(copied onto every span by the tracerl span processor, in this process and in any
process the context is propagated to) and it is also a span, ``tracerl.episode``, so a
trace viewer shows the run as one tree.

An agent whose HTTP client sends no trace headers (LiteLLM, another language, a closed
binary) stays in its episode through the gateway with an episode-scoped base URL,
:meth:`Episode.base_url` or :func:`episode_base_url`: the URL path carries the context
(per-rollout endpoints, as RL rollout servers hand them out) and the gateway reads it back
with :func:`context_from_token`.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import orjson
from opentelemetry import baggage, context, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.propagators.composite import CompositePropagator
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from tracerl.schemas import attributes as A

_TRACER_NAME = "tracerl"
# W3C whatever OTEL_PROPAGATORS says: the token is read by a gateway configured on its own
_W3C = CompositePropagator([TraceContextTextMapPropagator(), W3CBaggagePropagator()])


@dataclass(frozen=True)
class Episode:
    episode_id: str
    task_id: str | None
    split: str | None
    trace_id: str
    token: str  # the episode's context as a URL path segment (see base_url)

    def base_url(self, gateway_url: str) -> str:
        """The gateway's base URL scoped to this episode: every call through it lands in the
        episode (its trace, task, split and agent), whatever headers the client sends."""
        return _scoped_url(gateway_url, self.token)


class EpisodeTokenError(ValueError):
    """A URL's episode token that is not one :func:`episode_token` made."""


def episode_token() -> str:
    """The current context (trace, span, baggage: episode, task, split, agent) as a URL-safe token."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier)
    return base64.urlsafe_b64encode(orjson.dumps(carrier)).decode("ascii").rstrip("=")


def context_from_token(token: str) -> context.Context:
    """The context :func:`episode_token` packed; :class:`EpisodeTokenError` names what is wrong."""
    try:
        carrier = orjson.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
    except (binascii.Error, ValueError) as exc:
        raise EpisodeTokenError(f"episode token {token[:40]!r} is not base64url JSON ({exc})") from None
    if not isinstance(carrier, dict) or not all(isinstance(v, str) for v in carrier.values()):
        raise EpisodeTokenError(f"episode token {token[:40]!r} does not hold W3C trace context headers")
    return _W3C.extract(carrier)


def episode_base_url(gateway_url: str) -> str:
    """The gateway's base URL scoped to the current episode (and agent, inside :func:`agent`)."""
    return _scoped_url(gateway_url, episode_token())


def _scoped_url(gateway_url: str, token: str) -> str:
    """``http://gw:8080/v1`` -> ``http://gw:8080/e/TOKEN/v1``: OpenAI clients append their paths."""
    root = gateway_url.rstrip("/").removesuffix("/v1")
    return f"{root}/{A.GATEWAY_EPISODE_PATH}/{token}/v1"


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
            token=episode_token(),
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
