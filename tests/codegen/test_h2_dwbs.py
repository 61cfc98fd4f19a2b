"""Depthwise 3x3 bit-sliced (mico_qconv2d_dwbs in mico_dwconv.c, chosen by
mico.codegen.dwconv_plan.dwb_plan) against the Python integer reference, through the C program
of benchmarks/kernels_rv32.py (one host program for the kernel cases, one under ASan + UBSan;
the benchmark's stride-2 case on rv32 under qemu).

The kernel cases call the bit-sliced entry point whatever the plan would choose: 2-bit
unsigned codes in, weights in {-1, 0, 1} (ternary 2-bit codes, 1-bit {-1, +1}, 4-bit codes
holding only those), 1- and 2-bit unsigned outputs with and without a ReLU; odd planes, rows
of 1..63 codes, planes whose channels start inside a byte, stride 2 (rows of up to 62 codes,
odd and even sizes, rows on 1 to 15 whole bytes or from inside a byte); multipliers whose
shift is 32 or less and above, ties of the rounding, biases that put every sum at the top or
bottom level, saturating scales; and the layers the kernel hands to the pair path (a weight
-2 or 3, a bias near the int32 limits, rows of 32 codes, 64 at stride 2, padding 0, 4-bit
codes)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from mico.codegen.dwconv_plan import dw_kernel, dw_lane_plan, dwb_plan, dwb_thresholds
from mico.quant.arithmetic import TERNARY, QFormat
from mico.targets import rv32
from tests.codegen.dw_sanitized import check_sanitized, tight_program
from tests.codegen.test_dwconv_lanes import kernels_rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

A2, O1 = QFormat(2, False), QFormat(1, False)


def _layer(h, w, *, a=A2, o=A2, wb=TERNARY, c=3, stride=1, pad=1, seed=0, extreme=False,
           relu=True):  # fmt: skip
    layer = kernels_rv32.random_layer(
        "conv", QFormat.for_bits(wb, True), a, in_c=c, out_c=c, hw=max(h, w), k=3, pad=pad,
        stride=stride, groups=c, seed=seed, extreme=extreme, o_fmt=o, relu=relu,
    )  # fmt: skip
    layer.x = layer.x[:, :h, :w]
    return layer


def _sliced_cases() -> list:
    """Layers the bit-sliced path computes."""
    geometry = [(16, 16), (25, 5), (5, 25), (1, 1), (1, 7), (7, 1), (3, 3), (9, 63), (33, 31),
                (16, 63), (11, 13), (2, 33), (40, 25)]  # fmt: skip
    layers = []
    for i, (h, w) in enumerate(geometry):
        o = O1 if i % 4 == 3 else A2
        layers.append(_layer(h, w, o=o, c=1 + i % 4, seed=i, relu=i % 3 != 2))
    # 1-bit weights {-1, +1}; 4-bit codes holding only -1, 0, 1
    layers.append(_layer(12, 10, wb=1, c=3, seed=20))
    four = _layer(10, 12, wb=4, c=4, seed=21)
    four.weight = np.clip(four.weight, -1, 1)
    layers.append(four)
    # scales: shifts of 32 or less and above, ties of the rounding, every sum at one level
    levels = _layer(25, 5, c=8, seed=22)
    levels.bias[0] = 10**6
    levels.bias[1] = -(10**6)
    levels.m[2], levels.shift[2] = 2**30, 33  # acc / 8: ties at acc = 4 (mod 8)
    levels.m[3], levels.shift[3] = 2**31 - 1, 32
    levels.m[4], levels.shift[4] = 3 * 2**18, 20  # shift 20
    levels.m[5], levels.shift[5] = 2**30, 62  # nothing reaches a level
    levels.m[6], levels.shift[6] = 2**31 - 1, 1  # every positive sum saturates
    levels.m[7], levels.shift[7] = 0, 40
    layers.append(levels)
    one = _layer(16, 16, o=O1, c=4, seed=23)
    one.m[:], one.shift[:] = 2**30, 31  # 1-bit outputs: acc / 2 rounded
    layers.append(one)
    # stride 2: even and odd rows and columns, rows of up to 62 codes, 1- and 2-bit outputs
    for i, (h, w) in enumerate([(32, 32), (33, 31), (9, 9), (2, 2), (1, 1), (7, 62), (63, 20),
                                (5, 3), (30, 61)]):  # fmt: skip
        o = O1 if i % 3 == 2 else A2
        layers.append(_layer(h, w, o=o, c=1 + i % 3, stride=2, seed=60 + i, relu=i % 4 != 3))
    # stride 2, the row readers: rows on whole bytes (w a multiple of 4: 1 to 15 bytes, the
    # 16- and 32-code rows' own steps), rows from inside a byte (code 1, 2 or 3 of it first,
    # rows of 64 codes counted from the byte: w = 61, 62), channels starting inside a byte
    for i, (h, w, c) in enumerate([(16, 16, 3), (9, 60, 3), (11, 52, 2), (6, 48, 2), (5, 36, 3),
                                   (13, 8, 4), (3, 4, 5), (7, 24, 3), (4, 44, 2), (31, 32, 3),
                                   (5, 5, 7), (6, 6, 5), (5, 62, 3), (7, 61, 4), (3, 59, 5),
                                   (8, 30, 3), (4, 57, 6)]):  # fmt: skip
        o = O1 if i % 4 == 1 else A2
        layers.append(_layer(h, w, o=o, c=c, stride=2, seed=80 + i, relu=i % 5 != 4))
    layers.append(_layer(16, 16, c=5, seed=24, extreme=True))  # biases near +-2^31 - 2^20
    layers.append(_layer(25, 5, o=O1, c=7, seed=25, extreme=True, relu=False))
    return layers


def _declined() -> list:
    """Layers the kernel hands to the pair path (mico_qconv2d_dwp_f1)."""
    minus2 = _layer(8, 8, wb=3, c=3, seed=30)
    minus2.weight = np.clip(minus2.weight, -1, 1)
    minus2.weight[1, 0, 2, 1] = -2
    three = _layer(8, 8, wb=4, c=2, seed=31)
    three.weight = np.clip(three.weight, -1, 1)
    three.weight[1, 0, 0, 0] = 3
    near = _layer(9, 7, c=3, seed=32)
    near.bias[2] = 2**31 - 20
    return [
        minus2, three, near,
        _layer(8, 32, c=2, seed=33),  # rows of 32 codes
        _layer(12, 64, c=2, stride=2, seed=34),  # stride 2, rows of 64 codes
        _layer(12, 12, c=2, pad=0, seed=35),
        _layer(10, 10, a=QFormat(4, False), o=QFormat(4, False), c=2, seed=36),
        _layer(40, 30, c=2, seed=37),  # more than 1,024 pixels (the pair path falls back too)
    ]  # fmt: skip


def _forced(weight, a_fmt, in_hw, out_hw, stride, padding, dilation, out_fmt=None):
    """The bit-sliced entry point of the layer's stride, whatever the plan would choose."""
    return {"s": 0, "q": 0, "sliced": 1, "stride": int(stride[1])}


