"""``tracerl run -- CMD``: run a program with capture switched on by environment alone.

It does what ``opentelemetry-instrument`` does (put OTel's ``sitecustomize`` first on
``PYTHONPATH`` so every Python process of the command auto-instruments itself at
start-up) and sets tracerl's defaults: the ``tracerl`` Parquet exporter (or OTLP to a
collector), no metrics/logs exporters, and optionally one episode for the whole run.
Child processes inherit the environment, so they are captured too.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Mapping, Sequence
from typing import NoReturn
from pathlib import Path

import opentelemetry.instrumentation.auto_instrumentation as auto_instrumentation

from tracerl.instrumentation import settings as S
from tracerl.schemas import environment as E

OPENLLMETRY_ENTRY_POINT = "openai"  # opentelemetry_instrumentor entry point of OpenLLMetry
# opentelemetry_instrumentor entry points of the HTTP clients, switched off by --no-http-spans
HTTP_CLIENT_ENTRY_POINTS = ("httpx", "httpx2", "requests", "urllib3", "urllib", "aiohttp-client")


def capture_env(
    base: Mapping[str, str],
    *,
    data_dir: str | None = None,
    otlp_endpoint: str | None = None,
    task_id: str | None = None,
    split: str | None = None,
    episode_id: str | None = None,
    capture_content: bool | None = None,
    http_spans: bool = True,
) -> dict[str, str]:
    """The environment a captured program runs with (``base`` plus tracerl's settings).

    ``http_spans=False`` switches the HTTP client instrumentations off: every captured LLM
    call also leaves an HTTP client span (its transport), and not making them at all is
    the cheapest way to skip them; LLM requests no hook recognises are then not seen either.
    """
    env = dict(base)
    env[E.RUN_SUMMARY_ENV] = "1"
    if otlp_endpoint:
        env[E.OTEL_TRACES_EXPORTER_ENV] = "otlp"
        env[E.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT_ENV] = otlp_endpoint
        env.setdefault(E.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL_ENV, "http/protobuf")
    else:
        env.setdefault(E.OTEL_TRACES_EXPORTER_ENV, "tracerl")
    if env[E.OTEL_TRACES_EXPORTER_ENV] == "tracerl":
        # hand spans to the Parquet exporter often: it makes large files itself (parquet_exporter.py)
        env.setdefault(E.OTEL_BSP_SCHEDULE_DELAY_ENV, str(S.PARQUET_HANDOVER_MS))
    # the distro defaults these to OTLP, which would retry against a collector nobody runs
    env.setdefault(E.OTEL_METRICS_EXPORTER_ENV, "none")
    env.setdefault(E.OTEL_LOGS_EXPORTER_ENV, "none")
    if data_dir is not None:
        env[E.DATA_DIR_ENV] = str(Path(data_dir).resolve())
    elif E.DATA_DIR_ENV not in env:
        env[E.DATA_DIR_ENV] = str(Path(S.DEFAULT_DATA_DIR).resolve())
    if task_id is not None or episode_id is not None:
        env[E.EPISODE_ID_ENV] = episode_id or uuid.uuid4().hex
    if task_id is not None:
        env[E.TASK_ID_ENV] = task_id
    if split is not None:
        env[E.SPLIT_ENV] = split
    if capture_content is not None:
        env[E.CAPTURE_CONTENT_ENV] = "true" if capture_content else "false"
    disabled = [d.strip() for d in env.get(E.OTEL_DISABLED_INSTRUMENTATIONS_ENV, "").split(",") if d.strip()]
    if env.get(E.LLM_SPANS_ENV, "tracerl") != "openllmetry":
        # tracerl makes the LLM-call spans itself; OpenLLMetry would add a second, slower one
        disabled.append(OPENLLMETRY_ENTRY_POINT)
    if not http_spans:
        disabled.extend(HTTP_CLIENT_ENTRY_POINTS)
    if disabled:
        env[E.OTEL_DISABLED_INSTRUMENTATIONS_ENV] = ",".join(dict.fromkeys(disabled))
    hook_dir = str(Path(auto_instrumentation.__file__).parent)
    paths = [p for p in env.get(E.PYTHONPATH_ENV, "").split(os.pathsep) if p and p != hook_dir]
    cwd = os.getcwd()
    if cwd not in paths:
        paths.insert(0, cwd)
    env[E.PYTHONPATH_ENV] = os.pathsep.join([hook_dir, *paths])
    return env


def exec_captured(command: Sequence[str], env: Mapping[str, str]) -> NoReturn:
    """Replace this process with ``command`` (as ``opentelemetry-instrument`` does), so
    signals, the exit status and the terminal belong to the program itself."""
    executable = shutil.which(command[0], path=env.get(E.PATH_ENV))
    if executable is None:
        raise FileNotFoundError(f"tracerl run: command not found: {command[0]!r}")
    os.execvpe(executable, list(command), dict(env))
