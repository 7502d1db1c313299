"""What the experiment trackers of ``--report-to`` (src/tracerl/trainer/trackers.py) stored, read back with each one's own reader.

Every tracker works locally, nothing reached over a network: :func:`tracker_env` is the environment a
command reporting to them runs in (MLflow's ``file:`` store, W&B offline, Trackio's folder), and a
reader per tracker gives back what it holds:

- TensorBoard: TensorBoard's ``EventAccumulator`` over the event files;
- MLflow: ``MlflowClient`` over the file store (parameters, metric history per step, artifacts);
- W&B: the offline run's ``.wandb`` file, its records parsed with W&B's own protobuf messages
  (the SDK no longer ships a reader: the file is LevelDB's log format, 32 KiB blocks of checksummed
  chunks, behind a 7-byte W&B header);
- Trackio: its ``Api`` and ``SQLiteStorage`` in a child process (Trackio fixes its folder at import).
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

HOW = "pip install -e '.[trackers]'"
"""What installs the trackers (the skip's message)."""


def tracker_env(folder: Path) -> dict[str, str]:
    """``os.environ`` with every tracker kept under ``folder``: MLflow in ``folder/mlruns``, W&B offline (its
    settings and caches there too), Trackio in ``folder/trackio``."""
    return {
        **os.environ,
        "MLFLOW_TRACKING_URI": (folder / "mlruns").resolve().as_uri(), "MLFLOW_ALLOW_FILE_STORE": "true",
        "WANDB_MODE": "offline", "WANDB_SILENT": "true", "WANDB_CONFIG_DIR": str(folder / "wandb-config"),
        "WANDB_CACHE_DIR": str(folder / "wandb-cache"), "WANDB_DATA_DIR": str(folder / "wandb-data"),
        "TRACKIO_DIR": str(folder / "trackio"), "COLUMNS": "400",
    }


# ---- TensorBoard ----


def tensorboard_run(logdir: Path) -> dict[str, Any]:
    """``{"scalars": {tag: [(step, value)]}, "images": {tag: [(step, png bytes)]}, "text": {tag: text}}`` of a run's folder."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    events = EventAccumulator(str(logdir), size_guidance={"scalars": 0, "images": 0, "tensors": 0})
    events.Reload()
    tags = events.Tags()
    return {
        "scalars": {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in tags["scalars"]},
        "images": {tag: [(e.step, e.encoded_image_string) for e in events.Images(tag)] for tag in tags["images"]},
        "text": {tag: tensor_util.make_ndarray(events.Tensors(tag)[-1].tensor_proto).item().decode() for tag in tags["tensors"]},
    }


# ---- MLflow ----


def mlflow_runs(store: Path) -> list[dict[str, Any]]:
    """Every run of the experiment ``tracerl`` in the file store ``store``: name, status, params, metric history, artifacts."""
    os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=store.resolve().as_uri())
    experiment = client.get_experiment_by_name("tracerl")
    runs = []
    for run in client.search_runs([experiment.experiment_id]):
        run_id = run.info.run_id
        runs.append({
            "id": run_id, "name": run.info.run_name, "status": run.info.status, "params": run.data.params,
            "metrics": {key: [(m.step, m.value) for m in client.get_metric_history(run_id, key)] for key in run.data.metrics},
            "artifacts": sorted(a.path for a in client.list_artifacts(run_id)),
        })
    return runs


# ---- W&B ----


def wandb_records(path: Path) -> list[Any]:
    """The records of a ``.wandb`` file, as W&B's ``Record`` messages."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    block, position, pending, records = 32768, 7, b"", []
    while position + 7 <= len(data):
        if block - position % block < 7:  # a block's tail too short for a chunk header is padding
            position += block - position % block
            continue
        _, length, kind = struct.unpack("<IHB", data[position : position + 7])
        if length == 0 and kind == 0:
            break
        pending += data[position + 7 : position + 7 + length]
        position += 7 + length
        if kind in (1, 4):  # a record whole, or the last chunk of one
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_runs(folder: Path) -> list[dict[str, Any]]:
    """The offline runs under ``folder`` (``folder/wandb/offline-run-*``), each one's id, name, config and history rows."""
    runs = []
    for run_dir in sorted((folder / "wandb").glob("offline-run-*")):
        (log,) = run_dir.glob("run-*.wandb")
        run: dict[str, Any] = {"dir": run_dir, "config": {}, "history": [], "files": []}
        for record in wandb_records(log):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run.update(id=record.run.run_id, name=record.run.display_name)
                run["config"].update({item.key: json.loads(item.value_json) for item in record.run.config.update})
            elif kind == "config":
                run["config"].update({item.key: json.loads(item.value_json) for item in record.config.update})
            elif kind == "history":
                run["history"].append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item})
            elif kind == "files":
                run["files"] += [f.path for f in record.files.files]
        runs.append(run)
    return runs


# ---- Trackio ----

_TRACKIO = """
import json, sys
from trackio.api import Api
from trackio.sqlite_storage import SQLiteStorage
project = sys.argv[1]
runs = []
for run in Api().runs(project):
    logs = SQLiteStorage.get_logs(project, run.name, run_id=run.id)
    runs.append({"name": run.name, "config": run.config, "logs": logs})
print(json.dumps(runs, default=str))
"""


def trackio_runs(trackio_dir: Path, project: str = "tracerl") -> list[dict[str, Any]]:
    """The runs of ``project`` in the Trackio folder ``trackio_dir``: name, config, logged rows (each with its ``step``)."""
    env = {**os.environ, "TRACKIO_DIR": str(trackio_dir)}
    done = subprocess.run([sys.executable, "-c", _TRACKIO, project], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
