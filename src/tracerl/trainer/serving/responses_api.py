"""The Responses API of the built-in server (``POST /v1/responses``): the subset the OpenAI SDK
and the OpenAI Agents SDK use, answered with the exact token ids capture needs.

A request becomes chat messages, and its prompt the same chat template a Chat Completions call
with those messages would get (:func:`conversation`): ``instructions`` a system message first,
``input`` text a user message, input items as their chat equivalents (a ``message`` item by its
role, ``function_call`` items the tool calls of an assistant message, each
``function_call_output`` a ``tool`` message), and with ``previous_response_id`` the earlier turns
of the conversation as this server kept them (:class:`ResponseStore`; like OpenAI, the earlier
turns' ``instructions`` are not carried over). Function tools are the chat endpoint's tools,
and a hermes ``<tool_call>`` reply becomes ``function_call`` output items. ``GET
/v1/responses/{id}`` answers a kept response as it was made (:meth:`ResponseStore.response`).

With vLLM's ``enable_response_messages`` the body carries the prompt's and the completion's
token ids as vLLM 0.32 does for non-harmony models (``input_messages`` / ``output_messages``
of one ``raw_message_tokens`` entry each); the completion's entry also carries the sampled
tokens' log-probs (``logprobs``, floats: the server has them, vLLM does not put them there).
Every body, and the ``response.completed`` event of a stream, names the policy version.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from tracerl.schemas import attributes as A
from tracerl.trainer.serving import tool_parser
from tracerl.trainer.serving.engine import ChoiceResult, GenerationHandle, TokenStep
from tracerl.trainer.serving.protocol import ChatCompletionRequest, RequestError, ResponsesRequest, parse_request
from tracerl.trainer.serving.responses import MIN_LOGPROB, _Reply

STORED_TURNS = 20_000  # responses kept for previous_response_id (each holds its own turn's messages only)
RAW_MESSAGE_TOKENS = "raw_message_tokens"  # vLLM's type of an input_messages / output_messages entry
TOKEN_FIELDS = ("input_messages", "output_messages")  # what enable_response_messages adds to a response
_TEXT_PARTS = ("input_text", "output_text", "text")


# ---- the conversation ---------------------------------------------------------------------
@dataclass(frozen=True)
class _Turn:
    previous: str | None  # the response this one continued
    messages: tuple[dict, ...]  # its input (instructions left out) and its output, as chat messages
    response: bytes  # the response as made, as JSON (a fraction of the memory its dicts would hold)


class ResponseStore:
    """The turns of the responses this server made, for ``previous_response_id`` and ``GET
    /v1/responses/{id}``: each keeps its own input and output, the id it continued and the
    response itself, so a chain costs memory once per turn. The last :data:`STORED_TURNS` are
    kept (in memory: none survive a restart)."""

    def __init__(self, capacity: int = STORED_TURNS) -> None:
        self._turns: OrderedDict[str, _Turn] = OrderedDict()
        self._capacity = capacity
        self._lock = threading.Lock()

    def put(self, response_id: str, previous: str | None, messages: list[dict], response: dict) -> None:
        """Keep a turn; its response without the token fields (a retrieve cannot ask for them)."""
        kept = json.dumps({k: v for k, v in response.items() if k not in TOKEN_FIELDS}).encode()
        with self._lock:
            self._turns[response_id] = _Turn(previous, tuple(messages), kept)
            while len(self._turns) > self._capacity:
                self._turns.popitem(last=False)

    def response(self, response_id: str) -> dict:
        """The response ``response_id`` as it was made (OpenAI's retrieve); a 404 when it is not kept."""
        with self._lock:
            turn = self._turns.get(response_id)
            if turn is not None:
                self._turns.move_to_end(response_id)
        if turn is None:
            raise RequestError(
                f"Response with id {response_id!r} not found. This server keeps the last {self._capacity} responses "
                "made with store left on, none from before a restart",
                param="response_id", status=404,
            )
        return json.loads(turn.response)

    def conversation(self, response_id: str) -> list[dict]:
        """The chat messages of the conversation up to and including ``response_id``'s output."""
        turns: list[_Turn] = []
        with self._lock:
            current: str | None = response_id
            while current is not None:
                turn = self._turns.get(current)
                if turn is None:
                    kept = "" if current == response_id else f" (an earlier response of its chain, {current!r}, is no longer kept)"
                    raise RequestError(
                        f"previous_response_id {response_id!r}: no such response in this server's memory{kept}. It keeps "
                        f"the last {self._capacity} responses made with store left on, none from before a restart",
                        param="previous_response_id",
                    )
                self._turns.move_to_end(current)
                turns.append(turn)
                current = turn.previous
        return [dict(m) for turn in reversed(turns) for m in turn.messages]


def _text(content: Any, where: str) -> str:
    """The text of an item's ``content`` (a string or a list of text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise RequestError(f"{where}.content must be a string or a list of parts", param=f"{where}.content")
    text = ""
    for i, part in enumerate(content):
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in _TEXT_PARTS and isinstance(part.get("text"), str):
            text += part["text"]
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            text += part["refusal"]
        else:
            raise RequestError(
                f"{where}.content[{i}] is of type {kind!r}; this text-only model takes parts of type "
                f"{', '.join(repr(t) for t in _TEXT_PARTS)}",
                param=f"{where}.content[{i}]",
            )
    return text


def turn_messages(items: str | list[dict[str, Any]] | None) -> list[dict]:
    """A request's ``input`` as chat messages (ChatCompletionRequest's shape)."""
    if items is None:
        return []
    if isinstance(items, str):
        return [{"role": "user", "content": items}]
    messages: list[dict] = []
    for i, item in enumerate(items):
        where = f"input[{i}]"
        kind = item.get("type") or ("message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "system", "developer", "assistant"):
                raise RequestError(f"{where}.role must be one of user, system, developer, assistant", param=f"{where}.role")
            messages.append({"role": role, "content": _text(item.get("content"), where)})
        elif kind == "function_call":
            if not isinstance(item.get("name"), str):
                raise RequestError(f"{where}: a function_call item needs its name", param=f"{where}.name")
            arguments = item.get("arguments", "{}")
            call = {"id": item.get("call_id") or item.get("id"), "type": "function",
                    "function": {"name": item["name"], "arguments": arguments if isinstance(arguments, str) else str(arguments)}}
            if messages and messages[-1]["role"] == "assistant":  # the calls of the message the model wrote with them
                messages[-1].setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind == "function_call_output":
            output = item.get("output")
            messages.append({"role": "tool", "tool_call_id": item.get("call_id"),
                             "content": output if isinstance(output, str) else _text(output, where)})
        elif kind == "reasoning":
            continue  # this server's models write none: nothing of it was, or is, in a prompt
        else:
            raise RequestError(
                f"{where} is an item of type {kind!r}; the built-in server takes message, function_call and "
                "function_call_output items",
                param=where,
            )
    return messages


def chat_tools(tools: list[dict[str, Any]] | None) -> list[dict] | None:
    """Responses' flat function tools in the chat endpoint's shape (``{"type", "function": {...}}``)."""
    if not tools:
        return None
    converted = []
    for i, tool in enumerate(tools):
        if isinstance(tool.get("function"), dict):  # already chat-shaped
            converted.append({"type": "function", "function": tool["function"]})
        elif tool.get("type") == "function" and isinstance(tool.get("name"), str):
            converted.append({"type": "function", "function": {
                key: tool[key] for key in ("name", "description", "parameters") if tool.get(key) is not None}})
        else:
            raise RequestError(
                f"tools[{i}] is a {tool.get('type')!r} tool; the built-in server serves function tools only "
                "(hosted tools run on OpenAI's servers)",
                param=f"tools[{i}]",
            )
    return converted


def conversation(req: ResponsesRequest, store: ResponseStore) -> tuple[ChatCompletionRequest, list[dict]]:
    """The chat request whose prompt this request's is, and this turn's own messages (what the store keeps)."""
    if req.background:
        raise RequestError("background responses are not served by the built-in server", param="background")
    if (req.model_extra or {}).get("prompt") is not None:
        raise RequestError("stored prompts (prompt) are not served by the built-in server: send the instructions and input "
                           "themselves", param="prompt")
    if req.conversation is not None:
        raise RequestError("conversation objects are not served by the built-in server: continue a conversation with "
                           "previous_response_id, or send its items as input", param="conversation")
    turn = turn_messages(req.input)
    earlier = store.conversation(req.previous_response_id) if req.previous_response_id else []
    system = [{"role": "system", "content": req.instructions}] if req.instructions else []
    messages = system + earlier + turn
    if not messages:
        raise RequestError("input is required (text or a list of items)", param="input")
    body: dict[str, Any] = {"messages": messages}
    tools = chat_tools(req.tools)
    if tools:
        body["tools"] = tools
    try:
        return parse_request(ChatCompletionRequest, body), turn
    except RequestError as exc:  # named as the chat messages they became
        raise RequestError(f"input: {exc.message}", param="input") from None


# ---- the answer ---------------------------------------------------------------------------
def _usage(prompt: list[int], result: ChoiceResult | None) -> dict:
    output = len(result.token_ids) if result is not None else 0
    return {"input_tokens": len(prompt), "input_tokens_details": {"cached_tokens": 0}, "output_tokens": output,
            "output_tokens_details": {"reasoning_tokens": 0}, "total_tokens": len(prompt) + output}


class ResponsesReply(_Reply):
    """Builds one response: the whole body, or its stream of events; keeps its turn in the store."""

    object_name = chunk_object_name = "response"
    id_prefix = "resp"

    def __init__(self, req: ResponsesRequest, prompt: list[int], turn: list[dict], tokenizer, served_model: str,
                 store: ResponseStore) -> None:
        super().__init__(req, tokenizer, served_model)
        self.id = f"resp_{uuid.uuid4().hex}"  # OpenAI's spelling: resp_..., msg_..., fc_...
        self.created_at = int(time.time())
        self.prompt = prompt
        self.turn = turn
        self.store = store
        self.parse_tools = bool(req.tools) and req.tool_choice != "none"
        self._sequence = 0

    # ---- pieces --------------------------------------------------------------------------
    def _split(self, result: ChoiceResult) -> tuple[str, list[dict]]:
        """The reply's text and its tool calls (chat-shaped), as the chat endpoint reads them."""
        parsed = tool_parser.parse(result.text) if self.parse_tools else None
        return (parsed.content or "", parsed.tool_calls) if parsed is not None else (result.text, [])

    def _text_part(self, text: str, logprobs: list[dict] | None = None) -> dict:
        return {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs or []}

    def _message(self, item_id: str, text: str, status: str, logprobs: list[dict] | None = None) -> dict:
        return {"type": "message", "id": item_id, "status": status, "role": "assistant",
                "content": [self._text_part(text, logprobs)]}

    @staticmethod
    def _function_call(call: dict, status: str = "completed", arguments: str | None = None) -> dict:
        function = call["function"]
        return {"type": "function_call", "id": f"fc_{uuid.uuid4().hex}", "call_id": call["id"], "name": function["name"],
                "arguments": function["arguments"] if arguments is None else arguments, "status": status}

    def _logprobs(self, result: ChoiceResult) -> list[dict] | None:
        if not self.req.output_logprobs():
            return None
        return [self._logprob(t, lp, tops) for t, lp, tops in zip(result.token_ids, result.logprobs, result.top_logprobs)]

    def _response(self, status: str, output: list[dict], result: ChoiceResult | None = None, final: bool = False) -> dict:
        req = self.req
        extra = req.model_extra or {}
        body = {
            "id": self.id, "object": "response", "created_at": self.created_at, "status": status, "error": None,
            "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
            "instructions": req.instructions, "max_output_tokens": req.max_output_tokens, "model": self.model,
            "output": output, "parallel_tool_calls": extra.get("parallel_tool_calls", True),
            "previous_response_id": req.previous_response_id, "reasoning": {"effort": None, "summary": None},
            "store": req.store is not False, "temperature": req.temperature,
            "text": extra.get("text") or {"format": {"type": "text"}}, "tool_choice": req.tool_choice or "auto",
            "tools": req.tools or [], "top_logprobs": req.top_logprobs, "top_p": req.top_p, "truncation": "disabled",
            "usage": _usage(self.prompt, result) if final else None, "user": None, "metadata": extra.get("metadata") or {},
        }
        if final and result is not None and req.enable_response_messages:  # TOKEN_FIELDS
            body["input_messages"] = [{"type": RAW_MESSAGE_TOKENS, "message": self.tokenizer.decode(self.prompt), "tokens": self.prompt}]
            body["output_messages"] = [{"type": RAW_MESSAGE_TOKENS, "message": result.text, "tokens": result.token_ids,
                                        "logprobs": [max(lp, MIN_LOGPROB) for lp in result.logprobs]}]
        body[A.POLICY_VERSION_FIELD] = self.version
        return body

    def _keep(self, text: str, calls: list[dict], response: dict) -> None:
        if self.req.store is False:
            return
        assistant: dict = {"role": "assistant", "content": text}
        if calls:
            assistant["tool_calls"] = calls
        self.store.put(self.id, self.req.previous_response_id, [*self.turn, assistant], response)

    # ---- whole body ----------------------------------------------------------------------
    def body(self, results: list[ChoiceResult]) -> dict:
        if not results:  # the client hung up: nobody reads this
            return self._response("cancelled", [])
        result = results[0]
        text, calls = self._split(result)
        status = "incomplete" if result.finish_reason == "length" else "completed"
        output = []
        if text or not calls:
            output.append(self._message(f"msg_{uuid.uuid4().hex}", text, status, self._logprobs(result) if not calls else None))
        output += [self._function_call(call) for call in calls]
        response = self._response(status, output, result, final=True)
        self._keep(text, calls, response)
        return response

    # ---- stream --------------------------------------------------------------------------
    def _event(self, kind: str, **fields: Any) -> dict:
        event = {"type": kind, "sequence_number": self._sequence, **fields}
        self._sequence += 1
        return event

    async def stream(self, handle: GenerationHandle) -> AsyncIterator[dict]:
        """OpenAI's events: created, in_progress, the message's text deltas, each function call, completed."""
        yield self._event("response.created", response=self._response("in_progress", []))
        yield self._event("response.in_progress", response=self._response("in_progress", []))
        message_id = f"msg_{uuid.uuid4().hex}"
        shown = sent = ""
        opened = False
        pending_logprobs: list[dict] = []  # of tokens whose text is not sent yet
        result: ChoiceResult | None = None
        async for event in handle.events():
            if isinstance(event, TokenStep):
                shown += event.text
                if self.req.output_logprobs():
                    pending_logprobs.append(self._logprob(event.token_id, event.logprob, event.top_logprobs))
                visible = shown[: len(shown) - tool_parser.held_back(shown)] if self.parse_tools else shown
                if len(visible) > len(sent):
                    if not opened:
                        opened = True
                        for opening in self._open_message(message_id):
                            yield opening
                    yield self._event("response.output_text.delta", item_id=message_id, output_index=0, content_index=0,
                                      delta=visible[len(sent):], logprobs=pending_logprobs)
                    sent, pending_logprobs = visible, []
            else:
                result = event
        assert result is not None
        text, calls = self._split(result)
        status = "incomplete" if result.finish_reason == "length" else "completed"
        output: list[dict] = []
        if text or not calls or opened:
            if not opened:
                opened = True
                for opening in self._open_message(message_id):
                    yield opening
            if not calls and len(text) > len(sent):  # what was held back and turned out to be no call
                yield self._event("response.output_text.delta", item_id=message_id, output_index=0, content_index=0,
                                  delta=text[len(sent):], logprobs=pending_logprobs)
            logprobs = self._logprobs(result) if not calls else None
            part = self._text_part(text, logprobs)
            yield self._event("response.output_text.done", item_id=message_id, output_index=0, content_index=0,
                              text=text, logprobs=logprobs or [])
            yield self._event("response.content_part.done", item_id=message_id, output_index=0, content_index=0, part=part)
            message = self._message(message_id, text, status, logprobs)
            yield self._event("response.output_item.done", output_index=0, item=message)
            output.append(message)
        for call in calls:
            index = len(output)
            item = self._function_call(call)
            yield self._event("response.output_item.added", output_index=index, item={**item, "arguments": "", "status": "in_progress"})
            yield self._event("response.function_call_arguments.delta", item_id=item["id"], output_index=index, delta=item["arguments"])
            yield self._event("response.function_call_arguments.done", item_id=item["id"], output_index=index,
                              name=item["name"], arguments=item["arguments"])
            yield self._event("response.output_item.done", output_index=index, item=item)
            output.append(item)
        response = self._response(status, output, result, final=True)
        self._keep(text, calls, response)
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        yield self._event(kind, response=response)

    def _open_message(self, message_id: str) -> list[dict]:
        return [
            self._event("response.output_item.added", output_index=0,
                        item={"type": "message", "id": message_id, "status": "in_progress", "role": "assistant", "content": []}),
            self._event("response.content_part.added", item_id=message_id, output_index=0, content_index=0,
                        part=self._text_part("")),
        ]
