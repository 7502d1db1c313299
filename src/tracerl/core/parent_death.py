"""Child processes that stop when the process that started them dies, however it dies.

A parent's ``finally`` blocks do not run when it is killed (SIGKILL, the OOM killer, or
SIGTERM with Python's default handler), so a server it started in a session of its own
(``vllm serve``, a collector worker) would live on holding gigabytes and ports. Linux's
``PR_SET_PDEATHSIG`` asks the kernel to signal the child when its parent thread exits;
SIGTERM lets the child stop gracefully (vLLM stops its engine and workers, a collector
commits its buffer). Elsewhere it does nothing: the parent's own cleanup is all there is.
"""

from __future__ import annotations

import ctypes
import signal
import sys

_PR_SET_PDEATHSIG = 1
# looked up once, in the parent: a ``preexec_fn`` runs between fork and exec, where loading a library could
# wait forever on a lock another thread of the parent held at the fork
_prctl = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def stop_with_parent(sig: int = signal.SIGTERM) -> None:
    """Ask the kernel to send ``sig`` to this process when its parent thread exits (Linux only).

    Call it in the child: first thing in a ``multiprocessing`` target, or as a ``Popen``
    ``preexec_fn``. The signal follows the *thread* that started the child, so start
    long-lived children from a thread that lives as long as they should.
    """
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, sig)
