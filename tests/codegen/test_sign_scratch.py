"""Planned scratch of the sign tables' convolution and linear layer (mico_qconv2d_sign_lut,
mico_qlinear_sign_lut) and the sign-weight sums (mico_qconv2d_addsub1/2), issue 16:
mico.codegen.scratch sizes their working memory per layer as the C carves it
(mico_qconv2d_*_scratch, mico_qlinear_sign_lut_scratch report the C's size: the two agree over
many shapes); through the kernels harness a call given exactly that many bytes works in them
and one given a byte less takes its stack, both bit-exact as is the call given none (host,
under ASan + UBSan); the kernels' own frames stay small, their stack fallbacks hold the
memory."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest

from mico.codegen import scratch as scr
from mico.codegen.addsub_plan import KERNELS as ADDSUB_KERNELS
from mico.codegen.sign_lut_plan import CONV_KERNEL as SIGN_LUT
from mico.codegen.sign_lut_plan import LINEAR_KERNEL as SIGN_LUT_LINEAR
from mico.quant.arithmetic import TERNARY, QFormat
from tests.benchmark_modules import load_benchmark

kernels_rv32 = load_benchmark("kernels_rv32")

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

TERN, BIN = QFormat.for_bits(TERNARY, True), QFormat(1, True)
#: test_h1_mean's flags: a run of the suite compiles the sanitized kernel objects once
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all")
#: the kernel sources these layers' calls link (the sanitized build compiles only these)
LINKED = ("mico_nn_run.c", "mico_conv2d.c", "mico_linear.c", "mico_conv_addsub.c",
          "mico_sign_lut.c")  # fmt: skip
FIELDS = ("in_c", "in_h", "in_w", "out_c", "out_h", "out_w", "k_h", "k_w", "stride_h",
          "stride_w", "pad_h", "pad_w", "dil_h", "dil_w", "groups")  # fmt: skip


def _shapes(n: int, seed: int) -> list[tuple[dict[str, int], tuple[int, int, int], int]]:
    """``n`` random (geometry, input format (bits, signed, zero), weight bits)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k_h, k_w = int(rng.integers(1, 10)), int(rng.integers(1, 10))
        s, d = int(rng.integers(1, 4)), int(rng.integers(1, 3))
        pad = int(rng.integers(0, 3))
        in_h, in_w = int(rng.integers(k_h * d, 40)), int(rng.integers(k_w * d, 60))
        groups = int(rng.choice([1, 1, 1, 2]))
        in_c = int(rng.integers(1, 40)) * int(rng.choice([1, 8]))  # whole bytes of signs
        geom = {"in_c": groups * in_c, "in_h": in_h, "in_w": in_w,
                "out_c": groups * int(rng.integers(1, 50)), "k_h": k_h, "k_w": k_w,
                "stride_h": s, "stride_w": s, "pad_h": pad, "pad_w": pad, "dil_h": d,
                "dil_w": d, "groups": groups}  # fmt: skip
        geom["out_h"] = (in_h + 2 * pad - d * (k_h - 1) - 1) // s + 1
        geom["out_w"] = (in_w + 2 * pad - d * (k_w - 1) - 1) // s + 1
        bits = int(rng.integers(1, 10))
        signed = int(rng.integers(0, 2))
        zero = (
            0 if signed or bits > 8 else int(rng.integers(0, 1 << bits)) * int(rng.integers(0, 2))
        )
        out.append((geom, (bits, signed, zero), int(rng.choice([1, 2, 4]))))
    return out


def _print_sizes(lines: list[str]) -> str:
    """Build and run (host) the program whose ``main`` body so far is ``lines``: its output."""
    lines = [*lines, "    return 0;", "}"]
    with tempfile.TemporaryDirectory(prefix="mico-scratch-") as tmp:
        work = Path(tmp)
        (work / "main.c").write_text("\n".join(lines) + "\n")
        sources = [str(work / "main.c"), *kernels_rv32._sources(work)]
        return kernels_rv32.build_and_run(work, sources, "host", "gcc", 300)


