"""One scheduled round: new episodes -> dataset -> train -> publish -> record -> report.

The state folder (``RoundConfig.state``)::

    STATE/lock                   held (flock) while a round or a rollback runs
    STATE/dataset/               the incremental dataset of every episode built so far
    STATE/rounds/vN/dataset/     round N's transitions: hard links to the dataset's files no version claimed yet
    STATE/policies/vN/           round N's checkpoint (tracerl_checkpoint.json inside)
    STATE/registry.json          the recorded versions (:mod:`tracerl.orchestration.registry`)
    STATE/metrics.jsonl          one row per trained version and per skipped round, derived from the registry
                                 (the row type the local loop writes too; the report's --runs)
    STATE/report.html            refreshed after each round
    STATE/trackers.json          with [train] report_to: each tracker's run id, continued by every round
    STATE/tensorboard/NAME/      with report_to tensorboard: its event files (NAME: the state folder's)

**Watermark.** An episode is built once: the incremental build skips episodes already in
``STATE/dataset`` (the pipeline's own watermark). A round trains on the dataset files that
no recorded version claims, and recording a version claims them. So no episode is trained
on by two versions, and an episode built by a round that then died is trained by the next.

**Crash safety.** Every step ends in one atomic rename, and a run starts from whatever the
last one left, under the lock:

- no ``rounds/vN``: build, then plan round N (the unclaimed files, linked into a hidden
  folder renamed into place). Killed while building: the files written are unclaimed and
  the next round takes them;
- ``rounds/vN`` but no ``policies/vN``: train (again) on exactly that plan. The checkpoint
  is renamed into place whole, so killed while training or saving, there is none;
- ``policies/vN`` exists: never trained again (it may already be served as version N), only
  published: publishing the same checkpoint as the same version again is harmless;
- recorded: the registry's rename claims the files; ``metrics.jsonl`` and the report are
  derived, rewritten by the next round if this one dies before them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


from tracerl.orchestration.phases import PhaseClock
from tracerl.pipeline.build_output import MANIFEST
from tracerl.schemas.dataset_folder import DatasetFolder, episodes_of, index_of, transition_files
from tracerl.schemas import attributes as A
from tracerl.core.storage import fsync_dir, write_atomic
from tracerl.orchestration.rounds.config import RoundConfig
from tracerl.orchestration.rounds.errors import RoundFailed, RoundStopped
from tracerl.orchestration.rounds.gate import gate
from tracerl.orchestration.release import release
from tracerl.orchestration.registry import REGISTRY_FILE, PolicyRegistry, VersionEntry
from tracerl.orchestration.round_record import metrics_row, skip_row, trained_entry
from tracerl.trainer.publish import PublishError
from tracerl.trainer.trackers import RECORD_FILE, TrackerError, TrackerRun, open_trackers
from tracerl.trainer.training.checkpoint import CHECKPOINT_MANIFEST_FILE


@dataclass(frozen=True)
class StateFolder:
    root: Path
    shared_dataset: Path | None = None  # several policies: each has STATE/NAME, all share STATE/dataset

    @property
    def dataset(self) -> Path:
        return self.shared_dataset or self.root / "dataset"

    def round_dataset(self, version: int) -> Path:
        return self.root / "rounds" / f"v{version:04d}" / "dataset"

    def checkpoint(self, version: int) -> Path:
        return self.root / "policies" / f"v{version:04d}"

    @property
    def metrics(self) -> Path:
        return self.root / A.RUN_METRICS_FILE

    @property
    def report(self) -> Path:
        return self.root / "report.html"

    def remove_partials(self) -> None:
        """What killed jobs leave half-written: hidden folders and files beside their final names (the files'
        named by ``tracerl.core.storage.temporary_name``: ``.NAME.<unique>.tmp``)."""
        files = [f".{name}.*.tmp" for name in (REGISTRY_FILE, self.metrics.name, self.report.name)]
        for pattern in ("dataset/.duckdb-*", "dataset/.*.tmp", "rounds/*/.*.partial", "policies/.*.tmp-*", "policies/.*.old-*",
                        f"policies/*/.{CHECKPOINT_MANIFEST_FILE}.*.tmp", *files):
            for path in self.root.glob(pattern):
                shutil.rmtree(path) if path.is_dir() else path.unlink()


@dataclass
class RoundSummary:
    """The one JSON line a scheduler reads (``status`` and the exit code in src/tracerl/orchestration/rounds/cli.py)."""

    status: str = "idle"
    version: int | None = None
    parent: int | None = None
    reason: str | None = None
    resumed: str | None = None  # the phase a run continued an unfinished round from
    episodes: int = 0
    transitions: int = 0
    checkpoint: str | None = None
    metrics: dict[str, Any] | None = None
    published: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # per phase
    gate: dict[str, Any] | None = None  # the gate's scores and decision, when there is an eval command

    policies: dict[str, dict[str, Any]] | None = None  # several policies: each one's summary

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None and v != [] and v != {}}


# a round of several policies reports the most serious of their statuses
_SEVERITY = ("idle", "skipped", "trained", "held", "report_failed", "publish_failed", "failed")


def ensure_base(registry: PolicyRegistry, config: RoundConfig) -> dict[str, Any]:
    """The registry's newest version, recording the starting policy as the first one if it is empty."""
    latest = registry.latest()
    if latest is None:
        latest = registry.append(VersionEntry(config.base_version, "base", None, str(config.model.resolve())))
    return latest


