"""Batched token sampling over a transformers causal LM, for the built-in policy server.

One background thread owns the model. Requests from any number of HTTP handlers queue
up; the thread decodes everything that is running as one left-padded batch with a KV
cache (continuous batching: newcomers join at the next step by re-prefilling the batch,
finished rows are dropped from the cache). Because the RL trainer recomputes the
log-probs of exactly the sampled ids, each reported log-prob is that of the distribution the
token was drawn from, ``log_softmax(logits / T)`` (raw logits for greedy rows; top-p shapes only the
sampling), like vLLM's ``--logprobs-mode processed_logprobs``, which tracerl starts it with.

Weight reloads are applied between tokens only once the running batch has drained, so
every token of a response comes from one policy version, the one it reports.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import AsyncIterator

import torch

from tracerl.trainer.serving.config import EngineConfig


@dataclass(frozen=True)
class SamplingParams:
    """How to sample one request's completions (OpenAI semantics)."""

    max_tokens: int
    temperature: float = 1.0  # 0 = greedy
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    top_logprobs: int = 0  # alternatives reported per token
    seed: int | None = None
    ignore_eos: bool = False  # vLLM extra: run to max_tokens (benchmarks, tests)


@dataclass
class TokenStep:
    """One sampled token of one choice; ``text`` is the newly visible text."""

    choice: int
    token_id: int
    logprob: float
    top_logprobs: list[tuple[int, float]]
    text: str


@dataclass
class ChoiceResult:
    """A finished choice: every sampled id (incl. a final EOS) with its log-prob."""

    choice: int
    prompt_token_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    top_logprobs: list[list[tuple[int, float]]]
    text: str
    finish_reason: str  # "stop" | "length"
    stop_string: str | None = None  # the stop string that ended it (finish_reason "stop"), if one did


@dataclass
class Admitted:
    """The request entered the running batch; all its tokens come from this version."""

    policy_version: int


@dataclass
class Failed:
    """Generation raised; the request cannot be completed."""

    message: str


class GenerationError(RuntimeError):
    """Raised to the awaiting request when the engine failed to generate."""


class WeightLoadError(ValueError):
    """A checkpoint could not be loaded (missing, malformed or incompatible)."""


class ContextLengthError(ValueError):
    """A max_model_len the model cannot serve."""


class GenerationHandle:
    """The asyncio side of one submitted request: a stream of engine events."""

    def __init__(self, num_choices: int) -> None:
        self.num_choices = num_choices
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue = asyncio.Queue()
        self.cancelled = False

    def cancel(self) -> None:
        """Stop generating for this request (client went away)."""
        self.cancelled = True

    async def admitted(self) -> int:
        """Wait until the request runs; return its policy version."""
        event = await self._queue.get()
        if isinstance(event, Failed):
            raise GenerationError(event.message)
        assert isinstance(event, Admitted)
        return event.policy_version

    async def events(self) -> AsyncIterator[TokenStep | ChoiceResult]:
        """Token steps and finished choices, until every choice finished (after ``admitted``)."""
        remaining = self.num_choices
        while remaining:
            event = await self._queue.get()
            if isinstance(event, Failed):
                raise GenerationError(event.message)
            if isinstance(event, ChoiceResult):
                remaining -= 1
            yield event

    async def results(self) -> list[ChoiceResult]:
        """All finished choices, ordered by choice index (after ``admitted``)."""
        done = [e async for e in self.events() if isinstance(e, ChoiceResult)]
        return sorted(done, key=lambda r: r.choice)


@dataclass
class _Group:
    """One request: every prompt times n choices, admitted into the batch together."""

    prompts: list[list[int]]
    n: int
    params: SamplingParams
    handle: GenerationHandle
    rng: random.Random  # the uniforms of this request's draws: seeded requests replay exactly


@dataclass
class _Row:
    """One choice being decoded."""

    group: _Group
    choice: int
    prompt: list[int]
    generated: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)
    emitted_text: str = ""

    @property
    def tokens(self) -> list[int]:
        return self.prompt + self.generated


@dataclass
class _Swap:
    model: torch.nn.Module
    version: int | None
    done: threading.Event = field(default_factory=threading.Event)
    applied_version: int = -1
    failure: str | None = None