def _c_sizes(shapes) -> list[tuple[int, int]]:
    """(mico_qconv2d_sign_lut_scratch, mico_qconv2d_addsub_scratch) of each shape, as the C
    computes them (host build)."""
    lines = ["#include <stdio.h>", '#include "mico_nn.h"', "int main(void)", "{"]
    for geom, (bits, signed, zero), w_bits in shapes:
        fields = ", ".join(f".{k} = {geom[k]}" for k in FIELDS)
        lines += [
            "    {",
            f"        MicoConv2d p = {{ {fields}, .in_fmt = {{ {bits}, {signed}, {zero} }}, "
            f".w_bits = {w_bits} }};",
            '        printf("%lu %lu\\n", (unsigned long)mico_qconv2d_sign_lut_scratch(&p),',
            "               (unsigned long)mico_qconv2d_addsub_scratch(&p));",
            "    }",
        ]
    text = _print_sizes(lines)
    return [tuple(int(v) for v in line.split()) for line in text.splitlines()]


def test_python_sizes_are_the_c_sizes():
    shapes = _shapes(400, seed=1)
    c_sizes = _c_sizes(shapes)
    taken = [0, 0]
    for (geom, in_fmt, w_bits), (c_lut, c_as) in zip(shapes, c_sizes, strict=True):
        py_lut = scr.sign_lut_bytes(geom, in_fmt, w_bits)
        py_as = scr.addsub_bytes(geom, in_fmt, w_bits)
        assert (py_lut, py_as) == (c_lut, c_as), (geom, in_fmt, w_bits)
        taken[0] += py_lut > 0
        taken[1] += py_as > 0
        assert py_lut % 8 == 0 and py_as % 8 == 0
    assert min(taken) >= 40, taken  # both kernels took many of the shapes


