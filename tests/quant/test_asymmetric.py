"""Asymmetric (zero-point) activation quantization: the shifted-code arithmetic, calibration,
dynamic per-sample zero points, the Bit layers and their checkpoints."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mico.errors import PlanError
from mico.ir.serialize import decode_attr, encode_attr
from mico.quant import QFormat, QuantConfig, calibrate, pack, quantize, quantize_model, unpack
from mico.quant.arithmetic import (
    dynamic_asymmetric,
    inv_scale_f32,
    quantize_multiplier,
    quantize_shifted,
    requantize,
    round_half_away,
)
from mico.quant.packing import lane_plan
from mico.quant.scales import asymmetric_params, choose_asymmetric, choose_scale

BITS = st.integers(2, 8)


def textbook(x: np.ndarray, scale: float, zero: int, bits: int) -> np.ndarray:
    """``q = clamp(round(x / s) + z, 0, 2**b - 1)``, returned as the shifted code ``q - z``
    (``x / s`` evaluated as mico does: float32 ``x * float32(1 / s)``)."""
    v = np.asarray(x, dtype=np.float32) * inv_scale_f32(scale)
    q = np.clip(round_half_away(v) + zero, 0, 2**bits - 1)
    return q - zero


@settings(max_examples=60, deadline=None)
@given(
    bits=BITS,
    data=st.data(),
    scale=st.floats(1e-3, 10.0),
    values=st.lists(st.floats(-1e3, 1e3, width=32), min_size=1, max_size=40),
)
def test_quantize_is_the_textbook_zero_point_formula(bits, data, scale, values):
    zero = data.draw(st.integers(0, 2**bits - 1))
    fmt = QFormat.asymmetric(bits, zero)
    x = np.asarray(values, dtype=np.float32)
    codes = quantize(x, scale, fmt)
    assert np.array_equal(codes, textbook(x, scale, zero, bits))
    assert (fmt.qmin, fmt.qmax) == (-zero, 2**bits - 1 - zero)
    # the codes dequantize as s * c, and survive packing as unsigned fields c + z
    assert np.array_equal(unpack(pack(codes, fmt), x.size, fmt), codes)
    fields = unpack(pack(codes, fmt), x.size, QFormat(bits, False))
    assert np.array_equal(fields, codes + zero)


@settings(max_examples=60, deadline=None)
@given(
    bits=BITS,
    data=st.data(),
    real=st.floats(1e-6, 0.9),
    acc=st.lists(st.integers(-(2**24), 2**24), min_size=1, max_size=40),
)
def test_requantize_is_the_textbook_zero_point_formula(bits, data, real, acc):
    zero = data.draw(st.integers(0, 2**bits - 1))
    m, shift = quantize_multiplier(real)
    a = np.asarray(acc, dtype=np.int64)
    v = a * m
    r = np.where(v < 0, -((np.abs(v) + (1 << (shift - 1))) >> shift),
                 (np.abs(v) + (1 << (shift - 1))) >> shift)  # fmt: skip
    expected = np.clip(r + zero, 0, 2**bits - 1) - zero
    assert np.array_equal(requantize(a, m, shift, QFormat.asymmetric(bits, zero)), expected)


@pytest.mark.parametrize("bits", range(2, 9))
def test_a_skewed_range_uses_every_code(bits):
    x = np.linspace(-0.17, 6.0, 20_000, dtype=np.float32)  # a GELU-like range
    scale, zero = choose_asymmetric(x, bits, "minmax")
    assert zero == round(0.17 / scale) and (zero > 0 or bits < 5)  # -0.17 rounds to code 0
    codes = quantize(x, scale, QFormat.asymmetric(bits, zero))
    assert len(np.unique(codes)) == 2**bits
    # symmetric signed codes leave nearly half of theirs unused on this range
    sym = quantize(x, choose_scale(x, QFormat(bits, True), "max"), QFormat(bits, True))
    assert len(np.unique(sym)) < 2**bits * 0.6


def test_non_negative_data_calibrates_to_zero_point_zero():
    x = np.abs(np.random.default_rng(0).standard_normal(5000)).astype(np.float32)
    for method in ("minmax", "percentile", "mse"):
        scale, zero = choose_asymmetric(x, 4, method)  # type: ignore[arg-type]
        assert zero == 0 and scale > 0
    assert asymmetric_params(0.0, 0.0, 8) == (1.0, 0)  # an all-zero range
    assert asymmetric_params(-3.0, -1.0, 4)[1] == 15  # all negative: the top code is 0
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
    config = QuantConfig(act_asymmetric=True, act_method="minmax")
    quantize_model(model, "4/4", config, example_inputs=torch.zeros(1, 8))
    calibrate(model, [torch.randn(32, 8)])
    assert model[2].a_fmt == QFormat(4, False)  # after ReLU: plain unsigned codes, z = 0
    assert model[0].act_zero > 0  # the normal inputs straddle 0


@pytest.mark.parametrize("bits", [2, 3, 4, 8])
def test_asymmetric_codes_beat_symmetric_ones_on_skewed_data(bits):
    """GELU outputs of normal data: min -0.17, long positive tail. Signed symmetric codes spend
    half their range below -0.17; shifted codes put every code inside the range."""
    x = torch.nn.functional.gelu(torch.randn(50_000) * 2).numpy()
    scale, zero = choose_asymmetric(x, bits, "mse")
    asym = quantize(x, scale, QFormat.asymmetric(bits, zero)) * np.float32(scale)
    fmt = QFormat(bits, True)
    s_sym = choose_scale(x, fmt, "mse")
    sym = quantize(x, s_sym, fmt) * np.float32(s_sym)
    mse_asym, mse_sym = np.mean((asym - x) ** 2), np.mean((sym - x) ** 2)
    assert mse_asym < 0.7 * mse_sym


def test_dynamic_zero_points_follow_each_sample():
    x = torch.tensor([[-1.0, 0.5, 3.0, 2.0], [0.0, 0.0, 0.0, 0.0], [0.5, 1.0, 2.0, 4.0]])
    s, z = dynamic_asymmetric(x, 4)
    assert s.shape == (3, 1) and z.shape == (3, 1)
    assert s[0, 0] == np.float32(4.0) / np.float32(15) and z[0, 0] == round(1.0 / float(s[0, 0]))
    assert (s[1, 0], z[1, 0]) == (1.0, 0.0)  # all zero: scale 1, zero point 0
    assert z[2, 0] == 0  # non-negative: unsigned
    codes = quantize_shifted(x, s, z, 4)
    for row in range(3):
        expected = textbook(x[row].numpy(), float(s[row, 0]), int(z[row, 0]), 4)
        assert np.array_equal(codes[row].numpy(), expected)
    assert len(torch.unique(codes[0])) == 4 and codes[0].min() == -z[0, 0]


def test_formats_refuse_what_they_cannot_hold():
    with pytest.raises(PlanError, match="unsigned codes of 2 or more bits"):
        QFormat(4, True, 3)
    with pytest.raises(PlanError, match="unsigned codes of 2 or more bits"):
        QFormat(1, False, 1)
    with pytest.raises(PlanError, match="outside"):
        QFormat(4, False, 16)
    with pytest.raises(PlanError, match="act_asymmetric"):
        QuantConfig(act_asymmetric="yes")  # type: ignore[arg-type]
    assert QFormat.for_bits(1.58, False, 1) == QFormat(2, True)  # ternary stays symmetric
    assert QFormat.for_bits(4, True, 5) == QFormat(4, True)  # signed codes ignore it
    fmt = QFormat.asymmetric(6, 9)
    assert str(fmt) == "uint6z9" and fmt.negative and fmt.ctype == "int16_t"
    assert decode_attr(encode_attr(fmt)) == fmt
    assert encode_attr(QFormat(4, False)) == {"$qformat": {"bits": 4, "signed": False}}


def test_lanes_hold_shifted_codes_as_signed_sums():
    plan = lane_plan(QFormat(2, True), QFormat.asymmetric(4, 3))
    assert plan is not None and plan["is_signed"] == 1
    unsigned = lane_plan(QFormat(2, True), QFormat(4, False))
    assert unsigned is not None and unsigned["is_signed"] == 0


def _skewed_model(config: QuantConfig, plan: str = "4/4") -> nn.Sequential:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 16), nn.GELU(), nn.Linear(16, 6)).eval()
    quantize_model(model, plan, config, example_inputs=torch.zeros(1, 12))
    calibrate(model, [torch.randn(64, 12) + 1.0])
    return model


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_layers_compute_with_shifted_codes(mode):
    model = _skewed_model(QuantConfig(act_mode=mode, act_asymmetric=True))
    x = torch.randn(5, 12) + 1.0
    with torch.no_grad():
        exact = model(x)  # eval: the integer path the C follows
        model.train()
        fake = model(x)  # fake quantization (QAT)
    assert torch.allclose(exact, fake, atol=1e-5)
    if mode == "static":
        assert model[2].a_fmt.zero > 0 and model[0].a_fmt.zero > 0
    else:
        assert model[2].a_fmt.zero == 0 and model[2].asymmetric


def test_asymmetric_beats_symmetric_on_a_skewed_layer():
    x = torch.randn(256, 12) + 1.0
    errors = {}
    for asym in (False, True):
        model = _skewed_model(QuantConfig(act_asymmetric=asym, act_method="mse"), "8/3")
        with torch.no_grad():
            out = model(x)
            for layer in model.modules():
                if hasattr(layer, "mode"):
                    layer.mode = "float"
            ref = model(x)
        errors[asym] = float(((out - ref) ** 2).mean())
    assert errors[True] < 0.8 * errors[False]


def test_checkpoints_keep_and_default_the_zero_point():
    asym = _skewed_model(QuantConfig(act_asymmetric=True))
    state = asym.state_dict()
    assert "2.activation_zero" in state and int(state["2.activation_zero"]) > 0
    again = _skewed_model(QuantConfig(act_asymmetric=True))
    again[2].activation_zero.fill_(0)
    again.load_state_dict(state)
    assert again[2].a_fmt == asym[2].a_fmt
    # symmetric layers keep the state dict they always had (old checkpoints load unchanged)
    sym = _skewed_model(QuantConfig())
    sym_state = sym.state_dict()
    assert not any(k.endswith("activation_zero") for k in sym_state)
    # an asymmetric layer loading a checkpoint from before zero points: its symmetric codes
    fresh = _skewed_model(QuantConfig(act_asymmetric=True))
    fresh.load_state_dict(sym_state)
    assert fresh[2].a_fmt == sym[2].a_fmt and fresh[2].act_zero == 0
    x = torch.randn(4, 12) + 1.0
    with torch.no_grad():
        assert torch.equal(fresh(x), sym(x))
    assert QuantConfig.from_dict({"act_mode": "static"}).act_asymmetric is False


@pytest.mark.parametrize("bits", [3, 8])
def test_debug_dumps_decode_shifted_codes(bits):
    """``mico verify``'s layer-by-layer comparison reads arena bytes as codes: fields minus z."""
    from mico.execute.layerwise import decode
    from mico.ir.dtypes import DataType
    from mico.ir.graph import Value
    from mico.ir.types import TensorType

    fmt = QFormat.asymmetric(bits, 2**bits // 3)
    codes = np.arange(fmt.qmin, fmt.qmax + 1)
    value = Value("x", TensorType((1, codes.size), DataType.uint(bits)), qformat=fmt)
    assert np.array_equal(decode(value, pack(codes, fmt).tobytes()), codes)


def test_run_configs_and_the_cli_reach_the_option():
    from typer.testing import CliRunner

    from mico.cli import app
    from mico.errors import ConfigError
    from mico.runconfig import parse_run_config

    assert parse_run_config({"quantize": {"act_asymmetric": True}}).act_asymmetric is True
    assert parse_run_config({}).act_asymmetric is False
    with pytest.raises(ConfigError, match=r"quantize\.act_asymmetric"):
        parse_run_config({"quantize": {"act_asymmetric": "yes"}})
    for command in ("train", "compile", "verify"):
        result = CliRunner().invoke(app, [command, "--help"], terminal_width=200)
        assert "--act-asymmetric" in result.output
