"""tracerl's built-in OpenAI-compatible policy server (CPU, transformers).

It answers like vLLM does for RL: with ``return_token_ids`` a response carries the
prompt's token ids and each choice's sampled ids, log-probs are of the raw model
distribution, and every response names the policy version that produced it
(``policy_version`` in the body, ``x-tracerl-policy-version`` header).
``POST /v1/load_weights`` swaps in a new checkpoint between decode steps.

``running_server()`` starts it on loopback in a background thread (tests, the demo);
``tracerl serve`` runs it in the foreground.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Iterator

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tracerl.trainer.serving import tool_parser
from tracerl.trainer.serving.engine import (
    ChoiceResult,
    GenerationEngine,
    GenerationError,
    GenerationHandle,
    SamplingParams,
    TokenStep,
    WeightLoadError,
)
from tracerl.trainer.serving.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    LoadWeightsRequest,
    RequestError,
    parse_request,
)
from tracerl.trainer.serving.prompts import chat_prompt_ids, completion_prompt_ids

VERSION_HEADER = "x-tracerl-policy-version"
_MIN_LOGPROB = -9999.0  # JSON has no -inf; vLLM clamps the same way


def create_app(
    model_path: str | Path | None = None,
    *,
    served_model_name: str | None = None,
    max_batch_size: int = 64,
    policy_version: int = 0,
    num_threads: int | None = 1,
) -> Starlette:
    """The ASGI app serving ``model_path`` (default: the tiny local model).

    The model loads here, so a bad path fails now; decoding starts with the app's lifespan.
    """
    if model_path is None:
        from tracerl.trainer.tiny_model import ensure_tiny_model

        model_path = ensure_tiny_model()
    engine = GenerationEngine(
        model_path, max_batch_size=max_batch_size, policy_version=policy_version, num_threads=num_threads
    )
    api = _Api(engine, served_model_name or Path(model_path).name)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        engine.start()
        try:
            yield
        finally:
            await run_in_threadpool(engine.stop)

    app = Starlette(
        routes=[
            Route("/v1/chat/completions", api.chat_completions, methods=["POST"]),
            Route("/v1/completions", api.completions, methods=["POST"]),
            Route("/v1/models", api.models, methods=["GET"]),
            Route("/v1/load_weights", api.load_weights, methods=["POST"]),
            Route("/health", api.health, methods=["GET"]),
        ],
        exception_handlers={RequestError: _request_error, HTTPException: _http_error},
        lifespan=lifespan,
    )
    app.state.engine = engine
    return app


class _Api:
    """Request handlers; one instance per app."""

    def __init__(self, engine: GenerationEngine, model_name: str) -> None:
        self.engine = engine
        self.model_name = model_name
        self.created = int(time.time())

    # ---- plain endpoints -------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        engine = self.engine
        body = {"status": "ok", "policy_version": engine.policy_version, "running": engine.running, "waiting": engine.waiting}
        return _json(body, engine.policy_version)

    async def models(self, request: Request) -> Response:
        card = {
            "id": self.model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "tracerl",
            "root": str(self.engine.model_path),
            "max_model_len": self.engine.max_context,
        }
        return _json({"object": "list", "data": [card]}, self.engine.policy_version)

    async def load_weights(self, request: Request) -> Response:
        body = parse_request(LoadWeightsRequest, await _body(request))
        try:
            version = await run_in_threadpool(self.engine.load_weights, body.path, body.version)
        except WeightLoadError as exc:
            raise RequestError(str(exc), param="path") from None
        except GenerationError as exc:
            raise RequestError(str(exc), status=503, type="server_error") from None
        return _json({"policy_version": version}, version)

    # ---- generation ----------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        req = parse_request(ChatCompletionRequest, await _body(request))
        if req.top_logprobs and not req.logprobs:
            raise RequestError("top_logprobs needs logprobs: true", param="top_logprobs")
        prompt = chat_prompt_ids(self.engine.tokenizer, req)
        params = self._sampling_params(req, [prompt], req.top_logprobs or 0, prompt_param="messages")
        return await self._generate(request, _ChatReply(self, req, prompt), [prompt], params)

    async def completions(self, request: Request) -> Response:
        req = parse_request(CompletionRequest, await _body(request))
        if req.echo:
            raise RequestError("echo is not supported by the built-in server", param="echo")
        prompts = completion_prompt_ids(self.engine.tokenizer, req, self.engine.vocab_size)
        params = self._sampling_params(req, prompts, req.logprobs or 0, prompt_param="prompt")
        return await self._generate(request, _CompletionReply(self, req, prompts), prompts, params)

    async def _generate(
        self, request: Request, reply: _ChatReply | _CompletionReply, prompts: list[list[int]], params: SamplingParams
    ) -> Response:
        """Run the request; answer once it is admitted, when its policy version is known."""
        handle = self.engine.submit(prompts, params, n=reply.req.n)
        reply.version = await _admitted(handle)
        if reply.req.stream:
            return _sse(reply.stream(handle), handle, reply.version)
        return _json(reply.body(await _results(handle, request)), reply.version)

    def _sampling_params(self, req, prompts: list[list[int]], top_logprobs: int, *, prompt_param: str) -> SamplingParams:
        context = self.engine.max_context
        longest = max(len(p) for p in prompts)
        if longest >= context:
            raise RequestError(
                f"the prompt is {longest} tokens long; this model's context is {context} tokens, "
                "so no completion token fits. Shorten the prompt.",
                param=prompt_param,
            )
        limit = req.token_limit()
        if limit is not None and longest + limit > context:
            raise RequestError(
                f"this model's maximum context length is {context} tokens, but the prompt ({longest} tokens) "
                f"plus max_tokens ({limit}) would be {longest + limit}. Lower max_tokens or shorten the prompt.",
                param="max_completion_tokens" if getattr(req, "max_completion_tokens", None) else "max_tokens",
            )
        return SamplingParams(
            max_tokens=limit if limit is not None else context - longest,
            temperature=req.temperature,
            top_p=req.top_p,
            stop=req.stop_strings(),
            top_logprobs=top_logprobs,
            seed=req.seed,
            ignore_eos=req.ignore_eos,
        )

    def token_text(self, req, token_id: int) -> str:
        """How logprobs name a token: its text, or "token_id:N" (vLLM) since texts can collide."""
        return f"token_id:{token_id}" if req.return_tokens_as_token_ids else self.engine.tokenizer.decode([token_id])

    def reported_model(self, req) -> str:
        """Single-model server: any name is served, and echoed back as asked."""
        return req.model or self.model_name


class _ChatReply:
    """Builds chat.completion bodies and chat.completion.chunk streams."""

    def __init__(self, api: _Api, req: ChatCompletionRequest, prompt: list[int]) -> None:
        self.api, self.req, self.prompt = api, req, prompt
        self.version = -1  # set on admission
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.parse_tools = bool(req.tools) and req.tool_choice != "none"

    def _envelope(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.api.reported_model(self.req)}

    def body(self, results: list[ChoiceResult]) -> dict:
        choices = []
        for r in results:
            message: dict = {"role": "assistant", "content": r.text}
            finish = r.finish_reason
            parsed = tool_parser.parse(r.text) if self.parse_tools else None
            if parsed is not None:
                message = {"role": "assistant", "content": parsed.content, "tool_calls": parsed.tool_calls}
                finish = "tool_calls"
            choice = {"index": r.choice, "message": message, "logprobs": None, "finish_reason": finish}
            if self.req.logprobs:
                choice["logprobs"] = {"content": [self._logprob(t, lp, tops) for t, lp, tops in zip(r.token_ids, r.logprobs, r.top_logprobs)]}
            if self.req.return_token_ids:
                choice["token_ids"] = r.token_ids
            choices.append(choice)
        body = {**self._envelope("chat.completion"), "choices": choices, "usage": _usage([self.prompt], results)}
        if self.req.return_token_ids:
            body["prompt_token_ids"] = self.prompt
        body["policy_version"] = self.version
        return body

    async def stream(self, handle: GenerationHandle) -> AsyncIterator[dict]:
        head = self._chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None} for i in range(self.req.n)])
        if self.req.return_token_ids:
            head["prompt_token_ids"] = self.prompt
        yield head
        shown = [""] * self.req.n  # text so far per choice; `sent` is what the client has
        sent = [""] * self.req.n
        results: list[ChoiceResult] = []
        async for event in handle.events():
            if isinstance(event, TokenStep):
                i = event.choice
                shown[i] += event.text
                visible = shown[i][: len(shown[i]) - tool_parser.held_back(shown[i])] if self.parse_tools else shown[i]
                choice = {"index": i, "delta": {"content": visible[len(sent[i]) :]}, "logprobs": None, "finish_reason": None}
                sent[i] = visible
                if self.req.logprobs:
                    choice["logprobs"] = {"content": [self._logprob(event.token_id, event.logprob, event.top_logprobs)]}
                if self.req.return_token_ids:
                    choice["token_ids"] = [event.token_id]
                yield self._chunk([choice])
            else:
                results.append(event)
                yield self._chunk([self._final_delta(event, sent[event.choice])])
        if self.req.stream_options and self.req.stream_options.include_usage:
            yield {**self._chunk([]), "usage": _usage([self.prompt], results)}

    def _final_delta(self, result: ChoiceResult, sent: str) -> dict:
        parsed = tool_parser.parse(result.text) if self.parse_tools else None
        if parsed is not None:
            calls = [{"index": k, **call} for k, call in enumerate(parsed.tool_calls)]
            delta: dict = {"tool_calls": calls}
            finish = "tool_calls"
        else:
            rest = result.text[len(sent) :]
            delta, finish = ({"content": rest} if rest else {}), result.finish_reason
        choice = {"index": result.choice, "delta": delta, "logprobs": None, "finish_reason": finish}
        if self.req.return_token_ids:
            choice["token_ids"] = []
        return choice

    def _chunk(self, choices: list[dict]) -> dict:
        return {**self._envelope("chat.completion.chunk"), "choices": choices, "policy_version": self.version}

    def _logprob(self, token_id: int, logprob: float, tops: list[tuple[int, float]]) -> dict:
        entry = self._token_logprob(token_id, logprob)
        entry["top_logprobs"] = [self._token_logprob(t, lp) for t, lp in tops]
        return entry

    def _token_logprob(self, token_id: int, logprob: float) -> dict:
        text = self.api.token_text(self.req, token_id)
        return {"token": text, "logprob": max(logprob, _MIN_LOGPROB), "bytes": list(text.encode("utf-8"))}


class _CompletionReply:
    """Builds text_completion bodies and streams."""

    def __init__(self, api: _Api, req: CompletionRequest, prompts: list[list[int]]) -> None:
        self.api, self.req, self.prompts = api, req, prompts
        self.version = -1  # set on admission
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _prompt_of(self, choice: int) -> list[int]:
        return self.prompts[choice // self.req.n]

    def _envelope(self) -> dict:
        return {"id": self.id, "object": "text_completion", "created": self.created, "model": self.api.reported_model(self.req)}

    def body(self, results: list[ChoiceResult]) -> dict:
        choices = []
        for r in results:
            choice = {"index": r.choice, "text": r.text, "logprobs": None, "finish_reason": r.finish_reason}
            if self.req.logprobs is not None:
                choice["logprobs"] = self._logprobs(r.token_ids, r.logprobs, r.top_logprobs, 0)
            if self.req.return_token_ids:
                choice["prompt_token_ids"] = self._prompt_of(r.choice)
                choice["token_ids"] = r.token_ids
            choices.append(choice)
        body = {**self._envelope(), "choices": choices, "usage": _usage(self.prompts, results)}
        if self.req.return_token_ids and len(self.prompts) == 1:
            body["prompt_token_ids"] = self.prompts[0]
        body["policy_version"] = self.version
        return body

    async def stream(self, handle: GenerationHandle) -> AsyncIterator[dict]:
        offsets = [0] * (len(self.prompts) * self.req.n)
        started: set[int] = set()
        results: list[ChoiceResult] = []
        async for event in handle.events():
            if isinstance(event, TokenStep):
                i = event.choice
                choice = {"index": i, "text": event.text, "logprobs": None, "finish_reason": None}
                if self.req.logprobs is not None:
                    choice["logprobs"] = self._logprobs([event.token_id], [event.logprob], [event.top_logprobs], offsets[i])
                offsets[i] += len(event.text)
                chunk = self._chunk([choice])
                if self.req.return_token_ids:
                    if i not in started:
                        choice["prompt_token_ids"] = self._prompt_of(i)
                        if not started and len(self.prompts) == 1:  # like the non-streamed body
                            chunk["prompt_token_ids"] = self.prompts[0]
                    choice["token_ids"] = [event.token_id]
                started.add(i)
                yield chunk
            else:
                results.append(event)
                choice = {"index": event.choice, "text": "", "logprobs": None, "finish_reason": event.finish_reason}
                if self.req.return_token_ids:
                    choice["token_ids"] = []
                yield self._chunk([choice])
        if self.req.stream_options and self.req.stream_options.include_usage:
            yield {**self._chunk([]), "usage": _usage(self.prompts, results)}

    def _chunk(self, choices: list[dict]) -> dict:
        return {**self._envelope(), "choices": choices, "policy_version": self.version}

    def _logprobs(self, ids: list[int], logprobs: list[float], tops: list[list[tuple[int, float]]], offset: int) -> dict:
        tokens = [self.api.token_text(self.req, t) for t in ids]
        text_offset = []
        for token in tokens:
            text_offset.append(offset)
            offset += len(token)
        return {
            "tokens": tokens,
            "token_logprobs": [max(lp, _MIN_LOGPROB) for lp in logprobs],
            "top_logprobs": [{self.api.token_text(self.req, t): max(lp, _MIN_LOGPROB) for t, lp in step} for step in tops]
            if self.req.logprobs
            else None,
            "text_offset": text_offset,
        }


# ---- helpers -------------------------------------------------------------------------------
async def _body(request: Request) -> object:
    raw = await request.body()
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise RequestError(f"the request body is not valid JSON: {exc}") from None


async def _admitted(handle: GenerationHandle) -> int:
    try:
        return await handle.admitted()
    except GenerationError as exc:
        raise RequestError(str(exc), status=500, type="server_error") from None
    except BaseException:
        handle.cancel()
        raise


async def _results(handle: GenerationHandle, request: Request) -> list[ChoiceResult]:
    """The finished choices, or a cancelled generation if the client hangs up first.

    Agents time out and retry; without this, each abandoned call would keep its batch slots.
    """
    results = asyncio.ensure_future(handle.results())
    hang_up = asyncio.ensure_future(_disconnected(request))
    try:
        await asyncio.wait({results, hang_up}, return_when=asyncio.FIRST_COMPLETED)
        return results.result() if results.done() else []
    except GenerationError as exc:
        raise RequestError(str(exc), status=500, type="server_error") from None
    finally:
        hang_up.cancel()
        results.cancel()
        handle.cancel()  # a no-op once finished


async def _disconnected(request: Request) -> None:
    """Return when the client closes the connection (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _usage(prompts: list[list[int]], results: list[ChoiceResult]) -> dict:
    prompt_tokens = sum(len(p) for p in prompts)
    completion_tokens = sum(len(r.token_ids) for r in results)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}


