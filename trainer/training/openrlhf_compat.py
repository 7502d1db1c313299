"""Everything OpenRLHF 0.11 needs to run where it assumes a CUDA build, in one place.

OpenRLHF is written for GPUs; tracerl also trains with it on CPU (the tests, CI, a laptop).
Four assumptions break there, and each is undone here and nowhere else:

1. ``openrlhf.models`` imports ``flash_attn`` at the top, whose package imports its compiled
   CUDA kernels (``flash_attn_2_cuda``). flash-attn's Python parts install without them
   (``FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE``); :func:`import_openrlhf` puts a stand-in for
   the kernel module in ``sys.modules`` whose every attribute is an ``AttributeError``
   that says so. OpenRLHF only calls the kernels when packing samples, which this backend
   never asks for, so the stand-in is never used, only imported. On a machine with the real
   kernels the stand-in is not installed.
2. ``Actor`` loads a checkpoint in bf16 or fp16 only. CPUs have no fast half-precision matmul
   and the trainer's log-probs must match the server's float32 ones, so ``"fp32"`` is added
   to OpenRLHF's dtype table.
3. DeepSpeed's CPU accelerator JIT-compiles two C++ ops at first use (a shared-memory
   all-reduce, ~2 minutes here, useless in one process; and FusedAdam, ~2 minutes, where
   ``torch.optim.AdamW`` is as good on CPU). :class:`TracerlDeepspeedStrategy` turns both off
   when there is no CUDA.
4. ``DeepspeedStrategy.setup_distributed`` looks for MPI when no launcher set the rendezvous
   variables: a lone process (``tracerl train`` on one GPU or on CPU) gets rank 0 of 1 on
   loopback, with ``LOCAL_RANK=-1`` so that it does not call ``torch.cuda.set_device``.
5. ``DeepspeedStrategy.save_model`` ends with ``torch.cuda.synchronize()``: without CUDA its
   barrier stays and the synchronize goes.
"""

from __future__ import annotations

import importlib.util
import os
import socket
import sys
import types

FLASH_ATTN_KERNELS = "flash_attn_2_cuda"
CPU_DTYPE = "fp32"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _missing_kernels_module() -> types.ModuleType:
    module = types.ModuleType(FLASH_ATTN_KERNELS)

    def __getattr__(name: str):
        raise AttributeError(
            f"{FLASH_ATTN_KERNELS}.{name}: flash-attn's CUDA kernels are not built here; tracerl's "
            "OpenRLHF backend does not pack samples, so nothing should call them (install flash-attn "
            "with its CUDA build on a GPU machine to use them)"
        )

    module.__getattr__ = __getattr__  # type: ignore[method-assign]
    module.__file__ = __file__  # inspect and hasattr probes see an ordinary module
    return module


def _single_process_rendezvous() -> None:
    """Rank 0 of 1 on loopback, unless a launcher (deepspeed, torchrun) already set the variables."""
    if "RANK" in os.environ or "LOCAL_RANK" in os.environ:
        return
    with socket.socket() as probe:  # a free port: two trainers in one machine must not collide
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    os.environ.update({"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "-1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def import_openrlhf() -> types.SimpleNamespace:
    """OpenRLHF's pieces this backend uses, imported with the CPU fixes above in place."""
    if FLASH_ATTN_KERNELS not in sys.modules and importlib.util.find_spec(FLASH_ATTN_KERNELS) is None:
        sys.modules[FLASH_ATTN_KERNELS] = _missing_kernels_module()
    if not cuda_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    try:
        import deepspeed
        import openrlhf.utils.deepspeed.deepspeed as strategy_module
        import openrlhf.utils.utils as openrlhf_utils
        from openrlhf.models import Actor, PolicyLoss
        from openrlhf.models.loss import aggregate_loss
        from openrlhf.models.utils import compute_approx_kl
        from openrlhf.utils.deepspeed import DeepspeedStrategy
    except ImportError as exc:
        raise ImportError(
            f"the OpenRLHF backend needs the openrlhf extra ({exc}): see trainer/README.md "
            "'OpenRLHF backend' for the install commands"
        ) from exc

    to_dtype = openrlhf_utils.convert_to_torch_dtype
    if not getattr(to_dtype, "tracerl_fp32", False):

        def convert_to_torch_dtype(param_dtype: str):
            import torch

            return torch.float32 if param_dtype == CPU_DTYPE else to_dtype(param_dtype)

        convert_to_torch_dtype.tracerl_fp32 = True  # type: ignore[attr-defined]
        openrlhf_utils.convert_to_torch_dtype = convert_to_torch_dtype

    if not cuda_available():
        strategy_module.torch_dist_barrier_and_cuda_sync = _barrier

    class TracerlDeepspeedStrategy(DeepspeedStrategy):
        """OpenRLHF's strategy; on CPU without the JIT-built ops (see the module docstring)."""

        def setup_distributed(self, *args, **kwargs) -> None:
            _single_process_rendezvous()
            if not cuda_available():
                deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
            super().setup_distributed(*args, **kwargs)

        def get_ds_train_config(self, optim_dict=None, *, max_norm=None):
            config = super().get_ds_train_config(optim_dict, max_norm=max_norm)
            if "optimizer" in config and not cuda_available():
                config["optimizer"]["params"]["torch_adam"] = True
            return config

    return types.SimpleNamespace(
        Actor=Actor, PolicyLoss=PolicyLoss, aggregate_loss=aggregate_loss, compute_approx_kl=compute_approx_kl, Strategy=TracerlDeepspeedStrategy
    )
