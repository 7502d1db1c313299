"""Experiment trackers: ``--report-to mlflow,tensorboard,wandb,trackio``, as Hugging Face's Trainer ``report_to``.

Every driver of training rounds (the local loop, scheduled rounds, ``tracerl train``) reports
through :func:`open_trackers`: the run's config once at start, each round's metrics row (the
dict it writes to ``metrics.jsonl``: rewards, losses, phase seconds, the policy version) with
step = the round, and the files a tracker can show (the loop's reward curve, a round's report).

One small protocol, :class:`Tracker` (``start(config)``, ``log(row, step)``,
``log_artifact(path, step)``, ``finish()``), one class per tracker, looked up by name in
:data:`TRACKERS`, as OpenTelemetry's exporters and Hugging Face's integrations are. Names are
checked when the option is read (an unknown one names the known ones); a tracker whose package
is not installed is refused before anything starts, saying what to ``pip install``; a tracker
that fails once running (a server gone, a disk full) is dropped with a warning: training never
stops for a tracker. Each tracker reads its usual environment (``MLFLOW_TRACKING_URI``,
``WANDB_MODE``, ``TRACKIO_DIR``, ...), so a team's settings apply unchanged.

Kept free of the trackers' packages at import (each is imported by its own tracker when it starts),
so that the options of every command can name the trackers without loading any.
"""

from __future__ import annotations

import contextlib
import json
import os
import struct
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from tracerl.schemas import environment as E

EXTRA = "trackers"  # pyproject.toml's optional dependencies that install them all
NONE, ALL = "none", "all"  # Hugging Face's report_to: no tracker; every tracker whose package is installed
RECORD_FILE = "trackers.json"  # in a run's folder: each tracker's run id, so that the next process of the run continues it


class TrackerError(ValueError):
    """A tracker cannot start (its package is missing, its store cannot be reached as configured); the message says what to do."""


class Tracker(Protocol):
    """One tracker of one run. Any method may raise: :class:`Trackers` drops a tracker that does, with a warning."""

    name: ClassVar[str]
    module: ClassVar[str]  # what it imports: its package is installed when this module is found
    package: ClassVar[str]  # what to pip install for it

    def start(self, config: dict[str, Any]) -> None:
        """Open (or, for a run that continues, reopen) the run; ``config`` is logged once, when the run is new."""

    def log(self, row: dict[str, float], step: int) -> None:
        """A round's numbers (nested fields flattened to ``a/b``), at ``step``."""

    def log_artifact(self, path: Path, step: int | None = None) -> None:
        """A file of the run: a PNG as an image at ``step`` where the tracker shows images, other files where it keeps files."""

    def finish(self) -> None:
        """Close the run (flush what is buffered)."""


@dataclass
class TrackerRun:
    """What the trackers of one run share.

    ``name``: the run's name in every tracker. ``folder``: where trackers that write local files write them
    (``FOLDER/tensorboard/NAME``, ``FOLDER/wandb``). ``record``: a JSON file of each tracker's run id, written at
    start; with ``resume``, the runs it holds are continued (a scheduled round is one process per round: one run
    across them).
    """

    name: str
    folder: Path
    record: Path | None = None
    resume: bool = False
    ids: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.resume and self.record and self.record.is_file():
            try:
                self.ids = json.loads(self.record.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                self.ids = {}

    def resumed(self, tracker: str) -> Any:
        """The id ``tracker`` recorded for this run (None: a new run)."""
        return self.ids.get(tracker) if self.resume else None

    def remember(self, tracker: str, run_id: Any) -> None:
        self.ids[tracker] = run_id

    def save(self) -> None:
        if self.record is not None and self.ids:
            from tracerl.core.storage import write_atomic

            self.record.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.record, json.dumps(self.ids, indent=2) + "\n")