def _linear_shapes(n: int, seed: int) -> list[tuple[int, int, int, tuple[int, int, int], int]]:
    """``n`` random (rows, in_features, out_features, input format, weight bits)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        rows = int(rng.choice([1, 1, 2, 3, 4, 7, 64]))
        in_f = int(rng.integers(1, 60)) * int(rng.choice([1, 8]))  # whole bytes of signs or not
        out_f = int(rng.integers(1, 200))
        bits, signed = int(rng.integers(1, 10)), int(rng.integers(0, 2))
        zero = (
            0 if signed or bits > 8 else int(rng.integers(0, 1 << bits)) * int(rng.integers(0, 2))
        )
        out.append((rows, in_f, out_f, (bits, signed, zero), int(rng.choice([1, 1, 2]))))
    return out


def _c_linear_sizes(shapes) -> list[int]:
    """mico_qlinear_sign_lut_scratch of each shape, as the C computes it (host build)."""
    lines = ["#include <stdio.h>", '#include "mico_nn.h"', "int main(void)", "{"]
    for rows, in_f, out_f, (bits, signed, zero), w_bits in shapes:
        lines += [
            "    {",
            f"        MicoLinear p = {{ .rows = {rows}, .in_features = {in_f}, "
            f".out_features = {out_f}, .in_fmt = {{ {bits}, {signed}, {zero} }}, "
            f".w_bits = {w_bits} }};",
            '        printf("%lu\\n", (unsigned long)mico_qlinear_sign_lut_scratch(&p));',
            "    }",
        ]
    return [int(line) for line in _print_sizes(lines).splitlines()]


def test_python_linear_sizes_are_the_c_sizes():
    """The sign tables' linear layer (mico_qlinear_sign_lut): the planner's size is the C's on
    many shapes, at most the 3 KB of its stack fallback, and less for a row alone."""
    shapes = _linear_shapes(400, seed=2)
    taken = 0
    for (rows, in_f, out_f, in_fmt, w_bits), c in zip(shapes, _c_linear_sizes(shapes),
                                                       strict=True):  # fmt: skip
        py = scr.sign_lut_linear_bytes(rows, in_f, out_f, in_fmt, w_bits)
        assert py == c, (rows, in_f, out_f, in_fmt, w_bits)
        assert py % 8 == 0 and py <= 2 * 128 * 2 + 2 * 64 * 4 + 128 * 16
        taken += py > 0
    assert taken >= 40, taken
    assert scr.sign_lut_linear_bytes(1, 1024, 256, (8, 0, 0), 1) == 256 + 256 + 2048
    assert scr.sign_lut_linear_bytes(4, 1024, 256, (8, 0, 0), 1) == 512 + 512 + 2048
    assert scr.sign_lut_linear_bytes(1, 16, 3, (4, 1, 0), 1) == 32 + 16 + 256


def _conv(w_fmt, a_fmt, seed, **kw):
    spec = dict(in_c=8, out_c=6, hw=(5, 7), k=3, pad=1)
    spec.update(kw)
    return kernels_rv32.random_layer("conv", w_fmt, a_fmt, seed=seed, **spec)


A8, S8 = QFormat(8, False), QFormat(8, True)


def _sign_lut_layers() -> list:
    """Codes of 2 to 8 bits (zero points too), strides, dilation, 1x1 kernels over three chunks,
    5x5 / 7x7 / 8x8 kernels, 70 channels (three blocks), few channels, a last pixel group of
    three, a single output pixel."""
    return [
        *[_conv(BIN, QFormat(b, sg), b, hw=(5, 7)) for b in (2, 5, 8) for sg in (False, True)],
        _conv(BIN, QFormat(8, False, zero=77), 1, hw=(4, 4)),
        _conv(BIN, A8, 2, in_c=8, hw=(9, 8), stride=2),
        _conv(BIN, A8, 3, in_c=8, hw=(9, 9), dil=2, pad=2),
        _conv(BIN, A8, 4, in_c=136, hw=(3, 6), k=1, pad=0),
        _conv(BIN, A8, 5, in_c=8, hw=(8, 8), k=5, pad=2),
        _conv(BIN, QFormat(6, True), 6, in_c=8, hw=(9, 9), k=7, pad=3),
        _conv(BIN, A8, 7, in_c=8, hw=(9, 10), k=8, pad=0),
        _conv(BIN, A8, 8, in_c=16, out_c=70, hw=(6, 5)),
        _conv(BIN, A8, 9, in_c=16, out_c=2, hw=(3, 3), pad=0),
        _conv(BIN, S8, 10, in_c=64, hw=(4, 5), k=1, pad=0, extreme=True, relu=False,
              o_fmt=S8),
    ]  # fmt: skip


def _addsub_layers() -> list:
    """Ternary and binary weights on codes of 1 to 8 bits; input rows' phase arrays (even
    output widths) and the patch (odd), strides, dilation, a 1x1 kernel over three chunks, 5x5,
    70 channels, rows of 40 (tiles of 16, 16, 8), codes at the lanes' limits."""
    layers = []
    for i, w in enumerate((TERN, BIN)):
        layers += [
            *[_conv(w, QFormat(b, sg), b + i, in_c=5, hw=hw) for b in (1, 4, 8)
              for sg in (False, True) for hw in ((5, 7), (6, 8))],
            _conv(w, QFormat(8, False, zero=128), 1, in_c=5, hw=(6, 8)),
            _conv(w, A8, 2, in_c=7, hw=(9, 8), stride=2),
            _conv(w, A8, 3, in_c=4, hw=(9, 9), dil=2, pad=2),
            _conv(w, A8, 4, in_c=130, hw=(3, 6), k=1, pad=0),
            _conv(w, A8, 5, in_c=6, hw=(8, 8), k=5, pad=2),
            _conv(w, A8, 6, in_c=9, out_c=70, hw=(6, 5)),
            _conv(w, S8, 7, in_c=6, hw=(3, 40)),
            _conv(w, A8, 8, in_c=5, hw=(7, 44), stride=2, k=5, pad=2),
            _conv(w, S8, 9, in_c=40, hw=(4, 6), extreme=True, relu=False, o_fmt=S8),
        ]  # fmt: skip
    return layers


def _lin(a_fmt, seed, in_c=64, out_c=40, rows=1, **kw):
    return kernels_rv32.random_layer("linear", BIN, a_fmt, in_c=in_c, out_c=out_c, rows=rows,
                                     seed=seed, **kw)  # fmt: skip


