"""Several processes for real: `torchrun --nproc_per_node 2` and `deepspeed --num_gpus 2` (gloo on
CPU) each train one round of the OpenRLHF backend, and the checkpoint is the one-process checkpoint
(data parallelism splits each minibatch over the ranks; the gradients averaged are the whole
minibatch's). Rank 0 alone writes and publishes: the server's version advances once."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch
from safetensors.torch import load_file

from tracerl.core.net import free_port
from tracerl.trainer.serving.app import running_server
from tracerl_testing.installed import require_openrlhf
from tracerl_testing.processes import lone_process_env

require_openrlhf()

pytestmark = pytest.mark.slow

ROWS = [([10, 11, 12, 13], [40, 41], 1.0), ([10, 11, 12, 14], [50, 51, 52], -1.0), ([10, 12, 13], [60], 0.5), ([11, 12, 13], [70, 71], -0.5)] * 2


def _train_command(launcher: list[str], dataset: Path, model: Path, out: Path, extra: list[str] = ()) -> list[str]:
    return [*launcher, "train", "--backend", "openrlhf", "--dataset", str(dataset), "--model", str(model), "--out", str(out),
            "--lr", "1e-2", "--epochs", "2", "--minibatch-size", "4", "--zero-stage", "2", *extra]


def _run(command: list[str]) -> subprocess.CompletedProcess:
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, env=lone_process_env(OMP_NUM_THREADS="1"))
    assert done.returncode == 0, done.stderr[-4000:]
    return done


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(next(folder.glob("*.safetensors")))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory, write_dataset):
    rows = [{"prompt_token_ids": p, "response_token_ids": r, "response_logprobs": None, "advantage": a} for p, r, a in ROWS]
    return write_dataset(tmp_path_factory.mktemp("ds") / "ds", rows)


def _launcher(name: str) -> list[str]:
    """The command that starts ``python -m tracerl`` in 2 processes, as src/tracerl/trainer/README.md gives it."""
    bin_dir = str(Path(sys.executable).parent)
    if name == "torchrun":
        return [shutil.which("torchrun", path=bin_dir), "--nproc_per_node", "2", "--master_port", str(free_port()), "-m", "tracerl"]
    # the deepspeed launcher passes --local_rank=N first, before the command; `tracerl` sets it aside
    return [shutil.which("deepspeed", path=bin_dir), "--num_gpus", "2", "--master_port", str(free_port()), "--module", "tracerl"]


@pytest.fixture(scope="module")
def one_process(tiny_checkpoint, tmp_path_factory, dataset):
    out = tmp_path_factory.mktemp("one")
    done = _run(_train_command([sys.executable, "-m", "tracerl"], dataset, tiny_checkpoint, out / "ckpt"))
    return json.loads(done.stdout.splitlines()[-1]), _weights(out / "ckpt")


@pytest.mark.parametrize("launcher", ["torchrun", "deepspeed"])
def test_two_processes_train_the_one_process_checkpoint_and_publish_once(launcher, tiny_checkpoint, one_process, dataset, tmp_path):
    single, theirs = one_process
    with running_server(tiny_checkpoint) as server:
        two = _run(_train_command(_launcher(launcher), dataset, tiny_checkpoint, tmp_path / "two", ["--server", server.base_url]))
        lines = [json.loads(line) for line in two.stdout.splitlines() if line.startswith("{")]
        assert len(lines) == 1 and lines[0]["policy_version"] == 1 and lines[0]["world_size"] == 2  # rank 0 alone speaks and publishes
        assert httpx.get(f"{server.base_url.removesuffix('/v1')}/health").json()["policy_version"] == 1
    assert single["steps"] == lines[0]["steps"] == 4 and single["tokens"] == lines[0]["tokens"]
    assert lines[0]["loss"] == pytest.approx(single["loss"], abs=1e-5)
    ours = _weights(tmp_path / "two")
    assert theirs.keys() == ours.keys()
    # Two processes sum the gradients in another order: Adam normalises each element's step, so an
    # element whose gradient is ~0 can move by up to ~1e-4 apart (measured: 1 element in 32,768 at
    # 6.7e-5, mean difference 3e-8, with transformers 5.24); a wrong all-reduce would be off everywhere.
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], atol=2e-4, rtol=1e-4, msg=name)
        assert (ours[name].float() - theirs[name].float()).abs().mean() < 1e-6, name
