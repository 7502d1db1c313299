"""A ``vllm serve`` tracerl started does not outlive a loop that is killed: SIGKILL (or the OOM killer)
runs no ``finally``, and an orphaned CPU vLLM holds ~3 GB and two cores until someone finds it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

START_AND_WAIT = """
import sys, time
from tracerl.trainer.serving.vllm_process import running_vllm
with running_vllm(sys.argv[1], log_path=sys.argv[2]) as server:
    print(server.process.pid, flush=True)
    time.sleep(600)
"""


def group_alive(pgid: int) -> bool:
    """Does a process of group ``pgid`` still run? (Zombies waiting for init to reap them do not.)"""
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            state, _ppid, group = stat.read_text().rpartition(")")[2].split()[:3]
        except OSError:  # gone while listing
            continue
        if int(group) == pgid and state != "Z":
            return True
    return False


def test_killing_the_process_that_started_vllm_stops_vllm_and_its_workers(vllm_python, start_model, tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", START_AND_WAIT, str(start_model), str(tmp_path / "vllm.log")],
                              stdout=subprocess.PIPE, text=True)
    server_pid = int(parent.stdout.readline())  # printed once vLLM answers /health: its engine and worker are up
    try:
        assert group_alive(server_pid)
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        deadline = time.monotonic() + 60
        while group_alive(server_pid) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not group_alive(server_pid), f"vLLM's process group {server_pid} outlived its parent; its log: {tmp_path / 'vllm.log'}"
    finally:
        if group_alive(server_pid):
            os.killpg(server_pid, signal.SIGKILL)
