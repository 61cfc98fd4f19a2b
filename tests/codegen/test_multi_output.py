"""Models with several outputs: one output buffer, each output a documented segment of it,
each checked against the reference, in both modes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen.compile import compile_model
from mico.errors import CompileError
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host


class TwoHeads(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.cls, self.box = nn.Linear(144, 3), nn.Linear(144, 2)

    def forward(self, x):
        h = torch.relu(self.conv(x)).flatten(1)
        return self.cls(h), torch.relu(self.box(h))


@pytest.mark.parametrize("mode", ["dynamic", "static"])
def test_two_outputs_share_one_buffer_in_segments(tmp_path, mode):
    torch.manual_seed(0)
    model = TwoHeads().eval()
    quantize_model(model, "8/8", QuantConfig(act_mode=mode), example_inputs=torch.zeros(1, 1, 8, 8))
    batches = [torch.randn(8, 1, 8, 8)]
    calibrate(model, batches)
    c = compile_model(model, batches[0][:1], tmp_path / "m", "m", mode=mode, calibration=batches)
    manifest = json.loads((tmp_path / "m" / "mico.json").read_text())
    assert manifest["outputs"] == [
        {"name": "output0", "shape": [3], "offset": 0, "size": 3},
        {"name": "output1", "shape": [2], "offset": 3, "size": 2},
    ]
    header = (tmp_path / "m" / "m.h").read_text()
    assert "#define M_OUTPUT1_OFFSET 3" in header and "#define M_OUTPUT1_SIZE 2" in header
    host.build(c.project)
    x = np.random.default_rng(0).standard_normal((4, 1, 8, 8)).astype(np.float32)
    out, ref = host.run(c.project, x), c.reference(x)
    assert out.shape == (4, 5)
    if mode == "static":
        assert np.array_equal(out, ref)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
        cls, box = model(torch.from_numpy(x))  # each output, in place
        np.testing.assert_allclose(out[:, :3], cls.detach().numpy(), rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(out[:, 3:], box.detach().numpy(), rtol=1e-4, atol=1e-5)


def test_outputs_that_are_not_tensors_are_refused(tmp_path):
    class Dict(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 2)

        def forward(self, x):
            return {"y": self.fc(x)}

    with pytest.raises(CompileError, match="returns dict; the C backend takes one tensor"):
        compile_model(Dict().eval(), torch.zeros(1, 4), tmp_path / "d", "d")