def _json(body: dict, version: int, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={VERSION_HEADER: str(version)})


def _sse(chunks: AsyncIterator[dict], handle: GenerationHandle, version: int) -> StreamingResponse:
    async def lines() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
        except GenerationError as exc:
            yield f"data: {json.dumps(RequestError(str(exc), status=500, type='server_error').body())}\n\n"
        finally:
            handle.cancel()

    return StreamingResponse(lines(), media_type="text/event-stream", headers={VERSION_HEADER: str(version)})


async def _request_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)
    return JSONResponse(exc.body(), status_code=exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error_type = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    message = f"{request.method} {request.url.path}: {exc.detail}"
    return JSONResponse({"error": {"message": message, "type": error_type, "param": None, "code": None}}, status_code=exc.status_code)


# ---- running it ----------------------------------------------------------------------------
@dataclass(frozen=True)
class RunningServer:
    """A server started by ``running_server``; ``base_url`` is what OpenAI clients take."""

    base_url: str  # http://HOST:PORT/v1
    url: str  # http://HOST:PORT
    app: Starlette

    @property
    def policy_version(self) -> int:
        return self.app.state.engine.policy_version


@contextmanager
def running_server(
    model_path: str | Path | None = None, host: str = "127.0.0.1", port: int = 0, **app_options
) -> Iterator[RunningServer]:
    """Serve on ``host:port`` (0 = a free port) in a background thread until the block exits."""
    app = create_app(model_path, **app_options)
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, name="tracerl-serve", daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            server.should_exit = True
            thread.join(timeout=10)
            raise RuntimeError(f"the policy server did not start on {host}:{port} (see the log above)")
        time.sleep(0.01)
    bound = server.servers[0].sockets[0].getsockname()[1]
    url = f"http://{host}:{bound}"
    try:
        yield RunningServer(base_url=f"{url}/v1", url=url, app=app)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
