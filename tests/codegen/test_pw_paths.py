"""The pointwise lanes path's byte pipeline and its im2col form (mico_conv2d.c mico_conv_pw,
mico_pw_unpack / mico_pw_words, mico_pw_patch, mico_pw_wsums, mico_pw_c<b>g<G>) against the
Python integer reference, and the generator's choice between the lanes and the W8A8 bytes for
narrow weights on 8-bit codes (emitters.widened_to_s8):

- activation fields unpacked a word at a time: whole blocks of 32 pixels of 8-, 4- and 2-bit
  codes from planes at every bit offset (the last plane's block read a field at a time when
  its words would pass the tensor's end), partial blocks, 1-, 3- and 5-bit codes;
- signed and asymmetric codes read as unsigned fields (x + o), o times each channel's weight
  sum taken from the bias, binary weights too, and more output channels than the path keeps
  weight sums for (the rows path then);
- lane weights extracted once per call (they fit 2 KB) and once per block (they do not);
- 16-bit lanes of 8 field groups (ternary and 2-bit weights on 8-bit codes);
- signed and asymmetric codes as fields u = x - qmin (mico_pw_offset): they span qmax - qmin
  <= 2 max|x| and the unsigned lanes twice the signed lanes' range, so the plan's n holds
  (with fields x + 2^(b-1), signed 2-bit codes reached 3 = 3 max|x| and 8-bit lanes carried
  into their neighbours: DS-CNN's ternary grid case); seeded random layers of every offset
  format against every weight width, 8- and 16-bit lanes in several segments, columns of the
  largest fields;
- layers of one group and at most 64 taps over rows too narrow for the rows path (one input
  plane: DS-CNN's 10 x 4 first conv, other kernels, strides, dilation, padding), short last
  blocks, every output width of the store, extremes.

One host program (ASan and UBSan when the compiler has them) and one rv32 one; the tests
assert outputs equal to the reference and the paths chosen, not speed."""

from __future__ import annotations

import functools
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import pytest

from mico.codegen import sign_lut_plan
from mico.codegen.emitters import lanes_plan, widened_to_s8
from mico.quant.arithmetic import TERNARY, QFormat
from mico.quant.packing import LANE_RUN_UNBOUNDED, lane_offsets, lane_plan
from mico.targets import rv32
from tests.codegen.test_lanes_pointwise import kernels_rv32

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

W1, W2, W4, W8 = (QFormat(b, True) for b in (1, 2, 4, 8))
WT = QFormat.for_bits(TERNARY, True)
W_FMTS = (W1, WT, W2, W4, W8)
A1, A2, A3, A4, A5, A8 = (QFormat(b, False) for b in (1, 2, 3, 4, 5, 8))
S2, S4, S8 = QFormat(2, True), QFormat(4, True), QFormat(8, True)


def _conv(w_fmt, a_fmt, seed, *, in_c, out_c=None, hw=(8, 8), k=1, **kw):
    out_c = out_c or 32 // w_fmt.bits
    return kernels_rv32.random_layer(
        "conv", w_fmt, a_fmt, in_c=in_c, out_c=out_c, hw=hw, k=k, seed=seed, **kw
    )


def words() -> list:
    """Blocks of 32 pixels read a word at a time: planes of 32 x k pixels (bit offset 0), of
    33, 40, 50 and 100 pixels (the planes' blocks from every bit offset of a word), 8-, 4- and
    2-bit codes, signed and asymmetric ones, extremes, the block of the last plane that ends
    the tensor."""
    layers = []
    for i, a_fmt in enumerate((A8, A4, A2, S4, S8, QFormat.asymmetric(4, 5))):
        for j, hw in enumerate(((4, 8), (3, 11), (5, 8), (5, 10), (10, 10))):
            w_fmt = (W4, W2, W8 if a_fmt.bits < 8 else WT)[(i + j) % 3]  # (not W8A8)
            layers.append(_conv(w_fmt, a_fmt, 100 + 10 * i + j, in_c=5 + 4 * j, hw=hw,
                                extreme=(i + j) % 4 == 0))  # fmt: skip
    return layers


