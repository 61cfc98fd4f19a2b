"""A conv node records its planes' sides, padding and dilation, so the share of its MACs whose
taps fall inside the input (:func:`mico.hw.proxy.valid_share`) is exact for a plane that is not
square (dscnn's 25x5) as for a square one; a record without them is still guessed."""

from __future__ import annotations

import itertools

import pytest
import torch

from mico.hw.layers import LayerShape
from mico.hw.opshape import OpShape, graph_op_shapes, op_from_layer
from mico.hw.proxy import valid_share


def _inside(size: int, out: int, kernel: int, stride: int, pad: int, dil: int) -> list[int]:
    """For each output of one axis, its taps that read the input (not the zero padding)."""
    return [sum(0 <= o * stride - pad + t * dil < size for t in range(kernel))
            for o in range(out)]  # fmt: skip


def _brute_share(in_hw, out_hw, k_hw, s_hw, p_hw, d_hw=(1, 1)) -> float:
    """The in-bounds share counted tap by tap over the whole 2-D output, independently of
    :func:`valid_share`'s per-axis product."""
    inside = total = 0
    for oy, ox in itertools.product(range(out_hw[0]), range(out_hw[1])):
        for ty, tx in itertools.product(range(k_hw[0]), range(k_hw[1])):
            iy = oy * s_hw[0] - p_hw[0] + ty * d_hw[0]
            ix = ox * s_hw[1] - p_hw[1] + tx * d_hw[1]
            inside += 0 <= iy < in_hw[0] and 0 <= ix < in_hw[1]
            total += 1
    return inside / total


def _conv(in_hw, out_hw, k_hw, s_hw, p_hw, d_hw=(1, 1), ic: int = 4, oc: int = 8) -> OpShape:
    return OpShape(
        "c", "conv2d", in_elements=ic * in_hw[0] * in_hw[1],
        out_elements=oc * out_hw[0] * out_hw[1], in_channels=ic, out_channels=oc,
        kh=k_hw[0], kw=k_hw[1], sh=s_hw[0], sw=s_hw[1], out_pixels=out_hw[0] * out_hw[1],
        macs=oc * out_hw[0] * out_hw[1] * ic * k_hw[0] * k_hw[1], in_h=in_hw[0], in_w=in_hw[1],
        out_h=out_hw[0], out_w=out_hw[1], pad_h=p_hw[0], pad_w=p_hw[1], dil_h=d_hw[0],
        dil_w=d_hw[1],
    )  # fmt: skip


@pytest.mark.parametrize(
    "in_hw, out_hw, k_hw, s_hw, p_hw, d_hw",
    [((25, 5), (25, 5), (3, 3), (1, 1), (1, 1), (1, 1)),  # dscnn's plane, 3x3 same
     ((25, 5), (13, 5), (5, 3), (2, 1), (2, 1), (1, 1)),  # strided, non-square kernel
     ((49, 10), (25, 5), (10, 4), (2, 2), (5, 1), (1, 1)),  # dscnn's first layer
     ((9, 7), (9, 7), (3, 3), (1, 1), (2, 2), (2, 2)),  # dilated
     ((4, 4), (4, 4), (3, 3), (1, 1), (1, 1), (1, 1))],  # small_cnn's second conv
)  # fmt: skip
def test_valid_share_counts_in_bounds_taps(in_hw, out_hw, k_hw, s_hw, p_hw, d_hw) -> None:
    op = _conv(in_hw, out_hw, k_hw, s_hw, p_hw, d_hw)
    assert op.planes
    assert valid_share(op) == pytest.approx(_brute_share(in_hw, out_hw, k_hw, s_hw, p_hw, d_hw))


def test_valid_share_of_25x5_with_padding_is_not_every_tap() -> None:
    # 3x3, padding 1 on 25x5: the edge outputs of an axis miss one tap, so 23 x 3 + 2 x 2 = 73
    # of 75 taps along the 25 rows and 3 x 3 + 2 x 2 = 13 of 15 along the 5 columns
    op = _conv((25, 5), (25, 5), (3, 3), (1, 1), (1, 1))
    assert _inside(25, 25, 3, 1, 1, 1) == [2] + [3] * 23 + [2]
    assert valid_share(op) == pytest.approx((73 / 75) * (13 / 15))
    assert valid_share(op) < 1.0


