"""Request bodies the built-in server accepts: OpenAI's fields plus vLLM's extras.

Validation is pydantic's, so a bad request is answered with the exact field that is
wrong (``messages[2].role``). Unknown fields are accepted and ignored, as OpenAI
clients send many optional ones.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

MAX_N = 64
MAX_TOP_LOGPROBS = 20


class RequestError(Exception):
    """A client error answered as ``{"error": {"message", "type", "param", "code"}}``."""

    def __init__(self, message: str, *, param: str | None = None, status: int = 400, type: str = "invalid_request_error"):
        super().__init__(message)
        self.message, self.param, self.status, self.type = message, param, status, type

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": None}}


class _Lenient(BaseModel):
    model_config = ConfigDict(extra="allow")


class StreamOptions(_Lenient):
    include_usage: bool = False


class ContentPart(_Lenient):
    type: str
    text: str | None = None


class FunctionCall(_Lenient):
    name: str
    arguments: str | dict[str, Any] = "{}"


class ToolCall(_Lenient):
    id: str | None = None
    type: Literal["function"] = "function"
    function: FunctionCall


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @field_validator("content")
    @classmethod
    def _text_parts_only(cls, content):
        for i, part in enumerate(content if isinstance(content, list) else []):
            if part.type != "text" or part.text is None:
                raise ValueError(f"part {i} is of type {part.type!r}; this text-only model takes parts of type 'text' with a 'text'")
        return content

    def text(self) -> str | None:
        if isinstance(self.content, list):
            return "".join(part.text for part in self.content)
        return self.content


class FunctionDef(_Lenient):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(_Lenient):
    type: Literal["function"] = "function"
    function: FunctionDef


class _SamplingRequest(_Lenient):
    model: str | None = None
    max_tokens: Annotated[int, Field(ge=1)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] = 1.0
    top_p: Annotated[float, Field(gt=0, le=1)] = 1.0
    n: Annotated[int, Field(ge=1, le=MAX_N)] = 1
    seed: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    return_token_ids: bool = False  # vLLM extra
    return_tokens_as_token_ids: bool = False  # vLLM extra: logprob tokens read "token_id:N"
    ignore_eos: bool = False  # vLLM extra: keep sampling after EOS until max_tokens
    # Sampling controls the built-in sampler does not implement: refused unless neutral,
    # since silently sampling from another distribution would corrupt the training data.
    frequency_penalty: float | None = None
    presence_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    @field_validator("frequency_penalty", "presence_penalty", "logit_bias")
    @classmethod
    def _neutral_only(cls, value, info):
        if value:
            raise ValueError(f"the built-in server does not implement {info.field_name}; leave it out or send a neutral value")
        return value

    def stop_strings(self) -> tuple[str, ...]:
        stops = [self.stop] if isinstance(self.stop, str) else (self.stop or [])
        return tuple(s for s in stops if s)


class ChatCompletionRequest(_SamplingRequest):
    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Annotated[int, Field(ge=1)] | None = None
    logprobs: bool = False
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    tools: list[Tool] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    add_generation_prompt: bool = True  # vLLM extras, passed to the chat template
    continue_final_message: bool = False

    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class CompletionRequest(_SamplingRequest):
    prompt: str | Annotated[list[str], Field(min_length=1)] | Annotated[list[int], Field(min_length=1)] | Annotated[
        list[Annotated[list[int], Field(min_length=1)]], Field(min_length=1)
    ]
    max_tokens: Annotated[int, Field(ge=1)] | None = 16  # OpenAI's default for completions
    logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    echo: bool = False

    def token_limit(self) -> int | None:
        return self.max_tokens


class ResponsesRequest(_SamplingRequest):
    """``POST /v1/responses``: the subset of OpenAI's Responses API the OpenAI SDK and the Agents SDK send.

    ``input`` is text or a list of items (messages, ``function_call`` and ``function_call_output``
    items), turned into chat messages by :mod:`~tracerl.trainer.serving.responses_api`; ``tools``
    are function tools. Besides OpenAI's fields, vLLM's ``enable_response_messages`` returns the
    exact prompt and completion token ids (``input_messages`` / ``output_messages``).
    """

    input: str | list[dict[str, Any]] | None = None
    instructions: str | None = None
    previous_response_id: str | None = None
    max_output_tokens: Annotated[int, Field(ge=1)] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Literal["none", "auto", "required"] | dict[str, Any] | None = None
    include: list[str] | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    store: bool | None = None  # OpenAI's default: kept (here in the server's memory, for previous_response_id)
    background: bool | None = None
    conversation: str | dict[str, Any] | None = None
    enable_response_messages: bool = False  # vLLM extra: the prompt's and the completion's token ids
    n: Literal[1] = 1  # one output per response

    limit_param: ClassVar[str] = "max_output_tokens"  # how errors name the token limit

    def token_limit(self) -> int | None:
        return self.max_output_tokens

    def output_logprobs(self) -> bool:
        return "message.output_text.logprobs" in (self.include or ())


class MessagesRequest(_SamplingRequest):
    """``POST /v1/messages``: the subset of Anthropic's Messages API the ``anthropic`` SDK sends.

    ``system`` is text or text blocks; ``messages`` hold text or blocks (``text``, ``tool_use``,
    ``tool_result``; ``thinking`` is passed over), turned into chat messages by
    :mod:`~tracerl.trainer.serving.messages_api`; ``tools`` are ``{name, description, input_schema}``.
    Besides Anthropic's fields, chat's ``return_token_ids`` and ``logprobs`` (``top_logprobs``)
    return the exact prompt and completion ids and the sampled log-probs.
    """

    messages: Annotated[list[dict[str, Any]], Field(min_length=1)]
    max_tokens: Annotated[int, Field(ge=1)]  # required, as Anthropic's API has it
    system: str | list[dict[str, Any]] | None = None
    stop_sequences: list[str] | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: dict[str, Any] | None = None
    top_k: int | None = None
    thinking: dict[str, Any] | None = None
    logprobs: bool = False  # tracerl's, as chat's: the sampled tokens' log-probs ({"content": [...]})
    top_logprobs: Annotated[int, Field(ge=0, le=MAX_TOP_LOGPROBS)] | None = None
    n: Literal[1] = 1  # one message per request

    limit_param: ClassVar[str] = "max_tokens"

    @field_validator("top_k")
    @classmethod
    def _no_top_k(cls, value):
        if value:
            raise ValueError("the built-in server does not implement top_k sampling; leave it out")
        return value

    @field_validator("thinking")
    @classmethod
    def _no_thinking(cls, value):
        if value and value.get("type") not in (None, "disabled"):
            raise ValueError("extended thinking is not served by the built-in server (its models write no thinking); "
                             "leave it out or send {\"type\": \"disabled\"}")
        return value

    def token_limit(self) -> int | None:
        return self.max_tokens

    def stop_strings(self) -> tuple[str, ...]:
        return tuple(s for s in self.stop_sequences or () if s)


class LoadWeightsRequest(_Lenient):
    path: Annotated[str, Field(min_length=1)]
    version: Annotated[int, Field(ge=0)] | None = None


def parse_request(model: type[BaseModel], body: Any) -> Any:
    """Validate ``body`` as ``model`` or raise a RequestError naming the first bad field."""
    if not isinstance(body, dict):
        raise RequestError("the request body must be a JSON object")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        param = _param_name(error["loc"])
        message = error["msg"].removeprefix("Value error, ")
        raise RequestError(f"{param}: {message}" if param else message, param=param) from None


_UNION_LABELS = {"str", "int", "float", "bool"}


def _param_name(loc: tuple) -> str | None:
    """('messages', 0, 'role') -> 'messages[0].role'; drops pydantic's union-branch labels."""
    name = ""
    for part in loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif part in _UNION_LABELS or "[" in part:  # field names never hold "["
            break  # a union branch label, not a field
        else:
            name += f".{part}" if name else part
    return name or None
