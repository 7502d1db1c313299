"""Publishing a trained checkpoint to the endpoint the agents call: one way, several targets.

Everything that refreshes a policy endpoint (``tracerl train --server``, the demo, a
scheduled round) calls :func:`publish` with a target; what differs between endpoints
lives in the target. A target is a small object with a ``kind`` name and a
``load(checkpoint, version) -> served version`` method; :data:`TARGET_KINDS` maps the
kind names a command line offers (``--server-kind``) to target classes, so a new kind
of endpoint is one class and one entry there, and no caller changes.

The targets: tracerl's own server (``tracerl serve``, ``POST /v1/load_weights``);
``vllm serve`` reloading a full checkpoint from disk (:class:`VllmReload`) or swapping a
LoRA adapter in place (:class:`VllmLora`). (Sending weights over NCCL instead of disk
needs trainer and vLLM on separate GPUs and a gathered, unsharded model; until a GPU test
can show it, publishing goes through disk.) Whatever goes wrong, the checkpoint
stays on disk and the endpoint keeps serving the version it had (and agents are never
left paused), and :class:`PublishError` says what to do.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol

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
    base_url: str  # the endpoint, as its clients and the registry name it
    checkpoint_file: ClassVar[str]  # what a checkpoint folder holds for this target (checked before sending)

    def load(self, checkpoint: Path, version: int | None) -> int:
        """Make the endpoint serve ``checkpoint`` (as ``version`` if given); return the served version."""
        ...


@dataclass(frozen=True)
class BuiltinServer:
    """``tracerl serve``: loads the checkpoint beside decoding, swaps it in between tokens.

    It numbers versions itself (the next one) unless told which.
    """

    kind: ClassVar[str] = "tracerl"
    checkpoint_file: ClassVar[str] = "config.json"
    base_url: str  # http://HOST:PORT/v1, as the agents' OpenAI clients take it
    timeout_s: float = 120.0  # loading waits for the running batch to drain

    def __str__(self) -> str:
        return f"tracerl serve at {self.base_url}"

    def load(self, checkpoint: Path, version: int | None) -> int:
        body: dict = {"path": str(checkpoint)}
        if version is not None:
            body["version"] = version
        url = f"{self.base_url.rstrip('/')}{A.LOAD_WEIGHTS_PATH}"
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


# --- vLLM ---------------------------------------------------------------------------------------
# vLLM's weight endpoints (/pause, /resume, /collective_rpc, /update_weight_version, ...) exist
# only when it runs with VLLM_SERVER_DEV_MODE=1. Every vLLM target pauses with mode=wait (in-flight
# answers finish on the old weights, new requests wait), changes the weights, records the new
# version with /update_weight_version (what tracerl's middleware, serving/vllm_policy_version.py,
# puts on each answer, hence on the spans), and always resumes, so agents are never left paused.


class _Vllm:
    """The part of vLLM's HTTP API that publishing uses, its failures turned into what to do.

    A timeout is left to the caller (raised as ``httpx.TimeoutException``): what it means
    depends on the step that timed out.
    """

    def __init__(self, base_url: str, timeout_s: float = 60.0) -> None:
        self.url = base_url.rstrip("/").removesuffix("/v1")
        self.timeout_s = timeout_s  # pause (running answers finish first), resume, version

    def __str__(self) -> str:
        return f"vLLM at {self.url}"

    def request(self, method: str, path: str, *, timeout_s: float | None = None, **kwargs: Any) -> httpx.Response:
        try:
            return httpx.request(method, f"{self.url}{path}", timeout=timeout_s or self.timeout_s, **kwargs)
        except httpx.TimeoutException:
            raise
        except httpx.TransportError as exc:
            raise PublishError(f"cannot reach {self} ({type(exc).__name__}: {exc}): start `vllm serve` or pass its URL") from None

    def dev_endpoint(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """A development endpoint's answer; its absence names VLLM_SERVER_DEV_MODE, any refusal vLLM's words."""
        reply = self.request(method, path, **kwargs)
        if reply.status_code == 404:
            raise PublishError(
                f"{self} has no {path} endpoint: it was started without VLLM_SERVER_DEV_MODE=1, which publishing "
                "needs (pause, reload, resume, weight version). Restart it with VLLM_SERVER_DEV_MODE=1 (on a trusted "
                "network only: those endpoints run code on the server's behalf)"
            )
        if reply.status_code != 200:
            raise PublishError(f"{self} refused {path} (HTTP {reply.status_code}): {_error_message(reply)}")
        return reply

    def next_version(self, version: int | None) -> int:
        """``version``, else one more than vLLM's weight version (its ``"default"`` before any counts as 0)."""
        if version is not None:
            return version
        served = str(self.dev_endpoint("GET", "/weight_info").json().get("weight_version"))
        return (int(served) if served.isdigit() else 0) + 1

    def record_version(self, version: int) -> None:
        self.dev_endpoint("POST", "/update_weight_version", json={"new_version": str(version)})

    def adapter_versions(self) -> dict[str, int]:
        """Each LoRA adapter's policy version, as :class:`VllmLora` records them (empty before any)."""
        served = str(self.dev_endpoint("GET", "/weight_info").json().get("weight_version"))
        try:
            versions = json.loads(served) if served.startswith("{") else {}
        except ValueError:
            versions = {}
        return {name: v for name, v in versions.items() if isinstance(v, int)}

    def record_adapter_version(self, adapter: str, version: int) -> None:
        """Set one adapter's version, keeping the others' (read, change, write: one publisher at a time)."""
        versions = {**self.adapter_versions(), adapter: version}
        self.dev_endpoint("POST", "/update_weight_version", json={"new_version": json.dumps(versions, sort_keys=True)})

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Hold new requests and let running ones finish; resume whatever happens inside."""
        try:
            self.dev_endpoint("POST", "/pause", params={"mode": "wait"})
        except httpx.TimeoutException:
            self._resume()  # the pause may still take effect
            raise PublishError(f"{self} did not pause within {self.timeout_s:g} s (answers still running); it was resumed: publish again") from None
        try:
            yield
        finally:
            self._resume()

    def _resume(self) -> None:
        for attempt in range(3):
            try:
                if self.request("POST", "/resume").status_code in (200, 404):  # 404: never paused (no dev endpoints)
                    return
            except (httpx.TimeoutException, PublishError):
                pass
            time.sleep(0.5 * (attempt + 1))
        raise PublishError(f"{self} may still be paused and its agents waiting: POST {self.url}/resume by hand")


@dataclass
class VllmReload:
    """``vllm serve`` reloading a full checkpoint from disk (``/collective_rpc reload_weights``).

    Each version is its own directory (vLLM reads the path it is given). A reload that fails
    part-way leaves vLLM's weights undefined (on CPU the next request kills the engine), so a
    rejected or timed-out reload is followed, before agents resume, by the reload of the
    checkpoint served before (``served_checkpoint``: the last one this target published, or
    the one given).
    """

    kind: ClassVar[str] = "vllm"
    checkpoint_file: ClassVar[str] = "config.json"
    base_url: str  # http://HOST:PORT/v1 (or without /v1)
    served_checkpoint: Path | None = None
    reload_timeout_s: float = 300.0
    retries: int = 2  # more tries after a reload that timed out

    def __str__(self) -> str:
        return str(_Vllm(self.base_url))

    def load(self, checkpoint: Path, version: int | None) -> int:
        vllm = _Vllm(self.base_url)
        version = vllm.next_version(version)
        with vllm.paused():
            self._reload(vllm, checkpoint)
            vllm.record_version(version)
            vllm.dev_endpoint("POST", "/reset_prefix_cache")
        self.served_checkpoint = checkpoint
        return version

    def _reload(self, vllm: _Vllm, checkpoint: Path) -> None:
        problem = ""
        for _ in range(self.retries + 1):
            try:
                reply = vllm.request("POST", "/collective_rpc", json=_reload_body(checkpoint), timeout_s=self.reload_timeout_s)
            except httpx.TimeoutException:
                problem = f"timed out after {self.reload_timeout_s:g} s ({self.retries + 1} tries; raise reload_timeout_s if the model is large)"
                continue
            if reply.status_code == 200:
                return
            problem = f"rejected it (HTTP {reply.status_code}): {_error_message(reply)}"
            break
        raise PublishError(f"{vllm} did not load {checkpoint}: {problem}. {self._restore(vllm)}")

    def _restore(self, vllm: _Vllm) -> str:
        if self.served_checkpoint is None:
            return "Its weights may now be half-loaded: restart `vllm serve` on the last good checkpoint; the new checkpoint stays on disk"
        try:
            reply = vllm.request("POST", "/collective_rpc", json=_reload_body(self.served_checkpoint), timeout_s=max(self.reload_timeout_s, 600))
        except httpx.TimeoutException:
            reply = None
        if reply is None or reply.status_code != 200:
            return f"Restoring {self.served_checkpoint} failed too: restart `vllm serve` on it"
        return f"It serves {self.served_checkpoint} again, at the version it had; the new checkpoint stays on disk"


def _reload_body(checkpoint: Path) -> dict:
    return {"method": "reload_weights", "kwargs": {"weights_path": str(checkpoint)}}


@dataclass(frozen=True)
class VllmLora:
    """``vllm serve --enable-lora`` swapping the policy's LoRA adapter in place (``/v1/load_lora_adapter``).

    The agents call the adapter by its name (``model=adapter_name``); each publish loads
    the new adapter folder under that name with ``load_inplace``, so the name never
    changes. A rejected adapter leaves the previous one served.

    One vLLM can serve several adapters, each a policy of its own (``--policy``): each
    adapter has its own versions, recorded together as vLLM's weight version, a JSON object
    adapter -> version that ``vllm_policy_version`` reads per request. The publishes of one
    vLLM's adapters come from one process (a round or the loop), one after another.
    """

    kind: ClassVar[str] = "vllm-lora"
    checkpoint_file: ClassVar[str] = "adapter_config.json"
    base_url: str
    adapter_name: str = "policy-lora"
    timeout_s: float = 120.0

    def __str__(self) -> str:
        return f"{_Vllm(self.base_url)} (LoRA adapter {self.adapter_name!r})"

    def load(self, checkpoint: Path, version: int | None) -> int:
        vllm = _Vllm(self.base_url, self.timeout_s)
        if version is None:
            version = vllm.adapter_versions().get(self.adapter_name, 0) + 1
        with vllm.paused():
            body = {"lora_name": self.adapter_name, "lora_path": str(checkpoint), "load_inplace": True}
            reply = vllm.request("POST", "/v1/load_lora_adapter", json=body)
            if reply.status_code != 200:
                raise PublishError(f"{self} did not load {checkpoint}: {self._advice(reply)}; it serves the previous adapter")
            vllm.record_adapter_version(self.adapter_name, version)
        return version

    @staticmethod
    def _advice(reply: httpx.Response) -> str:
        message = _error_message(reply)
        if reply.status_code == 404 and "detail" in reply.text:  # FastAPI's own 404: the route is not mounted
            return "runtime LoRA loading is off: start vLLM with VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"
        if "LoRA is not enabled" in message:
            return "LoRA is not enabled: start vLLM with --enable-lora --max-lora-rank R (R >= the adapter's rank)"
        return f"rejected (HTTP {reply.status_code}): {message}"


TARGET_KINDS: dict[str, type[PublishTarget]] = {target.kind: target for target in (BuiltinServer, VllmReload, VllmLora)}


def target_for(base_url: str, kind: str = BuiltinServer.kind, adapter_name: str | None = None) -> PublishTarget:
    """The target of ``kind`` (a name of :data:`TARGET_KINDS`) at ``base_url`` (a LoRA target: ``adapter_name``'s, when given)."""
    if kind not in TARGET_KINDS:
        raise PublishError(f"unknown endpoint kind {kind!r}: use one of {', '.join(sorted(TARGET_KINDS))}")
    if kind == VllmLora.kind and adapter_name:
        return VllmLora(base_url, adapter_name=adapter_name)
    return TARGET_KINDS[kind](base_url)


def publish(checkpoint_dir: str | os.PathLike, target: PublishTarget, version: int | None = None) -> PublishResult:
    """Make ``target`` serve the checkpoint in ``checkpoint_dir`` (as ``version``, or its next)."""
    checkpoint = Path(checkpoint_dir).resolve()
    if not (checkpoint / target.checkpoint_file).is_file():
        if (checkpoint / "adapter_config.json").is_file():
            raise PublishError(f"{checkpoint} is a LoRA adapter, not a full model: publish it to vLLM with --server-kind vllm-lora "
                               "(vllm serve --enable-lora); it was left as it was")
        raise PublishError(f"{checkpoint} is not what {target} loads (no {target.checkpoint_file}); it was left as it was")
    started = time.perf_counter()
    served = target.load(checkpoint, version)
    return PublishResult(str(target), checkpoint, served, round(time.perf_counter() - started, 3))


def _error_message(reply: httpx.Response) -> str:
    """The server's own words: OpenAI-style ``{"error": {"message"}}``, else the body's start."""
    try:
        return str(reply.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return reply.text[:500] or reply.reason_phrase
