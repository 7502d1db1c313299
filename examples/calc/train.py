"""Train the calculator agent: ``python -m examples.calc.train`` (``--help`` for the options)."""

from examples.calc.recipe import RECIPE
from tracerl.orchestration.local.cli import run_recipe_cli

if __name__ == "__main__":
    run_recipe_cli(RECIPE)
