"""The depthwise pair path on signed codes (mico_qconv2d_dwp_f1 / _f2 in mico_dwconv.c) against
the Python integer reference, through the C program of benchmarks/kernels_rv32.py.

Signed 2- and 4-bit codes in rows of whole bytes are read straight into words of 3 lanes of 10
bits or 4 of 8 (mico_dwp_readkk: u = f ^ h folded into each line's byte, a line outside the
plane the padding h); signed codes take 4 lanes too, a layout of its own whose padding columns
are restored when a layer's channels move between 3 and 4 lanes; signed outputs without a
ReLU go by table from 3 codes up (the table holds the codes' two's-complement fields,
mico_dwp_lut, stored packed for 4-bit outputs of even rows). The cases reach signed codes in
and out at 2, 3, 4 and 8 bits, odd channel counts, planes that start inside a byte, rows of
odd width, one-row planes, padding 0 and 2, stride 2, saturating multipliers and biases,
channels that fall back (sums past 3 lanes, levels too far apart for the table), the in-place
contract, the generator's choice of path and, on rv32, the cmsis_nn layer's instructions."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen.dwconv_plan import dw_kernel, dw_lane_plan, dwp_levels
from mico.ir.ops.mico_ops import out_spec
from mico.quant.arithmetic import TERNARY, QFormat
from mico.targets import rv32
from tests.codegen import test_dw_forms, test_dw_lut
from tests.codegen.dw_sanitized import (
    check_sanitized,
    pair_path_kernels,
    pair_path_plan,
    tight_program,
)
from tests.codegen.test_dwconv_lanes import kernels_rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

S2, S3, S4, S8 = (QFormat(b, True) for b in (2, 3, 4, 8))
A2, A4 = QFormat(2, False), QFormat(4, False)


def _layer(h, w, *, a=S4, o=S4, wb=4, c=3, relu=False, **kw):
    return test_dw_lut._layer(h, w, a=a, o=o, wb=wb, c=c, relu=relu, **kw)


def _extreme(h, w, a, o, c, seed):
    """Codes and weights at their limits, multipliers that saturate, biases near int32's."""
    layer = kernels_rv32.random_layer(
        "conv", QFormat.for_bits(4, True), a, in_c=c, out_c=c, hw=max(h, w), k=3, pad=1,
        groups=c, seed=seed, o_fmt=o, relu=False, extreme=True,
    )  # fmt: skip
    layer.x = layer.x[:, :h, :w]
    return layer


def _mixed(h, w, a=S4, o=S4, c=6, seed=0, stride=1):
    """Channels that move between 4 lanes (small weights) and 3 (large ones) and back, one
    without a table (levels 300 lane values apart: its words requantize), one whose every sum
    is at the top level (4-bit weights' sums always fit 3 lanes: 15 * 63; the pairs' fallback
    of wider weights: test_dw_lut.py)."""
    layer = _layer(h, w, a=a, o=o, wb=4, c=c, seed=seed, stride=stride)
    rng = np.random.default_rng(seed)
    layer.weight[:] = rng.integers(-7, 8, size=layer.weight.shape)
    layer.weight[0] = np.array([1, 0, -1, 1, 1, 0, 0, -1, 1]).reshape(1, 3, 3)  # 4 lanes
    layer.weight[1] = 7  # 3 lanes (15 * 63)
    layer.weight[2] = 1  # 4 lanes again
    layer.weight[3] = -7  # 3 lanes at their widest
    layer.weight[4] = 7
    layer.m[4], layer.shift[4] = 2**36 // 300, 36  # levels too far apart: requantized words
    layer.bias[5] = 10**6  # every sum at the top level
    for ch in range(c):  # (multipliers for the weights set here: codes across the range)
        if ch == 4:
            continue
        span = max(1, int(np.abs(layer.weight[ch]).sum()) * 8)
        real = (o.qmax - o.qmin + 1) / (2 * span)
        layer.shift[ch] = int(np.clip(np.floor(30 - np.log2(real)), 1, 62))
        layer.m[ch] = int(np.clip(round(real * 2.0 ** int(layer.shift[ch])), 0, 2**31 - 1))
    return layer


