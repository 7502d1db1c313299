"""Trajectory mode: merge consecutive calls whose prompt extends the previous prompt + response.

A chat agent's next prompt is usually the previous prompt, the previous answer, and
what the environment said (tool output, user turn). Such calls can be trained as one
sample: the policy's tokens keep mask 1, the environment's tokens in between get mask 0
(and log-prob 0, never used). The merged row keeps the first call's step, return and
advantage, sums the immediate rewards, and takes the last call's output messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any


def _extends(prev: dict[str, Any], row: dict[str, Any]) -> bool:
    if prev["episode_id"] != row["episode_id"] or prev["agent_name"] != row["agent_name"]:
        return False
    seen = prev["prompt_token_ids"] + prev["response_token_ids"]
    prompt = row["prompt_token_ids"]
    return len(prompt) >= len(seen) and prompt[: len(seen)] == seen


def _extend(prev: dict[str, Any], row: dict[str, Any]) -> None:
    env = row["prompt_token_ids"][len(prev["prompt_token_ids"]) + len(prev["response_token_ids"]):]
    prev["response_token_ids"] = prev["response_token_ids"] + env + row["response_token_ids"]
    prev["response_mask"] = prev["response_mask"] + [0] * len(env) + [1] * len(row["response_token_ids"])
    if prev["response_logprobs"] is None or row["response_logprobs"] is None:
        prev["response_logprobs"] = None
    else:
        prev["response_logprobs"] = prev["response_logprobs"] + [0.0] * len(env) + row["response_logprobs"]
    prev["reward"] += row["reward"]
    prev["output_messages"] = row["output_messages"]


def merge_trajectories(rows: Iterable[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Merged rows, in order; ``rows`` must be sorted by episode and step."""
    current: dict[str, Any] | None = None
    for row in rows:
        if current is not None and _extends(current, row):
            _extend(current, row)
            continue
        if current is not None:
            yield current
        current = dict(row)
    if current is not None:
        yield current
