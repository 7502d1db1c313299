"""docs/attributes.md, the published attribute contract, lists every ``tracerl.*`` name the code defines."""

from __future__ import annotations

from pathlib import Path

from tracerl.schemas import attributes as A

PAGE = Path(__file__).resolve().parents[2] / "docs" / "attributes.md"


def test_the_contract_page_lists_every_tracerl_name():
    names = {value.rstrip(".") for key, value in vars(A).items() if not key.startswith("_") and isinstance(value, str) and value.startswith("tracerl.")}
    listed = {name for name in names if f"`{name}" in PAGE.read_text()}
    assert names - listed == set(), "add these to docs/attributes.md"
