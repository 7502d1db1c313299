"""``tracerl train run``, ``tracerl train loop`` and ``tracerl policy list | show | rollback``.

``train run`` prints one JSON line on stdout (phases go to stderr) and exits with a code a
scheduler can alert on (:data:`EXIT_CODES`, documented in src/tracerl/trainer/README.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
import json
import re
import signal
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any, Optional

import typer

from tracerl.core.commands import command_group
from tracerl.core.dataclass_options import given_options, option_parameters
from tracerl.trainer.publish import TARGET_KINDS, BuiltinServer
from tracerl.orchestration.rounds.config import Endpoint, RoundConfig, RoundConfigError, load_config
from tracerl.trainer.training.options import pop_training_overrides, training_parameters

# status -> exit code: 0 nothing to alert on; the others each mean one thing to look at
EXIT_CODES = {
    "trained": 0,  # a new version trained, published and recorded
    "idle": 0,  # fewer new episodes than min_episodes: nothing to do
    "stopped": 0,  # train loop: stopped by SIGTERM between phases
    "failed": 1,  # building or training failed (the message says why); the next run redoes the round
    "config_error": 2,  # bad options or config file
    "locked": 3,  # another round holds the lock (a round longer than the schedule's period?)
    "publish_failed": 4,  # trained, not served: the next run publishes the same checkpoint again
    "report_failed": 5,  # recorded and served, but report.html was not refreshed
    "held": 6,  # the gate held the checkpoint back: it scored worse than the served policy (not published)
    "skipped": 0,  # no row of the round could be trained on (all older than max_policy_lag, or empty responses): its files set aside (registry "skipped"), no version made
}

_CONFIG = typer.Option(None, "--config", "-c", help="TOML file of the round (src/tracerl/orchestration/rounds/config.py shows every key).")
# the policy commands' --state is RoundConfig's (the flag `train run` and `train loop` take), flag and help declared there once
_STATE = option_parameters(RoundConfig, only=("state",), overrides=True)[0].default


def _phase(name: str) -> None:
    print(f"tracerl round: {name}", file=sys.stderr, flush=True)


def _emit(summary: dict[str, Any]) -> int:
    typer.echo(json.dumps(summary))
    return EXIT_CODES[summary["status"]]


def _config_from_options(options: dict[str, Any]) -> RoundConfig:
    """The round's configuration: the file, the round's flags on top (:func:`load_config`), then the training options
    (training/options.py)."""
    training = pop_training_overrides(options)
    config = options.pop("config")
    urls, kind = options.pop("endpoint"), options.pop("endpoint_kind")
    try:
        given = given_options(RoundConfig, options)
    except typer.BadParameter as exc:
        raise RoundConfigError(f"{exc.param_hint}: {exc.message}") from None
    if urls:
        given["endpoint"] = [Endpoint(url, kind) for url in urls]
    cfg = load_config(config, **given)
    try:
        backend, train, backend_options = training.apply(cfg.backend, cfg.train, cfg.backend_options)
    except typer.BadParameter as exc:
        raise RoundConfigError(f"{exc.param_hint}: {exc.message}") from None
    cfg = dataclasses.replace(cfg, backend=backend, train=train, backend_options=backend_options)
    cfg.check_servable()
    from tracerl.trainer.trackers import TrackerError, check_trackers

    try:
        check_trackers(cfg.train.report_to)  # a package missing: exit 2 saying what to install, before any round
    except TrackerError as exc:
        raise RoundConfigError(str(exc)) from None
    return cfg


def one_round(cfg: RoundConfig, should_stop: Any = lambda: False) -> dict[str, Any]:
    """Run one round under the lock; its summary, whatever happened (never raises but for RoundStopped)."""
    from tracerl.orchestration.rounds.lock import RoundLocked, round_lock
    from tracerl.orchestration.rounds.errors import RoundFailed, RoundStopped
    from tracerl.orchestration.rounds.round import run_round

    try:
        # stdout is the JSON line alone: what libraries print there (DeepSpeed's logger binds
        # sys.stdout when first imported) goes to stderr with the phases
        with round_lock(cfg.state), contextlib.redirect_stdout(sys.stderr):
            return run_round(cfg, on_phase=_phase, should_stop=should_stop).as_dict()
    except RoundLocked as exc:
        return {"status": "locked", "reason": str(exc)}
    except RoundFailed as exc:
        return {"status": exc.status, "reason": str(exc)}
    except RoundStopped:
        raise
    except Exception as exc:  # the scheduler gets a status and a reason, the log the traceback
        traceback.print_exc()
        return {"status": "failed", "reason": f"{type(exc).__name__}: {exc}"}


def run(**options: Any) -> None:
    """One scheduled round, then exit: new episodes -> dataset -> train -> publish -> record -> report."""
    try:
        cfg = _config_from_options(options)
    except RoundConfigError as exc:
        raise typer.Exit(_emit({"status": "config_error", "reason": str(exc)})) from None
    raise typer.Exit(_emit(one_round(cfg)))


def parse_period(text: str) -> float:
    """``10m`` -> 600.0 (s, m, h; a bare number is seconds)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smh]?)\s*", text)
    if not match:
        raise typer.BadParameter(f"{text!r} is not a period: write e.g. 30s, 10m or 1h", param_hint="--every")
    return float(match.group(1)) * {"": 1, "s": 1, "m": 60, "h": 3600}[match.group(2)]


