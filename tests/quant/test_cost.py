"""Layer costs against hand formulas: MACs, BOPs, packed weight and activation bytes."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mico.quant import TERNARY, QuantConfig, get_model_macs, model_costs, quantize_model

DYNAMIC = QuantConfig(act_mode="dynamic")


def _conv_out(size: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (size + 2 * pad - dil * (k - 1) - 1) // stride + 1


def _conv2d_macs(conv: nn.Conv2d, h: int, w: int) -> tuple[int, tuple[int, int, int]]:
    oh = _conv_out(h, conv.kernel_size[0], conv.stride[0], conv.padding[0], conv.dilation[0])
    ow = _conv_out(w, conv.kernel_size[1], conv.stride[1], conv.padding[1], conv.dilation[1])
    per_output = (conv.in_channels // conv.groups) * conv.kernel_size[0] * conv.kernel_size[1]
    return conv.out_channels * oh * ow * per_output, (conv.out_channels, oh, ow)


@settings(max_examples=50, deadline=None)
@given(
    groups=st.sampled_from([1, 2, 4]),
    out_mult=st.integers(1, 3),
    kh=st.integers(1, 10),
    kw=st.integers(1, 4),
    stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    padding=st.tuples(st.integers(0, 3), st.integers(0, 2)),
    dilation=st.tuples(st.integers(1, 2), st.integers(1, 3)),
    h=st.integers(20, 28),
    w=st.integers(12, 16),
)
def test_conv2d_macs_match_formula(
    groups: int,
    out_mult: int,
    kh: int,
    kw: int,
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    h: int,
    w: int,
) -> None:
    conv = nn.Conv2d(4, groups * out_mult, (kh, kw), stride, padding, dilation, groups=groups)
    x = torch.zeros(1, 4, h, w)
    macs, out_shape = _conv2d_macs(conv, h, w)
    table = model_costs(nn.Sequential(conv), x, bits={"0": (4, 8)})
    cost = table["0"]
    assert cost.kind == "Conv2d"
    assert cost.input_shape == (4, h, w)
    assert cost.output_shape == out_shape
    assert cost.macs == macs
    assert cost.params == conv.weight.numel()
    assert get_model_macs(nn.Sequential(conv), (1, 4, h, w)) == macs
    # a batch does not change the per-sample cost
    assert model_costs(nn.Sequential(conv), torch.zeros(3, 4, h, w)).macs == macs


def test_known_conv2d_10x4_groups() -> None:
    conv = nn.Conv2d(4, 6, (10, 4), stride=(2, 1), padding=(3, 1), dilation=(1, 2), groups=2)
    # out: H = (20 + 6 - 9 - 1) // 2 + 1 = 9, W = (11 + 2 - 6 - 1) + 1 = 7
    table = model_costs(nn.Sequential(conv), torch.zeros(1, 4, 20, 11))
    assert table["0"].output_shape == (6, 9, 7)
    assert table.macs == 6 * 9 * 7 * 2 * 40


def test_depthwise_conv_macs() -> None:
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=8)
    assert get_model_macs(nn.Sequential(conv), (1, 8, 5, 5)) == 8 * 25 * 9


@pytest.mark.parametrize("length", [16, 33, 100])
def test_conv1d_macs_scale_with_sequence_length(length: int) -> None:
    conv = nn.Conv1d(3, 5, 4, stride=2, padding=1, dilation=2)
    out_len = _conv_out(length, 4, 2, 1, 2)
    table = model_costs(nn.Sequential(conv), torch.zeros(2, 3, length))
    assert table["0"].kind == "Conv1d"
    assert table["0"].output_shape == (5, out_len)
    assert table.macs == 5 * out_len * 3 * 4


@pytest.mark.parametrize("steps", [1, 7, 20])
def test_linear_on_sequences_counts_every_position(steps: int) -> None:
    model = nn.Sequential(nn.Linear(12, 5))
    table = model_costs(model, torch.zeros(2, steps, 12))
    assert table["0"].input_shape == (steps, 12)
    assert table["0"].output_shape == (steps, 5)
    assert table.macs == steps * 12 * 5
    assert model_costs(model, torch.zeros(1, 12)).macs == 60


class Mixed(nn.Module):
    """A conv, a shared linear called twice, a ternary head; ``head`` registered first."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(8, 3)
        self.conv = nn.Conv1d(2, 4, 3, padding=1)
        self.mix = nn.Linear(8, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)).flatten(1)[:, :8]
        y = torch.relu(self.mix(y))
        y = torch.relu(self.mix(y))
        return self.head(y)


def _quantized_mixed() -> Mixed:
    torch.manual_seed(0)
    return quantize_model(Mixed(), [[5, 3, TERNARY], [8, 4, 1.58]], DYNAMIC)