def serving_device() -> torch.device:
    """Where the model decodes: the GPU when there is one (a machine without vLLM still samples there), else the CPU.

    Only the model's forward passes and KV cache live there; the batch's bookkeeping and the
    sampler stay on the CPU, so the two paths sample the same way.
    """
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


def load_causal_lm(path: str | Path) -> torch.nn.Module:
    """Load a HF checkpoint for inference in float32 on :func:`serving_device`, or say what is wrong with it."""
    from transformers import AutoModelForCausalLM

    path = Path(path)
    if not (path / "config.json").is_file():
        raise WeightLoadError(f"{path} is not a Hugging Face checkpoint directory (no config.json)")
    from transformers.utils import logging as hf_logging

    bars = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # a reload per round would print a bar into the caller's console
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except Exception as exc:  # transformers raises many types for broken checkpoints
        raise WeightLoadError(f"cannot load checkpoint {path}: {exc}") from exc
    finally:
        if bars:
            hf_logging.enable_progress_bar()
    return model.to(serving_device()).eval()


class GenerationEngine:
    """Owns model and tokenizer; decodes submitted requests in a background thread."""

    def __init__(self, model_path: str | Path, config: EngineConfig | None = None) -> None:
        from transformers import AutoTokenizer

        config = config or EngineConfig()
        self.model_path = Path(model_path)
        self.model = load_causal_lm(self.model_path)
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_path)
        self.max_batch_size = config.max_batch_size
        self.num_threads = config.num_threads
        self.max_context = _max_context(self.model_path, int(self.model.config.max_position_embeddings), config.max_model_len)
        self.eos_token_ids = _eos_token_ids(self.model, self.tokenizer)
        self.pad_token_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else min(self.eos_token_ids)
        self._version = config.policy_version
        self._cond = threading.Condition()
        self._waiting: deque[_Group] = deque()
        self._swap: _Swap | None = None
        self._swap_lock = threading.Lock()  # one reload at a time
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._rng = random.Random()
        # batch state, touched only by the engine thread
        self._rows: list[_Row] = []
        self._cache = None
        self._mask: torch.Tensor | None = None
        self._logits: torch.Tensor | None = None  # next-token logits of every row, or None if stale
        self._outbox: list[tuple[GenerationHandle, object]] = []  # events of this step, posted together

    @property
    def policy_version(self) -> int:
        return self._version

    @property
    def running(self) -> int:
        """Sequences being decoded now (approximate when read from another thread)."""
        return len(self._rows)

    @property
    def waiting(self) -> int:
        """Requests queued for the next batch."""
        return len(self._waiting)

    @property
    def reload_pending(self) -> bool:
        """New weights are loaded and wait for the running batch to drain."""
        return self._swap is not None

    @property
    def vocab_size(self) -> int:
        return int(self.model.config.vocab_size)

    # ---- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        with self._cond:
            if self._thread is not None:
                return
            self._stopping = False
            self._thread = threading.Thread(target=self._run, name="tracerl-generation", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None

    # ---- API used by the server (event-loop / worker threads) --------------------------
    def submit(self, prompts: list[list[int]], params: SamplingParams, n: int = 1) -> GenerationHandle:
        """Queue ``n`` choices per prompt; call from a running event loop.

        Starts the decoding thread if needed, so the app also works where the ASGI
        lifespan is switched off.
        """
        self.start()
        handle = GenerationHandle(num_choices=len(prompts) * n)
        seed = params.seed if params.seed is not None else self._rng.getrandbits(63)
        group = _Group(prompts, n, params, handle, random.Random(seed))
        with self._cond:
            if self._stopping:
                raise GenerationError("the generation engine is shutting down")
            self._waiting.append(group)
            self._cond.notify_all()
        return handle

    def load_weights(self, path: str | Path, version: int | None = None) -> int:
        """Swap in the checkpoint at ``path`` once running requests finish; return the new version.

        Blocking: loads the checkpoint on the calling thread while decoding continues.
        The tokenizer stays the one served: a checkpoint must share its vocabulary.
        """
        model = load_causal_lm(path)
        vocab = int(model.config.vocab_size)
        if vocab != self.vocab_size:
            raise WeightLoadError(f"checkpoint {path} has vocab_size {vocab}, the served tokenizer needs {self.vocab_size}")
        self.start()
        with self._swap_lock:
            swap = _Swap(model, version)
            with self._cond:
                if self._stopping:
                    raise GenerationError("the server is shutting down; the new weights were not swapped in")
                self._swap = swap
                self._cond.notify_all()
            swap.done.wait()
        if swap.failure:
            raise GenerationError(swap.failure)
        return swap.applied_version

    # ---- engine thread -----------------------------------------------------------------
    def _run(self) -> None:
        if self.num_threads:
            torch.set_num_threads(self.num_threads)  # per OS thread under OpenMP: the caller's pool is untouched
        with torch.inference_mode():
            while True:
                with self._cond:
                    while not (self._stopping or self._waiting or self._rows or self._swap):
                        self._cond.wait()
                    if self._stopping:
                        break
                    if self._swap is not None and not self._rows:
                        self._apply_swap(self._swap)
                        self._swap = None
                        continue
                    newcomers = self._take_waiting() if self._swap is None else []
                try:
                    self._advance(newcomers)
                except Exception as exc:  # keep serving: fail only the requests in this batch
                    self._fail_all(f"generation failed: {type(exc).__name__}: {exc}", newcomers)
                finally:
                    self._post()
        self._fail_all("the server is shutting down", list(self._waiting))
        self._waiting.clear()
        self._post()
        if self._swap is not None:
            self._swap.failure = "the server shut down before the new weights could be swapped in"
            self._swap.done.set()
            self._swap = None

    def _post(self) -> None:
        """Hand this step's events to their event loops: one wake-up per loop, not per token."""
        by_loop: dict[asyncio.AbstractEventLoop, list[tuple[GenerationHandle, object]]] = {}
        for handle, event in self._outbox:
            by_loop.setdefault(handle._loop, []).append((handle, event))
        self._outbox = []
        for loop, batch in by_loop.items():
            try:
                loop.call_soon_threadsafe(_deliver, batch)
            except RuntimeError:  # that loop is closed (its server shut down): nobody listens
                for handle, _ in batch:
                    handle.cancelled = True

    def _take_waiting(self) -> list[_Group]:
        taken: list[_Group] = []
        room = self.max_batch_size - len(self._rows)
        while self._waiting:
            size = len(self._waiting[0].prompts) * self._waiting[0].n
            if size > room and (taken or self._rows):
                break
            taken.append(self._waiting.popleft())
            room -= size
        return taken

    def _apply_swap(self, swap: _Swap) -> None:
        self.model = swap.model
        self._version = swap.version if swap.version is not None else self._version + 1
        swap.applied_version = self._version
        swap.done.set()

    def _advance(self, newcomers: list[_Group]) -> None:
        """One decoding step of the whole batch, admitting newcomers first."""
        if newcomers:
            joining = []
            for group in newcomers:
                self._outbox.append((group.handle, Admitted(self._version)))
                for p, prompt in enumerate(group.prompts):
                    joining.extend(_Row(group, p * group.n + j, list(prompt)) for j in range(group.n))
            if self._rows and all(len(r.prompt) > 1 for r in joining):
                self._join(joining)
            else:  # nothing running (or a 1-token prompt): one prefill of everything
                self._rows += joining
                self._cache, self._mask, self._logits = self._forward_full([r.tokens for r in self._rows])
        if self._logits is None:
            self._decode()
        self._sample()

    def _forward_full(self, seqs: list[list[int]]) -> tuple[object, torch.Tensor, torch.Tensor]:
        """Run token lists (left-padded) through the model: (fresh KV cache, mask, last logits)."""
        from transformers import DynamicCache

        width = max(len(s) for s in seqs)
        ids = torch.full((len(seqs), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(seqs), width), dtype=torch.long)
        for i, s in enumerate(seqs):
            ids[i, width - len(s) :] = torch.tensor(s)
            mask[i, width - len(s) :] = 1
        positions = (mask.cumsum(1) - 1).clamp(min=0)
        cache = DynamicCache(config=self.model.config)
        device = self.model.device
        ids, mask, positions = ids.to(device), mask.to(device), positions.to(device)
        out = self.model(
            input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache, use_cache=True, logits_to_keep=1
        )
        return cache, mask, out.logits[:, -1].float().cpu()

    def _join(self, joining: list[_Row]) -> None:
        """Add rows to the running batch without recomputing it.

        The newcomers' prompts minus their last token are prefilled on their own and their
        KV cache is appended to the batch's (left-padded to one width); the next decode
        step then feeds every row's last token: a newcomer's last prompt token, a running
        row's last sample.
        """
        cache, mask, _ = self._forward_full([r.prompt[:-1] for r in joining])
        width = max(self._mask.shape[1], mask.shape[1])
        for mine, theirs in zip(self._cache.layers, cache.layers):
            mine.keys = torch.cat([_left_pad(mine.keys, width, -2), _left_pad(theirs.keys, width, -2)])
            mine.values = torch.cat([_left_pad(mine.values, width, -2), _left_pad(theirs.values, width, -2)])
        self._mask = torch.cat([_left_pad(self._mask, width, -1), _left_pad(mask, width, -1)])
        self._rows += joining
        self._logits = None

    def _decode(self) -> None:
        """Feed each row's last token through the model with the KV cache."""
        ids = torch.tensor([[r.tokens[-1]] for r in self._rows], device=self._mask.device)
        self._mask = torch.cat([self._mask, torch.ones((len(self._rows), 1), dtype=torch.long, device=self._mask.device)], dim=1)
        positions = self._mask.sum(1, keepdim=True) - 1
        out = self.model(input_ids=ids, attention_mask=self._mask, position_ids=positions, past_key_values=self._cache, use_cache=True)
        self._logits = out.logits[:, -1].float().cpu()

    def _drop_rows(self, keep: list[int]) -> None:
        """Keep only rows ``keep`` in the batch and cut padding columns no row needs any more."""
        self._rows = [self._rows[i] for i in keep]
        if not self._rows:
            self._cache = self._mask = None
            return
        index = torch.tensor(keep, device=self._mask.device)
        self._cache.batch_select_indices(index)
        self._mask = self._mask[index]
        unused = int((self._mask.cumsum(1) == 0).sum(1).min())
        if unused:
            self._mask = self._mask[:, unused:]
            for layer in self._cache.layers:
                layer.keys, layer.values = layer.keys[..., unused:, :], layer.values[..., unused:, :]

    def _sample(self) -> None:
        """Sample one token per row, report it, and drop finished rows from the batch."""
        logits = self._logits
        temperatures = torch.tensor([r.group.params.temperature or 1.0 for r in self._rows], dtype=logits.dtype, device=logits.device)
        logprobs = torch.log_softmax(logits / temperatures[:, None], dim=-1)  # the distribution each row samples from
        tokens = draw_tokens(logits, [r.group.params for r in self._rows], [r.group.rng.random() for r in self._rows])
        k = max(r.group.params.top_logprobs for r in self._rows)
        top = logprobs.topk(k, dim=-1) if k else None
        keep: list[int] = []
        for i, row in enumerate(self._rows):
            if row.group.handle.cancelled:
                continue
            params = row.group.params
            token = tokens[i]
            row.generated.append(token)
            row.logprobs.append(float(logprobs[i, token]))
            tops = (
                list(zip(top.indices[i, : params.top_logprobs].tolist(), top.values[i, : params.top_logprobs].tolist()))
                if top is not None and params.top_logprobs
                else []
            )
            row.top_logprobs.append(tops)
            if not self._report(row, token, tops):
                keep.append(i)
        self._logits = None
        if len(keep) < len(self._rows):
            self._drop_rows(keep)

    def _report(self, row: _Row, token: int, tops: list[tuple[int, float]]) -> bool:
        """Emit the step (and the result if the row finished); return whether it finished."""
        params = row.group.params
        text = self.tokenizer.decode(row.generated, skip_special_tokens=True)
        finish = matched = None
        if token in self.eos_token_ids and not params.ignore_eos:
            finish = "stop"
        else:
            hits = [(i, s) for s in params.stop if (i := text.find(s)) >= 0]
            if hits:
                at, matched = min(hits, key=lambda hit: hit[0])
                text, finish = text[:at], "stop"
            elif len(row.generated) >= params.max_tokens or len(row.tokens) >= self.max_context:
                finish = "length"
        visible = text if finish else _stable_prefix(text, params.stop)
        delta = visible[len(row.emitted_text) :] if visible.startswith(row.emitted_text) else ""
        row.emitted_text += delta
        handle = row.group.handle
        self._outbox.append((handle, TokenStep(row.choice, token, row.logprobs[-1], tops, delta)))
        if finish:
            result = ChoiceResult(row.choice, row.prompt, row.generated, row.logprobs, row.top_logprobs, text, finish, matched)
            self._outbox.append((handle, result))
        return finish is not None

    def _fail_all(self, message: str, groups: list[_Group]) -> None:
        handles = {id(r.group.handle): r.group.handle for r in self._rows}
        handles.update({id(g.handle): g.handle for g in groups})
        self._outbox.extend((handle, Failed(message)) for handle in handles.values())
        self._rows, self._cache, self._mask, self._logits = [], None, None, None


def draw_tokens(logits: torch.Tensor, params: list[SamplingParams], uniforms: list[float]) -> list[int]:
    """One token per row: argmax at temperature 0, else inverse-CDF sampling of
    softmax(logits / T) restricted to the top-p nucleus, all rows at once.

    Each row brings its own uniform draw, so a seeded request samples the same ids
    whatever else shares its batch.
    """
    tokens = logits.argmax(dim=-1)
    rows = [i for i, p in enumerate(params) if p.temperature > 0]
    if rows:
        index = torch.tensor(rows)
        temperature = torch.tensor([params[i].temperature for i in rows])[:, None]
        probs = torch.softmax(logits[index] / temperature, dim=-1)
        order = None
        if any(params[i].top_p < 1.0 for i in rows):
            probs, order = probs.sort(dim=-1, descending=True)
            top_p = torch.tensor([params[i].top_p for i in rows])[:, None]
            probs[probs.cumsum(-1) - probs >= top_p] = 0.0  # the most likely token always stays
        cdf = probs.cumsum(-1)
        target = torch.tensor([uniforms[i] for i in rows])[:, None] * cdf[:, -1:]
        picked = torch.searchsorted(cdf, target).clamp(max=probs.shape[-1] - 1)
        if order is not None:
            picked = order.gather(1, picked)
        tokens[index] = picked[:, 0]
    return tokens.tolist()


def _deliver(batch: list[tuple[GenerationHandle, object]]) -> None:
    """Runs on the handles' event loop."""
    for handle, event in batch:
        handle._queue.put_nowait(event)


def _left_pad(t: torch.Tensor, width: int, dim: int) -> torch.Tensor:
    """Zero-pad ``t`` on the left of ``dim`` to ``width`` (masked positions, so zeros are inert)."""
    missing = width - t.shape[dim]
    if missing == 0:
        return t
    shape = list(t.shape)
    shape[dim] = missing
    return torch.cat([t.new_zeros(shape), t], dim=dim)


def _stable_prefix(text: str, stops: tuple[str, ...]) -> str:
    """Text safe to stream: no half-decoded UTF-8 tail, no tail that may start a stop string."""
    text = text.rstrip("\ufffd")
    hold = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), hold, -1):
            if text.endswith(stop[:k]):
                hold = k
                break
    return text[: len(text) - hold]


def _max_context(model_path: Path, positions: int, max_model_len: int | None) -> int:
    """The context served: ``max_model_len`` if the model's positions reach that far (vLLM refuses
    a longer one too: the model never saw those positions), else the model's own length."""
    if max_model_len is None:
        return positions
    if not 1 <= max_model_len <= positions:
        raise ContextLengthError(
            f"max_model_len {max_model_len} is outside 1..{positions}: {model_path} has "
            f"max_position_embeddings {positions} (config.json). Serve at most {positions} tokens, "
            "or a model built for a longer context."
        )
    return max_model_len


def _eos_token_ids(model: torch.nn.Module, tokenizer) -> frozenset[int]:
    ids: set[int] = set()
    for source in (getattr(model, "generation_config", None), model.config, tokenizer):
        value = getattr(source, "eos_token_id", None)
        if isinstance(value, int):
            ids.add(value)
        elif isinstance(value, (list, tuple)):
            ids.update(int(v) for v in value)
    return frozenset(ids)
