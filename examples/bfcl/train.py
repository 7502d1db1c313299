"""``python -m examples.bfcl.train --model DIR``: the function-calling agent's training loop (same flags as ``tracerl demo``)."""

from examples.bfcl.recipe import RECIPE
from tracerl.orchestration.local.cli import run_recipe_cli

if __name__ == "__main__":
    run_recipe_cli(RECIPE)