def _cases() -> list:
    layers = [
        _layer(16, 16, c=5, seed=1),  # W4A4 signed in and out: 3 lanes, stored packed by table
        _layer(16, 16, o=A4, relu=True, c=3, seed=2),  # signed in, a ReLU
        _layer(16, 16, a=A4, c=3, seed=3),  # unsigned in, signed out
        _layer(16, 16, a=S2, o=S2, wb=2, c=5, seed=4),  # W2A2: 4 lanes, the table (3 codes)
        _layer(16, 16, a=S2, o=S2, wb=4, c=3, seed=5),  # 2-bit codes, 4-bit weights
        _layer(16, 12, a=S2, o=S4, c=3, seed=6),  # 2-bit codes in, 4-bit out
        _layer(16, 16, a=S4, o=S2, c=3, seed=7),  # 4-bit in, 2-bit out
        _layer(16, 16, a=S3, o=S3, wb=3, c=3, seed=8),  # 3-bit codes: read field by field
        _layer(16, 16, o=S3, c=3, seed=9),  # 3-bit outputs by table, staged
        _layer(17, 16, c=3, seed=10),  # 17 lines: the last lane's lines past the plane
        _layer(1, 16, c=3, seed=11),  # one row
        _layer(2, 16, a=S2, o=S2, wb=2, c=3, seed=12),
        _layer(16, 15, c=3, seed=13),  # odd rows: planes from inside a byte, read by field
        _layer(16, 9, a=S2, o=S2, wb=2, c=3, seed=14),  # 18 bits a row
        _layer(5, 5, c=3, seed=15),  # short rows (words of K lanes from the bytes)
        _layer(7, 6, a=S2, o=S2, wb=2, c=5, seed=16),
        _layer(11, 8, c=3, pad=0, seed=17),  # no padding: rows of 6 outputs
        _layer(12, 16, c=3, pad=2, seed=18),  # padding 2
        _layer(16, 16, o=S4, relu=True, c=3, seed=19),  # signed outputs after a ReLU: table
        _layer(16, 16, a=S2, o=S2, wb=2, relu=True, c=3, seed=32),  # (0, 1: no table)
        _layer(16, 16, a=S2, o=A2, wb=2, relu=True, c=3, seed=33),  # 4 codes from 0: table
        _layer(18, 18, a=S2, o=A2, wb=2, relu=True, c=3, stride=2, seed=34),  # thresholds
        _layer(16, 16, o=S8, c=3, seed=20),  # 8-bit outputs: the multiply, stored straight
        _layer(16, 16, a=S8, o=S4, c=3, seed=21),  # 8-bit codes in: pairs, by requantization
        _layer(32, 32, c=3, stride=2, seed=22),  # stride 2: 4-bit outputs stored packed
        _layer(18, 18, a=S2, o=S2, wb=2, c=3, stride=2, seed=23),  # stride 2, staged
        _layer(16, 16, o=QFormat(4, True), wb=TERNARY, c=3, seed=24),  # ternary: 4 lanes
        _extreme(16, 16, S4, S4, 3, 25),
        _extreme(16, 16, S2, S2, 3, 26),
        _extreme(5, 5, S4, S4, 3, 27),
        _mixed(16, 16, seed=28),
        _mixed(16, 16, a=S2, o=S2, seed=29),
        _mixed(7, 6, seed=30),  # short rows: 3 and 4 lanes from the bytes
        _mixed(32, 32, seed=31, stride=2),
    ]
    return layers


def test_signed_bit_exact(monkeypatch):
    """Every case equals the reference through its form's entry point and the plain kernel;
    the kernel's form code is the generator's mirror (test_dw_forms)."""
    layers = _cases()
    for layer, kernel in zip(layers, pair_path_kernels(monkeypatch, layers), strict=True):
        assert kernel == f"mico_qconv2d_dwp_f{layer.stride}{test_dw_forms._mirror(layer)[1]}"


def test_signed_forms_mirror(monkeypatch, tmp_path):
    """The generator's form code is the kernel's on every case; the cases meet the words of K
    lanes on signed codes stored packed (_r_k_n) and by table (_r_k_l), the pairs' and the
    stride-2 forms."""
    layers = _cases()
    codes = test_dw_forms._kernel_codes(layers, monkeypatch, tmp_path)
    forms = test_dw_forms._header_forms()
    names = set()
    for layer, code in zip(layers, codes, strict=True):
        mine, suffix = test_dw_forms._mirror(layer)
        name = f"mico_qconv2d_dwp_f{layer.stride}{suffix}"
        assert code >= 0 and mine == code == forms[name], (layer.a_fmt, layer.o_fmt, name)
        names.add(name)
    assert {"mico_qconv2d_dwp_f1_r_k_n_x", "mico_qconv2d_dwp_f1_r_k_l_x"} <= names
    assert {"mico_qconv2d_dwp_f1_r_k_n", "mico_qconv2d_dwp_f2_r_k_n"} <= names


def test_signed_levels():
    """The table of signed outputs without a ReLU: from 3 codes (2-bit, -1..1) up; after a
    ReLU from code 0 (4-bit: 0..7), none for fewer than 5 codes there (2-bit: 0, 1), none for
    8-bit codes in."""
    spec = lambda lay: out_spec(lay.o_fmt, 1.0, list(lay.m), list(lay.shift))  # noqa: E731
    for a, o, n in ((S4, S4, 14), (S2, S2, 2), (A4, S3, 6), (S2, S4, 14)):
        lay = _layer(8, 8, a=a, o=o, c=3)
        lvl = dwp_levels(lay.weight, lay.bias, spec(lay), False, lay.a_fmt)
        assert lvl is not None and lvl.shape == (3 * (n + 1),)
    lay = _layer(8, 8, c=3)
    lvl = dwp_levels(lay.weight, lay.bias, spec(lay), True, lay.a_fmt)
    assert lvl is not None and lvl.shape == (3 * 8,)
    lay = _layer(8, 8, a=S2, o=S2, c=3)
    assert dwp_levels(lay.weight, lay.bias, spec(lay), True, lay.a_fmt) is None
    lay = _layer(8, 8, a=S8, c=3)
    assert dwp_levels(lay.weight, lay.bias, spec(lay), False, lay.a_fmt) is None


