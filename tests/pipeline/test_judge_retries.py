"""``tracerl pipeline judge``'s retry rules and cache key, against real HTTP servers on loopback.

Each rule of src/tracerl/pipeline/README.md's table gets a judge that breaks it the way a real one does: a
scripted judge behind a gate that answers chosen requests with an HTTP error (5xx, 429 with and
without Retry-After, 400), ``tracerl_testing``'s scripted server refusing an unknown model (404),
a call budget, a length limit. The gate counts every request, so each test says how many calls
a rule costs; the cache tests count what a second run sends again, and the kill test kills the
documented CLI at its default concurrency and counts what the rerun repeats.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import pyarrow.parquet as pq
import pytest
from starlette.responses import JSONResponse

from tracerl.pipeline.doctor import diagnose
from tracerl.pipeline.judge import RATE_LIMIT_WAIT_S, RETRY_AFTER_MAX_S, JudgeOptions, _retry_wait, judge
from tracerl.pipeline.judgment_log import JudgmentLog
from tracerl.pipeline.options import BuildOptions
from tracerl.schemas import attributes as A
from tracerl.core.uvicorn_thread import serve_in_thread
from tracerl_testing.judges import scripted_judge, trajectories
from tracerl_testing.scripted_server import ScriptedServer
from tracerl_testing.span_builders import episode_span, llm_call, tool_span, write_spans


def _text(role: str, content: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def _episode(episode: str, task: str, answer: str, question: str = "What is 2 + 2?") -> list[dict]:
    """An unlabelled episode: one call that answers ``question`` with ``answer``."""
    messages = {A.GEN_AI_INPUT_MESSAGES: json.dumps([_text("system", "Answer with a number."), _text("user", question)]),
                A.GEN_AI_OUTPUT_MESSAGES: json.dumps([_text("assistant", answer)])}
    return [episode_span(episode, 0, 1000, task=task), llm_call(episode, "c1", 10, 20, [1, 2], [ord(c) for c in answer], extra=messages)]


def _score(context: str, trajectory: str) -> float:
    """The scripted rubric: 1 for the right sum, 0.2 for another answer."""
    return 1.0 if trajectory.rsplit("[assistant] ", 1)[-1].strip() == "4" else 0.2


@dataclass
class Gate:
    """A scripted judge behind a gate: the first requests get the queued ``(status, headers)`` errors, the
    rest reach the judge. Every request is logged with its arrival and the status it got."""

    failures: list[tuple[int, dict[str, str]]] = field(default_factory=list)
    latency_s: float = 0.0
    requests: list[tuple[float, int]] = field(default_factory=list)  # (monotonic arrival, status answered)
    in_flight: int = 0
    most_in_flight: int = 0
    base_url: str = ""

    def __post_init__(self) -> None:
        self.judge = ScriptedServer(scripted_judge(_score), latency_s=self.latency_s)

    @property
    def statuses(self) -> list[int]:
        return [status for _, status in self.requests]

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.judge.app(scope, receive, send)
        arrived = time.monotonic()

        async def logged(message: dict) -> None:
            if message["type"] == "http.response.start":
                self.requests.append((arrived, message["status"]))
            await send(message)

        self.in_flight += 1  # one event loop: no lock needed
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            if self.failures:
                status, headers = self.failures.pop(0)
                error = {"object": "error", "message": f"scripted error {status}", "code": status}
                return await JSONResponse(error, status_code=status, headers=headers)(scope, receive, logged)
            return await self.judge.app(scope, receive, logged)
        finally:
            self.in_flight -= 1


@contextmanager
def gate(*failures: tuple[int, dict[str, str]], latency_s: float = 0.0) -> Iterator[Gate]:
    server = Gate(list(failures), latency_s)
    with serve_in_thread(server, name="judge-gate") as url:
        server.base_url = f"{url}/v1"
        yield server


@pytest.fixture()
def one_task(data_dir):
    """Task t1 run three times (right, wrong, right): one group, one call."""
    return write_spans(data_dir, [*_episode("e1", "t1", "4"), *_episode("e2", "t1", "5"), *_episode("e3", "t1", "4")])


@pytest.fixture()
def three_tasks(data_dir):
    """Tasks t1 (two episodes), t2 and t3 (one each): three groups, three calls."""
    return write_spans(data_dir, [*_episode("e1", "t1", "4"), *_episode("e2", "t1", "5"),
                                  *_episode("e3", "t2", "4", question="What is 1 + 3?"),
                                  *_episode("e4", "t3", "7", question="And 2 + 2?")])


def _options(server: Gate, **kw) -> JudgeOptions:
    return JudgeOptions(**{"url": server.base_url, "model": "scripted", "concurrency": 1, **kw})


def _log(data_dir) -> JudgmentLog:
    return JudgmentLog(data_dir / "judgments" / "judge.jsonl")


def _rewards(data_dir) -> dict[str, float]:
    return {r["episode_id"]: r["value"] for r in pq.read_table(data_dir / "rewards" / "judge.parquet").to_pylist()}


# ---- the README's retry rules -------------------------------------------------------------------


@pytest.mark.parametrize("status", [500, 502, 503])
def test_a_5xx_is_retried_once_and_the_retry_scores(one_task, status):
    with gate((status, {})) as server:
        summary = judge(str(one_task), _options(server))
    assert server.statuses == [status, 200]
    assert (summary.scored, summary.failed, summary.calls) == (3, 0, 2)
    assert _rewards(one_task) == {"e1": 1.0, "e2": 0.2, "e3": 1.0}
    group = next(r for r in _log(one_task).records() if r["kind"] == "group")
    assert group["attempts"][0]["error"].startswith(f"HTTP {status}: ") and "answer" in group["attempts"][1]


def test_a_5xx_twice_fails_the_group_with_the_error_and_the_next_run_judges_it(one_task):
    with gate((502, {}), (503, {})) as server:
        first = judge(str(one_task), _options(server))
        assert server.statuses == [502, 503] and (first.scored, first.failed) == (0, 3)
        assert first.failed_reasons == {'HTTP 503: {"object":"error","message":"scripted error 503","code":503}': 3}
        second = judge(str(one_task), _options(server))
    assert server.statuses == [502, 503, 200] and (second.scored, second.already_judged) == (3, 0)


@pytest.mark.parametrize(("headers", "least_wait_s"), [({"Retry-After": "2"}, 2.0), ({}, RATE_LIMIT_WAIT_S)])
def test_a_429_is_retried_after_its_retry_after_or_a_pause_without_one(one_task, headers, least_wait_s):
    with gate((429, headers)) as server:
        summary = judge(str(one_task), _options(server))
    assert server.statuses == [429, 200] and summary.scored == 3
    waited = server.requests[1][0] - server.requests[0][0]
    assert least_wait_s - 0.05 <= waited < least_wait_s + 0.9  # the server's wait when it names one, else the default pause


def test_a_retry_after_longer_than_a_minute_is_capped():
    """A judge that asks for an hour does not hold a worker for an hour (the wait is read, not slept, here)."""
    asked = httpx.Response(429, headers={"Retry-After": "3600"})
    assert _retry_wait(asked) == RETRY_AFTER_MAX_S == 60.0
    assert _retry_wait(httpx.Response(503)) == 0.0 and _retry_wait(httpx.Response(503, headers={"Retry-After": "3"})) == 3.0
    assert _retry_wait(httpx.Response(429, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"})) == 0.0  # a date passed


def test_a_400_is_not_retried_and_is_reported_with_the_servers_message(one_task):
    with gate((400, {})) as server:
        summary = judge(str(one_task), _options(server))
    assert server.statuses == [400] and (summary.failed, summary.calls) == (3, 1)
    reason = 'HTTP 400: {"object":"error","message":"scripted error 400","code":400}'
    assert summary.failed_reasons == {reason: 3}
    assert any(f"3 x {reason}" in note for note in summary.messages(None))
    assert {r["reason"] for r in _log(one_task).records() if r["kind"] == "episode"} == {reason}
    assert any("scripted error 400" in note for note in diagnose(one_task, BuildOptions())["notes"])


def test_an_unknown_model_404_is_not_retried_and_the_next_run_tries_again(one_task):
    with gate() as server:
        refused = judge(str(one_task), JudgeOptions(url=server.base_url, model="missing-model"))
        assert server.statuses == [404] and refused.failed == 3
        assert "The model `missing-model` does not exist." in next(iter(refused.failed_reasons))
        again = judge(str(one_task), JudgeOptions(url=server.base_url, model="missing-model"))
    assert server.statuses == [404, 404] and again.failed == 3  # a failure is never final


# ---- skips and failures that a later run retries --------------------------------------------------


def test_a_too_long_skip_is_judged_once_the_limit_is_raised(one_task):
    """The issue's reproduction: skipped as too_long at a low limit, then scored 0 at a higher one."""
    with gate() as server:
        low = judge(str(one_task), _options(server, max_prompt_chars=500))
        assert (low.skipped, low.calls) == ({"too_long": 3}, 0)
        same = judge(str(one_task), _options(server, max_prompt_chars=500))
        lower = judge(str(one_task), _options(server, max_prompt_chars=400))
        assert (same.already_judged, same.calls, lower.already_judged, lower.calls) == (3, 0, 3, 0)
        raised = judge(str(one_task), _options(server, max_prompt_chars=32_000))
    assert (raised.scored, raised.already_judged, raised.calls) == (3, 0, 1) and server.statuses == [200]
    skips = [r for r in _log(one_task).records() if r["kind"] == "episode" and r["status"] == "skipped"]
    assert [r["max_prompt_chars"] for r in skips] == [500, 500, 500]  # the unchanged runs wrote nothing
    assert _rewards(one_task) == {"e1": 1.0, "e2": 0.2, "e3": 1.0}


