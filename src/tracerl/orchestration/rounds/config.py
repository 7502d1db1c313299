"""What a scheduled round needs, read from a TOML file so that a crontab line stays short.

::

    spans = "s3://traces/prod?region=eu-west-1"   # what the collector writes (folder or URI)
    state = "/var/lib/tracerl/rounds"              # dataset, checkpoints, registry, lock, report
    model = "/var/lib/tracerl/policy-v0"           # the starting policy (version base_version)
    min_episodes = 64
    max_policy_lag = 2
    backend = "torch"                              # or "openrlhf"
    eval_command = "python eval.py {checkpoint}"   # optional gate: prints the held-out mean reward last
    gate_margin = 0.02                             # do not publish a checkpoint scoring worse by more
    keep_checkpoints = 2                           # versions whose weights stay (plus the served and pinned); 0: all

    [build]                                        # BuildOptions fields (tracerl pipeline build-dataset)
    splits = ["train"]
    agents = "solver"

    [train]                                        # TrainConfig fields (tracerl train)
    learning_rate = 1e-5
    report_to = ["mlflow", "tensorboard"]          # trackers each trained round reports to (--report-to); one run across rounds

    [openrlhf]                                     # OpenRLHFOptions fields, with backend = "openrlhf"
    zero_stage = 2

    [[endpoint]]                                   # every endpoint to publish to (none: train only)
    url = "http://127.0.0.1:8000/v1"
    kind = "tracerl"                               # or vllm, vllm-lora

    [policies]                                     # optional: a LoRA adapter per group of agents, on one vLLM
    writer = ["writer", "rewriter"]                # (needs [train] lora_rank and vllm-lora endpoints); each
    checker = ["checker"]                          # policy has its folder STATE/NAME, the dataset is shared

Relative paths are relative to the file's folder. Command-line options override the file.
"""

from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracerl.pipeline.options import BuildOptions
from tracerl.pipeline.source import PipelineInputError
from tracerl.trainer.publish import TARGET_KINDS, BuiltinServer, PublishTarget, VllmLora, target_for
from tracerl.trainer.training.config import BACKENDS, OpenRLHFOptions, TrainConfig


class RoundConfigError(ValueError):
    """The configuration cannot run a round; the message names the key and what to do."""


@dataclass(frozen=True)
class Endpoint:
    url: str
    kind: str = BuiltinServer.kind

    def target(self, adapter_name: str | None = None) -> PublishTarget:
        """What publishing to this endpoint talks to (one of several policies: its adapter, by ``adapter_name``)."""
        return target_for(self.url, self.kind, adapter_name=adapter_name)


@dataclass(frozen=True)
class RoundConfig:
    spans: str  # a data dir or spans folder, local or a URI (s3://...)
    state: Path
    model: Path
    base_version: int = 0  # the version the starting policy is served as
    min_episodes: int = 1
    max_policy_lag: int | None = None
    backend: str = BACKENDS[0]
    report: bool = True  # refresh STATE/report.html after each round
    eval_command: str | None = None  # held-out evaluation of a checkpoint (src/tracerl/orchestration/rounds/gate.py): enables the gate
    gate_margin: float = 0.0  # hold a checkpoint scoring below the current policy's score minus this
    # the newest versions whose weights stay on disk, besides the served one and pinned ones (0: every version's);
    # an older version keeps its config and manifest, so it stays readable, but cannot be rolled back to
    keep_checkpoints: int = 2
    build: BuildOptions = field(default_factory=lambda: BuildOptions(incremental=True))
    train: TrainConfig = field(default_factory=TrainConfig)
    openrlhf: OpenRLHFOptions = field(default_factory=OpenRLHFOptions)
    endpoints: tuple[Endpoint, ...] = ()

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise RoundConfigError(f"backend: unknown {self.backend!r}, use {' or '.join(BACKENDS)}")
        if self.min_episodes < 1:
            raise RoundConfigError(f"min_episodes must be at least 1, got {self.min_episodes}")
        if self.keep_checkpoints < 0:
            raise RoundConfigError(f"keep_checkpoints must be 0 (keep all) or more, got {self.keep_checkpoints}")
        if self.max_policy_lag is not None and self.max_policy_lag < 0:
            raise RoundConfigError(f"max_policy_lag must be 0 or more, got {self.max_policy_lag}")
        for endpoint in self.endpoints:
            if endpoint.kind not in TARGET_KINDS:
                raise RoundConfigError(f"endpoint {endpoint.url}: unknown kind {endpoint.kind!r}, use one of {', '.join(sorted(TARGET_KINDS))}")
        if not (self.model / "config.json").is_file():
            raise RoundConfigError(f"model: {self.model} is not a Hugging Face checkpoint (no config.json)")

    @property
    def policies(self) -> dict[str, tuple[str, ...]]:
        """{policy: agents} (``[policies]``, ``--policy``): an adapter each. The build selects by them, so they live in ``build``."""
        return self.build.policies

    def check_servable(self) -> None:
        """With several policies: refuse what cannot serve them (checked once the command line's training options are in)."""
        if not self.policies:
            return
        if self.train.lora_rank <= 0:
            raise RoundConfigError("policies are LoRA adapters on one base model: set [train] lora_rank (or --lora-rank)")
        wrong = [e.url for e in self.endpoints if e.kind != VllmLora.kind]
        if wrong:
            raise RoundConfigError(f"policies are published as LoRA adapters: endpoint(s) {', '.join(wrong)} need kind = \"{VllmLora.kind}\"")


