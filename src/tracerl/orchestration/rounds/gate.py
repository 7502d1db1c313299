"""The optional gate: a round's checkpoint is not published when it scores worse than the served policy.

The score is the user's own held-out evaluation, a command (``eval = "..."`` in the round's
config, ``--eval``) run once per checkpoint with ``{checkpoint}`` in its arguments (and
``$TRACERL_CHECKPOINT``) replaced by the folder; the last line it prints is the mean reward.
A candidate scoring below the current policy's score minus ``gate_margin`` is held: recorded
(its episodes are claimed, so they are not trained on again) but not published, and the next
round trains from the current policy again.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

from tracerl.orchestration.rounds.errors import RoundFailed
from tracerl.schemas import environment as E


def evaluate(command: str, checkpoint: Path, policy: str | None = None) -> float:
    """Run the evaluation command on ``checkpoint`` (of ``policy``, in ``{policy}`` and ``$TRACERL_POLICY``); the reward it printed last."""
    argv = [arg.replace("{checkpoint}", str(checkpoint)).replace("{policy}", policy or "") for arg in shlex.split(command)]
    env = {**os.environ, E.GATE_CHECKPOINT_ENV: str(checkpoint), **({E.GATE_POLICY_ENV: policy} if policy else {})}
    done = subprocess.run(argv, capture_output=True, text=True, env=env)
    lines = done.stdout.strip().splitlines()
    try:
        if done.returncode != 0:
            raise ValueError(f"it exited {done.returncode}: {done.stderr.strip()[-500:]}")
        return float(lines[-1])
    except (ValueError, IndexError) as exc:
        raise RoundFailed("failed", f"the eval command {command!r} on {checkpoint} gave no reward on its last line ({exc})") from None


def gate(command: str, margin: float, candidate: Path, current: dict, policy: str | None = None) -> dict:
    """The gate's decision: both scores, the margin, and whether the candidate is held back (``policy``: whose checkpoints)."""
    current_score = current.get("eval_reward")
    if current_score is None:
        current_score = evaluate(command, Path(current["checkpoint"]), policy)
    score = evaluate(command, candidate, policy)
    return {"eval_reward": score, "current_eval_reward": current_score, "margin": margin, "held": score < current_score - margin}
