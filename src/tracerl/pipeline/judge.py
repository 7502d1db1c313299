"""``tracerl pipeline judge``: rewards for episodes nobody labelled, from a model that compares them.

The finished episodes of each task are shown together to a judge (any OpenAI-compatible
endpoint) that scores them against a rubric, relative to each other
(:mod:`tracerl.pipeline.judge_prompt`). Every outcome is kept in the data dir's
``judgments/NAME.jsonl`` (:mod:`tracerl.pipeline.judgment_log`: prompt, raw answer,
judge model, rubric hash, judge URL, the episode's content hash), which is also the cache:
a re-run judges again what no longer stands under the same model, rubric and URL (an
episode whose content changed, a failure, a ``too_long`` skip when the limit was raised,
what ``max_calls`` left unsent: :func:`tracerl.pipeline.judgment_log.still_stands`). Each
worker writes its group's lines before it sends another, so a kill loses at most
``concurrency`` groups. The scores are written as late rewards, ``rewards/NAME.parquet``
(episode_id, name, value, plus the provenance columns), which ``build-dataset``, ``doctor``
and the report read like any other rewards of the data dir; the judge's outcomes are counted
by doctor (``judgments``). With ``evaluation_events`` (opt-in) the scored and failed verdicts are
also written as OpenTelemetry ``gen_ai.evaluation.result`` events in ``logs/``, parented to each
episode's span, for trace viewers, and sent to the OTLP endpoint the environment names
(:mod:`tracerl.pipeline.judge_events`).

Rules, each with its count in the summary:

- **A group of one** (a task run once) is judged alone, against the rubric only (``alone``).
- **Ties** are kept as the judge gave them; a group scored all alike gives GRPO nothing to
  learn from, and is counted (``tied_groups``).
- **Too long**: an episode whose prompt alone exceeds ``max_prompt_chars`` is not sent
  (``skipped``, reason ``too_long``, with the limit; a run with a higher limit tries it again);
  a group that does not fit is split into parts that do, each judged on its own; more than
  ``max_group`` episodes of a task are split the same way.
- **An answer that does not parse** (a 2xx whose body is no chat completion with text included),
  or a call that fails (timeout, dropped connection, 5xx, 429) is retried once, a 429 or 5xx after
  the server's ``Retry-After`` (at most 60 s; 1 s after a 429 without one); another 4xx, or a 3xx,
  is not retried (the same request fails the same).
  Then every episode of the group is recorded ``failed`` with the answer or error, and its type
  (``error_type``: the HTTP status code, else the exception's fully-qualified class name), and judged
  again by the next run. Never a silent 0.
- **The call budget** (``max_calls``): a group it leaves unsent is recorded ``skipped``,
  reason ``max_calls``, and one whose retry it denies ``failed``; both are judged by the next run.
- The judge's own calls carry the agent name ``tracerl.judge`` and run with
  instrumentation suppressed: if a process with capture on makes them anyway, the pipeline
  excludes them (``judge_call``), so they never become policy transitions.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from functools import cached_property
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
from opentelemetry import baggage, context
from opentelemetry.instrumentation.utils import suppress_instrumentation

from tracerl.pipeline.build import analyze
from tracerl.pipeline.judge_prompt import (
    JudgeAnswerError, content_sha256, judge_messages, parse_scores, prompt_chars, rubric_sha256, transcript,
)
from tracerl.pipeline.judge_events import EvaluatedSpan, evaluated_spans, write_evaluation_events
from tracerl.pipeline.judge_options import JudgeOptions
from tracerl.pipeline.judgment_log import CacheKey, JudgmentLog, endpoint, still_stands
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.source import PipelineInputError
from tracerl.pipeline.sql_text import sql_str
from tracerl.pipeline.writer import call_messages
from tracerl.core.storage import write_atomic
from tracerl.schemas import attributes as A

Progress = Callable[[str, int | None, int], None]  # (what, total groups or None, groups done)
RETRY_AFTER_MAX_S = 60.0  # the longest a Retry-After holds a worker; a longer wait is better spent by the next run
RATE_LIMIT_WAIT_S = 1.0  # before retrying a 429 that names no wait: a rate limit needs time to refill


@dataclass
class JudgeSummary:
    scored: int = 0
    failed: int = 0
    failed_reasons: dict[str, int] = field(default_factory=dict)  # the error (its start) -> episodes
    skipped: dict[str, int] = field(default_factory=dict)
    already_judged: int = 0
    left_for_next_run: int = 0  # not sent: --max-calls was reached (recorded skipped, reason max_calls)
    unkeyed: int = 0  # judged again: their lines predate the cache key's judge URL and content hash
    calls: int = 0
    groups: int = 0
    alone: int = 0
    tied_groups: int = 0
    rewards_file: str = ""
    judgments_file: str = ""
    evaluation_events: int = 0  # gen_ai.evaluation.result events written by this run
    events_folder: str = ""  # where: the logs/ beside rewards/ (with evaluation_events on)
    events_endpoint: str | None = None  # the OTLP endpoint they were sent to as well (the environment's), None: none
    events_not_sent: str | None = None  # why that endpoint did not take them (then none were written: the next run tries)

    def commonest_failures(self) -> str:
        """The three commonest reasons of failure with their episodes, e.g. ``4 x HTTP 503: ...``."""
        return "; ".join(f"{n} x {reason}" for reason, n in Counter(self.failed_reasons).most_common(3))

    def messages(self, max_calls: int | None) -> list[str]:
        """What a user should know about this run, in words."""
        notes = []
        if self.alone:
            notes.append(f"{self.alone} episode(s) were the only one of their task and were judged alone, against the rubric only")
        if self.tied_groups:
            notes.append(f"{self.tied_groups} group(s) were scored all alike: no preference, so GRPO learns nothing from them")
        if self.skipped.get("too_long"):
            notes.append(f"{self.skipped['too_long']} episode(s) are too long for --max-prompt-chars and were not sent")
        if self.failed:
            notes.append(f"{self.failed} episode(s) could not be judged ({self.commonest_failures()}; answers and errors in "
                         f"{self.judgments_file}); the next run tries them again")
        if self.unkeyed:
            notes.append(f"{self.unkeyed} episode(s) had only judgments written before the cache held the judge's URL and the "
                         "episode's content: they were judged again, under the full key")
        if self.left_for_next_run:
            notes.append(f"--max-calls {max_calls} reached: {self.left_for_next_run} episode(s) left for the next run")
        if self.events_not_sent:
            notes.append(f"evaluation events not sent: {self.events_not_sent}; not written to {self.events_folder} either: "
                         "the next run sends and writes them")
        elif self.evaluation_events and self.events_endpoint:
            notes.append(f"{self.evaluation_events} evaluation event(s) also sent to {self.events_endpoint} "
                         "(OTEL_EXPORTER_OTLP_[LOGS_]ENDPOINT)")
        return notes


@dataclass
class _Episode:
    episode_id: str
    task_id: str | None
    turns: list[dict[str, str]]

    @cached_property
    def content_sha256(self) -> str:
        return content_sha256(self.turns)


def output_folder(spans: str, out: str | Path | None) -> Path:
    """Where rewards/ and judgments/ go: ``out``, or the data dir itself when ``spans`` is a local one."""
    if out is not None:
        return Path(out)
    root = Path(spans)
    if "://" not in spans and (root / "spans").is_dir():
        return root
    raise PipelineInputError(
        f"{spans} is not a local data dir (holding spans/): pass --out FOLDER for the judge's rewards/ and judgments/, "
        "then give build-dataset --rewards FOLDER/rewards/NAME.parquet"
    )


# tools that ran after the episode's last LLM call: their outcome is in no prompt, yet it may be the
# episode's answer (an agent that returns its tool's result); shown when the span records a result or an error
_FINAL_TOOLS_SQL = f"""
    SELECT s.episode_id, coalesce(attr(s.attributes, {sql_str(A.GEN_AI_TOOL_NAME)}), s.name),
           attr(s.attributes, {sql_str(A.GEN_AI_TOOL_CALL_RESULT)}), s.status_code, s.status_message
    FROM spans s JOIN (SELECT episode_id, max(end_ns) AS last_end FROM policy_calls GROUP BY 1) l USING (episode_id)
    WHERE s.is_tool AND s.start_time_unix_nano >= l.last_end
      AND (s.status_code = 'ERROR' OR attr(s.attributes, {sql_str(A.GEN_AI_TOOL_CALL_RESULT)}) IS NOT NULL)
    ORDER BY s.episode_id, s.start_time_unix_nano, s.span_id