def run_round(config: RoundConfig, *, on_phase: Callable[[str], None] = lambda phase: None,
              should_stop: Callable[[], bool] = lambda: False) -> RoundSummary:
    """Run (or finish) one round; the caller holds the state folder's lock.

    With ``config.policies``, the new spans are built once (``STATE/dataset``) and each
    policy then runs its round in ``STATE/NAME`` on its own rows: its plan, training,
    publish (its adapter, by its name), registry and metrics. One policy's failure is its
    own: the others go on, and the summary holds each one's, its status the most serious.
    """
    figures: dict[str, Any] = {}  # the report's, from the round's build (none when it resumed past it)
    on_analysis = None
    if config.report:
        from tracerl.pipeline.report import analysis_figures

        def on_analysis(analysis: Any) -> None:
            figures.update(analysis_figures(analysis))

    rows: dict[str | None, tuple[int, dict[str, Any]]] = {}  # policy (None: the only one) -> the version it made, its metrics row
    if not config.policies:
        state = StateFolder(config.state)
        summary = policy_round(config, state, None, on_phase, should_stop, on_analysis, on_row=lambda v, row: rows.update({None: (v, row)}))
        try:
            _report(config, state, summary, on_phase, should_stop, figures)
        finally:
            _track(config, rows, state.report, on_phase)
        return summary
    from tracerl.pipeline import build_dataset

    root = StateFolder(config.state)
    root.remove_partials()
    summary = RoundSummary(policies={})
    clock = _phase_clock(summary, on_phase, should_stop)
    with clock("build"):
        build_dataset(config.spans, root.dataset, on_analysis=on_analysis, **_build_options(config))
    for name in config.policies:
        try:
            one = policy_round(config, StateFolder(config.state / name, root.dataset), name, lambda phase: on_phase(f"{name}: {phase}"), should_stop,
                               on_row=lambda v, row, name=name: rows.update({name: (v, row)}))
            summary.policies[name] = one.as_dict()
        except RoundFailed as exc:
            summary.policies[name] = {"status": exc.status, "reason": str(exc)}
    summary.status = max((p["status"] for p in summary.policies.values()), key=_SEVERITY.index)
    try:
        _report(config, root, summary, on_phase, should_stop, figures)
    finally:
        _track(config, rows, root.report, on_phase)
    return summary


