"""Fixtures of the scheduled-round tests: captured episodes arriving in batches, and a round's config file."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tracerl_testing.span_builders import chat_episode, write_spans


@pytest.fixture
def capture(data_dir: Path) -> Callable[[int], list[str]]:
    """``capture(n)``: n more finished, rewarded episodes land in ``data_dir`` as one span file, as an
    agent's exporter writes them; returns their ids. Two tasks, rewards differing within each."""
    numbers = itertools.count()

    def write(n: int) -> list[str]:
        ids, rows = [], []
        for _ in range(n):
            i = next(numbers)
            ids.append(f"ep-{i:04d}")
            rows += chat_episode(ids[-1], task=f"task-{i % 2}", reward=float(i % 3 == 0))
        write_spans(data_dir, rows)
        return ids

    return write


@pytest.fixture
def round_config(tmp_path: Path, data_dir: Path, tiny_checkpoint: Path) -> Callable[..., Path]:
    """``round_config(endpoint=URL, **top_level_keys)``: write the round's TOML file; return its path."""

    def write(endpoint: str | None = None, **keys) -> Path:
        lines = [f"spans = {json.dumps(str(data_dir))}", 'state = "state"', f"model = {json.dumps(str(tiny_checkpoint))}", "report = false"]
        lines += [f"{k} = {json.dumps(v)}" for k, v in keys.items()]
        lines += ["", "[train]", "epochs = 1", "minibatch_size = 8"]
        if endpoint:
            lines += ["", "[[endpoint]]", f"url = {json.dumps(endpoint)}"]
        path = tmp_path / "round.toml"
        path.write_text("\n".join(lines) + "\n")
        return path

    return write


@pytest.fixture
def tracerl(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess]:
    """``tracerl(*args)``: ``python -m tracerl ARGS`` as a real process in ``tmp_path``; ``.summary`` is its JSON line."""

    def run(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        env = {**os.environ, "COLUMNS": "400"}
        done = subprocess.run([sys.executable, "-m", "tracerl", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=tmp_path)
        lines = done.stdout.strip().splitlines()
        done.summary = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else None
        return done

    return run
