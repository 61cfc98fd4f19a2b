"""Depthwise 3x3 on planes of 5 columns of 4-bit codes (mico_qconv2d_dw4 in mico_dwconv.c,
chosen by mico.codegen.dwconv_plan.dw4_plan) against the Python integer reference, through the
C program of benchmarks/kernels_rv32.py (host programs for the kernel cases, one under ASan +
UBSan, one with the kernel's own tables; DS-CNN's layer on rv32 under qemu).

The kernel cases call the entry point whatever the plan would choose: 4-bit codes in and out,
unsigned (mico_qconv2d_dw4) or signed (_dw4s), weights of 1, 2 (and ternary), 3, 4 and 8 bits,
with and without a ReLU; planes of 1 to 49 rows, odd and even, odd channel counts (every other
plane starting inside a byte); multipliers whose shift is 32 or less and above, ties of the
rounding, biases that put every sum at the top or bottom code, saturating scales, a multiplier
of 0; 4-bit weights at their limits (sums spanning 945), channels of 8-bit weights whose sums
span more than the 10-bit lanes (one output at a time), a channel without a table from the
generator (the kernel requantizes its table itself); and the layers the kernel hands to
mico_qconv2d_depthwise3x3 (other widths, signed codes on one side only, asymmetric codes, 8-bit
outputs, stride 2, padding 0, rows of 4 or 6 codes)."""

from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from mico.codegen.dwconv_plan import dw4_plan, dw_kernel, dw_lane_plan, dwp_levels
from mico.quant.arithmetic import TERNARY, QFormat
from mico.targets import rv32
from tests.codegen.dw_sanitized import check_sanitized, tight_program
from tests.codegen.test_dwconv_lanes import kernels_rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

A4, S4 = QFormat(4, False), QFormat(4, True)
ENTRY, ENTRY_S = "mico_qconv2d_dw4", "mico_qconv2d_dw4s"


def _layer(h, w=5, *, a=A4, o=A4, wb=4, c=3, stride=1, pad=1, seed=0, extreme=False,
           relu=True):  # fmt: skip
    layer = kernels_rv32.random_layer(
        "conv", QFormat.for_bits(wb, True), a, in_c=c, out_c=c, hw=max(h, w), k=3, pad=pad,
        stride=stride, groups=c, seed=seed, extreme=extreme, o_fmt=o, relu=relu,
    )  # fmt: skip
    layer.x = layer.x[:, :h, :w]
    return layer


def _taken() -> list:
    """Layers the kernel computes (every channel in its lanes unless said otherwise)."""
    layers = []
    for i, h in enumerate([25, 1, 2, 3, 4, 7, 10, 49, 24]):
        wb = (4, 2, TERNARY, 3, 1)[i % 5]
        layers.append(_layer(h, c=1 + i % 7, wb=wb, seed=i, relu=i % 3 != 2))
    # 8-bit weights of small values; 4-bit weights at their limits (sums spanning 945); 8-bit
    # weights whose sums span more than 1,023 in every other channel (one output at a time)
    small8 = _layer(25, c=4, wb=8, seed=20)
    small8.weight = np.clip(small8.weight, -7, 7)
    wide = _layer(25, c=5, wb=8, seed=24)
    wide.weight[1::2] = np.clip(wide.weight[1::2], -3, 3)
    layers += [small8, _layer(25, c=5, seed=21, extreme=True), wide]
    # scales: shifts of 32 or less and above, ties of the rounding, every sum at one code
    levels = _layer(25, c=9, seed=22)
    levels.bias[0] = 10**6
    levels.bias[1] = -(10**6)
    levels.m[2], levels.shift[2] = 2**30, 33  # acc / 8: ties at acc = 4 (mod 8)
    levels.m[3], levels.shift[3] = 2**31 - 1, 32
    levels.m[4], levels.shift[4] = 3 * 2**18, 20  # shift 20
    levels.m[5], levels.shift[5] = 2**30, 62  # nothing reaches a code above 0
    levels.m[6], levels.shift[6] = 2**31 - 1, 1  # every positive sum saturates
    levels.m[7], levels.shift[7] = 0, 40
    # few codes reached, a step above a byte: no table from the generator
    levels.weight[8] = np.array([7, -7, 6, -6, 5, -5, 7, -7, 0]).reshape(1, 3, 3)
    levels.bias[8] = 15 * 30  # lane value 0 at the accumulator 0
    levels.m[8], levels.shift[8] = 2**30, 39  # acc / 512
    layers.append(levels)
    layers.append(_layer(25, c=7, seed=23, extreme=True, relu=False))
    return layers


