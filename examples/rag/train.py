"""Train the retrieval-QA agent: ``python -m examples.rag.train`` from the repository root (``--help`` for the options)."""

from examples.rag.recipe import RECIPE
from tracerl.orchestration.local.cli import run_recipe_cli

if __name__ == "__main__":
    run_recipe_cli(RECIPE)
