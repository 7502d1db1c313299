"""``tracerl pipeline judge``'s retry rules and cache key, against real HTTP servers on loopback.

Each rule of src/tracerl/pipeline/README.md's table gets a judge that breaks it the way a real one does: a
scripted judge behind a gate (``tracerl_testing.judges.gate``) that answers chosen requests itself, with an
HTTP error (5xx, 429 with and without Retry-After, 400, a redirect) or a 2xx of the wrong shape,
``tracerl_testing``'s scripted server refusing an unknown model (404), a call budget, a length limit.
The gate logs every request with its task and the run that sent it, so each test says how many calls
a rule costs; a property-based test serves random replies and checks every group ends judged or failed
within the rules; the cache tests count what a second run sends again, and the kill test kills the
documented CLI at its default concurrency and checks what the rerun asks.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from email.utils import formatdate
from functools import partial

import httpx
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from tracerl.cli import app
from tracerl.pipeline.doctor import diagnose
from tracerl.pipeline.judge import RATE_LIMIT_WAIT_S, RETRY_AFTER_MAX_S, JudgeOptions, _retry_wait, judge
from tracerl.pipeline.judgment_log import JudgmentLog
from tracerl.pipeline.options import BuildOptions
from tracerl.schemas import attributes as A
from tracerl_testing.judges import Canned, Gate, completion, dropping_server, error_body, trajectories, verdict
from tracerl_testing.judges import gate as judge_gate
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


gate = partial(judge_gate, _score)


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
    waited = server.requests[1].arrived - server.requests[0].arrived
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


# ---- a 2xx that is no chat completion reads as an answer that does not parse ----------------------------

# a list, a null message, a string choice, a number or list as content crashed the whole run (a TypeError or AttributeError:
# every group's calls spent, no judgment, no rewards file); the others failed with a Python exception's text as the reason
WRONG_SHAPES = {
    "a list": Canned(body=[]),
    "a null message": Canned(body={"choices": [{"message": None}]}),
    "a choice that is a string": Canned(body={"choices": ["x"]}),
    "no choice": Canned(body={"choices": []}),
    "an empty object": Canned(body={}),
    "a number as content": Canned(body=completion(5)),
    "a list as content": Canned(body=completion([{"type": "text", "text": verdict([1.0, 0.2])}])),
    "a null content": Canned(body=completion(None)),
    "not JSON": Canned(body=b"<html><body>502 Bad Gateway</body></html>", content_type="text/html"),
    "JSON sent as text/html": Canned(body={"error": {"message": "upstream timed out"}}, content_type="text/html"),
}


@pytest.mark.parametrize("reply", WRONG_SHAPES.values(), ids=WRONG_SHAPES)
def test_a_reply_of_the_wrong_shape_is_retried_once_then_its_group_fails_and_the_others_are_judged(three_tasks, reply):
    with gate(scripts={"What is 2 + 2?": [reply, reply]}) as server:
        summary = judge(str(three_tasks), _options(server))
    assert sorted(server.asked()) == ["And 2 + 2?", "What is 1 + 3?", "What is 2 + 2?", "What is 2 + 2?"]  # t1 twice, no more
    assert (summary.scored, summary.failed, summary.calls) == (2, 2, 4)
    [reason] = summary.failed_reasons
    assert reason.startswith("malformed reply: ") and len(reason) <= 100  # short: the reply itself is in the group's line
    assert _rewards(three_tasks) == {"e3": 1.0, "e4": 0.2}
    group = next(r for r in _log(three_tasks).records() if r["kind"] == "group" and r["episodes"] == ["e1", "e2"])
    assert [a["error"] for a in group["attempts"]] == [reason] * 2
    assert all(a["reply"] == Canned.encode(reply.body).decode()[:500] for a in group["attempts"])


def test_a_reply_of_the_wrong_shape_then_an_answer_scores_whatever_its_content_type(one_task):
    """The body is what is read: a completion sent as text/plain by a proxy is still the judge's answer."""
    answer = Canned(body=completion(verdict([0.9, 0.1, 0.8])), content_type="text/plain")
    with gate(scripts={"What is 2 + 2?": [WRONG_SHAPES["a list"], answer]}) as server:
        summary = judge(str(one_task), _options(server))
    assert server.statuses == [200, 200] and (summary.scored, summary.failed, summary.calls) == (3, 0, 2)
    assert _rewards(one_task) == {"e1": 0.9, "e2": 0.1, "e3": 0.8}