def fields() -> list:
    """Codes a field at a time: 1-, 3- and 5-bit codes, partial blocks (planes of 7 and 45
    pixels), a 3-bit signed plane."""
    return [
        _conv(W4, A1, 200, in_c=12, hw=(4, 8)),
        _conv(W2, A3, 201, in_c=9, hw=(5, 9)),
        _conv(W4, A5, 202, in_c=17, hw=(1, 7)),
        _conv(W2, QFormat(3, True), 203, in_c=10, hw=(4, 8), extreme=True),
        _conv(W8, A4, 204, in_c=6, hw=(3, 15)),
    ]


def offsets() -> list:
    """Signed and asymmetric codes (o W_c from the bias) with weights of every width, binary
    ones too; 264 output channels of signed codes (more than the path keeps weight sums for:
    the rows path); signed 2-bit codes on 8-bit lanes in several segments; weights extracted
    once per call (32 channels of 32 taps at 4 bits) and once per block (64 x 64)."""
    layers = [
        _conv(w, a, 300 + i, in_c=21, hw=(6, 6), extreme=i % 2 == 1)
        for i, (w, a) in enumerate(
            ((W1, S4), (WT, S4), (W2, QFormat.asymmetric(2, 1)), (W4, S8), (W8, S4),
             (W4, QFormat.asymmetric(8, 100)))
        )
    ]  # fmt: skip
    layers.append(_conv(W4, S4, 310, in_c=16, out_c=264, hw=(4, 8)))
    layers.append(_conv(W4, A4, 311, in_c=32, out_c=32, hw=(8, 8)))
    layers.append(_conv(W4, S4, 312, in_c=64, out_c=64, hw=(8, 8)))
    # signed 2-bit codes on 8-bit lanes (2-bit weights in 4 groups, 4-bit ones in 2): flushed
    # every n taps (the signed lanes' bound, not nu) their fields carried between lanes
    # (dscnn's ternary grid case)
    layers += [_conv(w, S2, 313 + i, in_c=64, out_c=64, hw=(25, 5)) for i, w in enumerate((W2, W4))]
    # offset codes on 8-bit lanes, 3x3 and 5x5 kernels of several input channels
    layers.append(_conv(W2, S2, 315, in_c=7, out_c=32, hw=(10, 9), k=3, pad=1))
    layers.append(_conv(W4, S2, 316, in_c=2, out_c=32, hw=(12, 11), k=5, stride=2, pad=2))
    return layers


def eight_groups() -> list:
    """16-bit lanes of 8 field groups (2-bit and ternary weights on 8-bit codes), one segment
    and several, 33 and 64 input channels, the lanes at their bound."""
    return [
        _conv(WT, A8, 400, in_c=33, hw=(5, 7)),
        _conv(W2, A8, 401, in_c=64, out_c=48, hw=(4, 8), extreme=True),
        _conv(W2, S8, 402, in_c=20, hw=(6, 6)),
    ]


def patched() -> list:
    """Layers of one input plane (rows too narrow for the rows path: the im2col patch of
    mico_pw_patch): DS-CNN's 10 x 4 kernel of stride 2 on 49 x 10, 5 x 5, 3 x 3 with dilation
    2, a kernel of 8 x 8 (64 taps), a 1 x 1 of stride 2, signed and asymmetric codes (padding
    reads as the field of code 0), 4- and 2-bit outputs, extremes, output channels that leave
    a block partly empty."""
    layers = []
    first = _conv(W4, A4, 500, in_c=1, out_c=64, hw=(49, 10), k=4, stride=2, pad=1)
    first.weight = np.random.default_rng(501).integers(W4.qmin, W4.qmax + 1, size=(64, 1, 10, 4))
    layers.append(first)
    first2 = _conv(W2, S4, 502, in_c=1, out_c=24, hw=(49, 10), k=4, stride=2, pad=1,
                   extreme=True)  # fmt: skip
    first2.weight = np.random.default_rng(503).choice([W2.qmin, W2.qmax], size=(24, 1, 10, 4))
    layers.append(first2)
    layers += [
        _conv(W4, A4, 510, in_c=1, out_c=16, hw=(9, 9), k=5, pad=1),
        _conv(W4, QFormat.asymmetric(4, 3), 511, in_c=1, out_c=8, hw=(11, 7), k=3, pad=2, dil=2),
        _conv(W2, A2, 512, in_c=1, out_c=20, hw=(12, 12), k=8, o_fmt=A2),
        _conv(W4, A8, 513, in_c=1, out_c=8, hw=(9, 6), k=1, stride=2, o_fmt=A4),
        _conv(W8, S4, 514, in_c=1, out_c=4, hw=(7, 5), k=3, pad=1, extreme=True),
    ]
    return layers


