"""Every knob of a build (:class:`BuildOptions`) and the values each may take.

The manifest records the options so a dataset can be rebuilt. Each field declares its
command-line option (:mod:`tracerl.core.dataclass_options`): ``build-dataset``, ``doctor``,
``report`` and a round's ``--split``/``--agents``/``--policy`` take their flags, help and
defaults from here, and a round's ``[build]`` table its keys. This is the one place an option
of a build is written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from tracerl.core.dataclass_options import option
from tracerl.pipeline.credit_rules import ADVANTAGE_SQL, RETURN_SQL
from tracerl.pipeline.source import PipelineInputError

CREDITS = tuple(RETURN_SQL)  # the credit rules' names, the default first (tracerl.pipeline.credit_rules)
ADVANTAGES = tuple(ADVANTAGE_SQL)  # the advantage estimators' names, the default first
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


def parse_weights(specs: list[str] | tuple[str, ...]) -> dict[str, float]:
    """``["correctness=0.9", "format=0.1"]`` as ``{reward name: weight}``; raises ``ValueError`` naming a bad one."""
    weights = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            weights[name] = float(value)
        except ValueError:
            raise ValueError(f"{spec!r}: use NAME=WEIGHT, e.g. correctness=0.9") from None
    return weights


_NAME_LIST = re.compile(r"^\s*[\w.-]+(\s*,\s*[\w.-]+)+\s*$")  # writer,rewriter: names, no pattern


def agents_pattern(agents: str | None) -> str | None:
    """``--agents`` as the regular expression the build searches each agent's name for.

    A regular expression is kept as it is: it selects every agent whose name it matches anywhere
    (``writer`` selects ``rewriter`` too; ``^writer$`` selects ``writer`` alone). Names joined
    by commas, ``writer,rewriter``, which as a pattern would select only an agent named with the
    comma, are those names exactly: ``^(writer|rewriter)$``. Raises :class:`PipelineInputError`
    for a pattern that does not compile.
    """
    if not agents:
        return agents
    if _NAME_LIST.match(agents):
        return "^(" + "|".join(re.escape(name.strip()) for name in agents.split(",")) + ")$"
    try:
        re.compile(agents)
    except re.error as exc:
        raise PipelineInputError(f"--agents {agents!r} is not a valid regular expression: {exc}") from None
    return agents


def _policy_specs(policies: dict[str, tuple[str, ...]]) -> list[str]:
    """``{policy: agents}`` as ``--policy`` gives them: ``["writer=write_query,rewrite_query"]``."""
    return [f"{name}={','.join(agents)}" for name, agents in policies.items()]


AGENTS_HELP = ("Regex searched in each call's agent name: only matching agents' calls are policy calls (writer also selects "
               "rewriter; ^writer$ does not). Names joined by commas, writer,rewriter, select exactly those names.")


@dataclass(frozen=True)
class BuildOptions:
    """Every knob of a build, each field its command-line option (``build-dataset``, ``doctor``: :data:`SELECTION`)
    and its key in a round's ``[build]`` table; checked when made, so a bad one fails before any data is read."""

    credit: str = field(default=CREDITS[0], metadata=option("--credit", help=f"{' or '.join(CREDITS)} (identical: the paper's)."))
    gamma: float = field(default=1.0, metadata=option("--gamma", help="Discount for --credit discounted."))
    advantage: str = field(default=ADVANTAGES[0], metadata=option(
        "--advantage",
        help=f"{', '.join(ADVANTAGES)}: grpo and rloo compare episodes of one task (a task of one episode gets 0), "
             "batch all episodes of the build."))
    # a regular expression searched in the agent name, or names joined by commas (agents_pattern: kept as the pattern)
    agents: str | None = field(default=None, metadata=option("--agents", help=AGENTS_HELP))
    # several policies trained from one trace stream: {policy name: its agents}. A call of one of these
    # agents is a transition of its policy only if that policy served it (policy_name); a call any other
    # model served is counted (wrong_policy) and left out. Calls of other agents are left out (agent_filter).
    policies: dict[str, tuple[str, ...]] = field(default_factory=dict, metadata=option(
        "--policy", cli_type=list[str], to_cli=_policy_specs, from_cli=parse_policies,
        help="NAME=AGENT[,AGENT...]: these agents' calls are policy NAME's, trained on only where model NAME served them "
             "(repeatable; instead of --agents; the loop and `train run` train a LoRA adapter NAME each)."))
    splits: tuple[str, ...] = field(default=(), metadata=option("--split", help="Keep episodes of this split (repeatable)."))
    policy_versions: str | None = field(default=None, metadata=option(
        "--policy-versions", help="Keep calls served by these policy versions, e.g. '3', '3,4' or '>=3'."))
    rewards: tuple[str, ...] = field(default=(), metadata=option(
        "--rewards", help="Late rewards (Parquet/CSV/JSONL, local or a URI) keyed by episode_id, trace_id, response_id or "
                          "rollout_id (agentlightning); repeatable."))
    reward_weights: dict[str, float] = field(default_factory=dict, metadata=option(
        "--reward-weight", cli_type=list[str], to_cli=lambda weights: [f"{n}={w}" for n, w in weights.items()], from_cli=parse_weights,
        help="NAME=WEIGHT, e.g. correctness=0.9 (repeatable)."))
    # gen_ai.evaluation.result events (OpenTelemetry GenAI conventions) with a score value are rewards named by
    # their gen_ai.evaluation.name, on by default like every other reward an episode's telemetry records (an
    # evaluator's score is one someone chose to attach to this trace; --reward-weight weighs or drops it by
    # name, and the counts show it as source "evaluation"); off: none is read; evaluations: only these names
    evaluation_rewards: bool = field(default=True, metadata=option(
        "--evaluation-rewards/--no-evaluation-rewards",
        help="Read OpenTelemetry gen_ai.evaluation.result events (log records or span events) with a score value as rewards "
             "named by their gen_ai.evaluation.name."))
    evaluations: tuple[str, ...] = field(default=(), metadata=option(
        "--evaluation", help="Only evaluation events of this gen_ai.evaluation.name become rewards (repeatable; default: every name)."))
    rules: str | None = field(default=None, metadata=option("--rules", help="JSON/TOML file of intermediate-reward rules."))
    default_rules: bool = field(default=True, metadata=option("--default-rules/--no-default-rules", help="Built-in intermediate-reward rules."))
    episode_timeout_s: float = field(default=3600.0, metadata=option(
        "--episode-timeout", help="Seconds of inactivity before an unfinished episode is processed as truncated."))
    trajectory: bool = field(default=False, metadata=option(
        "--trajectory/--no-trajectory", help="Merge calls whose prompt extends the previous prompt + response."))
    incremental: bool = field(default=False, metadata=option(
        "--incremental/--no-incremental", help="Only episodes not yet in OUT; append new files."))
    exports: tuple[str, ...] = field(default=(), metadata=option(
        "--export", help=f"Also write {', '.join(EXPORTS)} beside OUT, as OUT-{EXPORTS[0]}/... (repeatable; sft and dpo: "
                         "demonstrations and preference pairs)."))
    sft_min_reward: float = field(default=0.5, metadata=option(
        "--sft-min-reward", help="--export sft: the score from which a task's best episode is a demonstration."))
    dpo_min_margin: float = field(default=0.1, metadata=option(
        "--dpo-min-margin", help="--export dpo: the least score difference between chosen and rejected."))
    # the policy's tokenizer (its model folder): calls captured without token ids but with their messages
    # get ids rebuilt from the messages, marked token_source = "retokenized" (src/tracerl/pipeline/retokenize.py)
    retokenize: str | None = field(default=None, metadata=option(
        "--retokenize", metavar="TOKENIZER",
        help="The policy's model folder: calls captured without token ids (other instrumentations) get ids rebuilt from their "
             "messages, marked token_source=retokenized. Off by default: rebuilt ids can differ from those sampled."))
    # --threads until it meant torch's threads in train, serve and the loop: kept, with a warning, for old commands
    threads: int | None = field(default=None, metadata=option(
        "--duckdb-threads", renamed_from=("--threads",),
        help="DuckDB threads (default: all cores). Formerly --threads, which is torch's threads in train, serve and the loop."))
    # DuckDB's share: a build holds about this plus 0.3 GB (src/tracerl/pipeline/README.md)
    memory_limit: str = field(default="2GB", metadata=option(
        "--memory-limit", help="DuckDB memory limit; beyond it DuckDB spills to disk (with --engine ray: each bucket's)."))

    def __post_init__(self) -> None:
        check_credit(self.credit, self.gamma, self.advantage)
        object.__setattr__(self, "agents", agents_pattern(self.agents))  # one meaning, however the options were made
        check_policies(self.policies, self.agents)
        unknown = set(self.exports) - set(EXPORTS)
        if unknown:
            raise PipelineInputError(f"unknown export(s) {', '.join(sorted(unknown))}: choose from {', '.join(EXPORTS)}")


# the options that decide which calls become transitions and with what reward: `pipeline doctor` takes them
SELECTION = ("agents", "policies", "splits", "policy_versions", "rewards", "reward_weights", "evaluation_rewards", "evaluations",
             "rules", "default_rules", "episode_timeout_s", "advantage", "retokenize")