def test_a_redirect_is_a_failed_call_not_an_answer_and_is_not_retried(one_task):
    with gate(scripts={"What is 2 + 2?": [Canned(301, {"Location": "https://elsewhere/v1/chat/completions"}, b"")]}) as server:
        summary = judge(str(one_task), _options(server))
    assert server.statuses == [301] and summary.failed == 3
    assert next(iter(summary.failed_reasons)).startswith("HTTP 301")


def test_a_retry_after_that_only_looks_like_digits_waits_the_default(one_task):
    """'\xb2' (superscript two, a latin-1 header byte) passes str.isdigit() but not float(): it crashed the run."""
    superscript_two = [(b"Retry-After", b"\xb2")]
    assert (_retry_wait(httpx.Response(429, headers=superscript_two)), _retry_wait(httpx.Response(503, headers=superscript_two))) == (
        RATE_LIMIT_WAIT_S, 0.0)
    with gate((503, {"Retry-After": "\xb2"})) as server:
        assert judge(str(one_task), _options(server)).scored == 3 and server.statuses == [503, 200]


def test_an_answer_holding_a_unicode_line_break_is_kept_whole_in_the_log(one_task):
    """The log is JSON lines written as UTF-8 (``ensure_ascii=False``): U+2028 or NEL in an answer is a character
    of a line, not the end of one; read as a line break, it made the log unreadable and every later run crash."""
    odd = Canned(body=completion("I cannot decide\u2028between\x85them"))
    with gate(scripts={"What is 2 + 2?": [odd, odd]}) as server:
        assert judge(str(one_task), _options(server)).failed == 3
        again = judge(str(one_task), _options(server))
    assert (again.scored, again.already_judged) == (3, 0)
    first = next(r for r in _log(one_task).records() if r["kind"] == "group")
    assert [a["answer"] for a in first["attempts"]] == ["I cannot decide\u2028between\x85them"] * 2


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


# ---- any reply at all: property-based -----------------------------------------------------------------------

FUZZ_TASKS = {"What is 1 + 1?": 1, "What is 2 + 2?": 2, "What is 3 + 3?": 3}  # each task's question -> its episodes: one group each
Planned = tuple[Canned, tuple[float, ...] | None]  # a reply, and the scores it gives when it is a valid answer


def _asks_again(planned: Planned) -> bool:
    """The README's rule: after anything but an answer the judge asks once more, except after a 3xx or a 4xx other than 429."""
    reply, scores = planned
    return scores is None and not (300 <= reply.status < 500 and reply.status != 429)


def _answer(*scores: float) -> Planned:
    return Canned(body=completion(verdict(scores))), scores


def _wrong(reply: Canned) -> Planned:
    return reply, None


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=12),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=6)
_CONTENT_TYPES = st.sampled_from(["application/json", "text/plain", "text/html", "application/octet-stream"])
_DELAYS = st.sampled_from([0.0, 0.0, 0.01, 0.03])
_RETRY_AFTER = st.one_of(
    st.none(), st.integers(0, 5).map(str), st.integers(-5, 5).map(lambda s: formatdate(time.time() + s, usegmt=True)),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0xFF, exclude_characters="\x7f"), min_size=1, max_size=10),
).map(lambda value: {} if value is None else {"Retry-After": value})
_WRAPS = [lambda v: v, lambda v: {"choices": v}, lambda v: {"choices": [v]}, lambda v: {"choices": [{"message": v}]}, completion]


def _replies(n: int) -> st.SearchStrategy[Planned]:
    """What a group of ``n`` may be answered: a valid answer, a 2xx of any other shape, an HTTP error with any Retry-After."""
    scores = st.lists(st.floats(0.0, 1.0), min_size=n, max_size=n).map(tuple)
    wrong_verdicts = st.one_of(  # a verdict of the right shape but the wrong count, or a score out of 0..1
        st.sampled_from([k for k in range(n + 3) if k != n]).flatmap(lambda k: st.lists(st.floats(0.0, 1.0), min_size=k, max_size=k)),
        st.lists(st.floats(1.01, 5.0), min_size=n, max_size=n),
    ).map(verdict)
    bodies = st.one_of(st.builds(lambda wrap, value: wrap(value), st.sampled_from(_WRAPS), _JSON | wrong_verdicts),
                       st.binary(max_size=40))
    return st.one_of(
        st.builds(lambda s, kind, delay: (Canned(200, {}, completion(verdict(s)), kind, delay), s), scores, _CONTENT_TYPES, _DELAYS),
        st.builds(lambda body, kind, delay: (Canned(200, {}, body, kind, delay), None), bodies, _CONTENT_TYPES, _DELAYS),
        st.builds(lambda status, headers, body, delay: (Canned(status, headers, body, "application/json", delay), None),
                  st.sampled_from([301, 302, 400, 401, 403, 404, 408, 413, 422, 429, 500, 502, 503, 504]), _RETRY_AFTER,
                  st.sampled_from([None, b"", b"<html>busy</html>"]), _DELAYS),
    )


