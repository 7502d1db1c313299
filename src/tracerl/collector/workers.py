"""Several collector processes behind the same ports, for more than one core's worth of spans.

Converting OTLP to rows is Python work bound by the GIL, so one process uses about one
core. ``--workers N`` runs N independent collector processes: the kernel spreads
connections over them (SO_REUSEPORT on both ports), each has its own WAL
(``WAL_DIR/worker-i``) and instance id, so they write one dataset without coordination.
The supervisor reserves the ports, restarts a worker that dies (it replays its own WAL)
and, on SIGTERM/SIGINT, stops them all gracefully.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import threading
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import wait

from tracerl.collector.server import CollectorServer, Endpoints, bind
from tracerl.collector.service import CollectorConfig, replay_unused_wals
from tracerl.core.parent_death import stop_with_parent

log = logging.getLogger("tracerl.collector")


def _worker(config: CollectorConfig, endpoints: Endpoints, index: int, ready, log_level: int) -> None:
    logging.basicConfig(level=log_level, format=f"%(asctime)s %(levelname)s worker-{index}: %(message)s")
    stop_with_parent()  # if the supervisor is killed, stop too (gracefully: SIGTERM commits what is buffered)
    CollectorServer(config, endpoints, worker=index).serve(on_ready=ready.set)


def serve_workers(config: CollectorConfig, endpoints: Endpoints, workers: int,
                  on_ready: Callable[[int, int | None], None]) -> None:
    """Run ``workers`` collector processes until SIGTERM/SIGINT; ``on_ready(http_port, grpc_port)``."""
    replay_unused_wals(config, workers)
    # bound but not listening: a port-0 request becomes one fixed port that the workers share
    http_sock = bind(endpoints.host, endpoints.http_port, reuse_port=True)
    grpc_sock = bind(endpoints.host, endpoints.grpc_port, reuse_port=True) if endpoints.grpc_port is not None else None
    shared = replace(
        endpoints,
        http_port=http_sock.getsockname()[1],
        grpc_port=grpc_sock.getsockname()[1] if grpc_sock else None,
        reuse_port=True,
    )
    context = multiprocessing.get_context("spawn")
    stopping = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopping.set())

    def launch(index: int):
        ready = context.Event()
        proc = context.Process(target=_worker, args=(config, shared, index, ready, log.getEffectiveLevel()),
                               name=f"collector-worker-{index}")
        proc.start()
        return proc, ready

    procs = [launch(i) for i in range(workers)]
    failed = False
    for proc, ready in procs:
        while not ready.wait(0.2) and not stopping.is_set():
            if not proc.is_alive():
                failed = True
                stopping.set()
    if not stopping.is_set():
        on_ready(shared.http_port, shared.grpc_port)
    try:
        while not stopping.is_set():
            wait([p.sentinel for p, _ in procs], timeout=0.5)
            for i, (proc, _) in enumerate(procs):
                if not proc.is_alive() and not stopping.is_set():
                    log.error("worker %d exited with code %s; restarting it (it replays its WAL)", i, proc.exitcode)
                    procs[i] = launch(i)
    finally:
        for proc, _ in procs:
            if proc.is_alive():
                proc.terminate()  # SIGTERM: each worker commits its buffer to Parquet
        for proc, _ in procs:
            proc.join()
        http_sock.close()
        if grpc_sock is not None:
            grpc_sock.close()
    if failed:
        raise RuntimeError("a collector worker failed to start; see its error above")
