"""Scripted judges for ``tracerl pipeline judge``: responders for :mod:`tracerl_testing.scripted_server`.

A scripted judge reads the prompt as a model would (the ``<context>`` the episodes share,
then one ``<trajectory id="i">`` block each) and scores every trajectory with a plain
function, so a test knows the right answer; it can also answer garbage, and a
:func:`dropping_server` closes every connection without answering. A :func:`gate` stands in
front of a scripted judge, logs every request (which task, which run sent it) and answers
chosen ones itself with any status, header and body (:class:`Canned`).
"""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from starlette.responses import Response
from starlette.types import Message, Receive, Scope, Send

from tracerl.core.uvicorn_thread import serve_in_thread
from tracerl_testing.scripted_server import Reply, Responder, ScriptedServer

_CONTEXT = re.compile(r"<context>\n(.*?)\n</context>", re.DOTALL)
_TRAJECTORY = re.compile(r'<trajectory id="(\d+)">\n(.*?)\n</trajectory>', re.DOTALL)

Scorer = Callable[[str, str], float]  # (shared context, one trajectory's text) -> score in 0..1


def trajectories(body: dict) -> tuple[str, list[str]]:
    """The shared context and each trajectory's text, in id order, of a judge request."""
    prompt = body["messages"][-1]["content"]
    context = _CONTEXT.search(prompt)
    return (context.group(1) if context else "", [text for _, text in _TRAJECTORY.findall(prompt)])


def scripted_judge(score: Scorer) -> Responder:
    """A judge that scores each trajectory with ``score`` and answers in the format asked for."""

    def respond(body: dict) -> Reply:
        context, texts = trajectories(body)
        return Reply(text=verdict([score(context, text) for text in texts]))

    return respond


def verdict(scores: Sequence[float]) -> str:
    """A judge's answer in the format asked for: ``scores`` for trajectories 1..n, in a fenced JSON block."""
    entries = [{"trajectory_id": str(i), "explanation": "scripted", "score": s} for i, s in enumerate(scores, 1)]
    return "Here is my verdict:\n```json\n" + json.dumps({"scores": entries}) + "\n```"


def garbage_judge(body: dict) -> Reply:
    """A judge that does not follow the format."""
    return Reply(text="I think the second one is better, probably.")


@contextmanager
def dropping_server() -> Iterator[str]:
    """A base URL whose server reads each request and closes the connection without a byte of answer."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                conn.recv(65536)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}/v1"
    finally:
        stop.set()
        thread.join()
        listener.close()


def error_body(status: int) -> dict[str, Any]:
    """The OpenAI-style error object a vLLM server answers an HTTP error with."""
    return {"object": "error", "message": f"scripted error {status}", "code": status}


def completion(content: Any) -> dict[str, Any]:
    """A chat completion whose one message carries ``content`` (whatever it is: a judge test sends wrong ones too)."""
    return {"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                                                      "finish_reason": "stop"}]}


@dataclass(frozen=True)
class Canned:
    """One reply exactly as a judge, or whatever stands at its URL, sends it, after ``delay_s``.

    ``body``: a JSON value, sent as ``content_type`` says (a wrong one included), or bytes as written."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    body: Any = None
    content_type: str = "application/json"
    delay_s: float = 0.0

    @staticmethod
    def encode(body: Any) -> bytes:
        """``body`` as sent: bytes as given, anything else as JSON written the way Starlette (and so vLLM) writes it."""
        return body if isinstance(body, bytes) else json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await asyncio.sleep(self.delay_s)
        await Response(self.encode(self.body), self.status, self.headers, media_type=self.content_type)(scope, receive, send)


@dataclass
class Asked:
    """One request as the gate saw it: when it arrived, the status it got (``None`` while unanswered or never),
    the task's question in its prompt (``None`` when the body never arrived whole), the ``Authorization`` header
    it carried (tests give each run of the judge its own ``--api-key``: a marker of who sent it, whenever it lands),
    and the path and query it asked for."""

    arrived: float
    question: str | None
    run: str | None
    target: str
    status: int | None = None


_USER = re.compile(r"^\[user\] (.*)$", re.MULTILINE)


def _question(body: bytes) -> str | None:
    """The first user turn of a judge request's prompt: the task its group is of."""
    try:
        found = _USER.search(json.loads(body)["messages"][-1]["content"])
    except (ValueError, LookupError, TypeError):
        return None
    return found.group(1) if found else None


async def _whole_body(receive: Receive) -> bytes | None:
    """The request's body; ``None`` when its client went away first (a judge killed mid-send)."""
    body = b""
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return None
        body += message.get("body", b"")
        if not message.get("more_body"):
            return body


@dataclass
class Gate:
    """A scripted judge behind a gate that logs every request (:class:`Asked`) and can answer in its place.

    The first requests get the queued ``failures``; then a request whose task's question has replies left in
    ``scripts`` gets the next of them; the rest reach the judge, which scores with ``score``."""

    score: Scorer
    failures: list[Canned] = field(default_factory=list)
    latency_s: float = 0.0
    scripts: dict[str, list[Canned]] = field(default_factory=dict)
    requests: list[Asked] = field(default_factory=list)
    in_flight: int = 0
    most_in_flight: int = 0
    base_url: str = ""

    def __post_init__(self) -> None:
        self.judge = ScriptedServer(scripted_judge(self.score), latency_s=self.latency_s)

    @property
    def statuses(self) -> list[int | None]:
        return [asked.status for asked in self.requests]

    def asked(self, run: str | None = None) -> list[str]:
        """The questions of the requests that arrived whole (those sent with ``Authorization: Bearer RUN``), in order."""
        return [a.question for a in self.requests if a.question is not None and (run is None or a.run == f"Bearer {run}")]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return await self.judge.app(scope, receive, send)
        arrived = time.monotonic()
        body = await _whole_body(receive)
        headers = dict(scope["headers"])
        target = scope["path"] + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
        asked = Asked(arrived, _question(body) if body is not None else None,
                      headers[b"authorization"].decode() if b"authorization" in headers else None, target)
        self.requests.append(asked)
        if body is None:
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if replayed:
                return await receive()
            replayed = True
            return {"type": "http.request", "body": body, "more_body": False}

        async def logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                asked.status = message["status"]
            await send(message)

        self.in_flight += 1  # one event loop: no lock needed
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            scripted = self.scripts.get(asked.question or "")
            if self.failures:
                await self.failures.pop(0)(scope, replay, logged)
            elif scripted:
                await scripted.pop(0)(scope, replay, logged)
            else:
                await self.judge.app(scope, replay, logged)
        finally:
            self.in_flight -= 1


@contextmanager
def gate(score: Scorer, *failures: Canned | tuple[int, dict[str, str]], latency_s: float = 0.0,
         scripts: dict[str, list[Canned]] | None = None) -> Iterator[Gate]:
    """A :class:`Gate` on loopback; a failure given as ``(status, headers)`` answers the status's error object."""
    queued = [f if isinstance(f, Canned) else Canned(f[0], f[1], error_body(f[0])) for f in failures]
    server = Gate(score, queued, latency_s, {question: list(replies) for question, replies in (scripts or {}).items()})
    with serve_in_thread(server, name="judge-gate") as url:
        server.base_url = f"{url}/v1"
        yield server