def test_a_raised_limit_that_still_does_not_fit_records_the_new_limit(one_task):
    with gate() as server:
        judge(str(one_task), _options(server, max_prompt_chars=400))
        still = judge(str(one_task), _options(server, max_prompt_chars=500))
        again = judge(str(one_task), _options(server, max_prompt_chars=500))
    assert (still.skipped, still.already_judged, again.already_judged, server.statuses) == ({"too_long": 3}, 0, 3, [])


def test_what_the_call_budget_left_unsent_is_recorded_and_judged_by_the_next_run(three_tasks):
    with gate() as server:
        first = judge(str(three_tasks), _options(server, max_calls=1))
        assert server.statuses == [200] and (first.scored, first.left_for_next_run) == (2, 2)  # t1's pair, then the budget
        left = {r["episode_id"]: r["reason"] for r in _log(three_tasks).records() if r["kind"] == "episode" and r["status"] == "skipped"}
        assert left == {"e3": "max_calls", "e4": "max_calls"}
        assert "2 episode(s) not sent to the judge: max_calls" in diagnose(three_tasks, BuildOptions())["notes"]
        rest = judge(str(three_tasks), _options(server))
    assert server.statuses == [200] * 3 and (rest.scored, rest.already_judged, rest.calls) == (2, 2, 2)
    assert set(_rewards(three_tasks)) == {"e1", "e2", "e3", "e4"}