"""


def _episodes(spans: str, options: JudgeOptions) -> tuple[list[_Episode], dict[str, EvaluatedSpan]]:
    """The finished episodes (of ``options.splits``) with their turns, judge calls left out, and the
    outcome of tools that ran after their last call; with ``options.evaluation_events``, the span each
    episode's verdict event is parented to."""
    analysis = analyze(spans, BuildOptions(splits=options.splits, episode_timeout_s=options.episode_timeout_s, default_rules=False))
    try:
        calls = analysis.con.sql(
            "SELECT episode_id, task_id, start_ns, span_id, trace_id, content_layout, file_index, file_row FROM policy_calls"
        ).to_arrow_table()
        calls = call_messages(analysis.con, analysis.files, calls)
        outcomes = analysis.con.execute(_FINAL_TOOLS_SQL).fetchall()
        evaluated = evaluated_spans(analysis.con) if options.evaluation_events else {}
    finally:
        analysis.con.close()
    final_tools: dict[str, list[dict[str, str]]] = {}
    for episode_id, tool, result, status, message in outcomes:
        text = f"{tool} failed: {message or 'error'}" if status == "ERROR" else f"{tool} returned: {result}"
        final_tools.setdefault(episode_id, []).append({"role": "tool", "content": text})
    by_episode: dict[str, list[dict[str, Any]]] = {}
    for row in calls.to_pylist():
        by_episode.setdefault(row["episode_id"], []).append(row)
    episodes = []
    for episode_id in sorted(by_episode):
        rows = sorted(by_episode[episode_id], key=lambda r: (r["start_ns"], r["span_id"]))
        turns = transcript([(r["input_messages"], r["output_messages"]) for r in rows]) + final_tools.get(episode_id, [])
        episodes.append(_Episode(episode_id, rows[0]["task_id"], turns))
    return episodes, evaluated


