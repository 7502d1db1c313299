"""The rounds' lock: a second holder is refused at once, and a holder killed with SIGKILL releases it."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from tracerl.orchestration.rounds.lock import RoundLocked, round_lock

HOLD = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from tracerl.orchestration.rounds.lock import round_lock
    with round_lock(Path(sys.argv[1])):
        print("held", flush=True)
        time.sleep(600)
""")


def test_a_lock_held_by_another_process_is_refused_naming_it_and_freed_when_that_process_is_killed(tmp_path):
    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(RoundLocked, match=f"pid {holder.pid}"):
            with round_lock(tmp_path):
                pass
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=30)
        with round_lock(tmp_path):  # no stale lock: the kernel released it with the process
            pass
    finally:
        holder.kill()
        holder.wait()


def test_the_lock_is_not_reentrant_within_a_process_either(tmp_path):
    with round_lock(tmp_path):
        with pytest.raises(RoundLocked):
            with round_lock(tmp_path):
                pass

