"""How to reach the judge and what to ask it (:class:`JudgeOptions`): each field its ``pipeline judge`` option.

Apart from :mod:`tracerl.pipeline.judge` so that the command line is made without importing what
judging needs (the HTTP client, the build).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from tracerl.core.dataclass_options import option, option_of
from tracerl.pipeline.judge_prompt import DEFAULT_RUBRIC
from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.source import PipelineInputError
from tracerl.schemas import environment as E

_REWARD_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")  # also the name of its files


def _rubric_text(path: Path | None) -> str:
    """``--rubric FILE`` as the rubric's text; no file: the default rubric."""
    if path is None:
        return DEFAULT_RUBRIC
    return path.read_text(encoding="utf-8")  # a file that is not UTF-8: a ValueError, named with --rubric


@dataclass(frozen=True)
class JudgeOptions:
    """How to reach the judge and what to ask it."""

    url: str = field(metadata=option(
        "--judge-url", envvar=E.JUDGE_URL_ENV,
        help="OpenAI-compatible base URL of the judge, e.g. http://127.0.0.1:8000/v1 (vLLM, `tracerl serve`, a hosted API)."))
    model: str = field(metadata=option("--judge-model", envvar=E.JUDGE_MODEL_ENV, help="The model name the judge serves."))
    # the rubric's text; the option names a file holding it (to_cli: a text is no file to name, so none is the default)
    rubric: str = field(default=DEFAULT_RUBRIC, metadata=option(
        "--rubric", cli_type=Optional[Path], to_cli=lambda text: None, from_cli=_rubric_text, exists=True, dir_okay=False,
        help="A text file: what makes an episode better (default: goal reached, then efficiency, then progress)."))
    api_key: str | None = field(default=None, metadata=option(
        "--api-key", envvar=E.JUDGE_API_KEY_ENV, help="Bearer token for a hosted judge."))
    reward_name: str = field(default="judge", metadata=option(
        "--reward-name", help="The rewards' name (build with --reward-weight NAME=1 to train on them alone)."))
    splits: tuple[str, ...] = field(default=(), metadata=option_of(BuildOptions, "splits"))
    max_group: int = field(default=8, metadata=option(
        "--max-group", min=1, help="Most episodes compared in one judge call; a larger task group is split."))
    max_prompt_chars: int = field(default=32_000, metadata=option(
        "--max-prompt-chars", min=1, help="Longest prompt sent, in characters; a longer episode is skipped (too_long)."))
    max_calls: int | None = field(default=None, metadata=option(
        "--max-calls", min=0, help="Stop after this many judge calls (retries count); the rest waits for the next run."))
    concurrency: int = field(default=4, metadata=option("--concurrency", min=1, help="Judge calls in flight at once."))
    timeout_s: float = field(default=120.0, metadata=option("--timeout", min=0.0, help="Seconds to wait for one judge answer."))
    max_tokens: int = 1024
    episode_timeout_s: float = field(default=3600.0, metadata=option_of(BuildOptions, "episode_timeout_s"))
    # also write the scored verdicts as gen_ai.evaluation.result events in logs/ (src/tracerl/pipeline/judge_events.py)
    evaluation_events: bool = field(default=False, metadata=option(
        "--evaluation-events/--no-evaluation-events",
        help="Also write the scores as OpenTelemetry gen_ai.evaluation.result events in logs/, parented to each episode's span, "
             "for trace viewers (never read back as rewards)."))

    def __post_init__(self) -> None:
        if self.max_group < 1 or self.concurrency < 1:
            raise PipelineInputError("max_group and concurrency must be at least 1")
        if not _REWARD_NAME.match(self.reward_name):
            raise PipelineInputError(f"reward name {self.reward_name!r}: use letters, digits, '_', '.' or '-'")