def _signed() -> list:
    """Layers of signed codes in and out the kernel computes (mico_qconv2d_dw4s)."""
    layers = [
        _layer(h, a=S4, o=S4, wb=wb, c=c, seed=100 + i, relu=relu)
        for i, (h, wb, c, relu) in enumerate([(25, 4, 5, True), (25, 4, 4, False), (1, 2, 3, True),
                                              (8, TERNARY, 3, False), (13, 8, 2, True)])
    ]  # fmt: skip
    layers[-1].weight = np.clip(layers[-1].weight, -7, 7)
    layers.append(_layer(25, a=S4, o=S4, c=3, seed=106, extreme=True, relu=False))
    wide = _layer(6, a=S4, o=S4, wb=8, c=3, seed=107)  # a channel one output at a time
    wide.weight[1] = np.clip(wide.weight[1], -2, 2)
    layers.append(wide)
    return layers


def _declined() -> list:
    """Layers the kernel hands to mico_qconv2d_depthwise3x3."""
    return [
        _layer(25, a=S4, c=3, seed=30),  # signed codes in, unsigned out
        _layer(25, o=S4, c=3, seed=38),  # and the other way round
        _layer(25, a=QFormat(4, False, 1), c=3, seed=31),  # a zero point
        _layer(25, o=QFormat(8, False), c=3, seed=32),  # 8-bit outputs
        _layer(25, a=QFormat(2, False), o=QFormat(2, False), c=3, seed=33),
        _layer(12, 6, c=3, seed=34),  # rows of 6 codes
        _layer(12, 4, c=3, seed=35),  # rows of 4 codes
        _layer(13, 5, c=3, stride=2, seed=36),
        _layer(12, 5, c=3, pad=0, seed=37),
    ]


def _forced(weight, a_fmt, in_hw, out_hw, stride, padding, dilation, out_fmt=None):
    """The rows-of-5 entry point of the codes' signedness, whatever the plan would choose."""
    return {"s": 0, "q": 0, "dw4": 1, "signed": int(a_fmt.signed)}


