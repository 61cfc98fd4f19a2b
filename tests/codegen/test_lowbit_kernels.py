"""The channel-lanes kernels (mico_qconv2d_lanes_w* / mico_qlinear_lanes_w*) against the Python
integer arithmetic, layer by layer, through the C program of benchmarks/kernels_rv32.py: every
weight width the lanes take (1, 2, 4, 8 and ternary) against activations of 1..8 bits, signed
and unsigned, odd tap counts and pixel counts that fill no word or block, code extremes and
saturating multipliers; the lane plan and the weight layout; one case on rv32 under qemu."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mico.codegen.addsub_plan import addsub_kernel
from mico.codegen.emitters import lanes_plan
from mico.quant.arithmetic import TERNARY, QFormat
from mico.quant.packing import LANE_KERNELS, lane_plan, pack, pack_lanes
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

kernels_rv32 = load_benchmark("kernels_rv32")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

W_FMTS = [QFormat(1, True), QFormat.for_bits(TERNARY, True), QFormat(4, True), QFormat(8, True)]


def check(layers, target: str = "host") -> list[str]:
    """Run every layer's chosen and plain paths (one program); all must equal the reference
    exactly. Returns the chosen kernel of each layer."""
    chosen = []
    for layer, results in zip(layers, kernels_rv32.run_layers(layers, target), strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            assert np.array_equal(out, ref), (kernel, np.flatnonzero(out != ref)[:10])
        chosen.append(results[0][0])
    return chosen


def _conv_every(w_fmt) -> list:
    """3x3 conv (padding, odd 5x7 plane: pixel blocks and words left partly empty)."""
    out_c = 32 // w_fmt.bits
    layers = []
    for a_bits in range(1, 9):
        for signed in (False, True):
            a_fmt = QFormat(a_bits, signed)
            layer = kernels_rv32.random_layer(
                "conv", w_fmt, a_fmt, in_c=3, out_c=out_c, hw=5, k=3, pad=1,
                seed=a_bits * 2 + signed,
            )  # fmt: skip
            layer.x = np.concatenate([layer.x, layer.x[:, :, :2]], axis=2)  # 5 x 7 inputs
            layers.append(layer)
    return layers


def _linear_every(w_fmt) -> list:
    """Linear layers with 37 inputs (no whole word) and 3 rows, and with 300 (two chunks)."""
    out_c = 32 // w_fmt.bits * 2
    return [
        kernels_rv32.random_layer(
            "linear", w_fmt, QFormat(a_bits, signed), in_c=in_c, out_c=out_c, rows=rows,
            seed=a_bits + 10 * signed + in_c,
        )
        for a_bits in range(1, 9)
        for signed in (False, True)
        for in_c, rows in ((37, 3), (300, 1))
    ]  # fmt: skip


EXTREMES = [(1, 1, False), (1, 1, True), (2, 2, False), (4, 4, False), (4, 4, True),
            (8, 4, False), (TERNARY, 8, False), (2, 3, True)]  # fmt: skip


def _extremes(w_bits, a_bits, a_signed) -> list:
    """Codes at their limits (lanes filled to capacity between flushes), saturating
    multipliers, biases near the int32 limits, a reduction of 40 channels x 3x3 (chunks)."""
    w_fmt, a_fmt = QFormat.for_bits(w_bits, True), QFormat(a_bits, a_signed)
    out_c = 32 // w_fmt.bits
    layers = []
    for seed, extreme in ((1, True), (2, False)):
        layers.append(kernels_rv32.random_layer(
            "conv", w_fmt, a_fmt, in_c=40, out_c=out_c, hw=4, k=3, pad=1, stride=1, seed=seed,
            extreme=extreme, o_fmt=QFormat(8, True), relu=False,
        ))  # fmt: skip
        layers.append(kernels_rv32.random_layer(
            "linear", w_fmt, a_fmt, in_c=1000, out_c=out_c, seed=seed, extreme=extreme,
            o_fmt=QFormat(4, False),
        ))  # fmt: skip
    return layers


def _pointwise() -> list:
    """1x1 (the pointwise patch), stride 2 with padding, and groups of F channels."""
    w4, a4 = QFormat(4, True), QFormat(4, False)
    return [
        kernels_rv32.random_layer("conv", w4, a4, in_c=24, out_c=16, hw=9, k=1, seed=3),
        kernels_rv32.random_layer("conv", w4, a4, in_c=8, out_c=8, hw=9, k=3, pad=1, stride=2,
                                  seed=4),
        kernels_rv32.random_layer("conv", w4, a4, in_c=16, out_c=16, hw=6, k=3, pad=1, groups=2,
                                  seed=5),
    ]  # fmt: skip


@pytest.fixture(scope="module")
def chosen() -> dict:
    """Every host case below in one program (chosen and plain paths, each equal to the
    reference); case key -> the chosen kernel of each of its layers."""
    cases = {("conv", str(f)): _conv_every(f) for f in W_FMTS}
    cases.update({("linear", str(f)): _linear_every(f) for f in W_FMTS})
    cases.update({("extremes", e): _extremes(*e) for e in EXTREMES})
    cases[("pointwise",)] = _pointwise()
    cases[("short",)] = _short_blocks()
    kernels = iter(check([layer for layers in cases.values() for layer in layers]))
    return {key: [next(kernels) for _ in layers] for key, layers in cases.items()}


@pytest.mark.parametrize("w_fmt", W_FMTS, ids=str)
def test_conv_every_activation_width(chosen, w_fmt):
    used = sum(k.startswith("mico_qconv2d_lanes") for k in chosen[("conv", str(w_fmt))])
    assert used >= 6  # the lanes take most pairs of narrow widths


@pytest.mark.parametrize("w_fmt", W_FMTS, ids=str)
def test_linear_every_activation_width(chosen, w_fmt):
    assert len(chosen[("linear", str(w_fmt))]) == 32  # each equal to the reference


@pytest.mark.parametrize(("w_bits", "a_bits", "a_signed"), EXTREMES)
def test_extremes_and_long_reductions(chosen, w_bits, a_bits, a_signed):
    kernels = chosen[("extremes", (w_bits, a_bits, a_signed))]
    layers = _extremes(w_bits, a_bits, a_signed)
    # binary weights x 1-bit activations take the popcount kernels (test_binary_popcount.py);
    # ternary weights on 8-bit codes over many taps the sign-weight sums (test_addsub.py)
    binary = layers[0].binary()
    conv = layers[0]
    signs = addsub_kernel(conv.w_fmt, a_bits, conv.taps, 1, True, conv.weight, conv.out_hw, 3)
    path = (
        "mico_qconv2d_bin_" if binary else "mico_qconv2d_addsub" if signs else "mico_qconv2d_lanes"
    )
    assert kernels[0].startswith(path) and kernels[0] == kernels[2]
    if signs:  # the lanes still take such layers of fewer taps: at capacity here too
        convs = [layers[0], layers[2]]
        runs = kernels_rv32.run_layers(convs, "host", ("lanes",))
        for layer, ((kernel, _, out),) in zip(convs, runs, strict=True):
            assert kernel.startswith("mico_qconv2d_lanes_w2g8")
            assert np.array_equal(out, layer.reference().ravel())


def test_pointwise_strided_and_grouped(chosen):
    assert all(k.startswith("mico_qconv2d_lanes_w4g") for k in chosen[("pointwise",)])


def _short_blocks() -> list:
    """Layers whose output channels do not fill the last word (LeNet's 6, 84, 120): each
    path of the lanes with a short last block, codes at their limits and saturating
    multipliers too (the padding's channels, zero weights, are summed with the others and
    must neither spill into a real channel's lane nor be stored)."""
    w2, w4, w8 = QFormat(2, True), QFormat(4, True), QFormat(8, True)
    t = QFormat.for_bits(TERNARY, True)
    a4, a2, a8s = QFormat(4, False), QFormat(2, False), QFormat(8, True)
    conv = kernels_rv32.random_layer
    return [
        conv("conv", w4, a4, in_c=3, out_c=6, hw=9, k=3, pad=1, seed=21),  # by rows
        conv("conv", w2, a2, in_c=1, out_c=6, hw=6, k=5, seed=22),  # narrow rows: the patch
        conv("conv", w4, a4, in_c=24, out_c=12, hw=9, k=1, seed=23),  # pointwise
        conv("conv", w8, a4, in_c=5, out_c=6, hw=9, k=3, pad=1, seed=24),  # 8-bit lanes
        conv("conv", w2, a2, in_c=16, out_c=20, hw=9, k=3, pad=1, seed=25, extreme=True,
             o_fmt=QFormat(8, True), relu=False),
        conv("linear", w4, a4, in_c=37, out_c=12, rows=3, seed=26),
        conv("linear", w2, a2, in_c=300, out_c=120, seed=27),
        conv("linear", t, a8s, in_c=400, out_c=84, seed=28, extreme=True,
             o_fmt=QFormat(4, False)),
        conv("linear", w2, a2, in_c=300, out_c=6, seed=29),
    ]  # fmt: skip


def test_short_last_blocks(chosen):
    """Channels that leave the last word partly empty keep the lanes (bit-exact: ``chosen``
    checks every output), some at a wider weight width where that costs no more flash."""
    kernels = chosen[("short",)]
    assert all("_lanes_w" in k for k in kernels), kernels
    assert kernels[1].startswith("mico_qconv2d_lanes_w4")  # 6 channels: 2-bit codes as 4-bit
    assert kernels[6].startswith("mico_qlinear_lanes_w2")  # 120 of 128: the padding is cheap


def test_lane_plan_capacity():
    """n products of the largest magnitudes fit a lane (signed lanes: half of it)."""
    for wb in (1, 2, 4, 8):
        w_fmt = QFormat(wb, True)
        for ab in range(1, 9):
            for signed in (False, True):
                a_fmt = QFormat(ab, signed)
                plan = lane_plan(w_fmt, a_fmt)
                if plan is None:
                    continue
                s = plan["s"]
                assert (wb, s // wb) in LANE_KERNELS
                w_max = 1 if wb == 1 else 2**wb - 1
                x_max = max(a_fmt.qmax, -a_fmt.qmin)
                cap = 2 ** (s - 1) if signed else 2**s
                assert plan["n"] * w_max * x_max < cap
    assert lane_plan(QFormat(8, True), QFormat(8, False)) is None  # 8x8: the plain kernels
    assert lane_plan(QFormat(3, True), QFormat(3, False)) is None  # no word of 3-bit fields
    # 12 channels fill a word and a half: one group pads the last word, groups of 12 do not
    assert lanes_plan(QFormat(4, True), QFormat(4, False), 12)["w_bits"] == 4
    assert lanes_plan(QFormat(4, True), QFormat(4, False), 12, groups=2) is None
    assert lanes_plan(QFormat(4, True), QFormat(4, False), 16, groups=2) is not None
    # 6 channels of 2-bit codes: one 16-channel word either way, cheaper as 8 4-bit lanes
    assert lanes_plan(QFormat(2, True), QFormat(2, False), 6)["w_bits"] == 4


def test_pack_lanes_layout():
    """Word (block, tap) holds the offset weights w + 2^(bits-1) (binary: 0 / 1) of the block's
    F channels, where the kernels look; as many bytes as the plain packing."""
    rng = np.random.default_rng(0)
    for fmt in (QFormat(1, True), QFormat(2, True), QFormat(4, True), QFormat(8, True)):
        f = 32 // fmt.bits
        codes = rng.integers(fmt.qmin, fmt.qmax + 1, size=(2 * f, 5))
        if fmt.binary:
            codes = np.where(codes > 0, 1, -1)
        words = pack_lanes(codes, fmt)
        assert words.nbytes == pack(codes, fmt).nbytes
        for c in range(2 * f):
            for t in range(5):
                field = (int(words[(c // f) * 5 + t]) >> ((c % f) * fmt.bits)) & (2**fmt.bits - 1)
                want = (codes[c, t] + 1) // 2 if fmt.binary else codes[c, t] + 2 ** (fmt.bits - 1)
                assert field == want
    # 12 channels of 4 bits: the second word's last 4 channels are zero weights (offset 8)
    words = pack_lanes(np.zeros((12, 3), dtype=int), QFormat(4, True))
    assert words.tolist() == [0x88888888] * 3 + [0x88888888] * 3
    ones = pack_lanes(-np.ones((3, 2), dtype=int), QFormat(1, True))  # binary: -1 fills (0)
    assert ones.tolist() == [0, 0]
    with pytest.raises(ValueError, match="range"):
        pack_lanes(np.full((8, 1), 9), QFormat(4, True))


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_rv32_lanes_bit_exact_and_cheaper():
    """On rv32imac: W2A2 conv and W1A1 linear bit-exact, and fewer instructions than plain."""
    conv = kernels_rv32.random_layer(
        "conv", QFormat(2, True), QFormat(2, False), in_c=8, out_c=16, hw=6, k=3, pad=1, seed=7
    )
    fc = kernels_rv32.random_layer("linear", QFormat(1, True), QFormat(1, False), in_c=96,
                                   out_c=32, seed=8)  # fmt: skip
    results_all = kernels_rv32.run_layers([conv, fc], "rv32")
    for layer, results in zip((conv, fc), results_all, strict=True):
        ref = layer.reference().ravel()
        (_, lanes_count, lanes_out), (_, plain_count, plain_out) = results
        assert np.array_equal(lanes_out, ref) and np.array_equal(plain_out, ref)
        assert lanes_count < plain_count


@pytest.mark.parametrize("bits", [4, 2, 1])
def test_generated_dscnn_uses_lanes_and_is_bit_exact(bits, tmp_path):
    """End to end: the code generator emits the lanes layout and entry points for dscnn's
    wide layers at uniform W<b>A<b>; the program (ASan + UBSan) equals the Python reference."""
    import torch

    from mico.codegen import emit_c_project
    from mico.execute import run_graph
    from mico.ir import extract_ir
    from mico.models import from_zoo
    from mico.passes import lower_static
    from mico.quant import calibrate, fuse_model
    from mico.targets import host

    torch.manual_seed(bits)
    model = from_zoo("dscnn")
    n = model.n_layers
    model.set_qscheme([[bits] * n, [8] + [bits] * (n - 1)], act_mode="static")
    example = model.example_input()
    gen = torch.Generator().manual_seed(bits)
    batches = [torch.randn((4, *example.shape[1:]), generator=gen)]
    model = fuse_model(model, example).eval()
    calibrate(model, batches)
    graph = lower_static(extract_ir(model, example), batches)
    project = emit_c_project(graph, tmp_path / "c", "m")
    source = (project.directory / "m.c").read_text()
    assert ("_bin_swar" if bits == 1 else "_lanes_w") in source  # W1A1: popcount kernels
    host.build(project, sanitize=True)
    samples = torch.randn((2, *example.shape[1:]), generator=gen)
    reference = run_graph(graph, samples)[0].numpy()
    c_out = host.run(project, samples.numpy())
    assert np.array_equal(c_out.reshape(reference.shape), reference)
