"""Instructions per MAC of the integer conv / linear kernels, layer by layer, on rv32imac.

Run on demand (not a test; tests/codegen/test_lowbit_kernels.py uses its harness):

    python benchmarks/kernels_rv32.py [--out benchmarks/results] [--plans 8/8,4/4,...]

Each case is one layer (a shape x weight / activation widths) with seeded random codes, bias
and per-channel multipliers. A generated C program holds the layer's constants as the code
generator emits them, calls the kernel the generator picks (``mico.codegen.emitters``:
channel lanes where they apply) and, for comparison, the plain kernel on plainly packed
weights, and prints the instructions each call retired (the ``instret`` CSR, qemu
``-icount shift=0``) and the output bytes. Both outputs are held to the Python integer
reference (numpy, exact): a case whose C differs is reported as such.
Results: ``kernels_rv32.{md,json}``.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import numpy as np

from mico.codegen import scratch, sign_lut_plan
from mico.codegen.addsub_plan import KERNELS as ADDSUB_KERNELS
from mico.codegen.addsub_plan import addsub_kernel
from mico.codegen.binary_plan import binary_kernel, depthwise_sliced, takes_binary, thresholds
from mico.codegen.dwconv_plan import (
    dw_kernel,
    dw_lane_plan,
    dwb_thresholds,
    dwp_form,
    dwp_levels,
)
from mico.codegen.emitters import (
    LANES_MIN_MACS,
    SUB_WORD_BITS,
    conv2d_kernel,
    folded_bias,
    lanes_kernel,
    lanes_plan,
    linear_kernel,
    linear_x_off,
    sub_offset_kernel,
    widened_to_s8,
)
from mico.codegen.makefile import QEMU_RV32, RV32_ARCH, RV32_CC, RV32_LIBC, RV32_MEMORY
from mico.ir.ops.mico_ops import out_spec
from mico.quant.arithmetic import TERNARY, QFormat, format_bits, requantize
from mico.quant.packing import pack, pack_binary_rows, pack_lanes, unpack

KERNEL_SOURCES = (
    "mico_nn_run.c", "mico_conv2d.c", "mico_dwconv.c", "mico_linear.c", "mico_binary.c",
    "mico_conv_narrow.c", "mico_conv_addsub.c", "mico_sign_lut.c",
)  # fmt: skip


@dataclass
class Layer:
    """One conv (NCHW, batch 1) or linear layer with its codes and requantization."""

    kind: str  # "conv" or "linear"
    w_fmt: QFormat
    a_fmt: QFormat
    o_fmt: QFormat
    weight: np.ndarray  # codes: (out, in/groups, kh, kw) or (out, in)
    x: np.ndarray  # codes: (c, h, w) or (rows, in)
    bias: np.ndarray
    m: np.ndarray
    shift: np.ndarray
    relu: bool = True
    stride: int = 1
    pad: int = 0
    groups: int = 1
    dil: int = 1
    meta: dict = field(default_factory=dict)

    @property
    def macs(self) -> int:
        if self.kind == "linear":
            return int(self.x.shape[0] * self.weight.size)
        out_c, ipg, kh, kw = self.weight.shape
        oh, ow = self.out_hw
        return int(out_c * ipg * kh * kw * oh * ow)

    @property
    def taps(self) -> int:
        return int(np.prod(self.weight.shape[1:]))

    def binary(self) -> bool:
        """Whether the code generator gives this layer the popcount kernels."""
        k_w = 1 if self.kind == "linear" else self.weight.shape[3]
        dw = self.kind == "conv" and depthwise_sliced(
            self.groups, self.x.shape[0], self.weight.shape[0], self.weight.shape[2:],
            (self.stride,) * 2, (self.pad,) * 2, (self.dil,) * 2, self.x.shape[1:],
        )  # fmt: skip
        # depthwise layers as the generator sizes them (smaller ones keep the depthwise paths)
        return takes_binary(self.w_fmt, self.a_fmt, self.taps, self.groups, 1, k_w,
                            macs=self.macs if dw else None, depthwise=dw)  # fmt: skip

    def thresholds(self) -> np.ndarray | None:
        """The popcount kernels' thresholds (1-bit outputs), as the generator finds them."""
        spec = {"qformat": self.o_fmt, "m": [int(v) for v in self.m],
                "shift": [int(v) for v in self.shift],
                "clamp": [self.o_fmt.qmin, self.o_fmt.qmax]}  # fmt: skip
        return thresholds(self.bias, spec, self.relu, self.taps)

    @property
    def out_hw(self) -> tuple[int, int]:
        _, h, w = self.x.shape
        kh, kw = self.weight.shape[2:]
        d = self.dil
        return (
            (h + 2 * self.pad - d * (kh - 1) - 1) // self.stride + 1,
            (w + 2 * self.pad - d * (kw - 1) - 1) // self.stride + 1,
        )

    def reference(self) -> np.ndarray:
        """Output codes: bias + exact integer sums, ReLU, per-channel requantization."""
        w = self.weight.astype(np.int64)
        if self.kind == "linear":
            acc = self.x.astype(np.int64) @ w.T + self.bias[None, :]
            ch_axis = 1
        else:
            c, h, wd = self.x.shape
            xp = np.zeros((c, h + 2 * self.pad, wd + 2 * self.pad), dtype=np.int64)
            xp[:, self.pad : self.pad + h, self.pad : self.pad + wd] = self.x
            out_c, ipg, kh, kw = w.shape
            oh, ow = self.out_hw
            s, d = self.stride, self.dil
            acc = np.zeros((out_c, oh, ow), dtype=np.int64)
            opg = out_c // self.groups
            for ky in range(kh):
                for kx in range(kw):
                    y0, x0 = ky * d, kx * d
                    win = xp[:, y0 : y0 + s * (oh - 1) + 1 : s, x0 : x0 + s * (ow - 1) + 1 : s]
                    for g in range(self.groups):
                        xs = win[g * ipg : (g + 1) * ipg]  # (ipg, oh, ow)
                        ws = w[g * opg : (g + 1) * opg, :, ky, kx]  # (opg, ipg)
                        acc[g * opg : (g + 1) * opg] += np.einsum("oi,ihw->ohw", ws, xs)
            acc += self.bias[:, None, None]
            ch_axis = 0
        if self.relu:
            acc = np.maximum(acc, 0)
        out = np.empty_like(acc)
        for c in range(acc.shape[ch_axis]):
            idx = (slice(None), c) if ch_axis == 1 else (c,)
            out[idx] = requantize(acc[idx], int(self.m[c]), int(self.shift[c]), self.o_fmt)
        return out


