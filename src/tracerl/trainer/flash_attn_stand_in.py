"""A stand-in for flash-attn's CUDA kernels where only its Python parts are installed.

flash-attn's Python parts install without their kernels (``FLASH_ATTENTION_SKIP_CUDA_BUILD=TRUE``,
the way OpenRLHF's import of ``flash_attn`` is satisfied without an hour-long CUDA build), but
its package imports the kernel module ``flash_attn_2_cuda`` at the top. On a CUDA machine
transformers imports ``flash_attn`` to see whether it is available, so that failing import
breaks every model class (measured on an H100: ``Could not import module 'LlamaConfig'``).
Importing ``tracerl.trainer`` calls :func:`install_kernel_stand_in`: a module whose every
attribute raises an ``AttributeError`` that says so. Nothing tracerl runs calls the kernels
(it asks for sdpa attention then, :func:`tracerl.trainer.training.device.attention_implementation`);
where the real kernels exist, nothing is installed.
"""

from __future__ import annotations

import importlib.util
import sys
import types

FLASH_ATTN_KERNELS = "flash_attn_2_cuda"
STAND_IN_MARK = "tracerl_stand_in"  # an attribute of the stand-in module only


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
    setattr(module, STAND_IN_MARK, True)
    return module


def install_kernel_stand_in() -> None:
    """Put the stand-in in ``sys.modules`` when flash-attn is installed without its kernels; else do nothing."""
    if FLASH_ATTN_KERNELS in sys.modules or importlib.util.find_spec("flash_attn") is None:
        return
    if importlib.util.find_spec(FLASH_ATTN_KERNELS) is None:
        sys.modules[FLASH_ATTN_KERNELS] = _missing_kernels_module()


def kernels_built() -> bool:
    """Whether flash-attn's real CUDA kernels import here (the stand-in is not them)."""
    loaded = sys.modules.get(FLASH_ATTN_KERNELS)
    if loaded is not None:
        return not vars(loaded).get(STAND_IN_MARK)
    try:
        importlib.import_module(FLASH_ATTN_KERNELS)
    except ImportError:
        return False
    return True
