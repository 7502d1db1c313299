"""Everything OpenRLHF 0.11 needs to run where it assumes a CUDA build, in one place.

OpenRLHF is written for GPUs; tracerl also trains with it on CPU (the tests, CI, a laptop).
Where its assumptions break (no CUDA, no flash-attn kernels, no nvcc, tracerl's own
micro-batching), the fix is here and nowhere else:

1. ``openrlhf.models`` imports ``flash_attn`` at the top, whose package imports its compiled
   CUDA kernels. flash-attn's Python parts install without them; importing ``tracerl.trainer``
   puts a stand-in in their place (:mod:`tracerl.trainer.flash_attn_stand_in`). OpenRLHF only
   calls the kernels when packing samples, which this backend never asks for.
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

import os
import types

from tracerl.schemas import environment as E
from tracerl.trainer.training.device import cuda_available

CPU_DTYPE = "fp32"


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
    if not cuda_available():
        os.environ.setdefault(E.DS_ACCELERATOR_ENV, "cpu")
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
            f"the OpenRLHF backend needs the openrlhf extra ({exc}): see src/tracerl/trainer/README.md "
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
