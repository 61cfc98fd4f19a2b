"""Proxy versions 5 and 6: the share of a conv's MACs inside its input (padding), the channel
lanes' fill, the per-path cost candidates (a line of each path's counts, alone or under a
forest), and older proxy files refused by name."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from mico.errors import ConfigError
from mico.hw import fit_proxy
from mico.hw.opshape import OpShape
from mico.hw.proxy import (
    FEATURES,
    PROXY_VERSION,
    LatencyProxy,
    _PathCosts,
    cost_terms,
    features,
    lane_fill,
    valid_share,
)


def conv(ic: int, oc: int, side_in: int, side_out: int, k: int = 3, stride: int = 1,
         path: str = "tiled", bits: int = 8, out_bits: int = 8) -> OpShape:  # fmt: skip
    macs = oc * side_out * side_out * ic * k * k
    return OpShape(f"c{ic}x{oc}x{side_in}", "conv2d", in_elements=ic * side_in * side_in,
                   out_elements=oc * side_out * side_out, in_bits=bits, in_signed=False,
                   out_bits=out_bits, w_bits=bits, macs=macs, in_channels=ic,
                   out_channels=oc, kh=k, kw=k, sh=stride, sw=stride,
                   out_pixels=side_out * side_out, path=path)  # fmt: skip


def test_valid_share_counts_the_taps_inside_the_input() -> None:
    # 3x3, padding 1 on a 4x4 plane: corners 4 taps, edges 6, inside 9 -> 100 of 144
    assert valid_share(conv(8, 16, 4, 4)) == pytest.approx(100 / 144)
    # on 8x8: 22 of 24 taps per axis
    assert valid_share(conv(1, 8, 8, 8)) == pytest.approx((22 / 24) ** 2)
    assert valid_share(conv(8, 16, 8, 6)) == 1.0  # no padding
    assert valid_share(conv(8, 16, 8, 8, k=1)) == 1.0
    # a 1-D row is exact: 5 taps, padding 2 on a row of 10 -> 3+4+5*6+4+3 = 44 of 50
    row = OpShape("r", "conv1d", in_elements=4 * 10, out_elements=8 * 10, in_channels=4,
                  out_channels=8, kh=1, kw=5, out_pixels=10, macs=8 * 10 * 4 * 5)  # fmt: skip
    assert valid_share(row) == pytest.approx(44 / 50)
    # a plane that is not square (a node records its size, not its sides) counts every tap
    odd = OpShape("o", "conv2d", in_elements=64 * 125, in_channels=64, out_channels=64, kh=3,
                  kw=3, out_pixels=125, macs=64 * 64 * 9 * 125)  # fmt: skip
    assert valid_share(odd) == 1.0
    assert valid_share(OpShape("fc", "linear", in_channels=64, out_channels=10, macs=640)) == 1.0
    named = dict(zip(FEATURES, features(conv(8, 16, 4, 4)), strict=True))
    assert named["log_valid_share"] == pytest.approx(math.log(100 / 144))


def test_cost_terms_are_the_nodes_counts() -> None:
    op = conv(8, 16, 4, 4)
    terms = cost_terms(np.array([features(op)]))[0]
    # MACs inside, MACs, requantized outputs, int32 outputs, pixels, inputs, channels, call
    assert terms == pytest.approx([op.macs * 100 / 144, op.macs, 256, 0, 16, 128, 16, 1])
    raw = cost_terms(np.array([features(conv(8, 16, 4, 4, out_bits=32))]))[0]
    assert (raw[2], raw[3]) == pytest.approx((0, 256))


def test_lane_fill_is_the_share_of_lane_products_a_node_owns() -> None:
    """Channel lanes hold F = 32 / w_bits output channels a word and run whole words: 24
    channels on 2-bit weights run 2 words of 16 lanes (0.75), on 4-bit weights 3 of 8 (1.0);
    the im2col paths run whole pairs; the MAC terms of the path costs count what is run."""
    assert lane_fill(conv(96, 24, 8, 8, k=1, path="lanes", bits=2)) == pytest.approx(0.75)
    assert lane_fill(conv(96, 24, 8, 8, k=1, path="lanes", bits=4)) == 1.0
    assert lane_fill(conv(16, 8, 8, 8, k=1, path="lanes", bits=2)) == pytest.approx(0.5)
    assert lane_fill(conv(1, 6, 8, 8, k=5, path="lanes", bits=4)) == pytest.approx(0.75)
    # the im2col paths run channels in pairs: an odd one out is computed twice
    assert lane_fill(conv(96, 24, 8, 8, k=1, path="tiled", bits=2)) == 1.0
    assert lane_fill(conv(8, 5, 8, 8, path="tiled_sub", bits=4)) == pytest.approx(5 / 6)
    assert lane_fill(conv(8, 5, 8, 8, path="tiled_s8", bits=8)) == 1.0  # not these paths
    # 16 channels a group: one full word each
    grouped = OpShape("g", "conv2d", in_channels=32, out_channels=32, groups=2, w_bits=2,
                      path="lanes")  # fmt: skip
    assert lane_fill(grouped) == 1.0
    op = conv(96, 24, 8, 8, k=1, path="lanes", bits=2)
    named = dict(zip(FEATURES, features(op), strict=True))
    assert named["log_lane_fill"] == pytest.approx(math.log(0.75))
    terms = cost_terms(np.array([features(op)]))[0]
    assert terms[:2] == pytest.approx([op.macs / 0.75, op.macs / 0.75])


def _synthetic(op: OpShape) -> float:
    """A path's count as a kernel makes it: per MAC run, per output, per call."""
    per_mac = {"tiled": 6.0, "lanes": 2.5}[op.path]
    return per_mac * op.macs * valid_share(op) + 30.0 * op.out_elements + 400.0


