"""A policy per agent group against one shared policy: the SQL agent's held-out reward and cost per round.

Both setups train LoRA adapters (rank 8) on one base model, the recipe's warm-started tiny
model, served by the CPU vLLM (``TRACERL_VLLM_PYTHON``, else ``.venv-vllm``), on the same
training data: every call of the writer, the rewriter and the checker.

- ``shared``: one adapter answers and learns from every node's calls;
- ``per-policy``: ``writer=writer,rewriter`` and ``checker=checker``, two adapters, each
  trained on its own nodes' calls only;
- ``writer-only``: the recipe's own choice, one adapter trained on the writer's and rewriter's
  calls, the checker's never trained.

Every (setup, seed) runs in a fresh process, one after another (the CPU vLLM and the trainer
share the 2 cores). Prints the held-out reward per round as mean ± std over seeds, and the
seconds per round (the rollout, which every setup shares, and the rest).

    python benchmarks/policies.py --rounds 8                      # all three setups
    python benchmarks/policies.py --rounds 8 --setups per-policy  # one
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from loop_runs import REPO, Variant, per_round_table, plot_curves, run_all

from tracerl.schemas import environment as E

RECIPE = "examples.sql.recipe:RECIPE"


SETUPS = ("shared", "per-policy", "writer-only")


def variants(lr: float, concurrency: int, names: list[str]) -> list[Variant]:
    common = {"server": "vllm", "concurrency": concurrency}
    train = {"lora_rank": 8, "learning_rate": lr}
    every = {
        "shared": Variant("shared", {**common, "agents": None}, train),
        "per-policy": Variant("per-policy", {**common, "agents": None, "policies": {"writer": ("writer", "rewriter"), "checker": ("checker",)}}, train),
        "writer-only": Variant("writer-only", common, train),
    }
    return [every[name] for name in names]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--lr", type=float, default=5e-3, help="the adapters' learning rate")
    parser.add_argument("--concurrency", type=int, default=16, help="episodes at once (vLLM batches them)")
    parser.add_argument("--setups", nargs="+", choices=SETUPS, default=list(SETUPS), help="which setups run (each seed's runs are apart, so setups may run apart)")
    parser.add_argument("--out", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()

    os.environ.setdefault(E.VLLM_PYTHON_ENV, str(REPO / ".venv-vllm" / "bin" / "python"))
    chosen = variants(args.lr, args.concurrency, args.setups)
    out = args.out or Path(tempfile.mkdtemp(prefix="tracerl-policies-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"SQL agent, LoRA rank 8 at lr {args.lr}, CPU vLLM: seeds {args.seeds}, {args.rounds} rounds, runs in {out}", flush=True)
    started = time.time()
    results = run_all(RECIPE, chosen, args.seeds, out, args.rounds, parallel=1)
    print("\nheld-out reward per round, mean ± std over seeds:\n")
    print(per_round_table(results, chosen))
    print("\n| setup | seconds per round (rounds 1..N) | of which rollout | the rest (build, train, publish) | last - round 0 | seeds rising |\n|---|---|---|---|---|---|")
    for v in chosen:
        runs = [r for r in results if r["variant"] == v.name]
        total = statistics.fmean(s for r in runs for s in r["round_seconds"][:-1])  # the last round only evaluates
        rollout = statistics.fmean(s for r in runs for s in r["rollout_seconds"][:-1])
        rises = [r["held_out"][-1] - r["held_out"][0] for r in runs]
        print(f"| {v.name} | {total:.1f} | {rollout:.1f} | {total - rollout:.1f} | {statistics.fmean(rises):+.2f} | {sum(x > 0 for x in rises)}/{len(runs)} |")
    plot_curves(results, chosen, out / "policies.png", "SQL agent: a policy per agent group vs one shared")
    print(f"\ncurves: {out / 'policies.png'}   all runs: {out / 'results.json'}   total {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
