"""The first layer where a C program and the Python reference part ways (``mico verify``'s
diagnosis of a disagreement): on a static graph the debug build's intermediates agree with the
reference executor's, and a damaged tensor is named with its element and both values."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen.compile import compile_model
from mico.execute.layerwise import DumpError, first_difference
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(12, 16), nn.Linear(16, 5)

    def forward(self, x):
        return self.b(torch.relu(self.a(x.flatten(1))))


@pytest.fixture(scope="module")
def debug_run(tmp_path_factory):
    """A static 8/1 project (binary codes inside), its debug dump for one sample."""
    torch.manual_seed(0)
    model = Small().eval()
    quantize_model(model, "8/1", QuantConfig(act_mode="static"), example_inputs=torch.zeros(1, 12))
    batches = [torch.randn(8, 12) for _ in range(2)]
    calibrate(model, batches)
    out = tmp_path_factory.mktemp("layerwise") / "p"
    compiled = compile_model(model, batches[0][:1], out, "p", mode="static", calibration=batches)
    sample = np.random.default_rng(1).standard_normal(12).astype(np.float32)
    return compiled, sample, host.run_debug(compiled.project, sample)


def test_a_static_program_agrees_layer_by_layer(debug_run):
    compiled, sample, records = debug_run
    names = [name for name, _ in records]
    assert names == [n.name for n in compiled.graph.nodes if n.name in names] and len(names) >= 3
    assert first_difference(compiled.graph, records, sample) is None


def test_a_damaged_tensor_is_named_with_its_values(debug_run):
    compiled, sample, records = debug_run
    name, raw = records[1]
    damaged = bytearray(raw)
    damaged[0] ^= 0x01
    diff = first_difference(compiled.graph, [records[0], (name, bytes(damaged)), *records[2:]],
                            sample)  # fmt: skip
    assert diff is not None and diff.node == name and diff.first_index == 0
    assert diff.c_value != diff.reference_value and f"'{name}'" in str(diff)


def test_a_dump_naming_an_unknown_node_is_refused(debug_run):
    compiled, sample, _ = debug_run
    with pytest.raises(DumpError, match="'nowhere', which is not a node"):
        first_difference(compiled.graph, [("nowhere", b"\0")], sample)
