"""Publishing a trained checkpoint to the endpoint the agents call: one way, several targets.

Everything that refreshes a policy endpoint (``tracerl train --server``, the demo, a
scheduled round) calls :func:`publish` with a target; what differs between endpoints
lives in the target. A target is a small object with a ``kind`` name and a
``load(checkpoint, version) -> served version`` method; :data:`TARGET_KINDS` maps the
kind names a command line offers (``--server-kind``) to target classes, so a new kind
of endpoint is one class and one entry there, and no caller changes.

The first target is tracerl's own server (``tracerl serve``), refreshed by
``POST /v1/load_weights``. Whatever goes wrong, the checkpoint stays on disk and the
endpoint keeps serving the version it had, and :class:`PublishError` says what to do.
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar, Protocol

import httpx

from tracerl.schemas import attributes as A


class PublishError(RuntimeError):
    """The endpoint was not refreshed; it still serves what it served before."""


@dataclass(frozen=True)
class PublishResult:
    target: str  # which endpoint, in words
    checkpoint: Path
    policy_version: int  # the version the endpoint serves now
    seconds: float  # from the request to the endpoint serving the new weights

    def as_dict(self) -> dict:
        return {**asdict(self), "checkpoint": str(self.checkpoint)}


class PublishTarget(Protocol):
    """An endpoint to refresh; ``str(target)`` names it in messages."""

    kind: ClassVar[str]  # the name in TARGET_KINDS

    def load(self, checkpoint: Path, version: int | None) -> int:
        """Make the endpoint serve ``checkpoint`` (as ``version`` if given); return the served version."""
        ...


@dataclass(frozen=True)
class BuiltinServer:
    """``tracerl serve``: loads the checkpoint beside decoding, swaps it in between tokens.

    It numbers versions itself (the next one) unless told which.
    """

    kind: ClassVar[str] = "tracerl"
    base_url: str  # http://HOST:PORT/v1, as the agents' OpenAI clients take it
    timeout_s: float = 120.0  # loading waits for the running batch to drain

    def __str__(self) -> str:
        return f"tracerl serve at {self.base_url}"

    def load(self, checkpoint: Path, version: int | None) -> int:
        body: dict = {"path": str(checkpoint)}
        if version is not None:
            body["version"] = version
        url = f"{self.base_url.rstrip('/')}/load_weights"
        try:
            reply = httpx.post(url, json=body, timeout=self.timeout_s)
        except httpx.TransportError as exc:
            raise PublishError(
                f"cannot reach {self} ({type(exc).__name__}: {exc}): start it (`tracerl serve`) or pass its "
                f"URL, then publish {checkpoint} again"
            ) from None
        if reply.status_code != 200:
            raise PublishError(f"{self} refused {checkpoint} (HTTP {reply.status_code}): {_error_message(reply)}")
        return int(reply.json()[A.POLICY_VERSION_FIELD])


TARGET_KINDS: dict[str, type[PublishTarget]] = {BuiltinServer.kind: BuiltinServer}


def target_for(base_url: str, kind: str = BuiltinServer.kind) -> PublishTarget:
    """The target of ``kind`` (a name of :data:`TARGET_KINDS`) at ``base_url``."""
    if kind not in TARGET_KINDS:
        raise PublishError(f"unknown endpoint kind {kind!r}: use one of {', '.join(sorted(TARGET_KINDS))}")
    return TARGET_KINDS[kind](base_url)


def publish(checkpoint_dir: str | os.PathLike, target: PublishTarget, version: int | None = None) -> PublishResult:
    """Make ``target`` serve the checkpoint in ``checkpoint_dir`` (as ``version``, or its next)."""
    checkpoint = Path(checkpoint_dir).resolve()
    if not (checkpoint / "config.json").is_file():
        raise PublishError(f"{checkpoint} is not a Hugging Face checkpoint (no config.json); {target} was left as it was")
    started = time.perf_counter()
    served = target.load(checkpoint, version)
    return PublishResult(str(target), checkpoint, served, round(time.perf_counter() - started, 3))


def _error_message(reply: httpx.Response) -> str:
    """The server's own words: OpenAI-style ``{"error": {"message"}}``, else the body's start."""
    try:
        return str(reply.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return reply.text[:500] or reply.reason_phrase
