"""The end of every round (local loop, scheduled round, rollback): publish to every endpoint, record, prune.

Against real built-in servers on loopback; a publish that fails records nothing.
"""

from __future__ import annotations

import pytest

from tracerl.core.net import free_port
from tracerl.orchestration.phases import PhaseClock
from tracerl.orchestration.release import release
from tracerl.orchestration.registry import PolicyRegistry, VersionEntry
from tracerl.trainer.publish import BuiltinServer, PublishError
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.tiny_model import build_tiny_model
from tracerl.trainer.training.checkpoint import has_weights


def test_a_version_is_served_everywhere_recorded_with_each_answer_and_old_weights_pruned(tmp_path):
    base = build_tiny_model(tmp_path / "base", seed=0)
    versions = [build_tiny_model(tmp_path / f"v{n}", seed=n) for n in (1, 2)]
    registry = PolicyRegistry(tmp_path / "state")
    registry.append(VersionEntry(0, "base", None, str(base)))
    with running_server(base) as one, running_server(base) as two:
        targets = [BuiltinServer(one.base_url), BuiltinServer(two.base_url)]
        for n, checkpoint in enumerate(versions, start=1):
            clock = PhaseClock()
            entry = release(registry, VersionEntry(n, "trained", n - 1, str(checkpoint)), targets, keep=1, clock=clock)
            assert [p["endpoint"] for p in entry["published"]] == [one.base_url, two.base_url]
            assert {p["policy_version"] for p in entry["published"]} == {n}
            assert entry["recorded_at"] >= max(p["at"] for p in entry["published"])  # recorded once served, not when the entry was made
            assert set(clock.fields()) == {"publish_seconds", "record_seconds"}
    assert [e["version"] for e in registry.entries()] == [0, 1, 2]
    assert not has_weights(versions[0]) and has_weights(versions[1]) and has_weights(base)  # newest kept; the base is the user's


def test_a_failed_publish_records_nothing(tmp_path):
    base = build_tiny_model(tmp_path / "base", seed=0)
    registry = PolicyRegistry(tmp_path / "state")
    registry.append(VersionEntry(0, "base", None, str(base)))
    nobody = BuiltinServer(f"http://127.0.0.1:{free_port()}/v1")
    with pytest.raises(PublishError):
        release(registry, VersionEntry(1, "trained", 0, str(base)), [nobody], keep=1)
    assert [e["version"] for e in registry.entries()] == [0]
