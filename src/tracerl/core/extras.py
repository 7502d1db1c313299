"""What each install extra brings, so that a command whose extra is missing says what to install.

``pip install tracerl`` is capture only (what an agent's process needs); the other parts come
with extras named after their role (pyproject.toml). Commands of a part check its modules with
:func:`importlib.util.find_spec`, which imports nothing, instead of failing on an import deep
inside the part.
"""

from __future__ import annotations

import importlib.util

EXTRAS: dict[str, tuple[str, ...]] = {
    "collector": ("grpc", "starlette", "uvicorn", "google.protobuf"),
    "pipeline": ("duckdb", "matplotlib"),
    # `tracerl train` alone: a GPU training node reads a dataset folder and trains, nothing more
    "torch": ("torch", "transformers"),
    "ray": ("ray",),  # `pipeline build-dataset --engine ray`
    "trackers": ("tensorboard", "mlflow", "wandb", "trackio"),  # --report-to (src/tracerl/trainer/trackers.py)
}
EXTRAS["train"] = (*EXTRAS["collector"], *EXTRAS["pipeline"], *EXTRAS["torch"], "pydantic", "openai")


def missing_modules(extra: str) -> list[str]:
    """The modules of ``extra`` that cannot be imported here."""
    return [name for name in EXTRAS[extra] if not _importable(name)]


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except ModuleNotFoundError:  # a dotted name whose parent package is absent
        return False


def missing_message(extra: str, what: str, missing: list[str] | None = None) -> str | None:
    """What to install for ``what`` (a command), or ``None`` when ``extra`` is installed.

    ``missing`` gives the modules found missing another way (an import that failed).
    """
    missing = missing_modules(extra) if missing is None else missing
    if not missing:
        return None
    return f"{what} needs the {extra!r} extra ({', '.join(missing)} not installed): pip install 'tracerl[{extra}]'"

