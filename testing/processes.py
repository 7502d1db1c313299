"""Child processes started by tests, as a user's shell would start them."""

from __future__ import annotations

import os

# What a launcher (torchrun, deepspeed) sets, and what training in the test process itself
# leaves in os.environ (src/tracerl/trainer/training/device.py: launch_environment): a child inheriting
# them would take itself for a rank of the test process's job.
LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


def lone_process_env(**extra: str) -> dict[str, str]:
    """This process's environment without any launcher's variables, plus ``extra``."""
    return {**{k: v for k, v in os.environ.items() if k not in LAUNCHER_VARIABLES}, **extra}