def _check(layers: list, results: list) -> None:
    for layer, per_path in zip(layers, results, strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in per_path:
            case = (kernel, layer.w_fmt, layer.x.shape, layer.stride, layer.pad, layer.a_fmt)
            assert np.array_equal(out, ref), (case, np.flatnonzero(out != ref)[:8])
        assert per_path[0][0] == (ENTRY_S if layer.a_fmt.signed else ENTRY)


def test_dw4_bit_exact(monkeypatch):
    """Every case (one C program) equals the reference through mico_qconv2d_dw4; the cases
    meant to hit the kernel's slower channels do (a span above 1,023, a channel without its
    table), and the declined layers are exact through the fallback."""
    taken, declined = _taken() + _signed(), _declined()
    for layer in taken:
        args = ((1, 1), (1, 1), (1, 1))
        assert dw4_plan(np.clip(layer.weight, -7, 7), layer.a_fmt, layer.o_fmt,
                        layer.x.shape[1:], layer.out_hw, *args) is not None  # fmt: skip
    for layer in declined:
        args = ((layer.stride,) * 2, (layer.pad,) * 2, (1, 1))
        assert dw4_plan(layer.weight, layer.a_fmt, layer.o_fmt, layer.x.shape[1:],
                        layer.out_hw, *args) is None  # fmt: skip
    for wide in (_taken()[-3], _signed()[-1]):
        spans = 15 * np.abs(wide.weight).reshape(len(wide.weight), -1).sum(axis=1)
        assert (spans > 1023).any() and (spans <= 1023).any()
    levels = _taken()[-2]
    spec = {"qformat": levels.o_fmt, "m": levels.m, "shift": levels.shift}
    lvl = dwp_levels(levels.weight, levels.bias, spec, levels.relu, levels.a_fmt).reshape(-1, 16)
    assert (lvl[:, 0] == 0xFF).any() and (lvl[:, 0] != 0xFF).any()
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    layers = taken + declined
    _check(layers, kernels_rv32.run_layers(layers, paths=("chosen",)))


def test_dw4_own_tables(monkeypatch):
    """Without the generator's levels (lvl NULL) the kernel requantizes each channel's table
    itself: the reference's codes too."""
    taken = _taken()
    layers = [*taken[:8], taken[-2], *_signed()[:4]]
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    program = kernels_rv32.layers_program(layers, ("chosen",))
    assert program.count("lvl_dw") == 2 * len(layers)
    stripped = re.sub(r", \.lvl = L\d+_lvl_dw", "", program)
    stripped = re.sub(r"static const uint8_t L\d+_lvl_dw\[\] = \{[^}]*\};", "", stripped)
    assert stripped != program
    with tempfile.TemporaryDirectory(prefix="mico-dw4-") as tmp:
        work = Path(tmp)
        (work / "main.c").write_text(stripped)
        sources = [str(work / "main.c"), *kernels_rv32._sources(work)]
        tokens = kernels_rv32.build_and_run(work, sources, "host", "gcc", 300).split()
    marks = [i for i, token in enumerate(tokens) if token == "instret"]
    for layer, i in zip(layers, marks, strict=True):
        raw = np.frombuffer(bytes.fromhex(tokens[i + 2]), dtype=np.uint8)
        out = kernels_rv32.unpack(raw, layer.reference().size, layer.o_fmt)
        assert np.array_equal(out, layer.reference().ravel()), layer.x.shape


def test_dw4_sanitized(monkeypatch):
    """ASan + UBSan (one program): outputs that end exactly at the end of their buffer (an odd
    number of codes: the last byte half written) and inputs read up to the tensor's last
    byte; and the in-place contract (input and output the same buffer, as the memory plan may
    give a depthwise layer): every input row is read before the output row that overwrites
    it, in the lanes and one output at a time."""
    apart = [
        _layer(25, c=3, seed=40),  # 375 codes: the last byte's low nibble
        _layer(25, c=4, seed=41),
        _layer(2, c=5, seed=42),  # even planes from a high nibble
        _layer(1, c=1, seed=43),
        _layer(7, c=2, seed=44, extreme=True),
        _layer(25, a=S4, o=S4, c=3, seed=45, relu=False),  # signed codes
        _signed()[-1],  # a channel one output at a time
    ]
    in_place = [
        _layer(25, c=5, seed=50),  # channels starting inside a byte
        _layer(4, c=3, seed=51),
        _layer(25, a=S4, o=S4, c=3, seed=52, relu=False),
        _taken()[-3],  # channels one output at a time
        _signed()[-1],
    ]
    layers = apart + in_place
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    program = "#include <string.h>\n" + tight_program(layers)
    for i, layer in enumerate(in_place, start=len(apart)):
        entry = ENTRY_S if layer.a_fmt.signed else ENTRY
        call = f"{entry}(&L{i}_p_dw, &L{i}_l_dw, L{i}_x, y);"
        assert program.count(call) == 1
        program = program.replace(
            call, f"memcpy(y, L{i}_x, sizeof L{i}_x); {entry}(&L{i}_p_dw, &L{i}_l_dw, y, y);"
        )
    check_sanitized(program, layers, "-O0")


def _plan(a_fmt, o_fmt, in_hw, stride=1, pad=1, weight=None):
    if weight is None:
        weight = np.random.default_rng(0).integers(-8, 8, size=(8, 1, 3, 3))
    out_hw = tuple((v + 2 * pad - 3) // stride + 1 for v in in_hw)
    return dw_lane_plan(weight, a_fmt, in_hw, out_hw, (stride,) * 2, (pad,) * 2, (1, 1), o_fmt)


def test_plan_picks_dw4():
    """4-bit codes in and out (unsigned, or signed both) on planes of 5 columns at stride 1,
    padding 1 take the rows-of-5 path (DS-CNN's 25 x 5, any height, weights of any width whose
    sums fit 10 bits); other widths, signed codes on one side only, asymmetric codes, 8-bit
    outputs, other rows, stride 2, padding 0 and channels whose sums span more than 1,023
    keep the other paths."""
    assert dw_kernel(_plan(A4, A4, (25, 5))) == ENTRY
    assert dw_kernel(_plan(A4, A4, (49, 5))) == ENTRY
    assert dw_kernel(_plan(A4, A4, (1, 5))) == ENTRY
    ternary = np.random.default_rng(1).integers(-1, 2, size=(8, 1, 3, 3))
    assert dw_kernel(_plan(A4, A4, (25, 5), weight=ternary)) == ENTRY
    assert dw_kernel(_plan(S4, S4, (25, 5))) == ENTRY_S
    for a, o, hw, stride, pad in [
        (S4, A4, (25, 5), 1, 1),
        (A4, S4, (25, 5), 1, 1),
        (QFormat(4, False, 1), A4, (25, 5), 1, 1),
        (A4, QFormat(8, False), (25, 5), 1, 1),
        (QFormat(2, False), QFormat(2, False), (25, 5), 1, 1),
        (A4, A4, (16, 16), 1, 1),
        (A4, A4, (25, 4), 1, 1),
        (A4, A4, (25, 5), 2, 1),
        (A4, A4, (25, 5), 1, 0),
    ]:
        plan = _plan(a, o, hw, stride, pad)
        assert plan is None or dw_kernel(plan) != ENTRY, (a, o, hw, stride, pad)
    wide = np.full((8, 1, 3, 3), -8)  # (8-bit weights: 15 * 72 above 1,023)
    wide[1:] = 1
    assert dw_kernel(_plan(A4, A4, (25, 5), weight=wide)) != ENTRY
    assert dw4_plan(wide[1:], A4, A4, (25, 5), (25, 5), (1, 1), (1, 1), (1, 1)) is not None


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_dscnn_depthwise_w4a4():
    """On rv32imac (qemu), kernels_rv32's DS-CNN depthwise case (64 channels of 25 x 5): W4A4
    takes mico_qconv2d_dw4 (signed 4/4 _dw4s) as the generator picks it, bit-exact, in at most
    1 / 1.5 of the instructions of W8A8 (the issue's target for 4-bit codes)."""
    shape = kernels_rv32.SHAPES["depthwise3x3 64ch 25×5 pad1 (DS-CNN)"]
    plans = [p for p in kernels_rv32.PLANS if p[0] in ("8/8", "4/4", "4/4 signed")]
    layers = [kernels_rv32._plan_layer(shape, plan) for plan in plans]
    results = kernels_rv32.run_layers(layers, "rv32", ("chosen",))
    counts = {}
    for plan, layer, ((kernel, n, out),) in zip(plans, layers, results, strict=True):
        assert np.array_equal(out, layer.reference().ravel()), kernel
        counts[plan[0]] = (kernel, n)
    assert counts["4/4"][0] == ENTRY and counts["4/4 signed"][0] == ENTRY_S
    assert 3 * counts["4/4"][1] <= 2 * counts["8/8"][1], counts
    assert 3 * counts["4/4 signed"][1] <= 2 * counts["8/8"][1], counts