def test_a_failure_whose_retry_the_budget_denied_says_so_and_is_judged_by_the_next_run(one_task):
    with gate((500, {})) as server:
        first = judge(str(one_task), _options(server, max_calls=1))
        assert server.statuses == [500] and first.failed == 3
        assert next(iter(first.failed_reasons)).startswith("--max-calls 1 reached before the retry; last error: HTTP 500")
        second = judge(str(one_task), _options(server, max_calls=1))
    assert server.statuses == [500, 200] and second.scored == 3


# ---- the cache key: model, rubric, endpoint, the episode's content -------------------------------------


def test_the_cache_key_holds_the_judges_url_model_rubric_and_each_episodes_content(three_tasks):
    with gate() as server:
        base = judge(str(three_tasks), _options(server))
        assert base.calls == 3
        port_path = server.base_url.removeprefix("http://127.0.0.1")  # ":PORT/v1"
        same = [judge(str(three_tasks), _options(server, url=url))
                for url in (server.base_url + "/", f"http://user:secret@127.0.0.1{port_path}")]
        assert [(s.already_judged, s.calls) for s in same] == [(4, 0), (4, 0)]  # one server, however written
        other_url = judge(str(three_tasks), _options(server, url=f"http://localhost{port_path}"))
        other_model = judge(str(three_tasks), JudgeOptions(url=server.base_url, model="scripted-2", concurrency=1))
        other_rubric = judge(str(three_tasks), _options(server, rubric="Shorter answers are better."))
        assert [(s.already_judged, s.scored, s.calls) for s in (other_url, other_model, other_rubric)] == [(0, 4, 3)] * 3
        assert not any("secret" in line for line in _log(three_tasks).path.read_text().splitlines())

        # e3's content changes (its tool's result arrives): only e3 is judged again, alone
        write_spans(three_tasks, [tool_span("e3", "late", 30, 40, result="4")])
        before = len(server.judge.calls)
        changed = judge(str(three_tasks), _options(server))
        asked = [trajectories(c.request)[1] for c in server.judge.calls[before:]]
    assert (changed.already_judged, changed.scored, changed.calls) == (3, 1, 1)
    assert asked == [["[system] Answer with a number.\n[user] What is 1 + 3?\n[assistant] 4\n[tool] calculator returned: 4"]]
    records = [r for r in _log(three_tasks).records() if r["kind"] == "episode" and r["episode_id"] == "e3"]
    assert len({r["content_sha256"] for r in records}) == 2 and {r["judge_url"] for r in records} == {
        server.base_url, f"http://localhost{port_path}"}


