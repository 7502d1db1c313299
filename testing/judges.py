"""Scripted judges for ``tracerl pipeline judge``: responders for :mod:`tracerl_testing.scripted_server`.

A scripted judge reads the prompt as a model would (the ``<context>`` the episodes share,
then one ``<trajectory id="i">`` block each) and scores every trajectory with a plain
function, so a test knows the right answer; it can also answer garbage, and a
:func:`dropping_server` closes every connection without answering.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from tracerl_testing.scripted_server import Reply, Responder

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
        scores = [{"trajectory_id": str(i), "explanation": "scripted", "score": score(context, text)} for i, text in enumerate(texts, 1)]
        return Reply(text="Here is my verdict:\n```json\n" + json.dumps({"scores": scores}) + "\n```")

    return respond


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
