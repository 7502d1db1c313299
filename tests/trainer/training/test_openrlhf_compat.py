"""The fixes that let OpenRLHF run without CUDA: each one is in place, and only where needed."""

from __future__ import annotations


import pytest
import torch

from tracerl.trainer.training.openrlhf_compat import CPU_DTYPE, import_openrlhf
from tracerl.trainer.training.device import launch_environment
from tracerl_testing.installed import require_cuda, require_openrlhf

require_openrlhf()

require_cuda(present=False, why="these are the CPU fixes; a CUDA machine runs OpenRLHF unpatched")


def test_openrlhf_models_import_with_the_flash_attn_kernels_missing():
    orl = import_openrlhf()  # tests/trainer/test_flash_attn_stand_in.py: what stands in for the kernels
    assert orl.Actor.__module__ == "openrlhf.models.actor" and orl.PolicyLoss.__module__ == "openrlhf.models.loss"


def test_actor_dtypes_gain_fp32_and_keep_openrlhfs_own():
    import_openrlhf()
    import openrlhf.utils.utils as table

    convert_to_torch_dtype = table.convert_to_torch_dtype

    assert convert_to_torch_dtype(CPU_DTYPE) is torch.float32
    assert convert_to_torch_dtype("bf16") is torch.bfloat16
    with pytest.raises(ValueError, match="Invalid param_dtype"):
        convert_to_torch_dtype("fp8")
    import_openrlhf()  # importing twice does not wrap the table twice
    assert table.convert_to_torch_dtype is convert_to_torch_dtype


def test_strategy_on_cpu_uses_torch_adamw_and_no_jit_built_ops():
    import argparse

    import deepspeed

    orl = import_openrlhf()
    args = argparse.Namespace(
        local_rank=-1, ds=argparse.Namespace(param_dtype=CPU_DTYPE, zero_stage=2), train=argparse.Namespace(dynamic_batch_enable=False)
    )
    strategy = orl.Strategy(seed=0, max_norm=1.0, zero_stage=2, args=args)
    launch_environment()  # what the backend does first: rank 0 of 1 on loopback
    strategy.setup_distributed()
    assert strategy.world_size == 1 and not deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"]
    optimizer = {"type": "AdamW", "params": {"lr": 1e-3, "betas": [0.9, 0.999], "eps": 1e-8, "weight_decay": 0.0}}
    config = strategy.get_ds_train_config(optimizer, max_norm=1.0)
    assert config["optimizer"]["params"]["torch_adam"] is True
    # tracerl accumulates over micro-batches itself: every step() is DeepSpeed's boundary
    assert config["managed_gradient_accumulation"] is False and config["gradient_accumulation_steps"] == 1
    assert not config["bf16"]["enabled"] and not config["fp16"]["enabled"]
