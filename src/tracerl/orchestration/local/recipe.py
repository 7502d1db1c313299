"""What one agent brings to the local training loop: its program, its tasks, its starting format.

The loop (:mod:`tracerl.orchestration.local.run`) knows nothing of any agent. An agent to be
trained is an ordinary program that reads a tasks file, calls the policy endpoint found in
``OPENAI_BASE_URL`` under the model name ``policy`` (with several policies, each agent under
its policy's name, :func:`tracerl.agent_model`), and scores its own episodes with
``tracerl.episode`` / ``tracerl.emit_reward``. Those names are the agent's side of the loop and
live in :mod:`tracerl.instrumentation.agent_env`, so an agent's process never imports this
package (nor the pipeline and DuckDB behind it). A recipe names that program and adds
what only its author knows: which tasks exist (made locally, or read from a public data
set in its own format), and, for a model built from nothing, the examples that teach the
*format* of its answers (never the task itself) before reinforcement learning starts.

``tracerl demo`` is one recipe; each folder of ``examples/`` holds another.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracerl.orchestration.local.config import LocalConfig

Task = dict[str, Any]  # one line of a tasks file: "task_id", "split", and what the agent reads


@dataclass(frozen=True)
class FormatExample:
    """One assistant turn the starting policy should produce for ``messages``.

    ``messages`` and ``tools`` are what the agent sends, in OpenAI's shape (tool calls
    included); the prompt is rendered by the policy server's own code, so the starting
    policy learns on exactly the prompts it is later asked.
    """

    messages: list[dict]
    target: str  # the assistant's text, tool calls written as the server parses them
    tools: list[dict] | None = None
    ends_turn: bool = True  # False: ``target`` is only how the turn starts (what follows is not taught)
    # the agent whose turn it is: with a policy per agent group (--policy), only that agent's policy
    # replays it (None: every policy)
    agent: str | None = None


@dataclass(frozen=True)
class WarmStartStage:
    """Supervised epochs over ``examples``, stopped early once the mean loss is below ``stop_below_loss``."""

    examples: Sequence[FormatExample]
    max_epochs: int = 1
    stop_below_loss: float = 0.05
    learning_rate: float | None = None  # None: the loop's WARM_START_LEARNING_RATE


@dataclass(frozen=True)
class SkillCount:
    """How many held-out episodes of a round show the skill a recipe teaches."""

    what: str  # e.g. "the writer's query names a table and a column of the schema"
    shown: int
    episodes: int


def reward_reached(reward_name: str, what: str) -> Callable[[Path], SkillCount]:
    """A primary held-out measure that is one of the agent's own rewards: the held-out episodes whose reward
    ``reward_name`` is 1 (the SQL agent's execution match, beside the partial credit it may add)."""

    def count(spans: Path) -> SkillCount:
        from tracerl.pipeline.source import raw_spans_of
        from tracerl.schemas import attributes as A

        with raw_spans_of(spans) as con:
            (reached, episodes), = con.execute(f"""
                SELECT count(DISTINCT episode_id) FILTER (name = '{A.REWARD_SPAN_NAME}' AND reward_name = $name AND reward_value >= 1),
                       count(DISTINCT episode_id) FILTER (name = '{A.REWARD_SPAN_NAME}')
                FROM raw_spans WHERE split = 'test'
            """, {"name": reward_name}).fetchall()
        return SkillCount(what, int(reached), int(episodes))

    return count


@dataclass(frozen=True)
class AgentRecipe:
    name: str  # folder names, the cache key of the starting policy, OTEL_SERVICE_NAME
    title: str  # the reward curve's title
    agent_argv: tuple[str, ...]  # the agent program; the loop appends the tasks file's path
    # (seed, data file or None) -> (training tasks, held-out tasks), disjoint
    tasks: Callable[[int, Path | None], tuple[list[Task], list[Task]]]
    # (training tasks, seed) -> stages that teach the tiny model the format; None: start untrained
    warm_start: Callable[[list[Task], int], list[WarmStartStage]] | None = None
    # (training tasks, seed) -> turns reinforcement learning must not unlearn, replayed as supervised samples
    # in every round (InstructGPT's PPO-ptx, on the format): the calls of one sub-agent share weights with the
    # others, and training one drifts the rest. None: nothing replayed
    format_replay: Callable[[list[Task], int], list[FormatExample]] | None = None
    tokenizer_corpus: tuple[str, ...] = ()  # strings the tiny model's tokenizer gives tokens of their own
    # the agent program's arguments with the recipe's own tiny model only (never with --model): e.g. no worked
    # examples in the prompt, since the tiny model learns its format from the warm start instead
    tiny_agent_args: tuple[str, ...] = ()
    sends_tools: bool = False  # the agent sends `tools`: a --model's chat template must render them (checked before round 0)
    # (a round's spans folder) -> what the skill is in words, and of the held-out episodes how many show it, out of
    # how many (benchmarks/learning.py prints it beside the reward). None: held-out episodes that called a tool
    held_out_skill: Callable[[Path], SkillCount] | None = None
    # (a round's spans folder) -> the held-out measure a learning claim rests on (BFCL's verdict, execution match), when the
    # agent's reward is not it alone (a partial credit is part of it). benchmarks/learning.py counts a seed as rising on it.
    # None: the held-out mean reward
    held_out_primary: Callable[[Path], SkillCount] | None = None
    version: int = 1  # bump when the tasks or the warm start change, so cached starting policies are rebuilt
    defaults: LocalConfig = field(default_factory=LocalConfig)
