"""Where training runs and how processes find each other: the one place that names a device.

Every backend asks here instead of writing ``"cuda"`` or ``"cpu"`` itself, so that the same
code trains on a laptop's CPU, one GPU, or many GPUs under ``torchrun`` / ``deepspeed``:

- :func:`launch_environment` reads (and completes) the rendezvous variables a launcher set;
  a lone process becomes rank 0 of 1 on loopback, its rendezvous store on ``MASTER_PORT=0``:
  the port the OS gives as the store binds. (A free port looked up first and bound later can
  be taken in between: by another training starting beside it, or by a child process that
  inherited the variables while this one's store still holds the port.) DeepSpeed and OpenRLHF call
  ``torch.cuda.set_device(LOCAL_RANK)`` with CUDA, so a lone GPU process must be local rank 0,
  and a lone CPU process local rank -1 (OpenRLHF then never touches ``torch.cuda``).
- :func:`training_device` is that rank's device; :func:`default_dtype` bf16 with CUDA, fp32
  without (CPUs have no fast half-precision matmul, and the CPU tests compare log-probs with
  a float32 server to 1e-6); :func:`attention_implementation` flash-attention 2 only where its
  CUDA kernels import, else PyTorch's sdpa (flash-attn has no wheel for every torch).
- :func:`peak_memory_bytes` is what the train JSON reports: CUDA's max allocated, else the
  process's peak RSS.
"""

from __future__ import annotations

import os
import resource
import sys
from collections.abc import MutableMapping
from dataclasses import dataclass

from tracerl.schemas import environment as E
from tracerl.trainer.flash_attn_stand_in import kernels_built


@dataclass(frozen=True)
class LaunchEnvironment:
    rank: int
    world_size: int
    local_rank: int  # -1: no CUDA device to pin (a CPU process)
    master_addr: str
    master_port: int
    launched: bool  # True when a launcher (torchrun, deepspeed) started this process


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def launch_environment(environ: MutableMapping[str, str] | None = None, *, cuda: bool | None = None) -> LaunchEnvironment:
    """The process's place in the job, with the variables DeepSpeed reads set in ``environ``.

    A launcher's variables are kept as they are (on CPU, ``LOCAL_RANK`` becomes -1 only for
    DeepSpeed's CUDA-only calls: see the module docstring); with none, this process is rank 0
    of 1 on loopback, its store on a port the OS picks as it binds. ``cuda`` defaults to whether torch sees a GPU.
    """
    env = os.environ if environ is None else environ
    cuda = cuda_available() if cuda is None else cuda
    launched = E.RANK_ENV in env and E.WORLD_SIZE_ENV in env
    if launched:
        local_rank = int(env.get(E.LOCAL_RANK_ENV, env[E.RANK_ENV]))
        env.setdefault(E.MASTER_ADDR_ENV, "127.0.0.1")
        if E.MASTER_PORT_ENV not in env:
            raise RuntimeError(f"{E.RANK_ENV} and {E.WORLD_SIZE_ENV} are set but {E.MASTER_PORT_ENV} is not: "
                               "launch with torchrun or deepspeed, which set all three")
    else:
        local_rank = 0
        env.update({E.RANK_ENV: "0", E.WORLD_SIZE_ENV: "1", E.MASTER_ADDR_ENV: "127.0.0.1", E.MASTER_PORT_ENV: env.get(E.MASTER_PORT_ENV) or "0"})
    env[E.LOCAL_RANK_ENV] = str(local_rank if cuda else -1)
    return LaunchEnvironment(
        rank=int(env[E.RANK_ENV]), world_size=int(env[E.WORLD_SIZE_ENV]), local_rank=local_rank if cuda else -1,
        master_addr=env[E.MASTER_ADDR_ENV], master_port=int(env[E.MASTER_PORT_ENV]), launched=launched,
    )


def training_device(local_rank: int = 0):
    """``cuda:local_rank`` when torch sees a GPU, else the CPU."""
    import torch

    return torch.device("cuda", max(local_rank, 0)) if cuda_available() else torch.device("cpu")


def default_dtype(device=None) -> str:
    """``"bf16"`` on CUDA, ``"fp32"`` elsewhere (the names OpenRLHF and ``--dtype`` use)."""
    device = device if device is not None else training_device()
    return "bf16" if device.type == "cuda" else "fp32"


def torch_dtype(name: str):
    import torch

    dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    if name not in dtypes:
        raise ValueError(f"unknown dtype {name!r}: use one of {', '.join(dtypes)}")
    return dtypes[name]


def attention_implementation(device=None) -> str:
    """flash_attention_2 when its CUDA kernels import on a CUDA device, else sdpa."""
    device = device if device is not None else training_device()
    if device.type != "cuda":
        return "sdpa"
    return "flash_attention_2" if kernels_built() else "sdpa"


def peak_memory_bytes(device=None) -> int:
    """Peak memory of this process so far: CUDA's max allocated on a GPU, peak RSS on CPU."""
    device = device if device is not None else training_device()
    if device.type == "cuda":
        import torch

        return int(torch.cuda.max_memory_allocated(device))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)  # Linux reports KiB


def end_process_group() -> None:
    """Leave the data-parallel group once training is done, so every rank's process can exit
    (a gloo or NCCL group left open keeps its threads, and torchrun waits on them)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()
