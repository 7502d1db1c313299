"""Publishing a checkpoint to tracerl's own server; every failure leaves the served version as it was."""

from __future__ import annotations


import httpx
import pytest

from tracerl.trainer.publish import BuiltinServer, PublishError, publish, target_for
from tracerl.trainer.serving.app import running_server
from tracerl.trainer.tiny_model import build_tiny_model
from tracerl.core.net import free_port


def _served_version(server) -> int:
    return httpx.get(f"{server.url}/health").json()["policy_version"]


def test_the_server_serves_the_published_checkpoint_as_the_version_asked(tiny_checkpoint, tmp_path):
    other = build_tiny_model(tmp_path / "other", seed=1)
    with running_server(tiny_checkpoint) as server:
        target = target_for(server.base_url)
        assert isinstance(target, BuiltinServer)
        result = publish(other, target, version=5)
        assert result.policy_version == 5 == _served_version(server)
        assert result.checkpoint == other.resolve() and result.seconds > 0
        assert server.base_url in result.target
        assert publish(tiny_checkpoint, target).policy_version == 6  # no version asked: the server's next


def test_a_checkpoint_the_server_cannot_load_is_refused_in_its_words(policy_server, tmp_path):
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(PublishError, match=rf"refused {tmp_path} \(HTTP 400\): cannot load checkpoint"):
        publish(tmp_path, BuiltinServer(policy_server.base_url))
    assert _served_version(policy_server) == 0


def test_a_folder_that_is_no_checkpoint_is_not_sent(policy_server, tmp_path):
    with pytest.raises(PublishError, match="no config.json"):
        publish(tmp_path, BuiltinServer(policy_server.base_url))
    assert _served_version(policy_server) == 0


def test_an_unreachable_endpoint_says_what_to_do(tiny_checkpoint):
    nowhere = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens there
    with pytest.raises(PublishError, match=r"cannot reach tracerl serve at .*start it \(`tracerl serve`\)"):
        publish(tiny_checkpoint, BuiltinServer(nowhere))


def test_an_unknown_endpoint_kind_lists_the_known_ones():
    with pytest.raises(PublishError, match="unknown endpoint kind 'sglang': use one of tracerl"):
        target_for("http://127.0.0.1:1/v1", "sglang")
