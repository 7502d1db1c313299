"""Where training runs (device.py): the launcher's variables read in one place, CUDA faked present and absent."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tracerl.trainer.training.device import launch_environment


@pytest.mark.parametrize("cuda, local_rank", [(True, 0), (False, -1)])
def test_a_lone_process_is_rank_0_of_1_on_loopback(cuda, local_rank):
    env: dict[str, str] = {}
    launch = launch_environment(env, cuda=cuda)
    assert (launch.rank, launch.world_size, launch.local_rank, launch.launched) == (0, 1, local_rank, False)
    # DeepSpeed reads these; LOCAL_RANK -1 on CPU keeps OpenRLHF from calling torch.cuda.set_device,
    # LOCAL_RANK 0 with CUDA keeps DeepSpeed from building torch.device("cuda", -1)
    assert env["LOCAL_RANK"] == str(local_rank) and env["MASTER_ADDR"] == "127.0.0.1"
    assert env["MASTER_PORT"] == "0"  # the store binds whatever port the OS gives it: none is named in advance


def test_a_lone_process_group_starts_beside_another_that_left_its_variables_behind():
    """A process that trained alone leaves the rendezvous variables in its environment while
    its group's store still listens; a child that inherits them (a `tracerl train` it starts,
    a second training) must still start its own group rather than fail on a taken port."""
    start_group = textwrap.dedent("""
        import torch.distributed as dist
        from tracerl.trainer.training.device import launch_environment
        launch_environment(cuda=False)
        dist.init_process_group("gloo")
    """)
    parent = start_group + textwrap.dedent(f"""
        import os, subprocess, sys
        child = subprocess.run([sys.executable, "-c", {start_group!r} + "print(dist.get_world_size())"],
                               env=os.environ, capture_output=True, text=True)
        print(child.stdout.strip() or child.stderr[-600:])
        dist.destroy_process_group()
    """)
    done = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "1", done.stdout


@pytest.mark.parametrize("cuda", [True, False])
def test_torchruns_and_deepspeeds_variables_are_kept(cuda):
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    launch = launch_environment(env, cuda=cuda)
    assert (launch.rank, launch.world_size, launch.master_addr, launch.master_port, launch.launched) == (3, 4, "node0", 29500, True)
    assert launch.local_rank == (1 if cuda else -1) and env["LOCAL_RANK"] == str(launch.local_rank)


def test_a_half_set_launch_is_refused_with_what_to_do():
    with pytest.raises(RuntimeError, match="launch with torchrun or deepspeed"):
        launch_environment({"RANK": "0", "WORLD_SIZE": "2"}, cuda=False)
