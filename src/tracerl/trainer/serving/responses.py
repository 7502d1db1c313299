"""The bodies the policy server answers with: OpenAI's chat and completion shapes, plus RL's fields.

Each request gets one reply builder, which makes either the whole body or the stream of
chunks from the engine's results. Beside OpenAI's fields a reply carries what training
needs, under vLLM's names (``schemas.attributes``): with ``return_token_ids`` the
prompt's token ids and every sampled id, and always the policy version that produced it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator

from tracerl.schemas import attributes as A
from tracerl.trainer.serving import tool_parser
from tracerl.trainer.serving.engine import ChoiceResult, GenerationHandle, TokenStep
from tracerl.trainer.serving.protocol import ChatCompletionRequest, CompletionRequest, ResponsesRequest

MIN_LOGPROB = -9999.0  # JSON has no -inf; vLLM clamps the same way
PROMPT_TOKEN_IDS = A.VLLM_PROMPT_TOKEN_IDS_FIELD
TOKEN_IDS = A.VLLM_CHOICE_TOKEN_IDS_FIELD


class _Reply:
    """What chat and completion replies share: identity, envelope, version, token naming."""

    object_name: str  # OpenAI's "object" of a whole body
    chunk_object_name: str  # ... and of a streamed chunk
    id_prefix: str

    def __init__(self, req: ChatCompletionRequest | CompletionRequest | ResponsesRequest, tokenizer, served_model: str) -> None:
        self.req = req
        self.tokenizer = tokenizer
        self.model = req.model or served_model  # a single-model server serves any name and echoes it
        self.version = -1  # set once the engine admits the request
        self.id = f"{self.id_prefix}-{uuid.uuid4().hex}"
        self.created = int(time.time())

    def _envelope(self, obj: str) -> dict:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _chunk(self, choices: list[dict]) -> dict:
        return {**self._envelope(self.chunk_object_name), "choices": choices, A.POLICY_VERSION_FIELD: self.version}

    def token_text(self, token_id: int) -> str:
        """How logprobs name a token: its text, or "token_id:N" (vLLM) since texts can collide."""
        return f"token_id:{token_id}" if self.req.return_tokens_as_token_ids else self.tokenizer.decode([token_id])

    def _logprob(self, token_id: int, logprob: float, tops: list[tuple[int, float]]) -> dict:
        """A sampled token's log-prob entry as chat choices and Responses' output_text parts carry it."""
        entry = self._token_logprob(token_id, logprob)
        entry["top_logprobs"] = [self._token_logprob(t, lp) for t, lp in tops]
        return entry

    def _token_logprob(self, token_id: int, logprob: float) -> dict:
        text = self.token_text(token_id)
        return {"token": text, "logprob": max(logprob, MIN_LOGPROB), "bytes": list(text.encode("utf-8"))}


class ChatReply(_Reply):
    """Builds chat.completion bodies and chat.completion.chunk streams."""

    object_name = "chat.completion"
    chunk_object_name = "chat.completion.chunk"
    id_prefix = "chatcmpl"

    def __init__(self, req: ChatCompletionRequest, prompt: list[int], tokenizer, served_model: str) -> None:
        super().__init__(req, tokenizer, served_model)
        self.prompt = prompt
        self.parse_tools = bool(req.tools) and req.tool_choice != "none"

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
                choice[TOKEN_IDS] = r.token_ids
            choices.append(choice)
        body = {**self._envelope(self.object_name), "choices": choices, "usage": usage([self.prompt], results)}
        if self.req.return_token_ids:
            body[PROMPT_TOKEN_IDS] = self.prompt
        body[A.POLICY_VERSION_FIELD] = self.version
        return body

    async def stream(self, handle: GenerationHandle) -> AsyncIterator[dict]:
        n = self.req.n
        head = self._chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None} for i in range(n)])
        if self.req.return_token_ids:
            head[PROMPT_TOKEN_IDS] = self.prompt
        yield head
        shown = [""] * n  # text so far per choice; `sent` is what the client has
        sent = [""] * n
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
                    choice[TOKEN_IDS] = [event.token_id]
                yield self._chunk([choice])
            else:
                results.append(event)
                yield self._chunk([self._final_delta(event, sent[event.choice])])
        if self.req.stream_options and self.req.stream_options.include_usage:
            yield {**self._chunk([]), "usage": usage([self.prompt], results)}

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
            choice[TOKEN_IDS] = []
        return choice



class CompletionReply(_Reply):
    """Builds text_completion bodies and streams (one or more prompts, ``n`` choices each)."""

    object_name = chunk_object_name = "text_completion"
    id_prefix = "cmpl"

    def __init__(self, req: CompletionRequest, prompts: list[list[int]], tokenizer, served_model: str) -> None:
        super().__init__(req, tokenizer, served_model)
        self.prompts = prompts

    def _prompt_of(self, choice: int) -> list[int]:
        return self.prompts[choice // self.req.n]

    def body(self, results: list[ChoiceResult]) -> dict:
        choices = []
        for r in results:
            choice = {"index": r.choice, "text": r.text, "logprobs": None, "finish_reason": r.finish_reason}
            if self.req.logprobs is not None:
                choice["logprobs"] = self._logprobs(r.token_ids, r.logprobs, r.top_logprobs, 0)
            if self.req.return_token_ids:
                choice[PROMPT_TOKEN_IDS] = self._prompt_of(r.choice)
                choice[TOKEN_IDS] = r.token_ids
            choices.append(choice)
        body = {**self._envelope(self.object_name), "choices": choices, "usage": usage(self.prompts, results)}
        if self.req.return_token_ids and len(self.prompts) == 1:
            body[PROMPT_TOKEN_IDS] = self.prompts[0]
        body[A.POLICY_VERSION_FIELD] = self.version
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
                        choice[PROMPT_TOKEN_IDS] = self._prompt_of(i)
                        if not started and len(self.prompts) == 1:  # like the non-streamed body
                            chunk[PROMPT_TOKEN_IDS] = self.prompts[0]
                    choice[TOKEN_IDS] = [event.token_id]
                started.add(i)
                yield chunk
            else:
                results.append(event)
                choice = {"index": event.choice, "text": "", "logprobs": None, "finish_reason": event.finish_reason}
                if self.req.return_token_ids:
                    choice[TOKEN_IDS] = []
                yield self._chunk([choice])
        if self.req.stream_options and self.req.stream_options.include_usage:
            yield {**self._chunk([]), "usage": usage(self.prompts, results)}

    def _logprobs(self, ids: list[int], logprobs: list[float], tops: list[list[tuple[int, float]]], offset: int) -> dict:
        tokens = [self.token_text(t) for t in ids]
        text_offset = []
        for token in tokens:
            text_offset.append(offset)
            offset += len(token)
        return {
            "tokens": tokens,
            "token_logprobs": [max(lp, MIN_LOGPROB) for lp in logprobs],
            "top_logprobs": [{self.token_text(t): max(lp, MIN_LOGPROB) for t, lp in step} for step in tops]
            if self.req.logprobs
            else None,
            "text_offset": text_offset,
        }


def usage(prompts: list[list[int]], results: list[ChoiceResult]) -> dict:
    prompt_tokens = sum(len(p) for p in prompts)
    completion_tokens = sum(len(r.token_ids) for r in results)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens, "total_tokens": prompt_tokens + completion_tokens}