def test_a_record_without_planes_is_guessed_as_before() -> None:
    # no sides recorded (a record of mico before them): a square plane is guessed square, a
    # plane that is not square counts every tap
    square = OpShape("s", "conv2d", in_elements=8 * 16, out_elements=16 * 16, in_channels=8,
                     out_channels=16, kh=3, kw=3, out_pixels=16, macs=16 * 16 * 8 * 9)  # fmt: skip
    assert not square.planes
    assert valid_share(square) == pytest.approx(100 / 144)
    odd = OpShape("o", "conv2d", in_elements=64 * 125, in_channels=64, out_channels=64, kh=3,
                  kw=3, out_pixels=125, macs=64 * 64 * 9 * 125)  # fmt: skip
    assert valid_share(odd) == 1.0
    # the fields round-trip through a record's dictionary, and an old one reads as not recorded
    full = _conv((25, 5), (25, 5), (3, 3), (1, 1), (1, 1))
    assert OpShape.from_dict(full.to_dict()) == full
    old = {k: v for k, v in full.to_dict().items() if k not in ("in_h", "in_w", "out_h")}
    assert not OpShape.from_dict(old).planes


def test_nodes_and_layers_record_their_sides() -> None:
    """A lowered graph's conv node and a layer known by its shape alone both carry the planes'
    sides and padding the generator uses."""
    from mico.hw.programs import single_layer
    from mico.pipeline import lower_model, quantize_ptq
    from mico.quant import QuantConfig, QuantPlan

    shape = LayerShape("layer", "conv2d", 4, 8, (5, 3), (2, 1), 1, (25, 5), (13, 5))
    torch.manual_seed(0)
    model, sample = single_layer(shape)
    model.eval()
    x = torch.randn(2, *sample)
    quantized = quantize_ptq(model, QuantPlan.parse("layer=8/8"), [x],
                             QuantConfig(act_mode="static"))  # fmt: skip
    graph = lower_model(quantized, x[:1], "layer", calibration=[x])
    (node,) = [op for op in graph_op_shapes(graph) if op.is_mac]
    sides = (node.in_h, node.in_w, node.out_h, node.out_w, node.pad_h, node.pad_w)
    assert sides == (25, 5, 13, 5, 2, 1)
    assert valid_share(node) == pytest.approx(
        _brute_share((25, 5), (13, 5), (5, 3), (2, 1), (2, 1))
    )
    alone = op_from_layer(shape.with_bits(8, 8), in_signed=True)
    assert (alone.in_h, alone.in_w, alone.out_h, alone.out_w) == (25, 5, 13, 5)
    assert (alone.pad_h, alone.pad_w) == (2, 1)
    linear = op_from_layer(LayerShape("fc", "linear", 64, 10, (1, 1), (1, 1), 1, (1, 1), (1, 1)))
    assert not linear.planes and valid_share(linear) == 1.0


def test_input_row_alignment_reads_the_planes_width() -> None:
    """A conv's input rows of 49 2-bit codes (98 bits) start off byte boundaries, rows of 40
    (80 bits) on them; a node without planes says so (-1); a linear node's row is its inputs."""
    from mico.hw.proxy import FEATURES, features, input_row_alignment

    def row(width: int, bits: int) -> OpShape:
        return OpShape("r", "conv1d", in_elements=32 * width, in_channels=32, out_channels=32,
                       in_bits=bits, w_bits=bits, kh=1, kw=3, sw=2, out_pixels=width // 2,
                       macs=32 * 32 * 3 * (width // 2), in_h=1, in_w=width, out_h=1,
                       out_w=width // 2, pad_w=1)  # fmt: skip

    assert input_row_alignment(row(49, 2)) == 1.0  # 98 = 2 x 49
    assert input_row_alignment(row(40, 2)) == 4.0  # 80 = 16 x 5
    assert input_row_alignment(row(64, 8)) == 5.0  # whole words (capped)
    unknown = OpShape("u", "conv2d", in_elements=64, in_channels=1, kh=3, kw=3, out_pixels=64)
    assert input_row_alignment(unknown) == -1.0
    fc = OpShape("fc", "linear", in_channels=561, in_bits=4, out_channels=64, macs=561 * 64)
    assert input_row_alignment(fc) == 2.0  # 2244 = 4 x 561
    named = dict(zip(FEATURES, features(row(49, 2)), strict=True))
    assert named["input_row_align"] == 1.0
