"""Fixtures the example tests share."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tracerl.schemas import environment as E

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session", autouse=True)
def shared_policy_cache(tmp_path_factory):
    """One cache folder for the whole session: each recipe's starting policy is warm-started once per
    run (minutes on 2 cores), fresh every run, and the notebooks' kernels inherit it."""
    with pytest.MonkeyPatch.context() as patch:
        path = tmp_path_factory.mktemp("tracerl-cache")
        patch.setenv(E.CACHE_DIR_ENV, str(path))
        yield path


@pytest.fixture(scope="session")
def teach_tiny_model(tmp_path_factory) -> Callable[..., Path]:
    """``teach_tiny_model(recipe, examples, epochs)``: a tiny model with the recipe's tokenizer, taught
    ``examples`` (supervised, on the agent's own prompts), so a test knows what its agent will do."""
    from tracerl.orchestration.local.warm_start import supervised_samples
    from tracerl.trainer.tiny_model import build_tiny_model
    from tracerl.trainer.training.config import TrainConfig
    from tracerl.trainer.training.torch_backend import PolicyTrainer

    def teach(recipe, examples: list, epochs: int) -> Path:
        path = build_tiny_model(tmp_path_factory.mktemp("model") / "policy", seed=0, corpus=recipe.tokenizer_corpus)
        trainer = PolicyTrainer(path, TrainConfig(learning_rate=3e-3, minibatch_size=32, seed=0))
        trainer.train(supervised_samples(trainer.tokenizer, examples), epochs=epochs)
        return trainer.save(path)

    return teach


@pytest.fixture(scope="session")
def train_example() -> Callable[..., list[dict]]:
    """``train_example("sql", model, out, *options)`` runs ``python -m examples.sql.train --model MODEL ... --out OUT``
    from the repository root, as the example's README runs it, and returns its metrics.jsonl rows (one per round)."""

    def train(example: str, model: Path, out: Path, *options: str) -> list[dict]:
        command = [sys.executable, "-m", f"examples.{example}.train", "--model", str(model), *options, "--out", str(out)]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=2400)
        assert done.returncode == 0, done.stderr[-4000:]
        return [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]

    return train


@pytest.fixture
def run_example_notebook() -> Callable[[str], tuple[list[dict], str]]:
    """``run_example_notebook("sql")`` executes ``examples/sql/notebook.ipynb`` top to bottom and returns
    its code cells' outputs (none of them an error) and their text.

    It runs from the repository root, as a user opens it (``examples`` importable, ``python -m
    examples.NAME.agent`` starts), with the session's cache folder."""
    from tracerl_testing.installed import require_module

    nbformat = require_module("nbformat", "pip install -e '.[dev]'")
    nbclient = require_module("nbclient", "pip install -e '.[dev]'")

    def run(example: str) -> tuple[list[dict], str]:
        notebook = nbformat.read(REPO / "examples" / example / "notebook.ipynb", as_version=4)
        nbclient.NotebookClient(notebook, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(REPO)}}).execute()
        outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
        assert not [o for o in outputs if o.output_type == "error"]
        return outputs, "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", "")) for o in outputs)

    return run


@pytest.fixture(scope="session")
def qwen2_folder(tmp_path_factory) -> Path:
    """A model of a real architecture (Qwen2's classes and chat format, random weights), where a GPU user names a hub id."""
    from tracerl_testing.qwen2_model import build_qwen2_model

    return build_qwen2_model(tmp_path_factory.mktemp("qwen2") / "model")