def scalars(row: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """The numbers of a metrics row: nested dicts (a round's ``policies``) flattened to ``policies/NAME/field``,
    booleans as 0/1; text, lists and None left out."""
    numbers: dict[str, float] = {}
    for key, value in row.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            numbers.update(scalars(value, f"{name}/"))
        elif isinstance(value, bool):
            numbers[name] = int(value)
        elif isinstance(value, (int, float)):
            numbers[name] = value
    return numbers


def plain_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` as JSON values (paths as text, tuples as lists), what every tracker stores."""
    return json.loads(json.dumps(config, default=str))


def flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested config as ``a.b`` -> text (MLflow's parameters are flat strings)."""
    flat: dict[str, str] = {}
    for key, value in config.items():
        if isinstance(value, dict) and value:
            flat.update(flat_config(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value if isinstance(value, str) else json.dumps(value)
    return flat


def _importable(module: str) -> bool:
    """Whether ``module`` is installed (found, not imported)."""
    import importlib.util

    return importlib.util.find_spec(module) is not None


def png_size(path: Path) -> tuple[int, int] | None:
    """(width, height) of a PNG file, from its header; None when it is not one."""
    with open(path, "rb") as handle:
        head = handle.read(24)
    if head[:8] != b"\x89PNG\r\n\x1a\n" or head[12:16] != b"IHDR":
        return None
    return struct.unpack(">II", head[16:24])


# ---- the trackers ------------------------------------------------------------------------------


class TensorBoardTracker:
    """Event files in ``FOLDER/tensorboard/NAME`` (``tensorboard --logdir FOLDER/tensorboard``): scalars per step,
    the config as text, PNGs as images. Written with TensorBoard's own event writer (no TensorFlow, no torch);
    a run that continues appends a new event file to the same folder, which TensorBoard reads as one run."""

    name = "tensorboard"
    module = "tensorboard"
    package = "tensorboard"

    def __init__(self, run: TrackerRun) -> None:
        self.run = run
        self.logdir = run.folder / "tensorboard" / run.name
        self.writer: Any = None

    def start(self, config: dict[str, Any]) -> None:
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self.logdir.mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(self.logdir))
        if not self.run.resumed(self.name):
            from tensorboard.plugins.text.summary_v2 import text_pb

            text = "```json\n" + json.dumps(config, indent=2) + "\n```"  # the text plugin renders markdown
            self._write(text_pb("config", text), 0)
        self.run.remember(self.name, str(self.logdir))

    def _write(self, summary: Any, step: int) -> None:
        from tensorboard.compat.proto.event_pb2 import Event

        self.writer.add_event(Event(wall_time=time.time(), step=step, summary=summary))

    def log(self, row: dict[str, float], step: int) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        self._write(Summary(value=[Summary.Value(tag=k, simple_value=float(v)) for k, v in row.items()]), step)
        self.writer.flush()

    def log_artifact(self, path: Path, step: int | None = None) -> None:
        from tensorboard.compat.proto.summary_pb2 import Summary

        size = png_size(path)
        if size is None:  # TensorBoard keeps no files
            return
        image = Summary.Image(width=size[0], height=size[1], colorspace=4, encoded_image_string=path.read_bytes())
        self._write(Summary(value=[Summary.Value(tag=path.stem, image=image)]), step or 0)
        self.writer.flush()

    def finish(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _mlflow_key(key: str) -> str:
    """``key`` in the characters MLflow takes in a name (a reward or policy name of the user's may hold others)."""
    import re

    return re.sub(r"[^\w\-. :/]", "_", key)


class MLflowTracker:
    """A run of the experiment ``MLFLOW_EXPERIMENT_NAME`` (default tracerl) in the store ``MLFLOW_TRACKING_URI`` names
    (a tracking server, ``sqlite:///mlflow.db``, a ``file:`` store): the config as parameters, each row's numbers as
    metrics at the step, files as artifacts. ``MLFLOW_RUN_ID`` logs into that run."""

    name = "mlflow"
    module = "mlflow"
    package = "mlflow-skinny"

    def __init__(self, run: TrackerRun) -> None:
        self.run = run
        self.client: Any = None
        self.run_id: str | None = None

    @staticmethod
    def check() -> None:
        """MLflow's default store (no ``MLFLOW_TRACKING_URI``) is a SQLite file, which needs the full ``mlflow`` package."""
        from importlib.metadata import PackageNotFoundError, distribution

        uri = os.environ.get(E.MLFLOW_TRACKING_URI_ENV, "")
        if uri.startswith("sqlite:") or not uri:
            try:
                distribution("mlflow")  # the full package (the store, its SQLAlchemy and Alembic), not mlflow-skinny alone
            except PackageNotFoundError:
                raise TrackerError(
                    "--report-to mlflow: set MLFLOW_TRACKING_URI to your tracking server (http://HOST:5000), or, for a local store, "
                    "pip install mlflow (its default store, sqlite:///mlflow.db, needs the full package)"
                ) from None

    def start(self, config: dict[str, Any]) -> None:
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.client = MlflowClient()
        self.run_id = os.environ.get(E.MLFLOW_RUN_ID_ENV) or self.run.resumed(self.name)
        if self.run_id:
            self.client.update_run(self.run_id, status="RUNNING")
        else:
            experiment_name = os.environ.get(E.MLFLOW_EXPERIMENT_NAME_ENV, "tracerl")
            experiment = self.client.get_experiment_by_name(experiment_name)
            experiment_id = experiment.experiment_id if experiment else self.client.create_experiment(experiment_name)
            self.run_id = self.client.create_run(experiment_id, run_name=self.run.name).info.run_id
            params = [Param(_mlflow_key(k), v[:6000]) for k, v in flat_config(config).items()]  # MLflow's longest parameter value
            for i in range(0, len(params), 100):  # its most per batch
                self.client.log_batch(self.run_id, params=params[i : i + 100])
        self.run.remember(self.name, self.run_id)

    def log(self, row: dict[str, float], step: int) -> None:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(_mlflow_key(k), float(v), now, step) for k, v in row.items()]
        for i in range(0, len(metrics), 1000):
            self.client.log_batch(self.run_id, metrics=metrics[i : i + 1000])

    def log_artifact(self, path: Path, step: int | None = None) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def finish(self) -> None:
        if self.client is not None and self.run_id:
            self.client.set_terminated(self.run_id)


class WandbTracker:
    """A run of the project ``WANDB_PROJECT`` (default tracerl), its files under ``FOLDER/wandb`` (``WANDB_DIR``
    moves them); ``WANDB_MODE=offline`` keeps it local for ``wandb sync``. The config once, each row at its step,
    PNGs as ``wandb.Image`` at the step, other files saved with the run. The process's own output is not captured."""

    name = "wandb"
    module = "wandb"
    package = "wandb"

    def __init__(self, run: TrackerRun) -> None:
        self.run = run
        self.wandb_run: Any = None

    def start(self, config: dict[str, Any]) -> None:
        import wandb

        resumed = self.run.resumed(self.name)
        folder = Path(os.environ.get(E.WANDB_DIR_ENV) or self.run.folder)
        folder.mkdir(parents=True, exist_ok=True)
        self.wandb_run = wandb.init(
            project=os.environ.get(E.WANDB_PROJECT_ENV, "tracerl"), name=self.run.name, dir=str(folder), id=resumed,
            resume="allow" if resumed else None, config=None if resumed else config, reinit="create_new",
            settings=wandb.Settings(console="off", silent=True),
        )
        self.run.remember(self.name, self.wandb_run.id)

    def log(self, row: dict[str, float], step: int) -> None:
        self.wandb_run.log(row, step=step)

    def log_artifact(self, path: Path, step: int | None = None) -> None:
        import wandb

        if png_size(path) is not None:
            self.wandb_run.log({path.stem: wandb.Image(str(path))}, step=step)
        else:
            self.wandb_run.save(str(path), base_path=str(path.parent), policy="now")

    def finish(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()


class TrackioTracker:
    """A run of the project ``TRACKIO_PROJECT`` (default tracerl), stored where Trackio stores (``TRACKIO_DIR``, a
    Space with ``TRACKIO_SPACE_ID``): the config once, each row at its step, PNGs as ``trackio.Image``, other files
    as artifacts. A run that continues is resumed by its name."""

    name = "trackio"
    module = "trackio"
    package = "trackio"

    def __init__(self, run: TrackerRun) -> None:
        self.run = run
        self.trackio_run: Any = None

    def start(self, config: dict[str, Any]) -> None:
        import trackio

        resumed = self.run.resumed(self.name)
        self.trackio_run = trackio.init(
            project=os.environ.get(E.TRACKIO_PROJECT_ENV, "tracerl"), name=resumed or self.run.name, config=None if resumed else config,
            resume="allow" if resumed else "never", embed=False,
        )
        self.run.remember(self.name, self.trackio_run.name)

    def log(self, row: dict[str, float], step: int) -> None:
        self.trackio_run.log(row, step=step)

    def log_artifact(self, path: Path, step: int | None = None) -> None:
        import trackio

        if png_size(path) is not None:
            self.trackio_run.log({path.stem: trackio.Image(str(path))}, step=step)
        else:
            self.trackio_run.log_artifact(str(path))

    def finish(self) -> None:
        if self.trackio_run is not None:
            import trackio

            trackio.finish()  # the current run, ours (init made it so); Run.finish alone leaves it current, finished again at exit


TRACKERS: dict[str, type] = {t.name: t for t in (MLflowTracker, TensorBoardTracker, TrackioTracker, WandbTracker)}


def known_names() -> str:
    return f"{', '.join(TRACKERS)}, {ALL} (every one installed) or {NONE}"


def parse_report_to(value: str | Iterable[str] | None) -> tuple[str, ...]:
    """``--report-to``'s value (``"mlflow,tensorboard"``, or a list of names, as a TOML file gives) as names;
    ``none`` (or nothing) is ``()``. Raises ``ValueError`` naming the known ones for a name that is not one."""
    if value is None:
        return ()
    parts = value.split(",") if isinstance(value, str) else [p for item in value for p in str(item).split(",")]
    names = tuple(dict.fromkeys(p.strip().lower() for p in parts if p.strip()))
    unknown = [n for n in names if n not in TRACKERS and n not in (NONE, ALL)]
    if unknown:
        raise ValueError(f"unknown tracker(s) {', '.join(map(repr, unknown))}: use {known_names()}")
    if (NONE in names or ALL in names) and len(names) > 1:
        raise ValueError(f"{NONE!r} and {ALL!r} stand alone: use one of them, or names of trackers ({', '.join(TRACKERS)})")
    return () if names == (NONE,) else names


def resolve(names: Iterable[str]) -> tuple[str, ...]:
    """``all`` as the trackers whose package is installed; other names as given."""
    names = tuple(names)
    if names == (ALL,):
        return tuple(name for name, cls in TRACKERS.items() if _importable(cls.module))
    return names


def check_trackers(names: Iterable[str], warn: Callable[[str], None] | None = None) -> tuple[str, ...]:
    """The trackers ``names`` asks for, each one's package checked (nothing imported); raises :class:`TrackerError`
    saying what to install for one that is missing, or what to set for one that cannot start as configured.
    With ``all``, those that cannot start as configured are left out instead (``warn`` says why)."""
    every = tuple(names) == (ALL,)
    names = resolve(names)
    missing = [TRACKERS[n] for n in names if not _importable(TRACKERS[n].module)]
    if missing:
        packages = " ".join(cls.package for cls in missing)
        raise TrackerError(
            f"--report-to {','.join(cls.name for cls in missing)}: {packages} not installed: "
            f"pip install 'tracerl[{EXTRA}]' (or pip install {packages})"
        )
    kept = []
    for name in names:
        try:
            getattr(TRACKERS[name], "check", lambda: None)()
        except TrackerError as exc:
            if not every:
                raise
            if warn:
                warn(f"{exc}; --report-to all goes on without it")
            continue
        kept.append(name)
    return tuple(kept)


def _warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr, flush=True)


class Trackers:
    """The trackers of one run, as one: each call goes to every tracker still running; one that raises is
    finished as far as it can be and dropped with a warning, the others go on. Their output goes to stderr
    (a command's stdout is its JSON line)."""

    def __init__(self, trackers: list[Any], run: TrackerRun, warn: Callable[[str], None] = _warn) -> None:
        self.trackers, self.run, self.warn = trackers, run, warn

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.trackers)

    def __bool__(self) -> bool:
        return bool(self.trackers)

    def _each(self, method: str, *args: Any) -> None:
        for tracker in list(self.trackers):
            try:
                with contextlib.redirect_stdout(sys.stderr):
                    getattr(tracker, method)(*args)
            except Exception as exc:  # noqa: BLE001 - training never stops for a tracker
                self.trackers.remove(tracker)
                self.warn(f"the {tracker.name} tracker failed ({method}: {type(exc).__name__}: {exc}); the run goes on without it")
                if method != "finish":
                    with contextlib.suppress(Exception), contextlib.redirect_stdout(sys.stderr):
                        tracker.finish()

    def start(self, config: dict[str, Any]) -> None:
        self._each("start", plain_config(config))
        with contextlib.suppress(OSError):
            self.run.save()

    def log(self, row: dict[str, Any], step: int) -> None:
        """A metrics row's numbers at ``step`` (the round)."""
        if self.trackers:
            self._each("log", scalars(row), int(step))

    def log_artifact(self, path: Path, step: int | None = None) -> None:
        if self.trackers and Path(path).is_file():
            self._each("log_artifact", Path(path), step)

    def finish(self) -> None:
        self._each("finish")
        self.trackers = []

    def __enter__(self) -> Trackers:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


def open_trackers(names: Iterable[str], run: TrackerRun, config: dict[str, Any], warn: Callable[[str], None] = _warn) -> Trackers:
    """Start the trackers ``names`` (``--report-to``'s) for ``run``, logging ``config`` once.

    Raises :class:`TrackerError` before any starts when one's package is missing; one that then fails to
    start is dropped with a warning, as any that fails later."""
    trackers = Trackers([TRACKERS[name](run) for name in check_trackers(names, warn)], run, warn)
    if trackers:
        trackers.start(config)
    return trackers
