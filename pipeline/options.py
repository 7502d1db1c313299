"""Every knob of a build (:class:`BuildOptions`) and the values each may take.

The manifest records the options so a dataset can be rebuilt, and the CLI takes its
defaults from the dataclass: this is the one place a default is written.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tracerl.pipeline.source import PipelineInputError

CREDITS = ("identical", "discounted")  # see tracerl.pipeline.credit
ADVANTAGES = ("grpo", "rloo", "batch", "none")  # see tracerl.pipeline.credit
GROUP_ADVANTAGES = ("grpo", "rloo")  # compare episodes of one task: a group of one gets advantage 0
EXPORTS = ("openrlhf", "hf")  # see tracerl.pipeline.exports


def check_credit(credit: str, gamma: float, advantage: str) -> None:
    """Raise :class:`PipelineInputError` (a ValueError) naming a credit, gamma or advantage that does not exist."""
    if credit not in CREDITS:
        raise PipelineInputError(f"credit must be one of {', '.join(CREDITS)}, got {credit!r}")
    if advantage not in ADVANTAGES:
        raise PipelineInputError(f"advantage must be one of {', '.join(ADVANTAGES)}, got {advantage!r}")
    if not 0.0 <= gamma <= 1.0:
        raise PipelineInputError(f"gamma must be in [0, 1], got {gamma}")


@dataclass(frozen=True)
class BuildOptions:
    """Every knob of a build; checked when made, so a bad one fails before any data is read."""

    credit: str = "identical"
    gamma: float = 1.0
    advantage: str = "grpo"
    agents: str | None = None
    splits: tuple[str, ...] = ()
    policy_versions: str | None = None
    rewards: tuple[str, ...] = ()
    reward_weights: dict[str, float] = field(default_factory=dict)
    rules: str | None = None
    default_rules: bool = True
    episode_timeout_s: float = 3600.0
    trajectory: bool = False
    incremental: bool = False
    exports: tuple[str, ...] = ()
    threads: int | None = None
    memory_limit: str = "3GB"

    def __post_init__(self) -> None:
        check_credit(self.credit, self.gamma, self.advantage)
        unknown = set(self.exports) - set(EXPORTS)
        if unknown:
            raise PipelineInputError(f"unknown export(s) {', '.join(sorted(unknown))}: choose from {', '.join(EXPORTS)}")
