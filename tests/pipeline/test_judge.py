"""``tracerl pipeline judge``: unlabelled episodes scored by a judge model, each task's episodes relative
to each other, kept as rewards that every command of the data dir reads, with the prompt and the raw
answer beside them. The judges here are real HTTP servers on loopback: a scripted one that follows the
rubric deterministically (and can answer garbage, or slowly), one that drops every connection, and
``tracerl serve`` with an untrained model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pyarrow.parquet as pq
import pytest

from tracerl.pipeline import build_dataset
from tracerl.pipeline.doctor import diagnose
from tracerl.pipeline.judge import JudgeOptions, judge
from tracerl.pipeline.judgment_log import JudgmentLog
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.report import render, report_data
from tracerl.pipeline.source import PipelineInputError
from tracerl.schemas import attributes as A
from tracerl_testing.judges import dropping_server, gate, garbage_judge, scripted_judge, trajectories
from tracerl_testing.scripted_server import running_scripted_server
from tracerl_testing.span_builders import episode_span, llm_call, tool_span, write_spans


def _text(role: str, content: str) -> dict:
    return {"role": role, "parts": [{"type": "text", "content": content}]}


def _episode(episode: str, task: str | None, answer: str, question: str = "What is 2 + 2?") -> list[dict]:
    """An unlabelled episode: one call that answers ``question`` with ``answer`` (no reward)."""
    messages = {A.GEN_AI_INPUT_MESSAGES: json.dumps([_text("system", "Answer with a number."), _text("user", question)]),
                A.GEN_AI_OUTPUT_MESSAGES: json.dumps([_text("assistant", answer)])}
    return [episode_span(episode, 0, 1000, task=task),
            llm_call(episode, "c1", 10, 20, [1, 2], [ord(c) for c in answer], extra=messages)]


def right_answer(context: str, trajectory: str) -> float:
    """The rubric, scripted: 1 for the right sum, 0.2 for another number, 0 otherwise."""
    answer = trajectory.rsplit("[assistant] ", 1)[-1].strip()
    if not answer.isdigit():
        return 0.0
    return 1.0 if answer == "4" else 0.2


@pytest.fixture()
def unlabelled(data_dir):
    """Task t1 run three times (right, wrong, right), t2 once, t3 twice with the same wrong answer."""
    return write_spans(data_dir, [
        *_episode("e1", "t1", "4"), *_episode("e2", "t1", "5"), *_episode("e3", "t1", "4"),
        *_episode("e4", "t2", "4", question="What is 1 + 3?"),
        *_episode("e5", "t3", "7", question="And 2 + 2?"), *_episode("e6", "t3", "7", question="And 2 + 2?"),
    ])


def _options(server, **kw) -> JudgeOptions:
    return JudgeOptions(url=server.base_url, model="scripted", **kw)


def test_scores_each_tasks_episodes_together_as_rewards_every_command_reads(unlabelled, tmp_path):
    with running_scripted_server(scripted_judge(right_answer)) as server:
        summary = judge(str(unlabelled), _options(server))
        prompts = [call.request["messages"] for call in server.calls]
    assert (summary.scored, summary.failed, summary.groups, summary.calls) == (6, 0, 3, 3)
    assert (summary.alone, summary.tied_groups) == (1, 1)  # t2 is judged alone; t3's two episodes tie
    # the task the episodes share is shown once, then each episode's own turns
    group = next(p[-1]["content"] for p in prompts if p[-1]["content"].count("<trajectory") == 3)
    assert group.count("What is 2 + 2?") == 1 and "relative to the others" in prompts[0][0]["content"] + prompts[1][0]["content"] + prompts[2][0]["content"]
    context, texts = trajectories({"messages": [{"content": group}]})
    assert "[user] What is 2 + 2?" in context and texts == ["[assistant] 4", "[assistant] 5", "[assistant] 4"]

    rewards = pq.read_table(unlabelled / "rewards" / "judge.parquet").to_pylist()
    assert {r["episode_id"]: r["value"] for r in rewards} == {"e1": 1.0, "e2": 0.2, "e3": 1.0, "e4": 1.0, "e5": 0.2, "e6": 0.2}
    assert {r["judge_model"] for r in rewards} == {"scripted"} and {r["group_size"] for r in rewards} == {1, 2, 3}

    manifest = build_dataset(unlabelled, tmp_path / "ds")  # found in the data dir, like any late reward
    ds = pq.read_table(tmp_path / "ds").to_pylist()
    assert {r["episode_id"]: r["reward"] for r in ds} == {"e1": 1.0, "e2": 0.2, "e3": 1.0, "e4": 1.0, "e5": 0.2, "e6": 0.2}
    assert manifest["counts"]["judgments"]["by_status"] == {"scored": 6}
    page = render(report_data(unlabelled))  # the report counts them too
    assert "<td>scored</td><td class=num>6</td>" in page


def test_a_second_run_judges_only_what_is_new(unlabelled):
    with running_scripted_server(scripted_judge(right_answer)) as server:
        judge(str(unlabelled), _options(server))
        calls = len(server.calls)
        again = judge(str(unlabelled), _options(server))
        assert len(server.calls) == calls and (again.already_judged, again.calls) == (6, 0)
        write_spans(unlabelled, [*_episode("e7", "t1", "9"), *_episode("e8", "t1", "4")])
        more = judge(str(unlabelled), _options(server))
    assert (more.already_judged, more.scored, more.calls) == (6, 2, 1)  # the new episodes of t1, as one group
    rewards = {r["episode_id"]: r["value"] for r in pq.read_table(unlabelled / "rewards" / "judge.parquet").to_pylist()}
    assert len(rewards) == 8 and rewards["e7"] == 0.2
    # another rubric is another judgment: everything is judged again under it
    with running_scripted_server(scripted_judge(right_answer)) as server:
        other = judge(str(unlabelled), _options(server, rubric="Shorter answers are better."))
    assert (other.already_judged, other.scored) == (0, 8)


def test_an_answer_that_does_not_parse_is_retried_once_then_recorded_as_failed_never_a_zero(unlabelled):
    with running_scripted_server(garbage_judge) as server:
        summary = judge(str(unlabelled), _options(server))
        assert len(server.calls) == 6  # 3 groups, each asked twice
    assert (summary.scored, summary.failed) == (0, 6)
    assert pq.read_table(unlabelled / "rewards" / "judge.parquet").num_rows == 0
    records = JudgmentLog(unlabelled / "judgments" / "judge.jsonl").records()
    groups = [r for r in records if r["kind"] == "group"]
    assert all(a["answer"] == "I think the second one is better, probably." and "no JSON object" in a["error"]
               for g in groups for a in g["attempts"])
    report = diagnose(unlabelled, BuildOptions())
    assert ("judged episodes: failed", 6) in report["funnel"]
    assert any("6 episode(s) the judge could not score" in note and "no JSON object" in note for note in report["notes"])
    # the next run tries the failed ones again
    with running_scripted_server(scripted_judge(right_answer)) as server:
        assert judge(str(unlabelled), _options(server)).scored == 6
    assert diagnose(unlabelled, BuildOptions())["counts"]["judgments"]["by_status"] == {"scored": 6}


def test_a_judge_that_times_out_or_drops_the_connection_is_recorded_with_the_error(unlabelled):
    with running_scripted_server(scripted_judge(right_answer), latency_s=2.0) as server:
        slow = judge(str(unlabelled), _options(server, timeout_s=0.3, splits=()), out=None)
    assert slow.failed == 6
    with dropping_server() as url:
        dropped = judge(str(unlabelled), JudgeOptions(url=url, model="m"))
    assert dropped.failed == 6
    errors = {g["attempts"][-1]["error"].split(":")[0] for g in JudgmentLog(unlabelled / "judgments" / "judge.jsonl").records()
              if g["kind"] == "group"}
    assert "ReadTimeout" in errors and errors - {"ReadTimeout"} <= {"RemoteProtocolError", "ReadError"}  # a drop reads as either


def test_too_long_episodes_are_skipped_and_large_groups_split(unlabelled):
    write_spans(unlabelled, [*_episode("long", "t1", "4 " + "and so on " * 300)])
    with running_scripted_server(scripted_judge(right_answer)) as server:
        summary = judge(str(unlabelled), _options(server, max_prompt_chars=2500, max_group=2))
        sizes = sorted(c.request["messages"][-1]["content"].count("<trajectory") for c in server.calls)
    assert summary.skipped == {"too_long": 1} and summary.scored == 6
    assert sizes == [1, 1, 2, 2]  # t1's three episodes as 2 + 1, t2 alone, t3 as a pair
    assert any("too long" in note for note in summary.messages(None))
    notes = diagnose(unlabelled, BuildOptions())["notes"]
    assert "1 episode(s) not sent to the judge: too_long" in notes


def test_max_calls_bounds_the_cost_and_the_rest_waits_for_the_next_run(unlabelled):
    with running_scripted_server(scripted_judge(right_answer)) as server:
        first = judge(str(unlabelled), _options(server, max_calls=1, concurrency=1))
        assert len(server.calls) == 1 and first.left_for_next_run == 6 - first.scored
        rest = judge(str(unlabelled), _options(server))
    assert first.scored + rest.scored == 6 and rest.already_judged == first.scored


def test_an_untrained_model_as_judge_is_handled(unlabelled, tiny_checkpoint):
    from tracerl.trainer.serving.app import running_server

    with running_server(tiny_checkpoint) as server:
        summary = judge(str(unlabelled), JudgeOptions(url=server.base_url, model="policy", max_calls=2, concurrency=1, timeout_s=60))
    assert summary.failed + summary.left_for_next_run == 6 and summary.scored == 0
    attempts = [a for g in JudgmentLog(unlabelled / "judgments" / "judge.jsonl").records() if g["kind"] == "group" for a in g["attempts"]]
    assert attempts and all("answer" in a and a["error"] for a in attempts)  # whatever it said is kept, with why it is no score


def test_the_judge_also_sees_what_tools_did_after_the_last_call(data_dir):
    """An agent whose answer is its tool's result never shows that result to its model: the judge sees it."""
    write_spans(data_dir, [*_episode("e1", "t1", "calling"), tool_span("e1", "t1", 30, 40, result="4"),
                           *_episode("e2", "t1", "calling"), tool_span("e2", "t2", 30, 40, status="ERROR", status_message="bad input")])
    with running_scripted_server(scripted_judge(right_answer)) as server:
        judge(str(data_dir), JudgeOptions(url=server.base_url, model="m"))
        context, texts = trajectories(server.calls[0].request)
    assert context.endswith("[assistant] calling")  # what both episodes did alike is shown once
    assert texts == ["[tool] calculator returned: 4", "[tool] calculator failed: bad input"]


