"""What the judge is asked and how its answer is read.

The judge compares the episodes of one task with each other (as OpenPipe ART's RULER does):
scores relative to siblings are easier for a model to give consistently than absolute ones,
and relative scores are all that GRPO's group advantages use. What every episode of the group
shares (the system prompt, the task as the user stated it) is shown once, as the context;
then each episode's own turns. The judge answers with JSON only; an answer is accepted when
it scores every episode of the group exactly once, between 0 and 1.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass

from tracerl.pipeline.messages import chat_messages

DEFAULT_RUBRIC = """\
- An episode that reaches the task's goal scores higher than one that does not.
- Among those that reach it, a more efficient one (fewer steps, fewer errors) scores higher.
- An episode that fails but makes real progress scores higher than one that does not.
- Unsupported claims, wrong tool use and answers in the wrong format are mistakes."""

_INSTRUCTIONS = """\
You are a careful judge of an AI agent. You will see {what}, in the context they share.
Score {how} from 0 to 1 following this rubric:

{rubric}

Answer with one JSON object and nothing else:
{{"scores": [{{"trajectory_id": "1", "explanation": "...", "score": 0.0}}, ...]}}
with exactly one entry per trajectory."""

_GROUP = ("{n} trajectories of the agent attempting the same task", "each trajectory, relative to the others")
_ALONE = ("one trajectory of the agent attempting a task", "it")


class JudgeAnswerError(ValueError):
    """The judge's answer cannot be read as one score per trajectory; the message says why."""


@dataclass(frozen=True)
class Score:
    value: float
    explanation: str


def rubric_sha256(rubric: str) -> str:
    """The rubric's identity in the cache: changing a word judges everything again."""
    return hashlib.sha256(rubric.encode()).hexdigest()


def content_sha256(turns: list[dict[str, str]]) -> str:
    """An episode's identity in the cache: a hash of the turns the judge is shown, so an episode whose
    content changed (a span arrived late, a tool's result was added) is judged again."""
    return hashlib.sha256(json.dumps(turns, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def transcript(calls: list[tuple[str | None, str | None]]) -> list[dict[str, str]]:
    """An episode's turns from its calls' (input, output) message JSON, in call order.

    A chat agent's next prompt repeats the previous prompt and answer: only the messages
    after that repeated prefix are new. A call whose prompt does not extend the previous
    one (another sub-agent, a rewritten history) is shown whole.
    """
    turns: list[dict[str, str]] = []
    seen: list[dict[str, str]] = []
    for input_json, output_json in calls:
        inputs, outputs = chat_messages(input_json), chat_messages(output_json)
        new = inputs[len(seen):] if inputs[: len(seen)] == seen and seen else inputs
        turns.extend(new)
        turns.extend({**m, "role": "assistant"} for m in outputs)
        seen = inputs + [{**m, "role": "assistant"} for m in outputs]
    return turns


def shared_prefix(transcripts: list[list[dict[str, str]]]) -> int:
    """How many leading turns every transcript has in common (the task, as every episode saw it).

    At least one turn stays each episode's own, so no trajectory is shown empty.
    """
    if not transcripts:
        return 0
    n = min(len(t) for t in transcripts) - 1
    for i in range(max(n, 0)):
        if any(t[i] != transcripts[0][i] for t in transcripts[1:]):
            return i
    return max(n, 0)


def _render(turns: list[dict[str, str]]) -> str:
    return "\n".join(f"[{turn['role']}] {turn['content']}" for turn in turns)


def judge_messages(rubric: str, transcripts: list[list[dict[str, str]]]) -> list[dict[str, str]]:
    """The chat messages that ask for one score per transcript (trajectory ids 1..n, in the given order)."""
    what, how = _ALONE if len(transcripts) == 1 else _GROUP
    system = _INSTRUCTIONS.format(what=what.format(n=len(transcripts)), how=how, rubric=rubric.strip())
    shared = shared_prefix(transcripts) if len(transcripts) > 1 else 0
    parts = []
    if shared:
        parts.append(f"<context>\n{_render(transcripts[0][:shared])}\n</context>")
    for i, turns in enumerate(transcripts, 1):
        parts.append(f'<trajectory id="{i}">\n{_render(turns[shared:])}\n</trajectory>')
    return [{"role": "system", "content": system}, {"role": "user", "content": "\n\n".join(parts)}]


def prompt_chars(messages: list[dict[str, str]]) -> int:
    return sum(len(m["content"]) for m in messages)


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL)


def parse_scores(answer: str, n: int) -> list[Score]:
    """One :class:`Score` per trajectory 1..n from the judge's answer; :class:`JudgeAnswerError` if there is not exactly that."""
    fenced = _FENCE.search(answer)
    text = fenced.group(1) if fenced else answer
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise JudgeAnswerError("no JSON object in the answer")
    try:
        data = json.loads(text[start: end + 1])
    except json.JSONDecodeError as exc:
        raise JudgeAnswerError(f"the answer's JSON does not parse: {exc}") from None
    entries = data.get("scores") if isinstance(data, dict) else None
    if not isinstance(entries, list):
        raise JudgeAnswerError('the answer has no "scores" list')
    found: dict[int, Score] = {}
    for entry in entries:
        if not isinstance(entry, dict):
            raise JudgeAnswerError(f"a score entry is not an object: {entry!r}")
        try:
            key = int(str(entry.get("trajectory_id")).strip())
            value = float(entry.get("score"))
        except (TypeError, ValueError):
            raise JudgeAnswerError(f"a score entry lacks a numeric trajectory_id or score: {entry!r}") from None
        if not 1 <= key <= n:
            raise JudgeAnswerError(f"trajectory_id {key} is not one of 1..{n}")
        if key in found:
            raise JudgeAnswerError(f"trajectory {key} is scored twice")
        if not 0.0 <= value <= 1.0:
            raise JudgeAnswerError(f"trajectory {key}'s score {value} is outside 0..1")
        found[key] = Score(value, str(entry.get("explanation", "")))
    missing = [k for k in range(1, n + 1) if k not in found]
    if missing:
        raise JudgeAnswerError(f"trajectories {', '.join(map(str, missing))} have no score")
    return [found[k] for k in range(1, n + 1)]
