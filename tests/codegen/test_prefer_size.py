"""``prefer="size"`` (``mico compile --prefer size``): every layer on the plain kernels, the
least code in flash, still bit for bit the Python reference; ``speed`` (the default) keeps
the fast paths."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from mico.cli import app
from mico.codegen.compile import compile_model
from mico.errors import ConfigError
from mico.pipeline import quantize_ptq
from mico.quant import QuantPlan
from mico.targets import host, rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

#: the entry points a size-preferring program may call (plus the input quantization)
PLAIN = {"mico_qconv2d_tiled", "mico_qconv2d_depthwise3x3", "mico_qlinear"}


class DepthwiseNet(nn.Module):
    """A first conv, a depthwise / pointwise pair and a classifier: every layer kind whose
    fast paths (pixel and channel lanes, word kernels) add code."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3, padding=1)
        self.dw = nn.Conv2d(16, 16, 3, padding=1, groups=16)
        self.pw = nn.Conv2d(16, 32, 1)
        self.fc = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv(x))
        x = torch.relu(self.pw(torch.relu(self.dw(x))))
        return self.fc(x.mean((2, 3)))


def _compiled(tmp_path, prefer, bits=4):
    torch.manual_seed(0)
    batches = [torch.randn(8, 1, 16, 16) for _ in range(2)]
    plan = QuantPlan.parse(",".join(f"{n}={bits}/{bits}" for n in ("conv", "dw", "pw", "fc")))
    model = quantize_ptq(DepthwiseNet().eval(), plan, batches)
    return compile_model(model, batches[0][:1], tmp_path / prefer, name="m", mode="static",
                         calibration=batches, prefer=prefer)  # fmt: skip


def _calls(compiled) -> set[str]:
    source = (compiled.project.directory / "m.c").read_text()
    return set(re.findall(r"\b(mico_q(?:conv2d|linear)\w*)\(", source))


@pytest.mark.parametrize("bits", [4, 2])
def test_size_preference_calls_the_plain_kernels_bit_exact(tmp_path, bits):
    speed, size = _compiled(tmp_path, "speed", bits), _compiled(tmp_path, "size", bits)
    assert not _calls(speed) <= PLAIN  # the fast paths, where the generator takes them
    assert _calls(size) <= PLAIN and _calls(size)
    assert size.project.prefer == "size" and speed.project.prefer == "speed"
    manifest = json.loads((size.project.directory / "mico.json").read_text())
    assert manifest["prefer"] == "size"
    samples = np.random.default_rng(1).standard_normal((4, 1, 16, 16)).astype(np.float32)
    host.build(size.project)
    np.testing.assert_array_equal(host.run(size.project, samples), size.reference(samples))
    # constants: no lane words' padding, no depthwise output tables
    assert size.project.const_bytes <= speed.project.const_bytes
    if rv32.available():  # less code in the program's flash
        assert rv32.model_sizes(size.project)["flash"] < rv32.model_sizes(speed.project)["flash"]


def test_unknown_preference_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown kernel preference 'fast'.*'speed'.*'size'"):
        _compiled(tmp_path, "fast")
    assert not (tmp_path / "fast").exists()


def test_cli_compile_prefer_size(tmp_path):
    out = tmp_path / "c"
    result = CliRunner().invoke(
        app, ["compile", "mlp", "--plan", "2/2", "--mode", "static", "--prefer", "size",
              "-o", str(out)],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "--prefer size" in result.output
    assert json.loads((out / "mico.json").read_text())["prefer"] == "size"
    assert "mico_qlinear_sub" not in (out / "model.c").read_text()  # neither _sub4 nor _sub2
