"""Every knob of a build (:class:`BuildOptions`) and the values each may take.

The manifest records the options so a dataset can be rebuilt, and the CLI takes its
defaults from the dataclass: this is the one place a default is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tracerl.pipeline.source import PipelineInputError

CREDITS = ("identical", "discounted")  # see tracerl.pipeline.credit
ADVANTAGES = ("grpo", "rloo", "batch", "none")  # see tracerl.pipeline.credit
GROUP_ADVANTAGES = ("grpo", "rloo")  # compare episodes of one task: a group of one gets advantage 0
EXPORTS = ("openrlhf", "hf", "sft", "dpo")  # see tracerl.pipeline.exports and tracerl.pipeline.sft_dpo


def check_credit(credit: str, gamma: float, advantage: str) -> None:
    """Raise :class:`PipelineInputError` (a ValueError) naming a credit, gamma or advantage that does not exist."""
    if credit not in CREDITS:
        raise PipelineInputError(f"credit must be one of {', '.join(CREDITS)}, got {credit!r}")
    if advantage not in ADVANTAGES:
        raise PipelineInputError(f"advantage must be one of {', '.join(ADVANTAGES)}, got {advantage!r}")
    if not 0.0 <= gamma <= 1.0:
        raise PipelineInputError(f"gamma must be in [0, 1], got {gamma}")


POLICY_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,63}$")  # a served model name, a folder name and a TOML key


def parse_policies(specs: list[str] | tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    """``["writer=write_query,rewrite_query", "checker=check_query"]`` as ``{policy: agents}``, checked.

    Each spec is ``NAME=AGENT[,AGENT...]``; agent names are exact (not patterns).
    """
    policies: dict[str, tuple[str, ...]] = {}
    for spec in specs:
        name, sep, agents = spec.partition("=")
        names = tuple(a.strip() for a in agents.split(",") if a.strip())
        if not sep or not names:
            raise PipelineInputError(f"--policy {spec!r}: write NAME=AGENT[,AGENT...], e.g. writer=write_query,rewrite_query")
        if name.strip() in policies:
            raise PipelineInputError(f"--policy {spec!r}: policy {name.strip()!r} is given twice; list all its agents in one --policy")
        policies[name.strip()] = names
    check_policies(policies)
    return policies


def check_policies(policies: dict[str, tuple[str, ...]], agents: str | None = None) -> None:
    """Refuse a policy name that cannot be a model and folder name, an agent two policies claim, and
    policies beside an ``--agents`` selection (each policy names its agents)."""
    if policies and agents:
        raise PipelineInputError("give --agents or --policy, not both: each --policy names its agents")
    owner: dict[str, str] = {}
    for name, agents in policies.items():
        if not POLICY_NAME.match(name):
            raise PipelineInputError(
                f"policy name {name!r}: use letters, digits, '_', '.' or '-', starting with a letter (it is the model name agents call)"
            )
        for agent in agents:
            if agent in owner and owner[agent] != name:
                raise PipelineInputError(f"agent {agent!r} is claimed by two policies, {owner[agent]!r} and {name!r}: give each agent to one policy")
            owner[agent] = name


@dataclass(frozen=True)
class BuildOptions:
    """Every knob of a build; checked when made, so a bad one fails before any data is read."""

    credit: str = "identical"
    gamma: float = 1.0
    advantage: str = "grpo"
    agents: str | None = None
    # several policies trained from one trace stream: {policy name: its agents}. A call of one of these
    # agents is a transition of its policy only if that policy served it (policy_name); a call any other
    # model served is counted (wrong_policy) and left out. Calls of other agents are left out (agent_filter).
    policies: dict[str, tuple[str, ...]] = field(default_factory=dict)
    splits: tuple[str, ...] = ()
    policy_versions: str | None = None
    rewards: tuple[str, ...] = ()
    reward_weights: dict[str, float] = field(default_factory=dict)
    # gen_ai.evaluation.result events (OpenTelemetry GenAI conventions) with a score value are rewards named by
    # their gen_ai.evaluation.name, on by default like every other reward an episode's telemetry records (an
    # evaluator's score is one someone chose to attach to this trace; --reward-weight weighs or drops it by
    # name, and the counts show it as source "evaluation"); off: none is read; evaluations: only these names
    evaluation_rewards: bool = True
    evaluations: tuple[str, ...] = ()
    rules: str | None = None
    default_rules: bool = True
    episode_timeout_s: float = 3600.0
    trajectory: bool = False
    incremental: bool = False
    exports: tuple[str, ...] = ()
    sft_min_reward: float = 0.5  # --export sft: a task's best episode is a demonstration from this score on
    dpo_min_margin: float = 0.1  # --export dpo: chosen and rejected at least this far apart in score
    # the policy's tokenizer (its model folder): calls captured without token ids but with their messages
    # get ids rebuilt from the messages, marked token_source = "retokenized" (src/tracerl/pipeline/retokenize.py)
    retokenize: str | None = None
    threads: int | None = None
    memory_limit: str = "2GB"  # DuckDB's share: a build holds about this plus 0.3 GB (src/tracerl/pipeline/README.md)

    def __post_init__(self) -> None:
        check_credit(self.credit, self.gamma, self.advantage)
        check_policies(self.policies, self.agents)
        unknown = set(self.exports) - set(EXPORTS)
        if unknown:
            raise PipelineInputError(f"unknown export(s) {', '.join(sorted(unknown))}: choose from {', '.join(EXPORTS)}")
