"""F.pad (constant, reflect, replicate, circular) and adaptive pooling to sizes that do not
divide the input, in both C modes, held to the Python reference."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mico.codegen.compile import compile_model
from mico.codegen.padding import pad_index
from mico.errors import UnsupportedOpError
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host


class Net(nn.Module):
    def __init__(self, pad: nn.Module | None, pool: tuple[int, int], one_d: bool = False):
        super().__init__()
        conv = nn.Conv1d if one_d else nn.Conv2d
        self.pad, self.one_d = pad, one_d
        self.conv = conv(1, 4, 3, padding=1)
        self.pool = nn.AdaptiveAvgPool1d(pool[1]) if one_d else nn.AdaptiveAvgPool2d(pool)
        self.fc = nn.Linear(4 * (pool[1] if one_d else pool[0] * pool[1]), 3)

    def forward(self, x):
        if self.pad is not None:
            x = self.pad(x)
        return self.fc(self.pool(torch.relu(self.conv(x))).flatten(1))


CASES = {
    "zero-pad": (nn.ZeroPad2d((1, 2, 0, 1)), (2, 2), False),
    "constant-0.5": (nn.ConstantPad2d(1, 0.5), (2, 2), False),
    "reflect": (nn.ReflectionPad2d((2, 1, 1, 2)), (2, 2), False),
    "replicate": (nn.ReplicationPad2d(2), (2, 2), False),
    "circular": (nn.CircularPad2d(1), (2, 2), False),
    "uneven-3x3": (None, (3, 3), False),
    "uneven-5x2": (None, (5, 2), False),
    "1d-reflect-uneven": (nn.ReflectionPad1d(2), (1, 3), True),
}


@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_padding_and_uneven_pooling_match_the_reference(tmp_path, case, mode):
    pad, pool, one_d = CASES[case]
    torch.manual_seed(0)
    model = Net(pad, pool, one_d).eval()
    shape = (1, 10) if one_d else (1, 8, 8)
    quantize_model(model, "4/8", QuantConfig(act_mode=mode), example_inputs=torch.zeros(1, *shape))
    batches = [torch.randn(8, *shape)]
    calibrate(model, batches)
    c = compile_model(model, batches[0][:1], tmp_path / "p", "p", mode=mode, calibration=batches)
    host.build(c.project)
    x = np.random.default_rng(1).standard_normal((4, *shape)).astype(np.float32)
    out, ref = host.run(c.project, x), c.reference(x)
    if mode == "static":
        assert np.array_equal(out, ref)
    else:
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=1, max_size=3),
    st.data(),
    st.sampled_from(["constant", "reflect", "replicate", "circular"]),
)
def test_pad_index_is_torch_pad_of_the_indices(shape, data, mode):
    # torch pads the trailing 1-3 dims of a 3-5-D input in the non-constant modes
    dims = data.draw(st.integers(1, len(shape))) if mode == "constant" else len(shape)
    limit = {"reflect": lambda s: s - 1, "circular": lambda s: s}.get(mode, lambda s: 4)
    pads = []
    for d in range(dims):
        size = shape[len(shape) - 1 - d]
        pads += [data.draw(st.integers(0, max(0, min(4, limit(size))))) for _ in range(2)]
    index = torch.arange(int(np.prod(shape)), dtype=torch.float64).reshape(1, 1, *shape)
    if mode == "constant":
        expected = F.pad(index, pads, mode="constant", value=-1)
    else:
        expected = F.pad(index, pads, mode=mode)
    got = pad_index(shape, pads, mode, "pad")
    assert np.array_equal(got, expected.reshape(-1).numpy().astype(np.int64))


def test_bad_padding_is_named():
    with pytest.raises(UnsupportedOpError, match="negative padding"):
        pad_index((4, 4), [-1, 0], "constant", "pad at 'p'")
    with pytest.raises(UnsupportedOpError, match="torch allows at most 3"):
        pad_index((4, 4), [4, 0], "reflect", "pad at 'p'")
    with pytest.raises(UnsupportedOpError, match="mode 'mirror'"):
        pad_index((4, 4), [1, 1], "mirror", "pad at 'p'")


@pytest.mark.parametrize(
    "clamp",
    [
        lambda x: torch.clamp(x, -0.5, 0.3),
        lambda x: torch.clamp(x, min=0.1),
        lambda x: torch.clamp(x, max=0.2),
        lambda x: torch.clamp_min(x, -0.1),
    ],
    ids=["both", "min", "max", "clamp_min"],
)
def test_dynamic_mode_clamps_with_any_bounds(tmp_path, clamp):
    class Clamped(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            return clamp(self.fc(x))

    c = compile_model(Clamped().eval(), torch.zeros(1, 4), tmp_path / "c", "c", mode="dynamic")
    host.build(c.project)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    assert np.array_equal(host.run(c.project, x), c.reference(x))