def _offset_fmts(rng: np.random.Generator) -> list[QFormat]:
    """Signed codes of 1..8 bits and asymmetric ones of 2..8 bits (a random zero point)."""
    fmts = [QFormat(b, True) for b in range(1, 9)]
    fmts += [QFormat.asymmetric(b, int(rng.integers(1, 2**b))) for b in range(2, 9)]
    return fmts


def _windows(offsets: np.ndarray, n: int) -> np.ndarray:
    """Sums of w' over every run of n consecutive taps (the whole rows when shorter)."""
    n = min(n, offsets.shape[1])
    return np.lib.stride_tricks.sliding_window_view(offsets, n, axis=1).sum(axis=2)


def _layer(rng: np.random.Generator, w_fmt, a_fmt, seed: int, *, in_c, out_c, hw, k=1, **kw):
    """A random layer whose first pixels of every plane hold the largest field (x = qmax) and
    whose weights lean to their largest offset weight: lanes near their bound."""
    layer = kernels_rv32.random_layer(
        "conv", w_fmt, a_fmt, in_c=in_c, out_c=out_c, hw=hw, k=k, seed=seed, **kw
    )
    flat = layer.x.reshape(in_c, -1)
    flat[:, : int(rng.integers(1, 6))] = a_fmt.qmax
    if not w_fmt.binary:
        heavy = rng.random(layer.weight.shape) < rng.uniform(0.3, 0.9)
        layer.weight = np.where(heavy, w_fmt.qmax, layer.weight)
    return layer