def random_layer(
    kind: str,
    w_fmt: QFormat,
    a_fmt: QFormat,
    *,
    in_c: int,
    out_c: int,
    hw: int | tuple[int, int] = 1,
    k: int = 1,
    pad: int = 0,
    stride: int = 1,
    groups: int = 1,
    dil: int = 1,
    rows: int = 1,
    o_fmt: QFormat | None = None,
    seed: int = 0,
    extreme: bool = False,
    relu: bool = True,
) -> Layer:
    """A layer of seeded random codes; multipliers put the sums' spread across the output range.

    ``extreme``: weights and inputs at their code limits and multipliers that saturate.
    """
    rng = np.random.default_rng(seed)
    o_fmt = o_fmt or a_fmt
    if kind == "linear":
        wshape, xshape = (out_c, in_c), (rows, in_c)
    else:
        h, w_ = (hw, hw) if isinstance(hw, int) else hw
        wshape, xshape = (out_c, in_c // groups, k, k), (in_c, h, w_)
    w, x = _codes(rng, w_fmt, wshape, extreme), _codes(rng, a_fmt, xshape, extreme)
    taps = int(np.prod(wshape[1:]))
    spread = max(
        1.0, np.sqrt(taps) * max(abs(w_fmt.qmin), w_fmt.qmax) * max(abs(a_fmt.qmin), a_fmt.qmax) / 2
    )
    bias = rng.integers(-int(spread), int(spread) + 1, size=out_c)
    if extreme:
        bias = rng.choice([-(2**31) + 2**20, 2**31 - 1 - 2**20, 0], size=out_c)
    real = (o_fmt.qmax - o_fmt.qmin + 1) / (2 * spread) * rng.uniform(0.5, 2.0, size=out_c)
    if extreme:
        real = real * 1000.0
    shift = np.clip(np.floor(30 - np.log2(real)).astype(np.int64), 1, 62)
    m = np.clip(np.round(real * 2.0**shift), 0, 2**31 - 1).astype(np.int64)
    return Layer(kind, w_fmt, a_fmt, o_fmt, w.astype(np.int64), x.astype(np.int64),
                 bias.astype(np.int64), m, shift, relu=relu, stride=stride, pad=pad,
                 groups=groups, dil=dil)  # fmt: skip


def _codes(rng: np.random.Generator, fmt: QFormat, shape: tuple, extreme: bool) -> np.ndarray:
    """Random codes of a format (binary: {-1, +1}); ``extreme``: only its two limits."""
    if extreme or fmt.binary:
        return rng.choice([fmt.qmin, fmt.qmax], size=shape)
    return rng.integers(fmt.qmin, fmt.qmax + 1, size=shape)


# ----------------------------------------------------------------------------- C program
def _array(ctype: str, name: str, values) -> str:
    items = ", ".join(str(int(v)) for v in values) or "0"
    return f"static const {ctype} {name}[] = {{ {items} }};"


def _fmt(f: QFormat) -> str:
    zero = f", .zero = {f.zero}" if f.zero else ""
    return f"{{ .bits = {f.bits}, .is_signed = {int(f.signed)}{zero} }}"


#: whether a call's scratch still holds the 0xa5 bytes it was filled with before the call
UNTOUCHED = """static int mico_untouched(const void *ws, size_t n)
{
    const unsigned char *b = (const unsigned char *)ws;
    size_t i;
    for (i = 0; i < n; i++) {
        if (b[i] != 0xa5u) {
            return 0;
        }
    }
    return 1;
}"""


INSTRET = """static unsigned long mico_instret(void)
{
#if defined(__riscv)
    unsigned long v;
    __asm__ volatile(".insn i 0x73, 2, %0, zero, -1022" : "=r"(v));
    return v;
#else
    return 0;
#endif
}"""


def _layer_code(
    layer: Layer, tag: str, paths: tuple[str, ...], extensions: tuple[str, ...] = ()
) -> tuple[list[str], list]:
    """Constants of one layer (symbols prefixed ``tag``) and its calls [(kernel, args)];
    ``extensions``: the ISA extensions the chosen path may use (binary layers: zbb)."""
    lo, hi = layer.o_fmt.qmin, layer.o_fmt.qmax
    out_c = layer.weight.shape[0]
    lines = [_array("uint8_t", f"{tag}x", pack(layer.x, layer.a_fmt)),
             # the bias filled up to whole words of channels: a lanes layer's short last block
             # reads its channels' bias (mico_lanes_finish) and stores none of them
             _array("int32_t", f"{tag}bias", np.concatenate(
                 [layer.bias, np.zeros(-len(layer.bias) % 32, dtype=np.int64)])),
             _array("int32_t", f"{tag}m", layer.m),
             _array("int32_t", f"{tag}sh", layer.shift)]  # fmt: skip
    out = (f"{{ .fmt = {_fmt(layer.o_fmt)}, .relu = {int(layer.relu)}, .n_mult = {out_c}, "
           f".m = {tag}m, .shift = {tag}sh, .lo = {lo}, .hi = {hi} }}")  # fmt: skip
    pixels = 1 if layer.kind == "linear" else 4
    plan = lanes_plan(layer.w_fmt, layer.a_fmt, out_c // layer.groups, pixels, weight=layer.weight)
    dw = None
    if layer.kind == "conv" and layer.groups == layer.x.shape[0] == out_c:
        dw = dw_lane_plan(layer.weight, layer.a_fmt, layer.x.shape[1:], layer.out_hw,
                          (layer.stride,) * 2, (layer.pad,) * 2, (1, 1), layer.o_fmt)  # fmt: skip
    calls = []
    binary = layer.binary()
    k = layer.weight.shape[2:] if layer.kind == "conv" else (0, 0)
    s8 = layer.kind == "conv" and widened_to_s8(
        layer.w_fmt, layer.a_fmt, k, (layer.stride,) * 2, (layer.pad,) * 2,
        in_c=layer.x.shape[0] // layer.groups, weight=layer.weight,
    )  # fmt: skip
    # weights that are signs on wide codes: the generator's addsub path (mico_conv_addsub.c)
    addsub = (
        layer.kind == "conv"
        and dw is None
        and not binary
        and not s8
        and (not layer.meta.get("sized") or layer.macs >= LANES_MIN_MACS)
        and addsub_kernel(
            layer.w_fmt,
            layer.a_fmt.bits,
            layer.taps,
            layer.groups,
            plan is not None,
            layer.weight,
            layer.out_hw,
            layer.weight.shape[3],
        )
    )
    # binary weights on wider codes: the generator's sign tables (mico_sign_lut.c)
    sign_lut = (
        dw is None
        and not binary
        and not s8
        and (not layer.meta.get("sized") or layer.macs >= sign_lut_plan.MIN_MACS)
        and sign_lut_plan.layer_kernel(
            layer.kind, layer.w_fmt, layer.a_fmt.bits, layer.taps, layer.groups,
            layer.weight.shape[3] if layer.kind == "conv" else 1,
            plan is not None and (not layer.meta.get("sized") or layer.macs >= LANES_MIN_MACS),
        )
    )  # fmt: skip
    addsub = None if sign_lut else addsub
    for spec in paths:
        # "<path>@exact" / "<path>@short": the call given planned scratch of the layer's size
        # (mico.codegen.scratch) or a byte less, in a buffer the program checks it wrote
        path, _, ws_mode = spec.partition("@")
        sym = f"{path}_ws{ws_mode}" if ws_mode else path
        # "lanes": the channel lanes whatever the choice (where the layer has a plan)
        chosen_lanes = path == "chosen" and not binary and not s8 and not addsub and not sign_lut
        lanes = plan if chosen_lanes or path == "lanes" else None
        w_fmt = QFormat(8, True) if path == "chosen" and s8 else layer.w_fmt
        if path == "chosen" and binary:
            lines += _binary_code(layer, tag, out)
            layer_name = "mico_qlinear" if layer.kind == "linear" else "mico_qconv2d"
            calls.append((binary_kernel(layer_name, extensions),
                          f"&{tag}p_bin, {tag}thr, {tag}x, y"))  # fmt: skip
            continue
        if path == "chosen" and dw is not None:
            code, form = _dw_code(layer, tag, dw, out)
            lines += code
            calls.append((dw_kernel(dw, form), f"&{tag}p_dw, &{tag}l_dw, {tag}x, y"))
            continue
        w, p, lp = f"{tag}w_{sym}", f"{tag}p_{sym}", f"{tag}l_{sym}"
        if lanes is not None:  # at the plan's weight width (wider for a layer of few channels)
            w_fmt = QFormat(lanes["w_bits"], True) if lanes["w_bits"] != w_fmt.bits else w_fmt
            words = pack_lanes(layer.weight.reshape(out_c, -1), w_fmt)
            lines.append(_array("uint32_t", w, words))
            lines.append(f"static const MicoLanes {lp} = {{ .s = {lanes['s']}, "
                         f".n = {lanes['n']}, .is_signed = {lanes['is_signed']} }};")  # fmt: skip
        else:
            lines.append(_array("uint8_t", w, pack(layer.weight, w_fmt)))
        common = (f".in_fmt = {_fmt(layer.a_fmt)}, .w_bits = {w_fmt.bits}, "
                  f".weight = (const uint8_t *){w}, .bias = {tag}bias, .out = {out}")  # fmt: skip
        # "words": a linear layer's word kernels (mico_qlinear_sub4 / _sub2) whatever the
        # choice, given the generator's input offset (x_off, the bias folded)
        words = path == "words" and layer.kind == "linear" and w_fmt.bits in SUB_WORD_BITS
        x_off = linear_x_off(f"mico_qlinear_sub{w_fmt.bits}", layer.a_fmt) if words else 0
        if x_off:
            folded = folded_bias(layer.bias, layer.weight, x_off)
            folded = np.concatenate([folded, np.zeros(-len(folded) % 32, dtype=np.int64)])
            lines.append(_array("int32_t", f"{tag}bias_{sym}", folded))
            common = common.replace(f".bias = {tag}bias,", f".bias = {tag}bias_{sym},")
            common += f", .x_off = {x_off}"
        if layer.kind == "linear":
            rows, in_f = layer.x.shape
            if ws_mode:  # the sign tables' linear layer: planned scratch or a byte less
                size = scratch_bytes(layer, sign_lut_plan.LINEAR_KERNEL) - (ws_mode == "short")
                lines.append(f"static uint64_t {tag}ws_{sym}[{max(size + 7, 8) // 8}];")
                lines.append(f"#define {p}_WS {tag}ws_{sym}\n#define {p}_WSB {size}")
                common += f", .scratch = {tag}ws_{sym}, .scratch_bytes = {size}"
            lines.append(
                f"static const MicoLinear {p} = {{ .rows = {rows}, .in_features = {in_f}, "
                f".out_features = {out_c}, {common} }};"
            )
            # chosen: the W8A8 byte path for the layer's size (the generator takes it from
            # LINEAR_S8_MIN_MACS MACs: every benchmark shape); plain: mico_qlinear
            macs = layer.macs if layer.meta.get("sized") else None
            bytes_path = (
                linear_kernel(layer.w_fmt.bits, layer.a_fmt, macs) if path == "chosen" else None
            )
            kernel = (
                lanes_kernel("mico_qlinear", lanes, w_fmt.bits)
                if lanes
                else bytes_path or "mico_qlinear"
            )
            kernel = sign_lut if path == "chosen" and sign_lut else kernel
            if path == "sign_lut":  # the sign tables themselves, whatever the choice
                kernel = sign_lut_plan.LINEAR_KERNEL
            if words:  # the offset-code entry where its kernels take the layer
                kernel = sub_offset_kernel(f"mico_qlinear_sub{w_fmt.bits}", layer.a_fmt, x_off,
                                           in_f, None)  # fmt: skip
        else:
            in_c, h, wd = layer.x.shape
            oh, ow = layer.out_hw
            kh, kw = layer.weight.shape[2:]
            s, pd = layer.stride, layer.pad
            geom = (f".in_c = {in_c}, .in_h = {h}, .in_w = {wd}, .out_c = {out_c}, "
                    f".out_h = {oh}, .out_w = {ow}, .k_h = {kh}, .k_w = {kw}, .stride_h = {s}, "
                    f".stride_w = {s}, .pad_h = {pd}, .pad_w = {pd}, .dil_h = {layer.dil}, "
                    f".dil_w = {layer.dil}, .groups = {layer.groups}")  # fmt: skip
            w_bits = w_fmt.bits if path == "chosen" else None  # chosen: W8A8 byte path
            # a benchmark layer ("sized") gives its size: W8A8 layers then take the generator's
            # byte path for it (mico_qconv2d_narrow_s8 where it applies); others the sizeless
            # choice (mico_qconv2d_tiled_s8), which the W8A8 tests hold
            macs = layer.macs if layer.meta.get("sized") else None
            plain = conv2d_kernel(layer.a_fmt.bits, layer.groups, in_c, out_c, (kh, kw),
                                  layer.dil, w_bits=w_bits, macs=macs)  # fmt: skip
            kernel = lanes_kernel("mico_qconv2d", lanes, w_fmt.bits) if lanes else plain
            kernel = addsub if path == "chosen" and addsub else kernel
            if path == "addsub":  # the sign-weight kernel itself, whatever the choice
                kernel = ADDSUB_KERNELS[layer.w_fmt.bits]
            kernel = sign_lut if path == "chosen" and sign_lut else kernel
            if path == "sign_lut":  # the sign tables themselves, whatever the choice
                kernel = sign_lut_plan.CONV_KERNEL
            if ws_mode:
                size = scratch_bytes(layer, kernel) - (ws_mode == "short")
                lines.append(f"static uint64_t {tag}ws_{sym}[{max(size + 7, 8) // 8}];")
                lines.append(f"#define {p}_WS {tag}ws_{sym}\n#define {p}_WSB {size}")
                common += f", .scratch = {tag}ws_{sym}, .scratch_bytes = {size}"
            lines.append(f"static const MicoConv2d {p} = {{ {geom}, {common} }};")
        args = f"&{p}, &{lp}, {tag}x, y" if lanes else f"&{p}, {tag}x, y"
        calls.append((kernel, args))
    return lines, calls


def scratch_bytes(layer: Layer, kernel: str) -> int:
    """The planned scratch of a layer for ``kernel`` (:mod:`mico.codegen.scratch`: the
    sign-weight sums and the sign tables, convolution or linear)."""
    in_fmt = (layer.a_fmt.bits, int(layer.a_fmt.signed), layer.a_fmt.zero)
    if kernel == sign_lut_plan.LINEAR_KERNEL:
        rows, in_f = layer.x.shape
        out_f = layer.weight.shape[0]
        return scratch.sign_lut_linear_bytes(rows, in_f, out_f, in_fmt, layer.w_fmt.bits)
    in_c, h, w = layer.x.shape
    out_c, _, kh, kw = layer.weight.shape
    oh, ow = layer.out_hw
    geom = {"in_c": in_c, "in_h": h, "in_w": w, "out_c": out_c, "out_h": oh, "out_w": ow,
            "k_h": kh, "k_w": kw, "stride_h": layer.stride, "stride_w": layer.stride,
            "pad_h": layer.pad, "pad_w": layer.pad, "dil_h": layer.dil, "dil_w": layer.dil,
            "groups": layer.groups}  # fmt: skip
    if kernel == sign_lut_plan.CONV_KERNEL:
        return scratch.sign_lut_bytes(geom, in_fmt, layer.w_fmt.bits)
    if kernel in ADDSUB_KERNELS.values():
        return scratch.addsub_bytes(geom, in_fmt, layer.w_fmt.bits)
    raise ValueError(f"no planned scratch for {kernel} in this harness")


def _binary_code(layer: Layer, tag: str, out: str) -> list[str]:
    """Constants of a binary layer for the popcount kernels (weight rows as words)."""
    out_c = layer.weight.shape[0]
    thr = layer.thresholds()
    lines = [_array("uint32_t", f"{tag}w_bin", pack_binary_rows(layer.weight, layer.w_fmt))]
    if thr is None:
        lines.append(f"#define {tag}thr NULL")
    else:
        lines.append(_array("int32_t", f"{tag}thr", thr))
    common = (
        f".in_fmt = {_fmt(layer.a_fmt)}, .w_bits = 1, "
        f".weight = (const uint8_t *){tag}w_bin, .bias = {tag}bias, .out = {out}"
    )
    if layer.kind == "linear":
        rows, in_f = layer.x.shape
        lines.append(f"static const MicoLinear {tag}p_bin = {{ .rows = {rows}, "
                     f".in_features = {in_f}, .out_features = {out_c}, {common} }};")  # fmt: skip
        return lines
    in_c, h, wd = layer.x.shape
    oh, ow = layer.out_hw
    kh, kw = layer.weight.shape[2:]
    s, pd = layer.stride, layer.pad
    lines.append(
        f"static const MicoConv2d {tag}p_bin = {{ .in_c = {in_c}, .in_h = {h}, .in_w = {wd}, "
        f".out_c = {out_c}, .out_h = {oh}, .out_w = {ow}, .k_h = {kh}, .k_w = {kw}, "
        f".stride_h = {s}, .stride_w = {s}, .pad_h = {pd}, .pad_w = {pd}, .dil_h = 1, "
        f".dil_w = 1, .groups = {layer.groups}, {common} }};"
    )
    return lines


def _dw_code(layer: Layer, tag: str, dw: dict[str, int], out: str) -> tuple[list[str], str]:
    """Constants of a depthwise layer through pixel lanes (plainly packed weights), and the
    suffix of the pair path's entry point of its form (:func:`dwp_form`); the bit-sliced path
    gets its thresholds from the generator's function, as a compile does."""
    in_c, h, wd = layer.x.shape
    oh, ow = layer.out_hw
    s, pd = layer.stride, layer.pad
    lines, fields, form = [], f".s = {dw['s']}, .q = {dw['q']}", ""
    if dw.get("sliced"):
        spec = out_spec(layer.o_fmt, 1.0, list(layer.m), list(layer.shift))
        thr = dwb_thresholds(layer.weight, layer.bias, spec, layer.relu)
        lines.append(_array("uint8_t", f"{tag}thr_dw", thr))
        fields += f", .thr = {tag}thr_dw"
    if dw.get("pair") or dw.get("dw4"):  # outputs of 5..16 codes by table, as a compile emits
        spec = out_spec(layer.o_fmt, 1.0, list(layer.m), list(layer.shift))
        lvl = dwp_levels(layer.weight, layer.bias, spec, layer.relu, layer.a_fmt,
                         negative=bool(dw.get("dw4")))  # fmt: skip
        if lvl is not None:
            lines.append(_array("uint8_t", f"{tag}lvl_dw", lvl))
            fields += f", .lvl = {tag}lvl_dw"
    if dw.get("pair"):
        _, form = dwp_form(layer.a_fmt, layer.o_fmt, (h, wd), (oh, ow), (s, s), dw["sf"],
                           layer.w_fmt.bits, (layer.o_fmt.qmin, layer.o_fmt.qmax), lvl,
                           layer.relu)  # fmt: skip
    return [
        *lines,
        _array("uint8_t", f"{tag}w_dw", pack(layer.weight, layer.w_fmt)),
        f"static const MicoDwLanes {tag}l_dw = {{ {fields} }};",
        f"static const MicoConv2d {tag}p_dw = {{ .in_c = {in_c}, .in_h = {h}, .in_w = {wd}, "
        f".out_c = {in_c}, .out_h = {oh}, .out_w = {ow}, .k_h = 3, .k_w = 3, .stride_h = {s}, "
        f".stride_w = {s}, .pad_h = {pd}, .pad_w = {pd}, .dil_h = 1, .dil_w = 1, "
        f".groups = {in_c}, .in_fmt = {_fmt(layer.a_fmt)}, .w_bits = {layer.w_fmt.bits}, "
        f".weight = {tag}w_dw, .bias = {tag}bias, .out = {out} }};",
    ], form


def layers_program(
    layers: list[Layer],
    paths: tuple[str, ...] = ("chosen", "plain"),
    extensions: tuple[str, ...] = (),
) -> str:
    """A C program running each layer through each path, printing per call
    ``instret <count> <output bytes in hex>``.

    "chosen" is the call the code generator emits (lanes where they apply), "plain" the plain
    kernel (the one mico_qconv2d / mico_qlinear dispatch to) on plainly packed weights.
    """
    out_bytes = [(layer.reference().size * layer.o_fmt.bits + 7) // 8 for layer in layers]
    lines = ["#include <stdio.h>", "#include <string.h>", '#include "mico_nn.h"',
             f"static uint8_t y[{max(out_bytes) + 4}];", INSTRET]  # fmt: skip
    if any("@" in path for path in paths):  # calls given scratch: whether they wrote there
        lines.append(UNTOUCHED)
    body = []
    for i, layer in enumerate(layers):
        code, calls = _layer_code(layer, f"L{i}_", paths, extensions)
        lines += code
        for kernel, args in calls:
            ws = args.split(",")[0].lstrip("&")
            ws = ws if ws.endswith(("_wsexact", "_wsshort")) else ""
            body.append(f"""{f"    memset({ws}_WS, 0xa5, {ws}_WSB);" if ws else ""}
    t0 = mico_instret();
    {kernel}({args});
    t1 = mico_instret();
    printf("instret %lu ", t1 - t0);
    for (i = 0; i < {out_bytes[i]}; i++) {{
        printf("%02x", y[i]);
    }}
    {f'printf(" scratch %d", !mico_untouched({ws}_WS, {ws}_WSB));' if ws else ""}
    printf("\\n");""")
    lines.append("int main(void)\n{\n    unsigned long t0, t1;\n    size_t i;\n" + "\n".join(body)
                 + "\n    return 0;\n}")  # fmt: skip
    return "\n".join(lines) + "\n"


def _sources(work: Path) -> list[str]:
    csrc = resources.files("mico.csrc")
    (work / "mico_nn.h").write_text((csrc / "mico_nn.h").read_text())
    for name in KERNEL_SOURCES:
        (work / name).write_text((csrc / name).read_text())
    return [str(work / name) for name in KERNEL_SOURCES]


def build_and_run(
    work: Path,
    sources: list[str],
    target: str,
    cc: str,
    timeout: int,
    host_flags: tuple[str, ...] = (),
) -> str:
    """Compile ``sources`` (headers in ``work``) for the host with ``cc`` or for rv32 bare
    metal, run the program (rv32: under qemu -icount) and return what it printed.
    ``host_flags``: more options for the host build (e.g. the sanitizers)."""
    if target == "host":
        exe = work / "main"
        compiler = [cc, "-std=c99", "-O2", "-Wall", "-Wextra", "-Werror", *host_flags]
        run = [str(exe)]
    else:
        exe = work / "main.elf"
        flags = [*shlex.split(RV32_ARCH), *shlex.split(RV32_LIBC), *shlex.split(RV32_MEMORY)]
        compiler = [RV32_CC, *flags, "-O2", "-std=c99"]
        run = [*shlex.split(QEMU_RV32), "-kernel", str(exe)]
    inputs = [_kernel_object(compiler, work, Path(s)) for s in sources]
    cmd = [*compiler, "-I", str(work), *inputs, "-o", str(exe)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    res = subprocess.run(run, check=True, capture_output=True, text=True, timeout=timeout)
    return res.stdout + res.stderr


def _kernel_object(compiler: list[str], work: Path, source: Path) -> str:
    """``source`` as the link takes it: one of mico's kernel files (KERNEL_SOURCES) as an object
    compiled once per compiler, flags, file and headers (in a cache under the temporary
    folder; the tests and benchmark build hundreds of programs of the same kernels), any other
    file as it is."""
    if source.name not in KERNEL_SOURCES:
        return str(source)
    key = hashlib.sha256()
    key.update(" ".join([*compiler, _compiler_version(compiler[0])]).encode())
    key.update(source.read_bytes())
    for header in sorted(work.glob("*.h")):
        key.update(header.name.encode() + header.read_bytes())
    cache = Path(tempfile.gettempdir()) / f"mico-kernel-objects-{os.getuid()}"
    cache.mkdir(parents=True, exist_ok=True)
    obj = cache / f"{source.stem}-{key.hexdigest()[:24]}.o"
    if not obj.exists():
        partial = cache / f"{obj.name}.{os.getpid()}.tmp"
        cmd = [*compiler, "-I", str(work), "-c", str(source), "-o", str(partial)]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        os.replace(partial, obj)  # whole objects only, whoever builds it too
    return str(obj)


@functools.cache
def _compiler_version(cc: str) -> str:
    """The compiler's version line (part of an object's cache key)."""
    out = subprocess.run([cc, "--version"], check=True, capture_output=True, text=True).stdout
    return out.splitlines()[0] if out else cc


def run_layers(
    layers: list[Layer],
    target: str = "host",
    paths=("chosen", "plain"),
    cc: str = "gcc",
    extensions: tuple[str, ...] = (),
    host_flags: tuple[str, ...] = (),
    kernels: tuple[str, ...] = KERNEL_SOURCES,
) -> list[list[tuple[str, int, np.ndarray]]]:
    """Build and run one program for the layers; per layer [(kernel, instructions, codes)].

    ``extensions``: ISA extensions the chosen paths may use (``zbb``: the binary layers'
    ``cpop`` kernels, which encode the instruction themselves; the build stays rv32imac).
    ``host_flags``: more options for a host build (the sanitizers). A path ``<path>@exact``
    (``@short``) calls the path's kernel with planned scratch of the layer's size (a byte
    less): its kernel is reported as ``<kernel>@written`` when the call wrote there,
    ``<kernel>@untouched`` when it took its stack instead. ``kernels``: the kernel sources
    linked (fewer build faster: the sanitizers' builds).
    """
    program = layers_program(layers, paths, extensions)
    with tempfile.TemporaryDirectory(prefix="mico-kernels-") as tmp:
        work = Path(tmp)
        (work / "main.c").write_text(program)
        sources = [str(work / "main.c"), *(s for s in _sources(work) if Path(s).name in kernels)]
        text = build_and_run(work, sources, target, cc, 1800, host_flags).split()
    marks = iter([i for i, token in enumerate(text) if token == "instret"])
    written = {i + 1: text[i + 1] == "1" for i, token in enumerate(text) if token == "scratch"}
    results = []
    for i, layer in enumerate(layers):
        _, calls = _layer_code(layer, f"L{i}_", paths, extensions)
        n = layer.reference().size
        per_layer = []
        for kernel, _ in calls:
            j = next(marks)
            raw = np.frombuffer(bytes.fromhex(text[j + 2]), dtype=np.uint8)
            if j + 4 in written:  # a call given scratch: whether it wrote there
                kernel = f"{kernel}@{'written' if written[j + 4] else 'untouched'}"
            per_layer.append((kernel, int(text[j + 1]), unpack(raw, n, layer.o_fmt)))
        results.append(per_layer)
    return results


def run_layer(
    layer: Layer,
    target: str = "host",
    paths=("chosen", "plain"),
    cc: str = "gcc",
    extensions: tuple[str, ...] = (),
):
    """One layer: [(kernel, instructions, output codes)] per path."""
    return run_layers([layer], target, paths, cc, extensions)[0]


# ----------------------------------------------------------------------------- benchmark
SHAPES = {
    "conv3x3 16→16 16×16 pad1": dict(kind="conv", in_c=16, out_c=16, hw=16, k=3, pad=1),
    "conv3x3 32→32 16×16 pad1": dict(kind="conv", in_c=32, out_c=32, hw=16, k=3, pad=1),
    "conv1x1 32→32 16×16": dict(kind="conv", in_c=32, out_c=32, hw=16, k=1),
    "depthwise3x3 32ch 16×16 pad1": dict(
        kind="conv", in_c=32, out_c=32, hw=16, k=3, pad=1, groups=32
    ),
    "depthwise3x3 32ch 32×32 stride2 pad1": dict(
        kind="conv", in_c=32, out_c=32, hw=32, k=3, pad=1, stride=2, groups=32
    ),
    "FC 256→64": dict(kind="linear", in_c=256, out_c=64),
    # DS-CNN's pointwise layers (MLPerf Tiny KWS): 64 channels on its 25x5 planes
    "pointwise 64→64 25×5 (DS-CNN)": dict(kind="conv", in_c=64, out_c=64, hw=(25, 5), k=1),
    # and its depthwise layers
    "depthwise3x3 64ch 25×5 pad1 (DS-CNN)": dict(
        kind="conv", in_c=64, out_c=64, hw=(25, 5), k=3, pad=1, groups=64
    ),
}
#: (label, weight bits, activation bits, activations signed); activations after a ReLU are
#: unsigned, as mico stores them; "±1" activations are binary
PLANS = [
    ("8/8", 8, 8, False),
    ("4/4", 4, 4, False),
    ("2/2", 2, 2, False),
    ("1/1", 1, 1, False),
    ("1/±1", 1, 1, True),
    ("1/8", 1, 8, False),  # binary weights on 8-bit codes: the sign tables (mico_sign_lut.c)
    ("8/4", 8, 4, False),
    ("4/8", 4, 8, False),
    ("ternary/8", TERNARY, 8, False),
    ("ternary/4", TERNARY, 4, False),
    ("2/4", 2, 4, False),
    ("4/2", 4, 2, False),
    ("4/4 signed", 4, 4, True),
]


def _plan_layer(shape: dict, plan: tuple) -> Layer:
    """The benchmark's layer of a shape at a (label, w bits, a bits, signed) plan."""
    _, wb, ab, signed = plan
    spec = dict(shape)
    kind = spec.pop("kind")
    a_fmt = QFormat.for_bits(ab, signed)
    # binary outputs follow no ReLU (after one every output would be +1)
    layer = random_layer(kind, QFormat.for_bits(wb, True), a_fmt, relu=not a_fmt.binary, **spec)
    layer.meta["sized"] = True  # the generator's paths for the layer's size
    return layer


def measure_shape(shape: dict, plans: list, target: str = "rv32") -> list[dict]:
    """Every plan of one shape, in one program (chosen and plain paths), the binary layers
    again with Zbb in a second one."""
    layers = [_plan_layer(shape, plan) for plan in plans]
    runs = run_layers(layers, target)
    binary = [i for i, layer in enumerate(layers) if layer.binary()]
    zbb_runs = (
        run_layers([layers[i] for i in binary], target, ("chosen",), extensions=("zbb",))
        if binary
        else []
    )
    zbb_of = dict(zip(binary, zbb_runs, strict=True))
    rows = []
    for i, (plan, layer, run) in enumerate(zip(plans, layers, runs, strict=True)):
        label, wb, ab, signed = plan
        ref = layer.reference().ravel()
        (chosen, c_count, c_out), (plain, p_count, p_out) = run
        zbb: dict = {"zbb_kernel": None, "zbb_instructions": None, "zbb_per_mac": None}
        exact = np.array_equal(c_out, ref) and np.array_equal(p_out, ref)
        if i in zbb_of:  # the popcount kernels again, built for a core with Zbb (cpop)
            ((z_kernel, z_count, z_out),) = zbb_of[i]
            zbb = {"zbb_kernel": z_kernel, "zbb_instructions": z_count,
                   "zbb_per_mac": z_count / layer.macs}  # fmt: skip
            exact = exact and np.array_equal(z_out, ref)
        rows.append({
            "plan": label,
            "w_bits": format_bits(wb),
            "a_bits": ab,
            "a_signed": signed,
            "macs": layer.macs,
            "kernel": chosen,
            "instructions": c_count,
            "per_mac": c_count / layer.macs,
            "plain_kernel": plain,
            "plain_instructions": p_count,
            "plain_per_mac": p_count / layer.macs,
            **zbb,
            "exact": bool(exact),
        })  # fmt: skip
    return rows


def measure(shape: dict, plan: tuple, target: str = "rv32") -> dict:
    """One plan of one shape (see :func:`measure_shape`)."""
    return measure_shape(shape, [plan], target)[0]


def _markdown(results: dict, meta: dict) -> str:
    out = [
        "# Integer kernels on rv32imac (benchmarks/kernels_rv32.py)",
        "",
        f"Run {meta['date']}"
        + (f" at commit {meta['commit']}" if meta.get("commit") else "")
        + f" on {meta['host']}; {meta['cc']} -O2 -march=rv32imac, qemu "
        "-icount shift=0: instructions retired by one call of the kernel (instret), per MAC. "
        "**plain**: the kernels before lanes (mico_qconv2d_tiled / _depthwise3x3, "
        "mico_qlinear on plainly packed weights), **chosen**: the call the code generator emits "
        "now (channel lanes where they apply: several low-bit products per 32-bit multiply; "
        "depthwise 3x3 layers take pixel lanes, mico_qconv2d_dwl_s<lane bits>: k = 32 / s "
        "pixels of a row per word, one multiply per tap for k outputs, s = 32 being the "
        "one-pixel form W8A8 takes; other W8A8 layers keep the plain kernels). Seeded "
        "random codes, per-channel requantization, ReLU (none before the binary outputs of "
        "1/±1); every output is held to the Python "
        "integer reference (✓ = every path bit-exact). Activations are unsigned (after a "
        "ReLU, as mico stores them) unless marked signed; ±1: binary activations.",
        "",
        "Binary weights times 1-bit activations (1/1, 1/±1) take the popcount kernels "
        "(mico_binary.c, chosen at generation time from the target's ISA extensions): "
        "mico_q*_bin_swar on rv32imac (a SWAR bit count), and, in the **Zbb** column, "
        "mico_q*_bin_cpop, one Zbb `cpop` per word (the instruction encoded by the kernel, "
        "the build unchanged; qemu's rv32 CPU has Zbb). "
        "Their 1-bit outputs are stored by per-channel thresholds on the sum; convolutions "
        "with 1-bit outputs and stride 1 count bit-sliced (32 pixels per word, carry-save "
        "adders), no popcount, so their Zbb figure is the same.",
        "",
        "Weights that are signs on wider codes take no multiply: ternary weights on 5- to "
        "8-bit codes the sign-weight sums (mico_qconv2d_addsub2: codes added or subtracted, "
        "two pixels a 32-bit word, zeros skipped), binary weights on 5- to 8-bit codes (and "
        "2- to 8-bit ones where no lanes take the layer) the sign tables "
        "(mico_qconv2d_sign_lut / mico_qlinear_sign_lut: the 16 signed sums of four taps' codes "
        "built once per pixel pair, one table entry per nibble of weights, 16-bit lanes).",
        "",
        "Each layer goes through the generator's own choices for its size and weights: W8A8 "
        "layers take the byte path the generator picks for their MACs "
        "(mico_qconv2d_narrow_s8 for the 1x1 layers; runs before 2026-11-26's gave no size "
        "and measured mico_qconv2d_tiled_s8, 3.44 for conv1x1 32→32 W8A8, the 'before' of "
        "that row), and the lanes' n is the exact bound from the layer's weights "
        "(mico.quant.packing.longest_run). Pointwise layers of at most 64 input channels "
        "take mico_conv_pw (blocks of 32 pixels, block kernels at a constant stride, one "
        "store call per block); a W8A8 layer with a shift of at most 32 leaves "
        "mico_qconv2d_narrow_s8 for mico_qconv2d_tiled_s8 (ternary/8 on 1x1: its larger "
        "real multipliers).",
        "",
        "**One exception: the sub-byte lanes rows of FC 256→64.** A real compile gives channel "
        "lanes only to layers of at least 32,768 MACs (`LANES_MIN_MACS` in "
        "mico/codegen/emitters.py: the lanes add about 3 KB of code), and this layer has "
        "16,384. A program whose other layers call the same lanes entry point gives it the "
        "lanes too (their code is linked anyway: `mico.codegen.linked_paths`); a model with "
        "this layer alone runs it on the word kernels instead: 4- and 2-bit weights on codes "
        "the offset-code kernels take on `mico_qlinear_sub4t` / `_sub2t` (`cmsis_nn.md`: "
        "W4A4 2.27, W2A2 1.61 on signed codes, one multiplier), others on "
        "`mico_qlinear_sub4` / `_sub2` or `mico_qlinear`, not the lanes figure measured "
        "here; larger FC layers take the lanes.",
        "",
    ]
    plans = list(dict.fromkeys(r["plan"] for rows in results.values() for r in rows))
    out += [
        "## Summary: instructions per MAC, now (before) and gain vs W8A8",
        "",
        "Before: the chosen path's figure in the results this run replaced (--baseline); "
        "the gain is W8A8's figure over the pair's, both now (above 1: fewer instructions "
        "than W8A8).",
        "",
        "| layer | " + " | ".join(plans) + " |",
        "|---|" + "---:|" * len(plans),
    ]
    for shape, rows in results.items():
        by_plan = {r["plan"]: r for r in rows}
        cells = []
        for p in plans:
            r = by_plan.get(p)
            if r is None:
                cells.append("-")
                continue
            was = r.get("before_per_mac")
            cells.append(f"{r['per_mac']:.2f}" + (f" ({was:.2f})" if was else ""))
        out.append(f"| {shape} | " + " | ".join(cells) + " |")
    out += ["", "| layer | " + " | ".join(plans) + " |", "|---|" + "---:|" * len(plans)]
    for shape, rows in results.items():
        by_plan = {r["plan"]: r for r in rows}
        base = by_plan.get("8/8", {}).get("per_mac")
        cells = [
            f"{base / by_plan[p]['per_mac']:.2f}×" if base and p in by_plan else "-" for p in plans
        ]
        out.append(f"| {shape} (gain vs W8A8) | " + " | ".join(cells) + " |")
    out.append("")
    for shape, rows in results.items():
        base = next((r["per_mac"] for r in rows if r["plan"] == "8/8"), None)
        out += [f"## {shape}", "",
                "| w/a | MACs | plain instr/MAC | chosen instr/MAC | chosen kernel | "
                "speed-up vs plain | vs W8A8 chosen | Zbb instr/MAC (vs W8A8) | exact |",
                "|---|---:|---:|---:|---|---:|---:|---:|---|"]  # fmt: skip
        for r in rows:
            vs8 = f"{base / r['per_mac']:.2f}×" if base else "-"
            z = r.get("zbb_per_mac")
            zbb = "-" if z is None else f"{z:.2f}" + (f" ({base / z:.2f}×)" if base else "")
            out.append(
                f"| {r['plan']} | {r['macs']:,} | {r['plain_per_mac']:.2f} | {r['per_mac']:.2f} "
                f"| {r['kernel']} | {r['plain_per_mac'] / r['per_mac']:.2f}× | {vs8} | {zbb} | "
                f"{'✓' if r['exact'] else '✗'} |"
            )
        out.append("")
    return "\n".join(out)


def _merged(old: dict, new: dict) -> dict:
    """The old results with the rows measured now replaced (or added), in the old order."""
    merged = {shape: list(rows) for shape, rows in old.items()}
    for shape, rows in new.items():
        kept = merged.setdefault(shape, [])
        for r in rows:
            at = next((i for i, o in enumerate(kept) if o["plan"] == r["plan"]), None)
            if at is None:
                kept.append(r)
            else:
                kept[at] = r
    return merged


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--plans", default="", help="comma-separated labels (default: all)")
    ap.add_argument("--shapes", default="", help="comma-separated shape labels (default: all)")
    ap.add_argument(
        "--baseline",
        action="store_true",
        help="take the existing results' chosen figures as the 'before' column",
    )
    ap.add_argument(
        "--merge",
        action="store_true",
        help="keep the other rows of the existing kernels_rv32.json (rerun a subset)",
    )
    args = ap.parse_args(argv)
    plans = [p for p in PLANS if not args.plans or p[0] in args.plans.split(",")]
    shapes = {k: v for k, v in SHAPES.items() if not args.shapes or k in args.shapes.split(",")}
    out = Path(args.out)
    old = out / "kernels_rv32.json"
    before = json.loads(old.read_text())["results"] if old.exists() else {}
    results: dict[str, list] = {}
    for name, shape in shapes.items():
        results[name] = measure_shape(shape, plans)
        prev = {r["plan"]: r for r in before.get(name, [])}
        for r in results[name]:
            # the chosen path's figure in the results this run replaces
            was = prev.get(r["plan"], {})
            r["before_per_mac"] = was.get("before_per_mac", was.get("per_mac"))
            if args.baseline:
                r["before_per_mac"] = was.get("per_mac")
            print(f"{name:32s} {r['plan']:12s} plain {r['plain_per_mac']:6.2f}  chosen "
                  f"{r['per_mac']:6.2f} ({r['kernel']}) {'exact' if r['exact'] else 'MISMATCH'}",
                  flush=True)  # fmt: skip
    cc = subprocess.run([RV32_CC, "--version"], capture_output=True, text=True).stdout
    meta = {
        "date": __import__("datetime").date.today().isoformat(),
        "host": f"{platform.machine()} {platform.system()}",
        "cc": cc.splitlines()[0] if cc else RV32_CC,
        "commit": subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True, cwd=Path(__file__).parent).stdout.strip(),
    }  # fmt: skip
    out.mkdir(parents=True, exist_ok=True)
    if args.merge and (out / "kernels_rv32.json").exists():
        results = _merged(json.loads((out / "kernels_rv32.json").read_text())["results"], results)
    (out / "kernels_rv32.json").write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    (out / "kernels_rv32.md").write_text(_markdown(results, meta) + "\n")
    return 0 if all(r["exact"] for rows in results.values() for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