def test_the_judges_own_calls_are_never_policy_calls(data_dir):
    write_spans(data_dir, [
        *_episode("e1", "t1", "4"),
        episode_span("j", 0, 1000),
        llm_call("j", "c1", 10, 20, [1], [2], agent=A.JUDGE_AGENT),
    ])
    counts = diagnose(data_dir, BuildOptions())["counts"]
    assert counts["llm_calls"]["skipped"]["judge_call"] == 1 and counts["llm_calls"]["policy_calls"] == 1


def test_a_remote_or_spans_only_input_needs_out(tmp_path, unlabelled):
    with pytest.raises(PipelineInputError, match="pass --out"):
        judge(str(unlabelled / "spans"), JudgeOptions(url="http://127.0.0.1:9/v1", model="m"))


def test_kill_9_while_judging_loses_no_written_judgment_and_repeats_none(data_dir):
    """The CLI judges one group at a time against a slow judge and is killed mid-run; the next run
    sends only the groups that had no line written. Each run sends its own --api-key, so the gate
    tells their requests apart whenever the killed run's last one lands."""
    write_spans(data_dir, [row for i in range(12) for row in _episode(f"e{i:02d}", f"t{i}", "4", question=f"What is {i} + 4?")])
    log = data_dir / "judgments" / "judge.jsonl"
    with gate(right_answer, latency_s=0.4) as server:
        cli = [sys.executable, "-m", "tracerl", "pipeline", "judge", "--spans", str(data_dir), "--judge-url", server.base_url,
               "--judge-model", "scripted", "--concurrency", "1", "--api-key"]
        proc = subprocess.Popen([*cli, "run-1"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.time() + 60
        while time.time() < deadline and (not log.exists() or log.read_text().count('"kind": "episode"') < 3):
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        written = {int(r["episode_id"][1:]) for r in JudgmentLog(log).records() if r["kind"] == "episode"}
        assert 3 <= len(written) < 12
        subprocess.run([*cli, "run-2"], check=True, capture_output=True)
    rerun = [int(question.split()[2]) for question in server.asked("run-2")]
    assert sorted(rerun) == sorted(set(range(12)) - written)  # each unwritten one once, nothing written again
    episodes = [r["episode_id"] for r in JudgmentLog(log).records() if r["kind"] == "episode"]
    assert sorted(episodes) == [f"e{i:02d}" for i in range(12)]  # each judged once, whatever the kill cut
    rewards = pq.read_table(data_dir / "rewards" / "judge.parquet").column("episode_id").to_pylist()
    assert sorted(rewards) == [f"e{i:02d}" for i in range(12)]