def random_layers() -> list:
    """Pointwise layers of every offset format against every weight width (random taps up to
    the path's 64, random planes of one or two blocks of pixels), and single-plane layers of
    narrow rows (the im2col patch: 8 x 8 and 4 x 4 kernels); those that take the lanes."""
    rng = np.random.default_rng(2027)
    layers = []
    for i, a_fmt in enumerate(_offset_fmts(rng)):
        for j, w_fmt in enumerate(W_FMTS):
            if (i + j) % 2:
                continue  # half of the grid: the build stays short
            in_c = int(rng.choice([9, 24, 40, 64]))
            hw = (int(rng.integers(2, 6)), int(rng.integers(5, 10)))
            layers.append(_layer(rng, w_fmt, a_fmt, 7000 + 10 * i + j, in_c=in_c,
                                 out_c=32 // w_fmt.bits, hw=hw))  # fmt: skip
    for i, (w_fmt, a_fmt, k) in enumerate(((W2, QFormat(2, True), 8), (WT, QFormat(2, True), 8),
                                           (W4, QFormat(3, True), 8),
                                           (W2, QFormat.asymmetric(2, 2), 8),
                                           (W4, QFormat(4, True), 4))):  # fmt: skip
        layers.append(_layer(rng, w_fmt, a_fmt, 7500 + i, in_c=1, out_c=32, hw=(13, 7 + k - 1),
                             k=k))  # fmt: skip
    return [layer for layer, plan in zip(layers, _plans(layers), strict=True)
            if plan is not None and not layer.binary() and not _on_bytes(layer)
            and not _on_signs(layer)]  # fmt: skip


def _plans(layers: list) -> list[dict | None]:
    return [
        lanes_plan(layer.w_fmt, layer.a_fmt, layer.weight.shape[0], weight=layer.weight)
        for layer in layers
    ]


def _on_bytes(layer) -> bool:
    """Whether a pointwise layer of 8-bit codes takes the W8A8 bytes (emitters.widened_to_s8)."""
    k = layer.weight.shape[2:]
    return widened_to_s8(layer.w_fmt, layer.a_fmt, k, (1, 1), (0, 0), in_c=layer.x.shape[0],
                         weight=layer.weight)  # fmt: skip


def _on_signs(layer) -> bool:
    """Whether a layer of binary weights on wide codes takes the sign tables (sign_lut_plan)."""
    kernel = sign_lut_plan.layer_kernel("conv", layer.w_fmt, layer.a_fmt.bits, layer.taps,
                                        layer.groups, layer.weight.shape[3], True)  # fmt: skip
    return kernel is not None


CASES = {
    "words": words,
    "fields": fields,
    "offsets": offsets,
    "eight_groups": eight_groups,
    "patched": patched,
    "random_offsets": random_layers,
}


def _sanitized_run(layers: list) -> list[np.ndarray]:
    """The chosen paths' outputs of a host build under ASan and UBSan (any report fails)."""
    program = kernels_rv32.layers_program(layers, ("chosen",))
    with tempfile.TemporaryDirectory(prefix="mico-pw-") as tmp:
        work = Path(tmp)
        (work / "main.c").write_text(program)
        sources = [str(work / "main.c"), *kernels_rv32._sources(work)]
        flags = ["-fsanitize=address,undefined", "-fno-sanitize-recover=all"]
        cmd = ["gcc", "-std=c99", "-O2", "-g", "-Wall", "-Wextra", "-Werror", *flags, "-I",
               str(work), *sources, "-o", str(work / "main")]  # fmt: skip
        if subprocess.run(cmd, capture_output=True).returncode != 0:  # no sanitizer runtime
            cmd = [c for c in cmd if c not in flags]
            subprocess.run(cmd, check=True, capture_output=True)
        text = subprocess.run([str(work / "main")], check=True, capture_output=True,
                              text=True).stdout.split()  # fmt: skip
    marks = [i for i, token in enumerate(text) if token == "instret"]
    return [
        kernels_rv32.unpack(np.frombuffer(bytes.fromhex(text[j + 2]), dtype=np.uint8),
                            layer.reference().size, layer.o_fmt)
        for layer, j in zip(layers, marks, strict=True)
    ]  # fmt: skip


@pytest.fixture(scope="module")
def chosen() -> dict[str, list[str]]:
    """Every case's layers through their chosen paths in one sanitized host program, each
    output held to the reference; case name -> the kernel of each layer."""
    return dict(_chosen_once())


@functools.cache
def _chosen_once() -> dict[str, list[str]]:
    """:func:`chosen`'s work, once per test process: ``--dist worksteal`` can move this
    module's tests between workers and back, and a module fixture is set up again each time
    (three 54-second builds in one run of the suite)."""
    layers = {name: fn() for name, fn in CASES.items()}
    flat = [layer for group in layers.values() for layer in group]
    outs = iter(_sanitized_run(flat))
    kernels: dict[str, list[str]] = {}
    for name, group in layers.items():
        kernels[name] = []
        for i, layer in enumerate(group):
            out = next(outs)
            ref = layer.reference().ravel()
            (kernel, _), *_ = kernels_rv32._layer_code(layer, "L0_", ("chosen",))[1]
            assert np.array_equal(out, ref), (name, i, kernel, np.flatnonzero(out != ref)[:10])
            kernels[name].append(kernel)
    return kernels


@needs_gcc
@pytest.mark.parametrize("case", list(CASES))
def test_lanes_bit_exact(chosen, case):
    assert all(k.startswith("mico_qconv2d_lanes") for k in chosen[case]), chosen[case]


@needs_gcc
def test_eight_groups_take_their_lanes(chosen):
    assert chosen["eight_groups"][:2] == ["mico_qconv2d_lanes_w2g8"] * 2


def test_narrow_weights_on_bytes_choice():
    """Pointwise layers of narrower weights on 8-bit codes: the lanes where the pointwise
    lanes path takes them and costs less (at most 64 input channels), the W8A8 bytes for more
    channels and when the channels are not given; never for other kernels or binary weights."""
    rng = np.random.default_rng(7)
    one = ((1, 1), (1, 1), (0, 0))
    for w_fmt in (W4, WT, W2):
        for in_c in (16, 32, 64):
            w = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, size=(32, in_c))
            assert not widened_to_s8(w_fmt, A8, *one, macs=10**6, in_c=in_c, weight=w)
        w = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, size=(32, 96))
        assert widened_to_s8(w_fmt, A8, *one, macs=10**6, in_c=96, weight=w)
        assert widened_to_s8(w_fmt, A8, *one, macs=10**6)
    assert not widened_to_s8(W4, A8, (3, 3), (1, 1), (1, 1), macs=10**6, in_c=8)
    assert not widened_to_s8(W1, A8, *one, macs=10**6, in_c=32)
    assert not widened_to_s8(W4, A4, *one, macs=10**6, in_c=32)
    assert not widened_to_s8(W4, A8, *one, macs=1000, in_c=32)