def test_sliced_path_bit_exact(monkeypatch):
    """Every case (one C program) equals the reference through mico_qconv2d_dwbs_s1 / _s2."""
    layers = _sliced_cases() + _declined()
    for layer in _sliced_cases():
        args = ((layer.stride,) * 2, (layer.pad,) * 2, (1, 1))
        hw, out_hw = layer.x.shape[1:], layer.out_hw
        assert dwb_plan(layer.weight, layer.a_fmt, layer.o_fmt, hw, out_hw, *args) is not None
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    for layer, results in zip(layers, kernels_rv32.run_layers(layers), strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            case = (kernel, layer.o_fmt, layer.w_fmt, layer.x.shape, layer.stride, layer.pad)
            assert np.array_equal(out, ref), (case, np.flatnonzero(out != ref)[:8])
        assert results[0][0] == f"mico_qconv2d_dwbs_s{layer.stride}"


def test_sliced_path_sanitized(monkeypatch):
    """ASan + UBSan on outputs that end exactly at the end of their buffer (1- and 2-bit codes
    filling whole bytes or not) and on inputs read up to the tensor's last byte, stride 1 and
    2."""
    layers = [
        _layer(5, 5, c=8, seed=40),  # 400 bits: whole bytes
        _layer(5, 5, c=3, seed=41),  # 150 bits: the last byte partly written
        _layer(7, 3, o=O1, c=5, seed=42),
        _layer(16, 16, c=2, seed=43),
        _layer(1, 1, c=1, seed=44),
        _layer(9, 7, c=3, stride=2, seed=45),  # stride 2: 80 bits
        _layer(5, 62, o=O1, c=2, stride=2, seed=46),
        _layer(16, 16, c=2, stride=2, seed=47),  # whole words of outputs, rows of 4 bytes
        _layer(7, 60, c=3, stride=2, seed=48),  # rows of 15 bytes, the last the input's last
    ]
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    program = tight_program(layers)
    check_sanitized(program, layers, "-O0")


def _plan(a_fmt, o_fmt, in_hw, out_hw, stride=1, pad=1, weight=None):
    rng = np.random.default_rng(0)
    if weight is None:
        weight = rng.integers(-1, 2, size=(8, 1, 3, 3))
    return dw_lane_plan(weight, a_fmt, in_hw, out_hw, (stride,) * 2, (pad,) * 2, (1, 1), o_fmt)


def test_plan_picks_the_sliced_path():
    """W2A2 (and 2-bit in, 1-bit out) depthwise layers at stride 1 or 2, padding 1 take the
    bit-sliced path (DS-CNN's 25 x 5 and 16 x 16 planes, 32 x 32, 31 x 31 and 8 x 8 at stride
    2; a weight -2 the pair path); wider codes,
    signed or asymmetric codes, weights outside {-1, 0, 1}, padding 0, rows of 32 codes (64 at
    stride 2) and planes above 1,024 pixels keep the others."""
    assert dw_kernel(_plan(A2, A2, (25, 5), (25, 5))) == "mico_qconv2d_dwbs_s1"
    assert dw_kernel(_plan(A2, A2, (16, 16), (16, 16))) == "mico_qconv2d_dwbs_s1"
    assert dw_kernel(_plan(A2, O1, (16, 16), (16, 16))) == "mico_qconv2d_dwbs_s1"
    a4 = QFormat(4, False)
    assert not dw_kernel(_plan(a4, a4, (25, 5), (25, 5))).startswith("mico_qconv2d_dwbs")
    assert not dw_kernel(_plan(A2, a4, (25, 5), (25, 5))).startswith("mico_qconv2d_dwbs")
    signed = dw_kernel(_plan(QFormat(2, True), A2, (25, 5), (25, 5)))
    assert not signed.startswith("mico_qconv2d_dwbs")
    asym = QFormat(2, False, 1)
    assert not dw_kernel(_plan(asym, A2, (8, 8), (8, 8))).startswith("mico_qconv2d_dwbs")
    # stride 2: bit-sliced wherever it applies (below the pair path's words of 4 lanes on
    # every plane measured), the pair path for weights outside {-1, 0, 1}
    assert dw_kernel(_plan(A2, A2, (32, 32), (16, 16), stride=2)) == "mico_qconv2d_dwbs_s2"
    assert dw_kernel(_plan(A2, A2, (31, 31), (16, 16), stride=2)) == "mico_qconv2d_dwbs_s2"
    assert dw_kernel(_plan(A2, A2, (8, 8), (4, 4), stride=2)) == "mico_qconv2d_dwbs_s2"
    w2 = np.random.default_rng(1).integers(-2, 2, size=(8, 1, 3, 3))
    w2[0, 0, 0, 0] = -2
    pair = dw_kernel(_plan(A2, A2, (32, 32), (16, 16), stride=2, weight=w2))
    assert pair == "mico_qconv2d_dwp_f2"
    assert not dw_kernel(_plan(A2, A2, (8, 64), (4, 32), stride=2)).startswith("mico_qconv2d_dwbs")
    assert not dw_kernel(_plan(A2, A2, (16, 16), (14, 14), pad=0)).startswith("mico_qconv2d_dwbs")
    assert not dw_kernel(_plan(A2, A2, (16, 32), (16, 32))).startswith("mico_qconv2d_dwbs")
    assert not dw_kernel(_plan(A2, A2, (40, 30), (40, 30))).startswith("mico_qconv2d_dwbs")
    w2 = np.full((2, 1, 3, 3), -2)
    assert dwb_plan(w2, A2, A2, (8, 8), (8, 8), (1, 1), (1, 1), (1, 1)) is None


def test_generator_thresholds(monkeypatch):
    """The thresholds the harness passes are the generator's (dwconv_plan.dwb_thresholds,
    MicoDwLanes.thr, as a compile emits them: test_sliced_path_bit_exact runs them); without
    them (thr NULL) the kernel finds its own by bisection: the kernel cases again that way,
    the reference's codes both ways."""
    layers = _sliced_cases()
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    program = kernels_rv32.layers_program(layers, ("chosen",))
    for i, layer in enumerate(layers):
        spec = {"qformat": layer.o_fmt, "m": layer.m, "shift": layer.shift}
        thr = dwb_thresholds(layer.weight, layer.bias, spec, layer.relu)
        assert thr.shape == (3 * len(layer.bias),) and thr.min() >= 0 and thr.max() <= 28
        array = f"static const uint8_t L{i}_thr_dw[] = {{ {', '.join(str(int(t)) for t in thr)} }};"
        assert program.count(array) == 1
        field = f", .thr = L{i}_thr_dw"
        assert program.count(field) == 1
        program = program.replace(field, "").replace(array, "")  # the kernel's own bisection
    with tempfile.TemporaryDirectory(prefix="mico-dwb-thr-") as tmp:
        work = Path(tmp)
        (work / "main.c").write_text(program)
        sources = [str(work / "main.c"), *kernels_rv32._sources(work)]
        tokens = kernels_rv32.build_and_run(work, sources, "host", "gcc", 300).split()
    marks = [i for i, token in enumerate(tokens) if token == "instret"]
    for layer, i in zip(layers, marks, strict=True):
        raw = np.frombuffer(bytes.fromhex(tokens[i + 2]), dtype=np.uint8)
        out = kernels_rv32.unpack(raw, layer.reference().size, layer.o_fmt)
        assert np.array_equal(out, layer.reference().ravel()), (layer.x.shape, layer.o_fmt)


def test_sliced_path_in_place(monkeypatch):
    """The in-place contract (input and output the same buffer, as the memory plan may give a
    depthwise layer): every channel's plane is read before its outputs are written, and the
    output words written are completed ones (ASan + UBSan, host)."""
    layers = [
        _layer(25, 5, c=6, seed=50),  # channels starting inside a byte
        _layer(16, 16, c=3, seed=51),
        _layer(7, 9, o=O1, c=4, seed=52),  # 1-bit outputs: the output trails the input
        _layer(3, 3, c=5, seed=53),
        _layer(13, 11, c=4, stride=2, seed=54),
        _layer(32, 32, c=3, stride=2, seed=55),  # outputs stored as whole words
    ]
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    program = "#include <string.h>\n" + kernels_rv32.layers_program(layers, ("chosen",))
    n_bytes = max((lay.x.size * 2 + 7) // 8 for lay in layers)
    program = program.replace("static uint8_t y[", f"static uint8_t y[{n_bytes} + ", 1)
    for i, layer in enumerate(layers):
        entry = f"mico_qconv2d_dwbs_s{layer.stride}"
        call = f"{entry}(&L{i}_p_dw, &L{i}_l_dw, L{i}_x, y);"
        assert program.count(call) == 1
        program = program.replace(
            call, f"memcpy(y, L{i}_x, sizeof L{i}_x); {entry}(&L{i}_p_dw, &L{i}_l_dw, y, y);"
        )
    check_sanitized(program, layers, "-O1")


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_stride2_half_the_instructions_of_w8a8():
    """On rv32imac (qemu), kernels_rv32's stride-2 case (32 channels of 32 x 32): W2A2 takes
    the bit-sliced path as the generator picks it, bit-exact, in at most half the
    instructions of W8A8 (the issue's target for 2-bit codes)."""
    shape = kernels_rv32.SHAPES["depthwise3x3 32ch 32×32 stride2 pad1"]
    plans = [p for p in kernels_rv32.PLANS if p[0] in ("8/8", "2/2")]
    layers = [kernels_rv32._plan_layer(shape, plan) for plan in plans]
    results = kernels_rv32.run_layers(layers, "rv32", ("chosen",))
    counts = {}
    for plan, layer, ((kernel, n, out),) in zip(plans, layers, results, strict=True):
        assert np.array_equal(out, layer.reference().ravel()), kernel
        counts[plan[0]] = (kernel, n)
    assert counts["2/2"][0] == "mico_qconv2d_dwbs_s2"
    assert 2 * counts["2/2"][1] <= counts["8/8"][1], counts