@pytest.fixture()
def fuzz_tasks(data_dir, monkeypatch):
    """:data:`FUZZ_TASKS` as spans, and retry waits capped at tens of milliseconds (which wait is right has its own tests)."""
    monkeypatch.setattr("tracerl.pipeline.judge.RETRY_AFTER_MAX_S", 0.05)
    monkeypatch.setattr("tracerl.pipeline.judge.RATE_LIMIT_WAIT_S", 0.02)
    return write_spans(data_dir, [row for t, (question, n) in enumerate(FUZZ_TASKS.items())
                                  for i in range(n) for row in _episode(f"f{t}{i}", f"f{t}", str(i), question=question)])


_CRASHED = [WRONG_SHAPES[name] for name in ("a list", "a null message", "a choice that is a string", "a number as content")]


@settings(max_examples=int(os.environ.get("TRACERL_FUZZ_EXAMPLES", "30")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plan=st.tuples(*(st.tuples(_replies(n), _replies(n)) for n in FUZZ_TASKS.values())))
@example(plan=((_wrong(_CRASHED[0]), _wrong(_CRASHED[1])), (_wrong(_CRASHED[2]), _answer(0.2, 0.8)),
               (_wrong(_CRASHED[3]), _wrong(WRONG_SHAPES["a list as content"]))))
@example(plan=((_wrong(Canned(body={"\x85": None})), _answer(0.0)),  # the reply kept in the log broke its reading
               (_answer(0.0, 0.0), _answer(0.0, 0.0)), (_wrong(Canned(301, {}, None)), _wrong(Canned(body=b"")))))
@example(plan=((_wrong(Canned(429, {"Retry-After": "\xb2"}, error_body(429))), _answer(1.0)),
               (_wrong(Canned(301, {}, b"")), _answer(0.5, 0.5)), (_answer(0.0, 0.5, 1.0), _answer(1.0, 1.0, 1.0))))
def test_any_reply_leaves_every_group_judged_or_failed_within_the_retry_rules(fuzz_tasks, tmp_path_factory, plan):
    """Whatever the judge's server answers (status, Retry-After, body, content type, delay), the run ends: each group
    asked once, or twice where the rules retry; scored with the answer that was valid, or ``failed`` with a reason;
    the rewards file written."""
    out = tmp_path_factory.mktemp("judged")  # a fresh cache each example: every group is asked
    with gate(scripts={question: [reply for reply, _ in replies] for question, replies in zip(FUZZ_TASKS, plan)}) as server:
        summary = judge(str(fuzz_tasks), JudgeOptions(url=server.base_url, model="scripted", timeout_s=10), out=out)
    expected = {question: replies[: 1 + _asks_again(replies[0])] for question, replies in zip(FUZZ_TASKS, plan)}
    assert Counter(server.asked()) == {question: len(asked) for question, asked in expected.items()}
    assert summary.calls == len(server.requests) and summary.scored + summary.failed == sum(FUZZ_TASKS.values())
    lines = {r["task_id"]: r for r in _log(out).records() if r["kind"] == "episode" and r["trajectory_id"] == 1}
    rewards = _rewards(out)
    for t, question in enumerate(FUZZ_TASKS):
        scores = expected[question][-1][1]
        line = lines[f"f{t}"]
        assert (line["status"], line["score"]) == (("scored", scores[0]) if scores else ("failed", None)), question
        assert scores or line["reason"]
        assert [rewards.get(f"f{t}{i}") for i in range(FUZZ_TASKS[question])] == list(scores or [None] * FUZZ_TASKS[question])


# ---- the judge's URL and the command's exit status ---------------------------------------------------------


def test_a_judge_url_with_a_query_keeps_the_query_after_the_path(one_task):
    """Hosted APIs take their version as a query (``?api-version=...``): the path goes before it."""
    with gate() as server:
        summary = judge(str(one_task), _options(server, url=f"{server.base_url}/?api-version=2024-06-01"))
    assert [a.target for a in server.requests] == ["/v1/chat/completions?api-version=2024-06-01"] and summary.scored == 3


def _judge_command(spans, url: str, *extra: str):
    return CliRunner().invoke(app, ["pipeline", "judge", "--spans", str(spans), "--judge-url", url, "--judge-model", "scripted", *extra])


def test_the_command_fails_when_nothing_could_be_judged_and_says_why_and_what_to_do(three_tasks):
    with dropping_server() as url:
        result = _judge_command(three_tasks, url)
    assert result.exit_code == 1, result.output
    assert "none of the 4 episode(s) sent could be judged" in result.output and "RemoteProtocolError" in result.output
    assert "--judge-url" in result.output and "run the command again" in result.output
    assert (three_tasks / "rewards" / "judge.parquet").exists()  # written all the same: empty, as every output of a run


def test_the_command_succeeds_when_some_were_judged_and_counts_the_failed(three_tasks):
    with gate((500, {}), (500, {})) as server:  # t1's group is asked first (one call at a time) and fails twice
        result = _judge_command(three_tasks, server.base_url, "--concurrency", "1")
    assert result.exit_code == 0, result.output
    assert "2 episode(s) scored, 2 failed" in result.output and "2 episode(s) could not be judged" in result.output


# ---- kill -9 at the default concurrency ------------------------------------------------------------------


def test_a_group_a_kill_cut_between_its_lines_is_judged_again_whole(one_task):
    """A group's lines are one write, but the kernel may cut a write longer than a page at a kill -9: the group's
    line and some of its episodes' lines reach the disk, the rest not. The next run drops that unfinished group and
    judges its episodes again together, instead of keeping some scores and comparing the rest among themselves."""
    with gate() as server:
        judge(str(one_task), _options(server))
        lines = _log(one_task).path.read_bytes().splitlines(keepends=True)
        assert [json.loads(line)["kind"] for line in lines] == ["group", "episode", "episode", "episode"]
        _log(one_task).path.write_bytes(b"".join(lines[:2]) + lines[2][:20])  # e1's line whole, e2's cut, e3's lost
        again = judge(str(one_task), _options(server))
    assert [len(trajectories(call.request)[1]) for call in server.judge.calls] == [3, 3]
    assert (again.scored, again.already_judged) == (3, 0)
    records = _log(one_task).records()
    assert [r["kind"] for r in records] == ["group", "episode", "episode", "episode"]  # the cut group is gone, the new one whole
    assert _rewards(one_task) == {"e1": 1.0, "e2": 0.2, "e3": 1.0}


def test_kill_9_at_the_default_concurrency_loses_at_most_the_groups_in_flight_and_repeats_none(data_dir):
    """`tracerl pipeline judge` as the README runs it (four calls in flight) is killed mid-run; each worker
    writes its group before it sends another, so what was asked but not written is at most four groups,
    and the rerun asks exactly the groups with no line. Each run sends its own --api-key, so the gate knows
    which run asked for which task whenever its request lands: the counts are sets, with no offset taken
    while the killed run's last requests may still be arriving."""
    tasks = 24
    write_spans(data_dir, [row for i in range(tasks) for e in "ab"
                           for row in _episode(f"e{i:02d}{e}", f"t{i}", "4" if e == "a" else "5", question=f"What is {i} + 4?")])
    log = data_dir / "judgments" / "judge.jsonl"

    def written() -> list[int]:
        return [int(r["episodes"][0][1:3]) for r in JudgmentLog(log).records() if r["kind"] == "group"]

    with gate(latency_s=0.15) as server:
        cli = [sys.executable, "-m", "tracerl", "pipeline", "judge", "--spans", str(data_dir), "--judge-url", server.base_url,
               "--judge-model", "scripted", "--api-key"]
        proc = subprocess.Popen([*cli, "run-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and (not log.exists() or log.read_text().count('"kind": "group"') < 6):
            time.sleep(0.02)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        kept = set(written())
        assert 6 <= len(kept) < tasks
        subprocess.run([*cli, "run-2"], check=True, capture_output=True)
    first, second = ([int(question.split()[2]) for question in server.asked(run)] for run in ("run-1", "run-2"))
    assert server.most_in_flight == 4  # the default concurrency really ran
    assert len(first) == len(set(first)) and kept <= set(first) and len(set(first) - kept) <= 4  # lost: at most those in flight
    assert sorted(second) == sorted(set(range(tasks)) - kept)  # asked again: exactly the groups with no line, each once
    assert sorted(written()) == list(range(tasks))  # every group written once across both runs
    episodes = sorted(r["episode_id"] for r in JudgmentLog(log).records() if r["kind"] == "episode")
    assert episodes == sorted(f"e{i:02d}{e}" for i in range(tasks) for e in "ab")  # each episode judged once
    assert len(_rewards(data_dir)) == 2 * tasks