def test_offset_fields_bound_the_lanes():
    """The fields u = x - qmin of every offset format span at most twice max|x|, so every run
    of the plan's n taps, times qmax - qmin, fits the unsigned lane (random weights of every
    width, every offset format); the fields x + 2^(b-1) of signed 2-bit codes (up to 3) did
    not: 42 taps of 3 x 3 overflow an 8-bit lane."""
    rng = np.random.default_rng(5)
    s2 = QFormat(2, True)
    plan = lane_plan(W2, s2)
    assert plan == {"s": 8, "n": 42, "is_signed": 1}
    assert plan["n"] * (s2.qmax - s2.qmin) * 3 <= 2**8 - 1 < plan["n"] * (2**s2.bits - 1) * 3
    checked = 0
    for a_fmt in _offset_fmts(rng):
        u_max, x_max = a_fmt.qmax - a_fmt.qmin, max(a_fmt.qmax, -a_fmt.qmin)
        assert u_max <= 2 * x_max
        for w_fmt in W_FMTS:
            codes = rng.integers(w_fmt.qmin, w_fmt.qmax + 1, size=(32, 64))
            if w_fmt.binary:
                codes = rng.choice([-1, 1], size=(32, 64))
            got = lane_plan(w_fmt, a_fmt, weight=codes)
            if got is None or got["n"] >= LANE_RUN_UNBOUNDED:
                continue
            offs = lane_offsets(codes, w_fmt)
            assert _windows(offs, got["n"]).max() * u_max <= 2 ** got["s"] - 1
            checked += 1
    assert checked >= 10


def test_random_layers_cover_the_bounds():
    """The layers reach what the rule is about: 8- and 16-bit lanes whose reductions take
    several segments of n taps, and the patch."""
    layers = random_layers()
    multi = {
        p["s"]
        for layer, p in zip(layers, _plans(layers), strict=True)
        if p is not None and layer.taps > p["n"]
    }
    assert {8, 16} <= multi
    assert sum(layer.weight.shape[2] > 1 for layer in layers) >= 4


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_bit_exact():
    """The same paths built for rv32imac."""
    every = random_layers()  # signed 2-bit codes on 8-bit lanes in several segments
    multi = [
        layer
        for layer, p in zip(every, _plans(every), strict=True)
        if p["s"] == 8 and layer.taps > p["n"] and layer.a_fmt == QFormat(2, True)
    ]
    layers = [words()[1], words()[7], offsets()[3], offsets()[9], eight_groups()[0],
              patched()[0], patched()[3], *multi[:3]]  # fmt: skip
    assert len(multi) >= 2
    for layer, ((kernel, _, out),) in zip(
        layers, kernels_rv32.run_layers(layers, "rv32", ("chosen",)), strict=True
    ):
        assert kernel.startswith("mico_qconv2d_lanes")
        assert np.array_equal(out, layer.reference().ravel()), kernel
