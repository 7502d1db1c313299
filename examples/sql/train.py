"""``python -m examples.sql.train``: the SQL agent's training loop (same flags as ``tracerl demo``)."""

from examples.sql.recipe import RECIPE
from tracerl.orchestration.local.cli import run_recipe_cli

if __name__ == "__main__":
    run_recipe_cli(RECIPE)
