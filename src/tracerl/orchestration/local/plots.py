"""Reward curves as PNG files: one look of axes for the loop's curve and the benchmarks' comparisons."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def reward_axes(path: Path, title: str, ylabel: str, width: float = 6.5) -> Iterator:
    """Axes of reward (0 to 1) per round; the figure is written to ``path`` when the block ends.

    The title is wrapped rather than cut off: recipe titles are long.
    """
    import matplotlib

    matplotlib.use("Agg")  # files only: no display on training machines
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(width, 4), dpi=120)
    try:
        yield ax
        ax.set_xlabel("round (policy version)")
        ax.set_ylabel(ylabel)
        ax.set_ylim(-0.02, 1.02)
        ax.set_title("\n".join(textwrap.wrap(title, 60)), fontsize=11)
        ax.grid(alpha=0.3)
        ax.legend()
        fig.tight_layout()
        fig.savefig(path)
    finally:
        plt.close(fig)


def plot_reward_curve(rows: list[dict], path: Path, title: str) -> None:
    """The loop's curve: training reward (sampled) and held-out reward (greedy) per round."""
    rounds = [r["round"] for r in rows]
    with reward_axes(path, title, "mean episode reward") as ax:
        ax.plot(rounds, [r["train_mean_reward"] for r in rows], marker="o", label="train (sampled)")
        ax.plot(rounds, [r["eval_mean_reward"] for r in rows], marker="s", label="held-out (greedy)")