def loop(every: str, **options: Any) -> None:
    """`train run` every period, one JSON line per round; SIGTERM or Ctrl-C stops it between phases (exit 0)."""
    from tracerl.orchestration.rounds.errors import RoundStopped

    period = parse_period(every)
    try:
        cfg = _config_from_options(options)
    except RoundConfigError as exc:
        raise typer.Exit(_emit({"status": "config_error", "reason": str(exc)})) from None
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    while not stop.is_set():
        started = time.monotonic()
        try:
            _emit(one_round(cfg, should_stop=stop.is_set))
        except RoundStopped as exc:
            _emit({"status": "stopped", "reason": str(exc)})
            return
        stop.wait(max(0.0, period - (time.monotonic() - started)))
    _emit({"status": "stopped", "reason": "stopped between rounds"})


# the options of a round: the file, then a flag per RoundConfig field that declares one (overriding the file's key),
# the endpoints, and the training options (the same as `tracerl train`'s)
_ROUND_OPTIONS = [
    inspect.Parameter("config", inspect.Parameter.KEYWORD_ONLY, default=_CONFIG, annotation=Optional[Path]),
    *option_parameters(RoundConfig, overrides=True),
    inspect.Parameter("endpoint", inspect.Parameter.KEYWORD_ONLY, annotation=list[str], default=typer.Option(
        [], "--endpoint", metavar="<url>", help="Publish to this endpoint (repeatable; replaces the file's [[endpoint]]).")),
    inspect.Parameter("endpoint_kind", inspect.Parameter.KEYWORD_ONLY, annotation=str, default=typer.Option(
        BuiltinServer.kind, "--endpoint-kind", help=f"What serves at --endpoint: {', '.join(sorted(TARGET_KINDS))}.")),
    *training_parameters(),
]
run.__signature__ = inspect.Signature(_ROUND_OPTIONS)  # type: ignore[attr-defined]
# loop takes --every and every option of run (one list of options, one meaning)
loop.__signature__ = inspect.Signature([  # type: ignore[attr-defined]
    inspect.Parameter("every", inspect.Parameter.KEYWORD_ONLY, annotation=str,
                      default=typer.Option(..., "--every", help="Start a round this often (30s, 10m, 1h).")),
    *_ROUND_OPTIONS,
])


policy_app = command_group(no_args_is_help=True, help="The policy registry: versions, their data, where they are served.")


_POLICY = typer.Option(None, "--policy", help="Which policy, where the folder holds several (a subfolder each).")


def _registry(config: Path | None, state: Path | None, policy: str | None = None) -> Any:
    from tracerl.orchestration.registry import PolicyRegistry

    return PolicyRegistry(_state_of(config, state, policy))


def policy_folders(folder: Path) -> dict[str, Path]:
    """The policy registries of ``folder``: itself when it holds one (named ''), else each subfolder that holds
    one (a policy per agent group: the loop's ``OUT/policy/NAME``, a round's ``STATE/NAME``)."""
    from tracerl.orchestration.registry import REGISTRY_FILE

    if (folder / REGISTRY_FILE).is_file() or not folder.is_dir():
        return {"": folder}
    found = {sub.name: sub for sub in sorted(folder.iterdir()) if (sub / REGISTRY_FILE).is_file()}
    return found or {"": folder}


def _root(config: Path | None, state: Path | None) -> Path:
    """The folder given: --state, else the config file's state."""
    if state is not None:
        return state
    if config is None:
        raise typer.BadParameter("give --state STATE or --config FILE (the one `tracerl train run` uses)", param_hint="--state")
    try:
        return load_config(config).state
    except RoundConfigError as exc:
        raise typer.BadParameter(str(exc), param_hint="--config") from None


def _state_of(config: Path | None, state: Path | None, policy: str | None = None) -> Path:
    """One policy's folder: the folder given, or its subfolder ``policy`` where it holds several."""
    state = _root(config, state)
    folders = policy_folders(state)
    if policy is None and len(folders) > 1:
        raise typer.BadParameter(f"{state} holds several policies ({', '.join(folders)}): add --policy NAME", param_hint="--policy")
    if policy is not None and policy not in folders:
        known = ", ".join(name for name in folders if name) or "one, unnamed: leave --policy out"
        raise typer.BadParameter(f"no policy {policy!r} in {state} (policies: {known})", param_hint="--policy")
    return folders[policy or next(iter(folders))]