_SECTIONS = {"build": BuildOptions, "train": TrainConfig, "openrlhf": OpenRLHFOptions}
_PATHS = ("state", "model")
_TOP = {f.name for f in dataclasses.fields(RoundConfig)} - set(_SECTIONS) - {"endpoints"}


def load_config(path: Path | None, **overrides: Any) -> RoundConfig:
    """The configuration of ``path`` (None: none) with ``overrides`` (None values ignored) on top.

    ``overrides`` take the top-level keys, ``splits`` and ``agents`` (into ``[build]``),
    ``endpoints`` (a list of :class:`Endpoint`) and ``policies`` ({policy: agents}).
    """
    data: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        try:
            data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RoundConfigError(f"--config {path}: no such file") from None
        except tomllib.TOMLDecodeError as exc:
            raise RoundConfigError(f"{path} is not valid TOML: {exc}") from None
        base = Path(path).resolve().parent
    where = str(path) if path else "the command line"
    unknown = set(data) - _TOP - set(_SECTIONS) - {"endpoint", "policies"}
    if unknown:
        known = _TOP | set(_SECTIONS) | {"endpoint", "policies"}
        raise RoundConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    build = dict(data.get("build", {}))
    if "policies" in data:
        build["policies"] = _policies(where, data["policies"])
    for key in ("splits", "agents", "policies"):
        if overrides.get(key) is not None:
            build[key] = overrides.pop(key)
        overrides.pop(key, None)
    sections = {name: _section(where, name, cls, build if name == "build" else data.get(name, {})) for name, cls in _SECTIONS.items()}
    endpoints = overrides.pop("endpoints", None) or [_endpoint(where, e) for e in data.get("endpoint", [])]
    top = _absolute({k: v for k, v in data.items() if k in _TOP}, base)
    top.update(_absolute({k: v for k, v in overrides.items() if v is not None}, Path.cwd()))
    missing = [k for k in ("spans", "state", "model") if k not in top]
    if missing:
        raise RoundConfigError(f"{where}: missing {', '.join(missing)} (a config file key or --{missing[0]})")
    try:
        return RoundConfig(**top, **sections, endpoints=tuple(endpoints))
    except TypeError as exc:
        raise RoundConfigError(f"{where}: {exc}") from None


def _absolute(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """Paths (and a local ``spans``) made absolute against ``base``: the registry must not depend on the cwd."""
    values = dict(values)
    for key in (*_PATHS, "spans"):
        if key in values and "://" not in str(values[key]):
            path = (base / Path(str(values[key])).expanduser()).resolve()
            values[key] = str(path) if key == "spans" else path
    return values


def _section(where: str, name: str, cls: type, values: dict[str, Any]) -> Any:
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(values) - known
    if unknown:
        raise RoundConfigError(f"{where} [{name}]: unknown key(s) {', '.join(sorted(unknown))}; known: {', '.join(sorted(known))}")
    if name == "build":
        values = {**values, "incremental": True}  # a round's watermark is the incremental dataset
        for key in ("splits", "rewards", "exports"):
            if key in values:
                values[key] = tuple([values[key]] if isinstance(values[key], str) else values[key])
    try:
        return cls(**values)
    except (PipelineInputError, TypeError, ValueError) as exc:
        raise RoundConfigError(f"{where} [{name}]: {exc}") from None


def _policies(where: str, value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict) or not all(isinstance(v, list) and all(isinstance(a, str) for a in v) for v in value.values()):
        raise RoundConfigError(f'{where} [policies]: each key is a policy, its value the list of its agents, e.g. writer = ["writer", "rewriter"]')
    return {name: tuple(agents) for name, agents in value.items()}


def _endpoint(where: str, value: Any) -> Endpoint:
    if not isinstance(value, dict) or "url" not in value or set(value) - {"url", "kind"}:
        raise RoundConfigError(f"{where} [[endpoint]]: each needs url (and optionally kind), got {value!r}")
    return Endpoint(**value)
