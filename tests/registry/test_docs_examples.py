"""docs/registry.md's examples run as written, and the committed docs/examples configs are valid."""

from __future__ import annotations

import re
from pathlib import Path

import torch

from mico.registry import ModuleRegistry
from mico.runconfig import load_run_config

ROOT = Path(__file__).resolve().parents[2]


def test_registry_guide_examples_run(capsys):
    guide = ROOT / "docs" / "registry.md"
    blocks = re.findall(r"```python\n(.*?)```", guide.read_text(), flags=re.S)
    assert len(blocks) == 2
    with ModuleRegistry.scoped():
        scope: dict = {}
        for block in blocks:
            exec(compile(block, str(guide), "exec"), scope)
        errors = ModuleRegistry.validate_config("glu", {"in_features": "8"})
        assert errors == [
            "missing required field 'out_features' (int)",
            "field 'in_features' should be int, got str '8'",
        ]
        assert [m.name for m in ModuleRegistry.search("sigmoid gate")] == ["gated-linear"]
        model = scope["model"]
        assert model(torch.zeros(2, 1, 8, 8)).shape == (2, 10)
    assert "### gated-linear" in capsys.readouterr().out


def test_example_run_configs_are_valid():
    for path in sorted((ROOT / "examples").glob("*.yaml")):
        load_run_config(path)
