"""tracerl's built-in OpenAI-compatible policy server (CPU, transformers): the HTTP layer.

It answers like vLLM does for RL: with ``return_token_ids`` a response carries the
prompt's token ids and each choice's sampled ids, log-probs are of the raw model
distribution, and every response names the policy version that produced it (the
``policy_version`` field and header of ``schemas.attributes``). ``POST /v1/load_weights``
swaps in a new checkpoint between decode steps (``tracerl.trainer.publish`` calls it).

Here are the routes, request parsing and errors; the bodies are built in
:mod:`~tracerl.trainer.serving.responses` (the Responses API's in
:mod:`~tracerl.trainer.serving.responses_api`, Anthropic's Messages API's in
:mod:`~tracerl.trainer.serving.messages_api`) and the tokens sampled by
:mod:`~tracerl.trainer.serving.engine`. ``running_server()`` starts it on loopback in a
background thread (tests, the demo); ``tracerl serve`` runs it in the foreground.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tracerl.schemas import attributes as A
from tracerl.trainer.serving.config import EngineConfig
from tracerl.trainer.serving.engine import (
    ChoiceResult,
    GenerationEngine,
    GenerationError,
    GenerationHandle,
    SamplingParams,
    WeightLoadError,
)
from tracerl.trainer.serving.prompts import chat_prompt_ids, completion_prompt_ids
from tracerl.trainer.serving.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    LoadWeightsRequest,
    MessagesRequest,
    RequestError,
    ResponsesRequest,
    parse_request,
)
from tracerl.trainer.serving.responses import ChatReply, CompletionReply
from tracerl.trainer.serving.responses_api import ResponseStore, ResponsesReply, conversation
from tracerl.trainer.serving.messages_api import MessagesReply, chat_request
from tracerl.core.uvicorn_thread import serve_in_thread


def create_app(
    model_path: str | Path | None = None, *, served_model_name: str | None = None, engine_config: EngineConfig | None = None
) -> Starlette:
    """The ASGI app serving ``model_path`` (default: the tiny local model).

    The model loads here, so a bad path fails now; decoding starts with the app's lifespan.
    """
    if model_path is None:
        from tracerl.trainer.tiny_model import ensure_tiny_model

        model_path = ensure_tiny_model()
    engine = GenerationEngine(model_path, engine_config)
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
            Route("/v1/responses", api.responses, methods=["POST"]),
            Route("/v1/responses/{response_id}", api.retrieve_response, methods=["GET"]),
            Route(MESSAGES_ROUTE, api.messages, methods=["POST"]),
            Route("/v1/models", api.models, methods=["GET"]),
            Route(f"/v1{A.LOAD_WEIGHTS_PATH}", api.load_weights, methods=["POST"]),
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
        self.responses_store = ResponseStore()  # the Responses API's turns, for previous_response_id and retrieve

    # ---- plain endpoints -------------------------------------------------------------------
    async def health(self, request: Request) -> Response:
        engine = self.engine
        body = {"status": "ok", A.POLICY_VERSION_FIELD: engine.policy_version, "running": engine.running, "waiting": engine.waiting}
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
        return _json({A.POLICY_VERSION_FIELD: version}, version)

    # ---- generation ----------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        req = parse_request(ChatCompletionRequest, await _body(request))
        if req.top_logprobs and not req.logprobs:
            raise RequestError("top_logprobs needs logprobs: true", param="top_logprobs")
        prompt = chat_prompt_ids(self.engine.tokenizer, req)
        params = self._sampling_params(req, [prompt], req.top_logprobs or 0, prompt_param="messages")
        reply = ChatReply(req, prompt, self.engine.tokenizer, self.model_name)
        return await self._generate(request, reply, [prompt], params)

    async def completions(self, request: Request) -> Response:
        req = parse_request(CompletionRequest, await _body(request))
        if req.echo:
            raise RequestError("echo is not supported by the built-in server", param="echo")
        prompts = completion_prompt_ids(self.engine.tokenizer, req, self.engine.vocab_size)
        params = self._sampling_params(req, prompts, req.logprobs or 0, prompt_param="prompt")
        reply = CompletionReply(req, prompts, self.engine.tokenizer, self.model_name)
        return await self._generate(request, reply, prompts, params)

    async def responses(self, request: Request) -> Response:
        req = parse_request(ResponsesRequest, await _body(request))
        chat, turn = conversation(req, self.responses_store)
        prompt = chat_prompt_ids(self.engine.tokenizer, chat)
        top_logprobs = (req.top_logprobs or 0) if req.output_logprobs() else 0
        params = self._sampling_params(req, [prompt], top_logprobs, prompt_param="input")
        reply = ResponsesReply(req, prompt, turn, self.engine.tokenizer, self.model_name, self.responses_store)
        return await self._generate(request, reply, [prompt], params)

    async def retrieve_response(self, request: Request) -> Response:
        body = self.responses_store.response(request.path_params["response_id"])
        return _json(body, body[A.POLICY_VERSION_FIELD])

    async def messages(self, request: Request) -> Response:
        req = parse_request(MessagesRequest, await _body(request))
        prompt = chat_prompt_ids(self.engine.tokenizer, chat_request(req))
        top_logprobs = (req.top_logprobs or 0) if req.logprobs else 0
        params = self._sampling_params(req, [prompt], top_logprobs, prompt_param="messages")
        reply = MessagesReply(req, prompt, self.engine.tokenizer, self.model_name)
        return await self._generate(request, reply, [prompt], params)

    async def _generate(
        self, request: Request, reply: ChatReply | CompletionReply | ResponsesReply | MessagesReply, prompts: list[list[int]],
        params: SamplingParams,
    ) -> Response:
        """Run the request; answer once it is admitted, when its policy version is known."""
        handle = self.engine.submit(prompts, params, n=reply.req.n)
        reply.version = await _admitted(handle)
        if reply.req.stream:
            style = "responses" if isinstance(reply, ResponsesReply) else "messages" if isinstance(reply, MessagesReply) else "chat"
            return _sse(reply.stream(handle), handle, reply.version, style)
        return _json(reply.body(await _results(handle, request)), reply.version)

    def _sampling_params(self, req, prompts: list[list[int]], top_logprobs: int, *, prompt_param: str) -> SamplingParams:
        """Limits as vLLM (0.32) sets them: a prompt that leaves no room and a max_tokens beyond the
        whole context are 400s; a max_tokens that only overruns with this prompt is capped to what
        fits (the answer then ends with finish_reason "length"), since agents ask for a fixed
        max_tokens whatever their prompt's length."""
        context = self.engine.max_context
        longest = max(len(p) for p in prompts)
        if longest >= context:
            raise RequestError(
                f"the prompt is {longest} tokens long; this model's maximum context length is {context} tokens, "
                "so no completion token fits. Shorten the prompt (or serve with a larger --max-model-len).",
                param=prompt_param,
            )
        limit = req.token_limit()
        if limit is not None and limit > context:
            param = getattr(req, "limit_param", None) or (
                "max_completion_tokens" if getattr(req, "max_completion_tokens", None) else "max_tokens")
            raise RequestError(
                f"{param}={limit} is more than this model's maximum context length of {context} tokens "
                f"(prompt {longest} tokens + {param} {limit} = {longest + limit}). Request at most "
                f"{context - longest} tokens, or serve with a larger --max-model-len.",
                param=param,
            )
        return SamplingParams(
            max_tokens=min(limit, context - longest) if limit is not None else context - longest,
            temperature=req.temperature,
            top_p=req.top_p,
            stop=req.stop_strings(),
            top_logprobs=top_logprobs,
            seed=req.seed,
            ignore_eos=req.ignore_eos,
        )


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