def test_quantized_costs_bops_bytes_and_totals() -> None:
    model = _quantized_mixed()
    x = torch.zeros(1, 2, 6)
    table = model_costs(model, x)
    assert [c.name for c in table.layers] == ["conv", "mix", "head"]  # execution order
    conv, mix, head = table.layers
    assert (conv.w_bits, conv.a_bits) == (5, 8)
    assert (mix.w_bits, mix.a_bits) == (3, 4)
    assert (head.w_bits, head.a_bits) == (TERNARY, TERNARY)
    assert conv.macs == 4 * 6 * 2 * 3
    assert mix.macs == 2 * 8 * 8  # a shared layer counts at every call
    assert head.macs == 8 * 3
    assert conv.bops == conv.macs * 5 * 8
    assert mix.bops == mix.macs * 3 * 4
    assert head.bops == pytest.approx(head.macs * 1.58 * 1.58)
    assert conv.params == 24 and mix.params == 64 and head.params == 24
    assert conv.weight_bytes == math.ceil(24 * 5 / 8)  # 15
    assert mix.weight_bytes == math.ceil(64 * 3 / 8)  # 24
    assert head.weight_bytes == math.ceil(24 * 2 / 8)  # ternary is stored in 2 bits
    assert conv.activation_bytes == math.ceil(2 * 6 * 8 / 8)
    assert mix.activation_bytes == math.ceil(8 * 4 / 8)
    assert head.activation_bytes == math.ceil(8 * 2 / 8)
    assert table.macs == conv.macs + mix.macs + head.macs
    assert table.bops == pytest.approx(conv.bops + mix.bops + head.bops)
    assert table.weight_bytes == 15 + 24 + 6
    assert table.params == 24 + 64 + 24
    assert table.max_activation_bytes == 12
    total = table.to_dict()["total"]
    assert total == {
        "params": 112,
        "macs": table.macs,
        "bops": table.bops,
        "weight_bytes": 45,
        "max_activation_bytes": 12,
    }
    assert [layer["name"] for layer in table.to_dict()["layers"]] == ["conv", "mix", "head"]
    assert table.to_dict()["layers"][2]["weight_bytes"] == 6
    with pytest.raises(KeyError):
        table["nope"]


def test_cost_does_not_change_the_model_state() -> None:
    model = _quantized_mixed()
    model.train()
    modes = [m.mode for m in (model.conv, model.mix, model.head)]
    model_costs(model, torch.zeros(1, 2, 6))
    assert model.training
    assert [m.mode for m in (model.conv, model.mix, model.head)] == modes


def test_markdown_table_has_one_row_per_layer_and_a_total() -> None:
    table = model_costs(_quantized_mixed(), torch.zeros(1, 2, 6))
    lines = table.to_markdown().strip().splitlines()
    assert len(lines) == 2 + 3 + 1  # header, separator, layers, total
    assert lines[0].startswith("| layer |")
    assert [line.split("|")[1].strip() for line in lines[2:5]] == ["conv", "mix", "head"]
    head_cells = [c.strip() for c in lines[4].split("|")[1:-1]]
    assert head_cells[4:6] == ["1.58", "1.58"]
    assert head_cells[7] == "24"  # MACs
    assert head_cells[9] == "6"  # weight bytes
    total_cells = [c.strip() for c in lines[5].split("|")[1:-1]]
    assert total_cells[0] == "**total**"
    assert total_cells[6:8] == [str(table.params), str(table.macs)]
    assert total_cells[9] == str(table.weight_bytes)


def test_float_layers_with_given_bits() -> None:
    torch.manual_seed(0)
    model = Mixed()
    table = model_costs(
        model, torch.zeros(1, 2, 6), bits={"conv": (8, 8), "mix": (4, 2), "head": (TERNARY, 8)}
    )
    assert table["mix"].bops == table["mix"].macs * 8
    assert table["head"].weight_bytes == 6
    assert table["conv"].weight_bytes == 24
    assert len(table.to_markdown().strip().splitlines()) == 6


def test_float_model_costs_at_32_bits() -> None:
    model = nn.Sequential(nn.Linear(4, 3))
    table = model_costs(model, torch.zeros(1, 4))
    assert table["0"].bops == 12 * 32 * 32
    assert table.weight_bytes == 12 * 4
    assert table["0"].activation_bytes == 16
    assert len(table.to_markdown().strip().splitlines()) == 4


def test_model_costs_needs_an_example() -> None:
    with pytest.raises(ValueError, match="example_inputs"):
        model_costs(nn.Sequential(nn.Linear(2, 2)))
    with pytest.raises(TypeError, match="shape tuple or an example tensor"):
        get_model_macs(nn.Sequential(nn.Linear(2, 2)), 5)
    assert get_model_macs(nn.Sequential(nn.Linear(2, 3)), torch.zeros(4, 2)) == 6
