"""Does the loop teach the skill? Held-out reward of RL next to its controls, over several seeds.

For one recipe (``tracerl demo``'s or an ``examples/`` agent's), every seed runs:

- ``rl``: the recipe's loop with its defaults;
- ``lr0``: the same loop with learning rate 0 (same tasks, same sampling, no update).

Round 0 of each run is the other control: the warm-started model without RL. The
claim printed at the end is the issue's bar: the held-out reward rises by at least 0.2
absolute from round 0 to the last round, on the mean over seeds, and every seed rises.

    python benchmarks/learning.py                                   # the demo, seeds 0 1 2
    python benchmarks/learning.py --recipe examples.calc.recipe:RECIPE --parallel 2
    python benchmarks/learning.py --variants lr0                    # a control alone
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from loop_runs import Variant, load_recipe, mean_spread, per_round_table, plot_curves, run_all

RISE = 0.2  # the bar, absolute held-out reward
VARIANTS = {"rl": Variant("rl"), "lr0": Variant("lr0", train_changes={"learning_rate": 0.0})}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="tracerl.orchestration.demo.recipe:DEMO", help="module:NAME of an AgentRecipe")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--variants", nargs="+", choices=sorted(VARIANTS), default=sorted(VARIANTS, reverse=True),
                        help="rl: the recipe's loop; lr0: the same with learning rate 0 (each seed's run is reproducible, so variants may run apart)")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (each trains on one thread)")
    parser.add_argument("--out", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()

    recipe = load_recipe(args.recipe)
    out = args.out or Path(tempfile.mkdtemp(prefix=f"tracerl-learning-{recipe.name}-"))
    out.mkdir(parents=True, exist_ok=True)
    variants = [VARIANTS[name] for name in args.variants]
    print(f"{recipe.title}: seeds {args.seeds}, variants {[v.name for v in variants]}, runs in {out}", flush=True)
    started = time.time()
    results = run_all(args.recipe, variants, args.seeds, out, args.rounds, args.parallel)

    print("\nheld-out reward per round, mean ± std over seeds:\n")
    print(per_round_table(results, variants))
    print("\n| variant | round 0 (warm start, no RL) | last round | rise | seeds rising | seconds per run (max) |\n|---|---|---|---|---|---|")
    for v in variants:
        runs = [r for r in results if r["variant"] == v.name]
        rises = [r["held_out"][-1] - r["held_out"][0] for r in runs]
        print(f"| {v.name} | {mean_spread([r['held_out'][0] for r in runs])} | {mean_spread([r['held_out'][-1] for r in runs])} "
              f"| {statistics.fmean(rises):+.2f} | {sum(x > 0 for x in rises)}/{len(runs)} | {max(r['seconds'] for r in runs):.0f} |")
    rl = [r["held_out"][-1] - r["held_out"][0] for r in results if r["variant"] == "rl"]
    if rl:
        verdict = statistics.fmean(rl) >= RISE and all(x > 0 for x in rl)
        print(f"\nrl: mean rise {statistics.fmean(rl):+.2f} (bar {RISE}), every seed rising: {all(x > 0 for x in rl)} -> {'MEETS' if verdict else 'MISSES'} the bar")
    plot_curves(results, variants, out / "learning.png", f"{recipe.title}: held-out reward")
    print(f"curves: {out / 'learning.png'}   all runs: {out / 'results.json'}   total {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