def test_lines_from_before_the_full_key_are_judged_again_once_and_the_run_says_so(one_task):
    log = _log(one_task)
    with gate() as server:
        judge(str(one_task), _options(server))
    old = [{k: v for k, v in r.items() if k not in ("judge_url", "content_sha256")} for r in log.records()]
    log.path.write_text("".join(json.dumps(r) + "\n" for r in old))  # as an older tracerl wrote it
    with gate() as server:
        upgraded = judge(str(one_task), _options(server))
        assert (upgraded.unkeyed, upgraded.scored, upgraded.calls) == (3, 3, 1)
        assert any("3 episode(s) had only judgments written before the cache held the judge's URL" in n for n in upgraded.messages(None))
        after = judge(str(one_task), _options(server))
    assert (after.unkeyed, after.already_judged, after.calls) == (0, 3, 0)


# ---- kill -9 at the default concurrency ------------------------------------------------------------------


def test_kill_9_at_the_default_concurrency_loses_at_most_the_groups_in_flight_and_repeats_none(data_dir):
    """`tracerl pipeline judge` as the README runs it (four calls in flight) is killed mid-run; each worker
    writes its group before it sends another, so what was answered but not written is at most four groups,
    and the rerun sends exactly the groups with no line."""
    tasks = 24
    write_spans(data_dir, [row for i in range(tasks) for e in "ab"
                           for row in _episode(f"e{i:02d}{e}", f"t{i}", "4" if e == "a" else "5", question=f"What is {i} + 4?")])
    log = data_dir / "judgments" / "judge.jsonl"

    def written() -> set[int]:
        return {int(r["episodes"][0][1:3]) for r in JudgmentLog(log).records() if r["kind"] == "group"}

    with gate(latency_s=0.15) as server:
        cli = [sys.executable, "-m", "tracerl", "pipeline", "judge", "--spans", str(data_dir), "--judge-url", server.base_url,
               "--judge-model", "scripted"]
        proc = subprocess.Popen(cli, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and (not log.exists() or log.read_text().count('"kind": "group"') < 6):
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        time.sleep(0.5)  # the calls the kill cut short are answered into the void: let them land before counting
        sent_before, kept = len(server.requests), written()
        assert server.most_in_flight == 4  # the default concurrency really ran
        assert 6 <= len(kept) < tasks and len(kept) <= sent_before <= len(kept) + 4
        subprocess.run(cli, check=True, capture_output=True)
        rerun = [trajectories(c.request)[0] for c in server.judge.calls[sent_before:]]
    assert len(rerun) == tasks - len(kept) == len(server.requests) - sent_before
    assert not any(f"What is {i} + 4?" in context for context in rerun for i in kept)  # nothing written is asked again
    episodes = sorted(r["episode_id"] for r in JudgmentLog(log).records() if r["kind"] == "episode")
    assert episodes == sorted(f"e{i:02d}{e}" for i in range(tasks) for e in "ab")  # each episode judged once
    assert len(_rewards(data_dir)) == 2 * tasks