def _sign_lut_linear_layers() -> list:
    """Codes of 2 to 8 bits (zero points too) on one row and on pairs; odd rows (a last row
    alone), chunks of 128 taps and a short last one, three blocks of outputs (64, 64, 2), a
    single output, codes and multipliers at their limits."""
    return [
        *[_lin(QFormat(b, sg), b, rows=r) for b in (2, 5, 8) for sg in (False, True)
          for r in (1, 2)],
        _lin(QFormat(8, False, zero=77), 1, rows=3),
        _lin(QFormat(5, False, zero=9), 2, rows=5, in_c=24, out_c=9),
        _lin(A8, 3, in_c=264, out_c=130),
        _lin(A8, 4, in_c=264, out_c=130, rows=3),
        _lin(S8, 5, in_c=136, out_c=1, rows=2),
        _lin(QFormat(4, True), 6, in_c=8, out_c=70, rows=4),
        _lin(S8, 7, in_c=256, out_c=64, rows=2, extreme=True, relu=False, o_fmt=S8),
        _lin(A8, 8, in_c=512, out_c=16, extreme=True, o_fmt=QFormat(4, False)),
    ]  # fmt: skip


#: family -> its layers (the harness's path: the name less ``_linear``)
PATHS = {"sign_lut": _sign_lut_layers, "sign_lut_linear": _sign_lut_linear_layers,
         "addsub": _addsub_layers}  # fmt: skip


@pytest.fixture(scope="module", params=["plain", "sanitized"])
def runs(request) -> dict:
    """Each family's layers through the kernel with exact scratch, a byte short, none, and the
    plain path: family -> [(layer, results)] (one program a family; ``sanitized``: ASan +
    UBSan)."""
    flags = SANITIZE if request.param == "sanitized" else ()
    result = {}
    for path, layers_of in PATHS.items():
        layers = layers_of()
        harness = path.removesuffix("_linear")
        paths = (f"{harness}@exact", f"{harness}@short", harness, "plain")
        results = kernels_rv32.run_layers(layers, "host", paths, host_flags=flags, kernels=LINKED)
        result[path] = list(zip(layers, results, strict=True))
    return result


@pytest.mark.parametrize("path", sorted(PATHS))
def test_scratch_exact_is_used_and_short_is_not(runs, path):
    for layer, results in runs[path]:
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            assert np.array_equal(out, ref), (kernel, np.flatnonzero(out != ref)[:10])
        kernels = [kernel for kernel, _, _ in results]
        name = {"sign_lut": SIGN_LUT, "sign_lut_linear": SIGN_LUT_LINEAR}.get(
            path, ADDSUB_KERNELS[layer.w_fmt.bits]
        )
        assert kernels[:3] == [f"{name}@written", f"{name}@untouched", name], kernels


@pytest.mark.skipif(shutil.which("riscv64-unknown-elf-gcc") is None, reason="needs rv32 gcc")
def test_rv32_frames_are_small_and_the_fallbacks_hold_the_memory():
    """rv32 -O2 frames: the kernels with their scratch planned keep no large arrays (they were
    4.3 + 2.1 KB and 4.6 KB); the stack fallbacks hold the most a layer takes."""
    from mico.hw.stack import kernel_frames

    lut, addsub = kernel_frames("mico_sign_lut.c"), kernel_frames("mico_conv_addsub.c")
    for frames, names in ((lut, ("mico_qconv2d_sign_lut", "mico_sl_conv_layer",
                                 "mico_sl_conv_quad", "mico_qlinear_sign_lut",
                                 "mico_sl_linear_layer", "mico_sl_linear_pair")),
                          (addsub, ("mico_as_layer", "mico_as_rows", "mico_as_ch1",
                                    "mico_as_ch2"))):  # fmt: skip
        for name in names:
            assert frames[name].size < 512, (name, frames[name].size)
    # the sign tables' fallback: patch and tile on its frame, the tables on the quads' below
    assert lut["mico_sl_conv_stack"].size >= 4096
    assert lut["mico_sl_conv_quads_stack"].size >= 2048
    # the linear layer's: a chunk's codes of two rows, their sums, the tables (it was 3.3 KB
    # over the entry's frame and the pair's)
    assert lut["mico_sl_linear_stack"].size >= 2 * 128 * 2 + 2 * 64 * 4 + 128 * 16
    assert addsub["mico_as_stack"].size >= 4096 + 64 * 4
    assert set(scr.STACK_FALLBACKS.values()) >= {"mico_sl_conv_stack", "mico_as_stack",
                                                  "mico_sl_linear_stack"}  # fmt: skip