@policy_app.command("list")
def list_policies(config: Optional[Path] = _CONFIG, state: Optional[Path] = _STATE, policy: Optional[str] = _POLICY) -> None:
    """One line per version: version, kind, parent, episodes, loss, where it is served (each policy's, where there are several)."""
    from tracerl.orchestration.registry import PolicyRegistry, RegistryError
    from tracerl.trainer.training.checkpoint import has_weights

    folders = {policy: _state_of(config, state, policy)} if policy else policy_folders(_root(config, state))
    try:
        tables = {name: PolicyRegistry(path).entries() for name, path in folders.items()}
    except RegistryError as exc:
        raise typer.BadParameter(str(exc), param_hint="--state") from None
    named = any(tables)
    typer.echo(f"{'policy  ' if named else ''}{'version':>7}  {'kind':<8}  {'parent':>6}  {'episodes':>8}  {'loss':>10}  {'weights':<8}  {'recorded':<25}  published")
    for name, entries in tables.items():
        for e in entries:
            loss = (e.get("metrics") or {}).get("loss")
            where = ", ".join(f"{p['endpoint']} as {p['policy_version']}" for p in e.get("published", [])) or "-"
            weights = "pinned" if e.get("pinned") else ("kept" if e["kind"] == "base" or has_weights(Path(e["checkpoint"])) else "pruned")
            typer.echo(f"{f'{name:<6}  ' if named else ''}{e['version']:>7}  {e['kind']:<8}  {e['parent'] if e['parent'] is not None else '-':>6}  "
                       f"{len(e.get('episodes', [])):>8}  {'-' if loss is None else f'{loss:.4g}':>10}  {weights:<8}  {e['recorded_at']:<25}  {where}")


@policy_app.command("show")
def show_policy(
    version: int = typer.Argument(...), config: Optional[Path] = _CONFIG, state: Optional[Path] = _STATE, policy: Optional[str] = _POLICY,
) -> None:
    """Everything recorded about VERSION, as JSON."""
    from tracerl.orchestration.registry import RegistryError

    try:
        typer.echo(json.dumps(_registry(config, state, policy).get(version), indent=2))
    except RegistryError as exc:
        raise typer.BadParameter(str(exc), param_hint="VERSION") from None


@policy_app.command("pin")
def pin_policy(
    version: int = typer.Argument(..., help="The version whose weights to keep."),
    config: Optional[Path] = _CONFIG,
    state: Optional[Path] = _STATE,
    unpin: bool = typer.Option(False, "--unpin", help="Let keep_checkpoints prune it again."),
    policy: Optional[str] = _POLICY,
) -> None:
    """Keep VERSION's weights whatever keep_checkpoints says (a version you may roll back to); one JSON line."""
    from tracerl.orchestration.rounds.lock import RoundLocked, round_lock
    from tracerl.orchestration.registry import RegistryError

    folder = _state_of(config, state, policy)
    try:
        with round_lock(_root(config, state)):  # a round rewrites the registry too
            entry = _registry(None, folder).set_pinned(version, not unpin)
    except RoundLocked as exc:
        raise typer.Exit(_emit({"status": "locked", "reason": str(exc)})) from None
    except RegistryError as exc:
        raise typer.BadParameter(str(exc), param_hint="VERSION") from None
    typer.echo(json.dumps({"status": "pinned" if entry["pinned"] else "unpinned", "version": version, "checkpoint": entry["checkpoint"]}))


@policy_app.command("rollback")
def rollback_policy(
    version: int = typer.Argument(..., help="The version to serve again."),
    config: Optional[Path] = _CONFIG,
    state: Optional[Path] = _STATE,
    endpoint: list[str] = typer.Option([], "--endpoint", metavar="<url>", help="Publish here (repeatable; default: the config file's endpoints)."),
    endpoint_kind: str = typer.Option(BuiltinServer.kind, "--endpoint-kind"),
    policy: Optional[str] = _POLICY,
) -> None:
    """Publish VERSION's checkpoint again as a new version (so spans stay unambiguous); one JSON line.
    With several policies, --policy NAME rolls back that one's adapter; the others keep theirs."""
    from tracerl.orchestration.rounds.lock import RoundLocked, round_lock
    from tracerl.orchestration.registry import RegistryError
    from tracerl.orchestration.rounds.rollback import rollback
    from tracerl.orchestration.rounds.errors import RoundFailed

    folder = _state_of(config, state, policy)
    endpoints = tuple(Endpoint(url, endpoint_kind) for url in endpoint) or (load_config(config).endpoints if config else ())
    try:
        with round_lock(_root(config, state)):
            entry = rollback(folder, version, endpoints, policy)
    except RoundLocked as exc:
        raise typer.Exit(_emit({"status": "locked", "reason": str(exc)})) from None
    except RegistryError as exc:
        raise typer.Exit(_emit({"status": "config_error", "reason": str(exc)})) from None
    except RoundFailed as exc:
        raise typer.Exit(_emit({"status": exc.status, "reason": str(exc)})) from None
    typer.echo(json.dumps({"status": "rolled_back", **entry}))


def register(app: typer.Typer, train_group: typer.Typer) -> None:
    """Add ``run`` and ``loop`` to ``tracerl train`` and the ``policy`` group to ``app``."""
    train_group.command("run")(run)
    train_group.command("loop")(loop)
    app.add_typer(policy_app, name="policy")
