"""Where training runs (device.py): the launcher's variables read in one place, CUDA faked present and absent."""

from __future__ import annotations

import pytest

from tracerl.trainer.training.device import launch_environment


@pytest.mark.parametrize("cuda, local_rank", [(True, 0), (False, -1)])
def test_a_lone_process_is_rank_0_of_1_on_loopback(cuda, local_rank):
    env: dict[str, str] = {}
    launch = launch_environment(env, cuda=cuda)
    assert (launch.rank, launch.world_size, launch.local_rank, launch.launched) == (0, 1, local_rank, False)
    # DeepSpeed reads these; LOCAL_RANK -1 on CPU keeps OpenRLHF from calling torch.cuda.set_device,
    # LOCAL_RANK 0 with CUDA keeps DeepSpeed from building torch.device("cuda", -1)
    assert env["LOCAL_RANK"] == str(local_rank) and env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0


@pytest.mark.parametrize("cuda", [True, False])
def test_torchruns_and_deepspeeds_variables_are_kept(cuda):
    env = {"RANK": "3", "WORLD_SIZE": "4", "LOCAL_RANK": "1", "MASTER_ADDR": "node0", "MASTER_PORT": "29500"}
    launch = launch_environment(env, cuda=cuda)
    assert (launch.rank, launch.world_size, launch.master_addr, launch.master_port, launch.launched) == (3, 4, "node0", 29500, True)
    assert launch.local_rank == (1 if cuda else -1) and env["LOCAL_RANK"] == str(launch.local_rank)


def test_a_half_set_launch_is_refused_with_what_to_do():
    with pytest.raises(RuntimeError, match="launch with torchrun or deepspeed"):
        launch_environment({"RANK": "0", "WORLD_SIZE": "2"}, cuda=False)