def test_path_costs_carry_a_paths_costs_to_an_unseen_size() -> None:
    """Fitted on small layers of two paths, the line predicts a layer four times larger than
    any row, on padded planes, within 2 %."""
    ops = [conv(ic, oc, side, side, path=path)
           for path in ("tiled", "lanes") for ic in (2, 4, 8) for oc in (4, 8, 16)
           for side in (4, 6, 8)]  # fmt: skip
    rows = [(op, _synthetic(op)) for op in ops]
    proxy = fit_proxy(rows, "rv32", "instructions", algorithms={"conv2d": "costs"})
    assert proxy.kinds["conv2d"].algorithm == "costs"
    held_out = [conv(32, 32, 16, 16, path=path) for path in ("tiled", "lanes")]
    predicted = proxy.predict_ops(held_out)
    for op, value in zip(held_out, predicted, strict=True):
        assert value == pytest.approx(_synthetic(op), rel=0.02)


def test_path_costs_fall_back_to_the_parent_group() -> None:
    """A group of too few rows (one width pair) takes its path's coefficients."""
    ops = [conv(ic, oc, 6, 6) for ic in (2, 4, 8) for oc in (4, 8, 16)]
    rows = [(op, _synthetic(op)) for op in ops]
    lone = conv(4, 4, 6, 6, bits=2)
    rows.append((lone, _synthetic(lone) * 1.5))
    model = fit_proxy(rows, "rv32", "instructions", algorithms={"conv2d": "costs"})
    estimator = model.kinds["conv2d"].estimator
    assert isinstance(estimator, _PathCosts)
    # the 2-bit group (1 row) is not fitted: it is predicted by the path's line
    other = conv(8, 8, 6, 6, bits=2)
    assert model.predict_ops([other])[0] == pytest.approx(_synthetic(other), rel=0.1)


@pytest.mark.parametrize("algorithm", ["costs", "costs_forest"])
def test_path_cost_proxies_round_trip(tmp_path, algorithm) -> None:
    ops = [conv(ic, oc, side, side) for ic in (2, 4, 8) for oc in (4, 8) for side in (4, 8)]
    proxy = fit_proxy([(op, _synthetic(op)) for op in ops], "rv32", "instructions",
                      algorithms={"conv2d": algorithm})  # fmt: skip
    big = [conv(16, 16, 10, 10)]
    loaded = LatencyProxy.load(proxy.save(tmp_path / "p.json"))
    assert loaded.kinds["conv2d"].algorithm == algorithm
    assert loaded.predict_ops(big) == pytest.approx(proxy.predict_ops(big), rel=1e-9)


def test_an_older_proxy_file_is_refused_by_name(tmp_path) -> None:
    ops = [conv(ic, 8, 6, 6) for ic in (2, 4, 8, 16)]
    proxy = fit_proxy([(op, _synthetic(op)) for op in ops], "rv32", "instructions",
                      algorithms={"conv2d": "linear"})  # fmt: skip
    data = proxy.to_data()
    assert data["version"] == PROXY_VERSION == 6
    data["version"] = 5  # fitted before the lanes' fill feature: its vectors are one shorter
    old = tmp_path / "rv32-old.proxy.json"
    old.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=r"rv32-old\.proxy\.json.*version 5, this mico reads 6"
                       r".*fit it again"):  # fmt: skip
        LatencyProxy.load(old)


def test_program_nodes_choose_on_held_out_models() -> None:
    """From :data:`MODEL_FOLDS` models on, a kind's candidates are scored on nodes held out by
    model (single-layer rows always train); with fewer models, by shape as before."""
    from mico.hw.proxy import MODEL_FOLDS, _fit_kind

    ops = [conv(ic, oc, side, side) for ic in (2, 4, 8) for oc in (4, 8) for side in (4, 6, 8)]
    rows = [(op, _synthetic(op) * (1.0 + 0.05 * (i % 4))) for i, op in enumerate(ops)]
    models = [f"m{i % (MODEL_FOLDS + 1)}" for i in range(len(rows) - 3)] + ["", "", ""]
    by_model = _fit_kind("conv2d", rows, 0, 0.2, candidates=("costs", "linear"),
                         model_folds=models)  # fmt: skip
    by_shape = _fit_kind("conv2d", rows, 0, 0.2, candidates=("costs", "linear"))
    assert set(by_model.holdout_mape) == {"costs", "linear"}
    assert by_model.holdout_mape != by_shape.holdout_mape
    few = [m if m in ("", "m0", "m1") else "m2" for m in models]
    fallback = _fit_kind("conv2d", rows, 0, 0.2, candidates=("costs", "linear"), model_folds=few)
    assert fallback.holdout_mape == by_shape.holdout_mape
