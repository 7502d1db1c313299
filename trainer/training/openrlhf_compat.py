"""Everything OpenRLHF 0.11 needs to run where it assumes a CUDA build, in one place.

OpenRLHF is written for GPUs; tracerl also trains with it on CPU (the tests, CI, a laptop).
Where its assumptions break (no CUDA, no flash-attn kernels, no nvcc, tracerl's own
micro-batching), the fix is here and nowhere else:

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
3. DeepSpeed JIT-compiles its ops at first use: FusedAdam needs nvcc on a GPU (minutes, and
   fails where there is none) and a C++ build on CPU; on CPU also a shared-memory all-reduce
   (~2 minutes, useless in one process). :class:`TracerlDeepspeedStrategy` takes torch's
   Adam unless FusedAdam was built into the DeepSpeed install (``DS_BUILD_FUSED_ADAM=1``), and
   turns the shared-memory op off without CUDA.
4. OpenRLHF sizes DeepSpeed's gradient accumulation from fixed micro-batches; tracerl
   accumulates over micro-batches itself (a minibatch's last one may be short), so the
   strategy's config asks for DeepSpeed's unmanaged accumulation: every ``step()`` is a boundary.
5. ``DeepspeedStrategy.save_model`` ends with ``torch.cuda.synchronize()``: without CUDA its
   barrier stays and the synchronize goes.

The launcher's variables (rank, world size, local rank) are read in one place for every
backend: :func:`tracerl.trainer.training.device.launch_environment`.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import types

from tracerl.trainer.training.device import cuda_available

FLASH_ATTN_KERNELS = "flash_attn_2_cuda"
CPU_DTYPE = "fp32"


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
    module.tracerl_stand_in = True  # type: ignore[attr-defined]  device.attention_implementation asks
    return module


def install_kernel_stand_in() -> None:
    """Put the stand-in for flash-attn's missing CUDA kernels in place (see the module docstring, 1).

    Called before anything imports transformers' models too: on a CUDA machine transformers
    imports ``flash_attn`` to see whether it is available, and flash-attn's Python parts
    without their kernels would fail that import (and with it, every model class).
    """
    if FLASH_ATTN_KERNELS in sys.modules or importlib.util.find_spec("flash_attn") is None:
        return
    if importlib.util.find_spec(FLASH_ATTN_KERNELS) is None:
        sys.modules[FLASH_ATTN_KERNELS] = _missing_kernels_module()


def fused_adam_built() -> bool:
    """Whether this DeepSpeed install carries a prebuilt FusedAdam (else it would compile at first use)."""
    if not cuda_available():
        return False
    try:
        from deepspeed.git_version_info import installed_ops
    except ImportError:
        return False
    return bool(installed_ops.get("fused_adam"))


def _barrier() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()


def import_openrlhf() -> types.SimpleNamespace:
    """OpenRLHF's pieces this backend uses, imported with the CPU fixes above in place."""
    install_kernel_stand_in()
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
            if not cuda_available():
                deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False
            super().setup_distributed(*args, **kwargs)

        def get_ds_train_config(self, optim_dict=None, *, max_norm=None):
            config = super().get_ds_train_config(optim_dict, max_norm=max_norm)
            if "optimizer" in config and not fused_adam_built():
                config["optimizer"]["params"]["torch_adam"] = True
            config["managed_gradient_accumulation"] = False
            config["gradient_accumulation_steps"] = 1
            config["train_batch_size"] = self.micro_train_batch_size * self.world_size
            return config

    return types.SimpleNamespace(
        Actor=Actor, PolicyLoss=PolicyLoss, aggregate_loss=aggregate_loss, compute_approx_kl=compute_approx_kl, Strategy=TracerlDeepspeedStrategy
    )
