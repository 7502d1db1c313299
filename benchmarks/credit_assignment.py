"""The paper's credit-assignment claim, tested: identical vs discounted credit, each with and without AIR.

The demo's task is one where the early call decides the outcome (which tool) and the
later call can be right or wrong on its own (copying the tool's result): under
identical credit the answer turn of an episode whose tool was wrong is punished for
copying faithfully; discounted credit (gamma 0.9) gives the earlier call less of the final reward and
keeps a penalty on the call that caused it;
automatic intermediate rewards (AIR) add a penalty on a call whose tool failed. Each
combination trains both calls (the demo itself trains only the tool picker) and runs
over the same seeds; the table gives held-out reward per round as
mean ± std over seeds, ready for the README.

    python benchmarks/credit_assignment.py --parallel 2
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from loop_runs import Variant, load_recipe, per_round_table, plot_curves, run_all

GAMMA = 0.9
VARIANTS = [
    Variant("identical + AIR", {"credit": "identical", "air": True, "agents": None}),
    Variant("identical, no AIR", {"credit": "identical", "air": False, "agents": None}),
    Variant("discounted + AIR", {"credit": "discounted", "gamma": GAMMA, "air": True, "agents": None}),
    Variant("discounted, no AIR", {"credit": "discounted", "gamma": GAMMA, "air": False, "agents": None}),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="tracerl.orchestration.demo.recipe:DEMO", help="module:NAME of an AgentRecipe")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=None, help="default: the recipe's")
    parser.add_argument("--parallel", type=int, default=1, help="runs at once (each trains on one thread)")
    parser.add_argument("--out", type=Path, default=None, help="default: a temporary folder")
    args = parser.parse_args()

    recipe = load_recipe(args.recipe)
    out = args.out or Path(tempfile.mkdtemp(prefix="tracerl-credit-"))
    out.mkdir(parents=True, exist_ok=True)
    print(f"{recipe.title}: seeds {args.seeds}, runs in {out}", flush=True)
    started = time.time()
    results = run_all(args.recipe, VARIANTS, args.seeds, out, args.rounds, args.parallel)
    print("\nheld-out reward per round, mean ± std over seeds:\n")
    print(per_round_table(results, VARIANTS))
    plot_curves(results, VARIANTS, out / "credit_assignment.png", f"{recipe.title}: credit assignment")
    print(f"\ncurves: {out / 'credit_assignment.png'}   all runs: {out / 'results.json'}   total {time.time() - started:.0f} s")


if __name__ == "__main__":
    main()
