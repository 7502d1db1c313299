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

    [openrlhf]                                     # a backend's own options, in a table of its name (OpenRLHFOptions fields)
    zero_stage = 2

    [[endpoint]]                                   # every endpoint to publish to (none: train only)
    url = "http://127.0.0.1:8000/v1"
    kind = "tracerl"                               # or vllm, vllm-lora

    [policies]                                     # optional: a LoRA adapter per group of agents, on one vLLM
    writer = ["writer", "rewriter"]                # (needs [train] lora_rank and vllm-lora endpoints); each
    checker = ["checker"]                          # policy has its folder STATE/NAME, the dataset is shared

The keys are :class:`RoundConfig`'s fields (the tables: :class:`BuildOptions`'s,
:class:`TrainConfig`'s; a backend's, its row's options type: :class:`OpenRLHFOptions`'), each value checked against its field's type
and its option's bounds; a key no field has is refused, naming the known ones. A field that
declares an option is also a flag of ``train run`` and ``train loop`` (``--min-episodes``,
``--split``, ...), which overrides the file. Relative paths are relative to the file's folder.
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tracerl.core.dataclass_options import ConfigError, config_from_table, file_key, merged, nested_options, not_a_file_key, option
from tracerl.pipeline.options import BuildOptions
from tracerl.trainer.publish import TARGET_KINDS, BuiltinServer, PublishTarget, VllmLora, target_for
from tracerl.trainer.training.backends import BACKENDS, DEFAULT_BACKEND, UnknownBackend, backend_named
from tracerl.trainer.training.config import TrainConfig


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
    """A round's configuration: each field a key of the TOML file and, where it declares an option, a flag of
    ``train run`` and ``train loop`` that overrides the file (:func:`load_config`)."""

    # str, not Path: Path("s3://b/p") would become "s3:/b/p"
    spans: str = field(metadata=option("--spans", help="What the collector writes: a data dir or a URI (s3://...)."))
    state: Path = field(metadata=option("--state", help="The rounds' folder: dataset, checkpoints, registry, lock, report."))
    model: Path = field(metadata=option("--model", help="The starting policy (its first version)."))
    base_version: int = 0  # the version the starting policy is served as
    min_episodes: int = field(default=1, metadata=option("--min-episodes", min=1, help="Fewer new episodes: exit 0, nothing done."))
    max_policy_lag: int | None = field(default=None, metadata=option(
        "--max-policy-lag", min=0, metavar="K", help="Skip rows sampled more than K versions back."))
    backend: str = DEFAULT_BACKEND  # the training options' --backend
    report: bool = True  # refresh STATE/report.html after each round
    # held-out evaluation of a checkpoint (src/tracerl/orchestration/rounds/gate.py): enables the gate
    eval_command: str | None = field(default=None, metadata=option(
        "--eval", help="Gate: a command printing a checkpoint's held-out reward ({checkpoint} replaced)."))
    gate_margin: float = field(default=0.0, metadata=option(
        "--gate-margin", min=0.0, help="Gate: hold a checkpoint scoring worse than the served one by more."))
    # an older version keeps its config and manifest, so it stays readable, but cannot be rolled back to
    keep_checkpoints: int = field(default=2, metadata=option(
        "--keep-checkpoints", min=0, help="Newest versions whose weights stay, besides the served and pinned ones (0: all)."))
    # [build]: its --split, --agents and --policy are flags of a round too; the rest is the file's
    build: BuildOptions = field(default_factory=lambda: BuildOptions(incremental=True), metadata=nested_options("splits", "agents", "policies"))
    # [train] and each backend's table ([openrlhf], by the backend's name: backend_options): their fields declare
    # their flags, which the command takes once, with --backend, as the training options (tracerl.trainer.training.options)
    train: TrainConfig = field(default_factory=TrainConfig, metadata=nested_options())
    backend_options: dict[str, Any] = field(default_factory=dict, metadata=not_a_file_key())  # load_config: the backends' tables
    endpoints: tuple[Endpoint, ...] = field(default=(), metadata=file_key("endpoint"))  # [[endpoint]]; --endpoint

    def __post_init__(self) -> None:
        try:
            backend_named(self.backend)
        except UnknownBackend as exc:
            raise RoundConfigError(f"backend: {exc}") from None
        for endpoint in self.endpoints:
            if endpoint.kind not in TARGET_KINDS:
                raise RoundConfigError(f"endpoint {endpoint.url}: unknown kind {endpoint.kind!r}, use one of {', '.join(sorted(TARGET_KINDS))}")
        if not (self.model / "config.json").is_file():
            raise RoundConfigError(f"model: {self.model} is not a Hugging Face checkpoint (no config.json)")

    @property
    def chosen_backend_options(self) -> object | None:
        """The options of ``backend``, for its trainer and its checkpoints' manifests (None: its defaults)."""
        return self.backend_options.get(self.backend)

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


def load_config(path: Path | None, **overrides: Any) -> RoundConfig:
    """The configuration of ``path`` (None: none) with ``overrides`` on top: the field's default, then the file,
    then the command line (as TRL's ``TrlParser``).

    ``overrides`` are laid out as the file (what :func:`~tracerl.core.dataclass_options.given_options` makes of
    the flags): top-level keys, ``build={"splits": ...}``, ``endpoint=[Endpoint(...)]``; a None value is not given.
    Paths of the file are relative to its folder, those of ``overrides`` to the working directory.
    """
    table: dict[str, Any] = {}
    base = Path.cwd()
    if path is not None:
        try:
            table = tomllib.loads(Path(path).read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise RoundConfigError(f"--config {path}: no such file") from None
        except tomllib.TOMLDecodeError as exc:
            raise RoundConfigError(f"{path} is not valid TOML: {exc}") from None
        base = Path(path).resolve().parent
    where = str(path) if path else "the command line"
    if "policies" in table:  # [policies] is the build's policies (the build selects by them), written at the top
        table["build"] = {**table.get("build", {}), "policies": _policies(where, table.pop("policies"))}
    table = merged(RoundConfig, _absolute(table, base), _absolute({k: v for k, v in overrides.items() if v is not None}, Path.cwd()))
    if isinstance(table.get("build", {}), Mapping):
        table["build"] = {**table.get("build", {}), "incremental": True}  # a round's watermark is the incremental dataset
    try:
        backend_options = {name: config_from_table(row.options, table.pop(name), f"{where} [{name}]")
                           for name, row in BACKENDS.items() if name in table}
        return replace(config_from_table(RoundConfig, table, where), backend_options=backend_options)
    except ConfigError as exc:
        raise RoundConfigError(str(exc)) from None


def _absolute(values: dict[str, Any], base: Path) -> dict[str, Any]:
    """Paths (and a local ``spans``) made absolute against ``base``: the registry must not depend on the cwd."""
    values = dict(values)
    for key in ("state", "model", "spans"):
        if key in values and "://" not in str(values[key]):
            path = (base / Path(str(values[key])).expanduser()).resolve()
            values[key] = str(path) if key == "spans" else path
    return values


def _policies(where: str, value: Any) -> dict[str, tuple[str, ...]]:
    if not isinstance(value, dict) or not all(isinstance(v, list) and all(isinstance(a, str) for a in v) for v in value.values()):
        raise RoundConfigError(f'{where} [policies]: each key is a policy, its value the list of its agents, e.g. writer = ["writer", "rewriter"]')
    return {name: tuple(agents) for name, agents in value.items()}