def _json(body: dict, version: int, status: int = 200) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers={A.POLICY_VERSION_HEADER: str(version)})


def _sse(chunks: AsyncIterator[dict], handle: GenerationHandle, version: int, style: str = "chat") -> StreamingResponse:
    """Server-sent events: chat and completion chunks end with ``[DONE]``; the Responses API's and
    the Messages API's events are named (``event: response.completed``, ``event: message_stop``)
    and end with their last event, as OpenAI's and Anthropic's."""
    named_events = style != "chat"

    async def lines() -> AsyncIterator[str]:
        try:
            async for chunk in chunks:
                name = f"event: {chunk['type']}\n" if named_events else ""
                yield f"{name}data: {json.dumps(chunk)}\n\n"
            if not named_events:
                yield "data: [DONE]\n\n"
        except GenerationError as exc:
            if style == "responses":  # the Responses API's error event
                error = {"type": "error", "message": str(exc), "code": "server_error", "param": None}
                yield f"event: error\ndata: {json.dumps(error)}\n\n"
            elif style == "messages":  # Anthropic's
                error = {"type": "error", "error": {"type": "api_error", "message": str(exc)}}
                yield f"event: error\ndata: {json.dumps(error)}\n\n"
            else:
                yield f"data: {json.dumps(RequestError(str(exc), status=500, type='server_error').body())}\n\n"
        finally:
            handle.cancel()

    return StreamingResponse(lines(), media_type="text/event-stream", headers={A.POLICY_VERSION_HEADER: str(version)})


SERVED_ROUTES = ("POST /v1/chat/completions, POST /v1/completions, POST /v1/responses, GET /v1/responses/{id}, "
                 "POST /v1/messages and GET /v1/models")
MESSAGES_ROUTE = "/v1/messages"  # Anthropic's Messages API: its errors in Anthropic's shape


async def _request_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestError)
    if request.url.path == MESSAGES_ROUTE:  # {"type": "error", "error": {"type", "message"}} (+ the field it names)
        kind = "api_error" if exc.type == "server_error" else exc.type
        body = {"type": "error", "error": {"type": kind, "message": exc.message, "param": exc.param}}
        return JSONResponse(body, status_code=exc.status)
    return JSONResponse(exc.body(), status_code=exc.status)


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    error_type = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
    message = f"{request.method} {request.url.path}: {exc.detail}"
    if exc.status_code == 404:
        message += f"; this server serves {SERVED_ROUTES}"
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
    with serve_in_thread(app, host, port, name="tracerl-serve", lifespan="on") as url:
        yield RunningServer(base_url=f"{url}/v1", url=url, app=app)