def _track(config: RoundConfig, rows: dict[str | None, tuple[int, dict[str, Any]]], report: Path, on_phase: Callable[[str], None]) -> None:
    """The round's metrics rows to ``[train] report_to``'s trackers, and the report refreshed by it: the row at step = the
    version it made (several policies: their rows as ``policies/NAME/...``, at the newest of their versions). Opened only
    by a round that made a version (an idle one every minute opens nothing), continuing the run ``STATE/trackers.json``
    names: one run across the rounds' processes, the config logged by the first. A tracker never fails the round."""
    if not config.train.report_to or not rows:
        return
    step = max(version for version, _ in rows.values())
    row = rows[None][1] if None in rows else {"policies": {name: r for name, (_, r) in rows.items()}}
    warn = lambda text: on_phase(f"warning: {text}")  # noqa: E731
    run = TrackerRun(config.state.name, config.state, config.state / RECORD_FILE, resume=True)
    try:
        trackers = open_trackers(config.train.report_to, run, dataclasses.asdict(config), warn=warn)
    except TrackerError as exc:  # checked when the options were read; installed away since
        warn(str(exc))
        return
    with trackers:
        trackers.log(row, step)
        if config.report and report.exists():
            trackers.log_artifact(report, step)


def _report(config: RoundConfig, state: StateFolder, summary: RoundSummary, on_phase: Callable[[str], None],
            should_stop: Callable[[], bool], figures: dict[str, Any]) -> None:
    """Refresh STATE/report.html after a round that made a version (a failed report is said, not fatal), from
    ``figures``, the round's build's; a round that resumed past its build analyzes the spans for it."""
    trained = summary.status in ("trained", "held") or any(p["status"] in ("trained", "held") for p in (summary.policies or {}).values())
    if not (config.report and trained):
        return
    clock = _phase_clock(summary, on_phase, should_stop)
    with clock("report"):
        try:
            from tracerl.pipeline.report import write_report

            runs = None if config.policies else state.metrics  # several policies: metrics.jsonl in each one's folder
            write_report(config.spans, state.report, runs=runs, options=config.build, figures=figures or None)
        except Exception as exc:  # the round is recorded; a report that failed is said, not fatal
            raise RoundFailed("report_failed", f"round {summary.version} is recorded, but the report failed: {type(exc).__name__}: {exc}") from exc


