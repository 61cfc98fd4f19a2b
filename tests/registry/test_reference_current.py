"""The committed reference pages (docs/reference/) say what the registries hold today."""

from __future__ import annotations

from pathlib import Path

from mico.registry.reference import stale_pages

ROOT = Path(__file__).resolve().parents[2]


def test_committed_reference_is_current():
    stale = stale_pages(ROOT / "docs" / "reference")
    assert not stale, f"docs/reference is stale ({', '.join(stale)}): run `mico docs`"
