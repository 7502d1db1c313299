"""The leaderboard's AST checker, imported from the installed ``bfcl-eval`` and run unchanged.

``ast_checker.py`` needs nothing but the standard library, except one import: the model
registry (``bfcl_eval.constants.model_config``), which imports a handler for every provider
the leaderboard scores (Anthropic, Cohere, Mistral, Gemini, ... and through them numpy 1.26,
faiss and sentence-transformers). The checker asks that registry one thing,
``underscore_to_dot``: whether the model's tools had the dots of their names replaced by
underscores. Ours do (:func:`examples.bfcl.task.tool_name`, as the leaderboard's own FC
handlers send them), so when the registry is not importable it is given in its place a
registry whose every model answers yes. The checking rules themselves are the leaderboard's.
"""

from __future__ import annotations

import sys
import types
from dataclasses import dataclass
from functools import cache
from typing import Any

from examples.bfcl.task import INSTALL_HINT, BfclDataError, Task

REGISTRY_MODULE = "bfcl_eval.constants.model_config"
MODEL_NAME = "tracerl-policy"  # the name the checker is told; only its registry entry's underscore_to_dot is read


@dataclass(frozen=True)
class _Entry:
    underscore_to_dot: bool = True


class _EveryModel(dict):
    """The registry's place-holder: any model name maps to an entry with ``underscore_to_dot``."""

    def __missing__(self, name: str) -> _Entry:
        return _Entry()


@cache
def _ast_checker() -> Any:
    try:
        import bfcl_eval  # noqa: F401
    except ImportError:
        raise BfclDataError(f"the BFCL checker is not installed: {INSTALL_HINT}") from None
    if REGISTRY_MODULE not in sys.modules:
        try:
            __import__(REGISTRY_MODULE)
        except ImportError:  # the provider SDKs are absent (the --no-deps install): the one answer the checker reads
            registry = types.ModuleType(REGISTRY_MODULE)
            registry.MODEL_CONFIG_MAPPING = _EveryModel()
            sys.modules[REGISTRY_MODULE] = registry
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval import ast_checker

    return ast_checker.ast_checker, Language.PYTHON


def checker_category(task: Task) -> str:
    """The checker's mode for a question, from its shape as the leaderboard's categories have it:
    several calls expected -> parallel (any order), several functions offered -> multiple, else simple."""
    if len(task.ground_truth) > 1:
        return "parallel"
    return "multiple" if len(task.functions) > 1 else "simple"


def check(task: Task, calls: list[dict]) -> dict:
    """The leaderboard's verdict on ``calls`` (``[{name: {arg: value}}]``): a dict with ``valid`` and, when not, ``error_type``."""
    checker, python = _ast_checker()
    return checker(task.functions, calls, task.ground_truth, python, checker_category(task), MODEL_NAME)