def policy_round(config: RoundConfig, state: StateFolder, policy: str | None, on_phase: Callable[[str], None],
                 should_stop: Callable[[], bool], on_analysis: Callable[[Any], None] | None = None,
                 on_row: Callable[[int, dict[str, Any]], None] | None = None) -> RoundSummary:
    """One policy's round in ``state`` (``policy`` None: the only one, which builds the dataset itself, giving
    ``on_analysis`` its analysis); ``on_row`` gets the version it recorded and its ``metrics.jsonl`` row."""
    from tracerl.pipeline import build_dataset

    state.remove_partials()
    registry = PolicyRegistry(state.root)
    version = ensure_base(registry, config)["version"] + 1
    parent = registry.current()
    assert parent is not None  # the base version is never held back
    summary = RoundSummary(version=version, parent=parent["version"])
    clock = _phase_clock(summary, on_phase, should_stop)

    plan = state.round_dataset(version)
    checkpoint = state.checkpoint(version)
    if plan.exists():
        summary.resumed = "publish" if checkpoint.exists() else "train"
    else:
        with clock("build" if policy is None else "plan"):
            if policy is None:
                build_dataset(config.spans, state.dataset, on_analysis=on_analysis, **_build_options(config))
            claimed = registry.claimed_files()
            files = [f for f in transition_files(state.dataset) if f.name not in claimed]
            episodes = episodes_of(index_of(files), policy)
            if len(episodes) < config.min_episodes:
                summary.status, summary.version, summary.episodes = "idle", None, len(episodes)
                summary.reason = (f"{len(episodes)} new episode(s) since version {parent['version']}, "
                                  f"fewer than min_episodes {config.min_episodes}")
                return summary
            _link_plan(files, state.dataset, plan)
    planned = DatasetFolder(plan)  # its rows' index read once, for the episodes and the count
    episodes = planned.episodes(policy)
    summary.episodes, summary.transitions = len(episodes), planned.rows(policy)

    if not checkpoint.exists():
        from tracerl.trainer.training.dataset import DatasetError, EmptyDatasetError
        from tracerl.trainer.training.run import train_checkpoint

        with clock("train"):
            try:
                train_checkpoint(
                    plan, Path(parent["checkpoint"]), checkpoint, backend=config.backend, config=config.train,
                    options=config.chosen_backend_options, max_policy_lag=config.max_policy_lag,
                    version=version, on_saving=lambda: clock.mark("checkpoint"), policy=policy,
                )
            except EmptyDatasetError as exc:  # no row to train on (too stale, empty responses): never a blocker;
                # set the files aside, record why, go on
                registry.record_skip(version, [f.name for f in planned.files()], len(episodes), str(exc))
                shutil.rmtree(plan)
                write_metrics(registry, state.metrics)
                summary.status, summary.version, summary.reason = "skipped", None, f"round {version} skipped: {exc}"
                return summary
            except DatasetError as exc:
                raise RoundFailed("failed", f"round {version} cannot train on {plan}: {exc}") from exc
    summary.checkpoint = str(checkpoint)
    decision = None
    if config.eval_command:
        with clock("gate"):
            decision = summary.gate = gate(config.eval_command, config.gate_margin, checkpoint, parent, policy)
    entry = trained_entry(checkpoint, version, parent["version"], planned, policy, seconds=summary.seconds, gate=decision)
    summary.metrics = entry.metrics
    held = bool(decision and decision["held"])
    try:
        recorded = release(registry, entry, () if held else [e.target(policy) for e in config.endpoints],
                           keep=config.keep_checkpoints, clock=clock)
    except PublishError as exc:
        raise RoundFailed("publish_failed", f"version {version} ({checkpoint}) not published: {exc}") from exc
    summary.published = recorded["published"]
    rows = write_metrics(registry, state.metrics)
    summary.status = "held" if held else "trained"
    if on_row:
        on_row(version, next(r for r in rows if r["round"] == version and not r.get(A.RUN_METRICS_SET_ASIDE)))
    return summary


def write_metrics(registry: PolicyRegistry, path: Path) -> list[dict[str, Any]]:
    """``metrics.jsonl`` (what ``tracerl report --runs`` shows), derived from the registry: one row per trained
    version (round = its version), then one per round set aside (``set_aside``: true, its reason); whole or not
    at all. Returns the rows."""
    rows = [{"round": entry["version"], **metrics_row(entry)} for entry in registry.entries() if entry["kind"] == "trained"]
    rows += [{"round": r["round"], A.RUN_METRICS_SET_ASIDE: True, **skip_row(r), "at": r["at"]} for r in registry.skipped()]
    write_atomic(path, "".join(json.dumps(row) + "\n" for row in rows))
    return rows


def _phase_clock(summary: RoundSummary, on_phase: Callable[[str], None], should_stop: Callable[[], bool]) -> PhaseClock:
    """Times each phase into the summary, tells ``on_phase``, and stops between phases when asked."""

    def check(name: str) -> None:
        if should_stop():
            raise RoundStopped(f"stopped before {name} of round {summary.version}")

    return PhaseClock(summary.seconds, on_phase, check)


def _build_options(config: RoundConfig) -> dict[str, Any]:
    return {f: getattr(config.build, f) for f in config.build.__dataclass_fields__}


def _link_plan(files: list[Path], dataset: Path, plan: Path) -> None:
    """Round N's dataset folder (hard links to ``files`` and the build's manifest), appearing whole."""
    partial = plan.with_name(f".{plan.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for path in [*files, dataset / MANIFEST]:
        try:
            os.link(path, partial / path.name)
        except OSError:  # another filesystem: copy
            shutil.copy2(path, partial / path.name)
    fsync_dir(partial)
    os.replace(partial, plan)
    fsync_dir(plan.parent)