def _fits(episodes: list[_Episode], options: JudgeOptions) -> bool:
    return prompt_chars(judge_messages(options.rubric, [e.turns for e in episodes])) <= options.max_prompt_chars


def _parts(group: list[_Episode], options: JudgeOptions) -> list[list[_Episode]]:
    """``group`` split into parts of at most ``max_group`` episodes whose prompt fits ``max_prompt_chars``
    (balanced sizes, so no part is left with one episode when it need not be)."""
    n_parts = -(-len(group) // options.max_group)
    size = -(-len(group) // n_parts)
    fitted: list[list[_Episode]] = []
    for start in range(0, len(group), size):
        part = group[start: start + size]
        while part:
            take = len(part)
            while take > 1 and not _fits(part[:take], options):
                take -= 1
            fitted.append(part[:take])
            part = part[take:]
    return fitted


class MalformedReply(JudgeAnswerError):
    """A 2xx whose body is no chat completion with text (a proxy's page, an error object, no choice, a content that is
    not a string): an answer that does not parse, retried once and then recorded ``failed``, not a crash of the run."""

    def __init__(self, why: str, response: httpx.Response) -> None:
        super().__init__(f"malformed reply: {why}")
        self.reply = response.text[:500]  # kept in the group's line, as an answer is


def _completion_text(response: httpx.Response) -> str:
    """The text of the first choice of a chat completion; :class:`MalformedReply` saying what is missing otherwise."""
    try:
        body = response.json()
    except (ValueError, RecursionError):  # not JSON, not UTF-8, nested past the parser's depth
        raise MalformedReply("the body is not JSON", response) from None
    choices = body.get("choices") if isinstance(body, dict) else None
    if not isinstance(choices, list) or not choices:
        raise MalformedReply('no "choices" list with a choice', response)
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise MalformedReply('the first choice has no "message" object', response)
    content = message.get("content")
    if not isinstance(content, str):
        raise MalformedReply(f"the message's content is not text: {json.dumps(content)[:40]}", response)
    return content


def _completions_url(base: str) -> str:
    """``base`` + ``/chat/completions``, added to the path: a query (a hosted API's ``?api-version=...``) stays after it."""
    parts = urlsplit(base)
    return urlunsplit(parts._replace(path=parts.path.rstrip("/") + "/chat/completions"))


class _Judge:
    """Calls the judge for one part at a time (thread-safe); counts calls against ``max_calls``."""

    def __init__(self, options: JudgeOptions) -> None:
        self.options = options
        headers = {"Authorization": f"Bearer {options.api_key}"} if options.api_key else {}
        self.client = httpx.Client(timeout=options.timeout_s, headers=headers)
        self.url = _completions_url(options.url)
        self.calls = 0
        self._lock = threading.Lock()

    def _may_call(self) -> bool:
        with self._lock:
            if self.options.max_calls is not None and self.calls >= self.options.max_calls:
                return False
            self.calls += 1
            return True

    def _ask(self, messages: list[dict[str, str]]) -> str:
        """The judge's answer text; raises httpx errors for a failed call (a 3xx included: a redirect is no answer),
        :class:`MalformedReply` for a 2xx that carries no text."""
        body = {"model": self.options.model, "messages": messages, "temperature": 0.0, "max_tokens": self.options.max_tokens}
        token = context.attach(baggage.set_baggage(A.AGENT_NAME, A.JUDGE_AGENT))
        try:
            with suppress_instrumentation():
                response = self.client.post(self.url, json=body)
        finally:
            context.detach(token)
        if not response.is_success:
            raise httpx.HTTPStatusError(f"HTTP {response.status_code}: {response.text[:500]}", request=response.request, response=response)
        return _completion_text(response)

    def judge(self, part: list[_Episode]) -> dict[str, Any] | None:
        """``{"scores": [...]}`` or ``{"error": ...}`` with the answers and errors of each attempt;
        ``None`` when ``max_calls`` left no call for it."""
        messages = judge_messages(self.options.rubric, [e.turns for e in part])
        attempts: list[dict[str, str]] = []
        wait, denied = 0.0, False
        for _ in range(2):
            if not self._may_call():
                denied = True
                break
            time.sleep(wait)
            try:
                answer = self._ask(messages)
            except httpx.HTTPStatusError as exc:
                attempts.append({"error": str(exc), "error_type": str(exc.response.status_code)})
                if exc.response.status_code < 500 and exc.response.status_code != 429:
                    break  # the request itself is wrong (context too long, unknown model): the same again fails the same
                wait = _retry_wait(exc.response)
                continue
            except MalformedReply as exc:
                attempts.append({"reply": exc.reply, "error": str(exc), "error_type": _error_type(exc)})
                continue
            except httpx.HTTPError as exc:
                attempts.append({"error": f"{type(exc).__name__}: {exc}", "error_type": _error_type(exc)})
                continue
            try:
                scores = parse_scores(answer, len(part))
            except JudgeAnswerError as exc:
                attempts.append({"answer": answer, "error": str(exc), "error_type": _error_type(exc)})
                continue
            attempts.append({"answer": answer})
            return {"messages": messages, "attempts": attempts, "scores": scores}
        if not attempts:
            return None
        error = attempts[-1]["error"]
        if denied:  # a failure of the budget as much as of the judge: said so, and (as every failure) retried next run
            error = f"--max-calls {self.options.max_calls} reached before the retry; last error: {error}"
        return {"messages": messages, "attempts": attempts, "error": error, "error_type": attempts[-1]["error_type"]}


def _error_type(exc: Exception) -> str:
    """The exception's fully-qualified class name: what the conventions' ``error.type`` takes (``httpx.ReadTimeout``)."""
    return f"{type(exc).__module__}.{type(exc).__qualname__}"


def _retry_wait(response: httpx.Response) -> float:
    """Seconds before retrying a 429 or 5xx: the server's ``Retry-After`` (seconds or an HTTP date), at most
    :data:`RETRY_AFTER_MAX_S`; without one, :data:`RATE_LIMIT_WAIT_S` after a 429 and none after a 5xx."""
    value = response.headers.get("retry-after", "").strip()
    if value.isascii() and value.isdigit():  # isdigit() alone takes '²' (a latin-1 header byte), which float() refuses
        return min(float(value), RETRY_AFTER_MAX_S)
    try:
        return min(max(parsedate_to_datetime(value).timestamp() - time.time(), 0.0), RETRY_AFTER_MAX_S)
    except (TypeError, ValueError, IndexError, OverflowError):
        return RATE_LIMIT_WAIT_S if response.status_code == 429 else 0.0


def _records(part: list[_Episode], result: dict[str, Any], key: CacheKey, group: str) -> list[dict[str, Any]]:
    now = time.time()
    common = {**key.fields(), "group": group, "group_size": len(part), "unix": now}
    lines: list[dict[str, Any]] = [{"kind": "group", **common, "episodes": [e.episode_id for e in part],
                                    "prompt": result["messages"], "attempts": result["attempts"]}]
    for i, episode in enumerate(part, 1):
        line = {"kind": "episode", "episode_id": episode.episode_id, "task_id": episode.task_id, **common, "trajectory_id": i,
                "content_sha256": episode.content_sha256}
        if "scores" in result:
            score = result["scores"][i - 1]
            line |= {"status": "scored", "score": score.value, "explanation": score.explanation, "reason": None}
        else:
            line |= {"status": "failed", "score": None, "reason": result["error"], "error_type": result["error_type"]}
        lines.append(line)
    return lines


def _skipped(episode: _Episode, key: CacheKey, reason: str, **why: Any) -> dict[str, Any]:
    """An episode not sent: ``too_long`` (``why`` holds the limit it exceeded) or ``max_calls``."""
    return {"kind": "episode", "episode_id": episode.episode_id, "task_id": episode.task_id, **key.fields(),
            "content_sha256": episode.content_sha256, "group": None, "group_size": 1, "trajectory_id": None, "unix": time.time(),
            "status": "skipped", "score": None, "reason": reason, **why}


def write_rewards(log: JudgmentLog, path: Path, options: JudgeOptions, key: CacheKey) -> int:
    """``path``: the scored episodes as late rewards with their provenance, replaced atomically; rows written."""
    scored = [r for r in log.latest(key).values() if r["status"] == "scored"]
    table = pa.table({
        "episode_id": pa.array([r["episode_id"] for r in scored], pa.string()),
        "name": pa.array([options.reward_name] * len(scored), pa.string()),
        "value": pa.array([float(r["score"]) for r in scored], pa.float64()),
        "judge_model": pa.array([r["judge_model"] for r in scored], pa.string()),
        "rubric_sha256": pa.array([r["rubric_sha256"] for r in scored], pa.string()),
        "group": pa.array([r["group"] for r in scored], pa.string()),
        "group_size": pa.array([r["group_size"] for r in scored], pa.int32()),
    })
    path.parent.mkdir(parents=True, exist_ok=True)
    buffer = pa.BufferOutputStream()
    pq.write_table(table, buffer)
    write_atomic(path, buffer.getvalue().to_pybytes())
    return len(scored)


def judge(spans: str, options: JudgeOptions, out: str | Path | None = None, progress: Progress | None = None) -> JudgeSummary:
    """Judge the finished episodes of ``spans`` whose judgment does not stand; write judgments and rewards; return the counts."""
    folder = output_folder(str(spans), out)
    log = JudgmentLog(folder / "judgments" / f"{options.reward_name}.jsonl")
    rewards_path = folder / "rewards" / f"{options.reward_name}.parquet"
    key = CacheKey(options.model, rubric_sha256(options.rubric), endpoint(options.url))
    summary = JudgeSummary(rewards_file=str(rewards_path), judgments_file=str(log.path))
    report = progress or (lambda what, total, done: None)
    report("reading episodes", None, 0)
    previous, unkeyed = log.latest(key), log.unkeyed(key)
    todo: dict[str | None, list[_Episode]] = {}
    skipped: list[dict[str, Any]] = []
    episodes, evaluated = _episodes(str(spans), options)
    for episode in episodes:
        if still_stands(previous.get(episode.episode_id), episode.content_sha256, options.max_prompt_chars):
            summary.already_judged += 1
            continue
        summary.unkeyed += episode.episode_id in unkeyed and episode.episode_id not in previous
        if prompt_chars(judge_messages(options.rubric, [episode.turns])) > options.max_prompt_chars:
            skipped.append(_skipped(episode, key, "too_long", max_prompt_chars=options.max_prompt_chars))
        else:
            # episodes without a task have nothing to be compared with: each is its own group
            todo.setdefault(episode.task_id if episode.task_id is not None else f"\0{episode.episode_id}", []).append(episode)
    if skipped:
        log.append(skipped)
        summary.skipped["too_long"] = len(skipped)
    parts = [part for group in todo.values() for part in _parts(group, options)]
    summary.groups = len(parts)
    judge_client = _Judge(options)

    def judge_and_record(part: list[_Episode]) -> dict[str, Any] | None:
        # the worker writes its own outcome before it takes another part: a kill loses at most one part per worker
        result = judge_client.judge(part)
        if result is None:
            log.append([_skipped(e, key, "max_calls") for e in part])
        else:
            log.append(_records(part, result, key, hashlib.sha256(",".join(e.episode_id for e in part).encode()).hexdigest()[:16]))
        return result

    report("judging", len(parts), 0)
    with ThreadPoolExecutor(max_workers=options.concurrency) as pool:
        futures = {pool.submit(judge_and_record, part): part for part in parts}
        for done, future in enumerate(as_completed(futures), 1):
            part = futures[future]
            result = future.result()
            if result is None:
                summary.left_for_next_run += len(part)
            elif "scores" in result:
                summary.scored += len(part)
                summary.alone += len(part) == 1
                values = {s.value for s in result["scores"]}
                summary.tied_groups += len(part) > 1 and len(values) == 1
            else:
                summary.failed += len(part)
                reason = result["error"][:120]
                summary.failed_reasons[reason] = summary.failed_reasons.get(reason, 0) + len(part)
            report("judging", len(parts), done)
    judge_client.client.close()
    summary.calls = judge_client.calls
    write_rewards(log, rewards_path, options, key)
    if options.evaluation_events:
        summary.events_folder = str(folder / "logs")
        events = write_evaluation_events(folder, list(log.latest(key).values()), options.reward_name, evaluated)
        summary.evaluation_events, summary.events_endpoint, summary.events_not_sent = events.written, events.endpoint, events.not_sent
    return summary