def test_signed_sanitized(monkeypatch):
    """ASan + UBSan (one program): outputs that end exactly at their buffer's end; and the
    in-place contract (input and output the same buffer, as the memory plan may give a
    depthwise layer): a channel's plane is read into the lanes before its outputs are
    stored."""
    apart = [_layer(16, 16, c=3, seed=40), _mixed(16, 16, a=S2, o=S2, c=6, seed=41),
             _layer(16, 15, c=3, seed=42), _mixed(7, 6, seed=43)]  # fmt: skip
    in_place = [_layer(16, 16, c=5, seed=50), _layer(16, 16, a=S2, o=S2, wb=2, c=3, seed=51),
                _mixed(16, 16, seed=52), _layer(5, 5, c=3, seed=53)]  # fmt: skip
    layers = apart + in_place
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", pair_path_plan)
    program = "#include <string.h>\n" + tight_program(layers)
    for i, layer in enumerate(in_place, start=len(apart)):
        entry = f"mico_qconv2d_dwp_f1{test_dw_forms._mirror(layer)[1]}"
        call = f"{entry}(&L{i}_p_dw, &L{i}_l_dw, L{i}_x, y);"
        assert program.count(call) == 1, call
        program = program.replace(
            call, f"memcpy(y, L{i}_x, sizeof L{i}_x); {entry}(&L{i}_p_dw, &L{i}_l_dw, y, y);"
        )
    check_sanitized(program, layers, "-O1")


def test_plan_takes_the_pairs_on_signed_codes():
    """The generator takes the pair path (words of K lanes on the rows) for cmsis_nn's layer,
    16 x 16 planes of signed 4- and 2-bit codes, over the pixel lanes (which it estimated
    below the pairs at W2A2); W8A8 keeps the byte path; unsigned 2-bit codes with ternary
    weights keep the bit-sliced path."""
    rng = np.random.default_rng(0)
    w4 = rng.integers(-7, 8, size=(32, 1, 3, 3))
    w2 = rng.integers(-1, 2, size=(32, 1, 3, 3))
    w8 = rng.integers(-127, 128, size=(32, 1, 3, 3))

    def kernel(w, a, o):
        return dw_kernel(dw_lane_plan(w, a, (16, 16), (16, 16), (1, 1), (1, 1), (1, 1), o))

    assert kernel(w4, S4, S4) == "mico_qconv2d_dwp_f1"
    assert kernel(w4, S4, A4) == "mico_qconv2d_dwp_f1"
    assert kernel(w2, S2, S2) == "mico_qconv2d_dwp_f1"
    assert kernel(w2, S2, A2) == "mico_qconv2d_dwp_f1"
    assert kernel(w8, S8, S8) == "mico_qconv2d_dw8_f1"
    assert kernel(w2, A2, A2) == "mico_qconv2d_dwbs_s1"


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_signed_depthwise():
    """On rv32imac (qemu), kernels_rv32's depthwise 32 x 16 x 16 with signed codes in and out
    without a ReLU (cmsis_nn's first layer): W4A4 and W2A2 take the pair path as the generator
    picks it, bit-exact, W4A4 in at most 1 / 1.5 of W8A8's instructions, W2A2 1 / 2."""
    shape = dict(kernels_rv32.SHAPES["depthwise3x3 32ch 16×16 pad1"])
    shape.pop("kind")
    layers = [
        kernels_rv32.random_layer(
            "conv", QFormat.for_bits(b, True), QFormat(b, True), relu=False, seed=b, **shape
        )
        for b in (8, 4, 2)
    ]
    for layer in layers:
        layer.meta["sized"] = True
    results = kernels_rv32.run_layers(layers, "rv32", ("chosen",))
    counts = {}
    for layer, ((kernel, n, out),) in zip(layers, results, strict=True):
        assert np.array_equal(out, layer.reference().ravel()), kernel
        counts[layer.a_fmt.bits] = (kernel, n)
    assert counts[4][0].startswith("mico_qconv2d_dwp_f1_r_k_n"), counts
    assert counts[2][0].startswith("mico_qconv2d_dwp_f1_r_k_l"), counts
    assert 3 * counts[4][1] <= 2 * counts[8][1], counts
    assert 2 * counts[2][1] <= counts[8][1], counts
