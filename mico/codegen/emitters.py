"""``emit`` rules of the ``mico.*`` ops: one C statement (and its constant data) per node.

Every tensor is addressed through the kernels' format descriptor ``MicoFmt`` (packed codes of
1..8 bits, or int32), and every result through ``MicoOut`` (ReLU, multipliers, clamp, format),
so the same kernels serve every bit-width. Multipliers and shifts are int32 arrays in flash.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from mico.codegen import addsub_plan, binary_plan, dwconv_plan, sign_lut_plan
from mico.codegen.context import EmitContext
from mico.codegen.linked_paths import gate_macs, offset_gate_macs, prefers_size
from mico.codegen.planner import SCRATCH_ATTR, scratch_name
from mico.errors import CompileError
from mico.ir.dtypes import DataType
from mico.ir.graph import Node, Value
from mico.ir.ops import mico_ops
from mico.ir.ops.mico_ops import code_range
from mico.ir.ops.registry import OpRegistry
from mico.quant.arithmetic import QFormat, inv_scale_f32
from mico.quant.exact_input import exact_params, exact_preferred
from mico.quant.packing import lane_channels, lane_plan, pack, pack_binary_rows, pack_lanes
from mico.quant.thresholds import c_table, table_usable


def c_int(value: int) -> str:
    """An int32 literal (INT32_MIN has no literal of type int in C)."""
    value = int(value)
    return f"({value + 1} - 1)" if value == -(2**31) else str(value)


def _fields(values: dict[str, object]) -> str:
    return ", ".join(f".{k} = {v}" for k, v in values.items())


def fmt_of(value: Value) -> tuple[int, ...]:
    """``(bits, signed)`` of a tensor's storage: its code format, or int32; asymmetric codes
    add their zero point: ``(bits, 0, zero)``."""
    if value.qformat is not None:
        fmt = value.qformat
        return (fmt.bits, 0, fmt.zero) if fmt.zero else (fmt.bits, int(fmt.signed))
    dtype = value.type.dtype
    if dtype == DataType.INT32:
        return 32, 1
    if dtype.is_int and dtype.bits <= 8:
        return dtype.bits, int(dtype.signed)
    raise CompileError(f"tensor '{value.name}' is {dtype}; the integer kernels need codes or int32")


def c_fmt(bits: int, signed: int, zero: int = 0) -> str:
    """A ``MicoFmt`` initializer (the zero point only when there is one)."""
    if zero:
        return f"{{ .bits = {bits}, .is_signed = {signed}, .zero = {zero} }}"
    return f"{{ .bits = {bits}, .is_signed = {signed} }}"


def _fmt(value: Value) -> str:
    return c_fmt(*fmt_of(value))


def c_out(
    ctx: EmitContext,
    name: str,
    out: Value,
    spec: dict[str, Any] | None,
    relu: bool = False,
) -> str:
    """The ``MicoOut`` initializer storing into ``out`` as ``spec`` (see mico_ops) says."""
    storage = fmt_of(out)
    bits = storage[0]
    if spec is None:
        lo, hi = code_range(None) if bits == 32 else code_range(out.qformat)
        m = shift = None
    else:
        fmt: QFormat | None = spec.get("qformat")
        stored = (*storage, 0)[:3]  # (bits, signed, zero)
        if (fmt is None) != (bits == 32) or (
            fmt is not None and (fmt.bits, int(fmt.signed), fmt.zero) != stored
        ):
            raise CompileError(f"'{name}' stores {spec.get('qformat')} into {out.type}")
        lo, hi = spec.get("clamp") or code_range(fmt)
        m, shift = spec.get("m"), spec.get("shift")
    fields: dict[str, object] = {"fmt": c_fmt(*storage), "relu": int(bool(relu))}
    if m is None:
        fields.update(n_mult=0, m="NULL", shift="NULL")
    else:
        ms, ss = np.atleast_1d(m).astype(np.int64), np.atleast_1d(shift).astype(np.int64)
        ctx.flash.setdefault("scales", 0)  # requantization multipliers, apart from the bias
        fields.update(
            n_mult=ms.size,
            m=ctx.const_int32(f"{name}_m", ms, kind="scales"),
            shift=ctx.const_int32(f"{name}_shift", ss, kind="scales"),
        )
    fields.update(lo=c_int(lo), hi=c_int(hi))
    return "{ " + _fields(fields) + " }"


def _weights(
    ctx: EmitContext,
    node: Node,
    lanes: int = 0,
    binary: bool = False,
    s8: bool = False,
    x_off: int = 0,
) -> tuple[str, str, int]:
    """Emit packed weights and int32 bias; return their symbols and the weight bit-width.

    ``lanes``: the weights as channel-lanes words of that many bits a code (``pack_lanes``,
    the layer's width or a wider one, see :func:`lanes_plan`; 0: not lanes);
    ``binary``: as rows of whole words (``pack_binary_rows``, for the popcount kernels);
    ``s8``: as int8 codes, a byte each (:func:`widened_to_s8`); ``x_off``: the offset the
    kernel adds to the input codes (``MicoLinear.x_off``, :func:`linear_x_off`), taken off the
    bias as ``x_off`` times each output's sum of weights.
    """
    weight, bias = node.inputs[1], node.inputs[2]
    fmt = weight.qformat
    assert fmt is not None and weight.data is not None and bias.data is not None
    fmt = QFormat(8, True) if s8 else fmt
    fmt = QFormat(lanes, True) if lanes and lanes != fmt.bits else fmt
    if binary:
        words = pack_binary_rows(np.asarray(weight.data), fmt)
        w_sym = "(const uint8_t *)" + ctx.const_int32(
            f"{weight.name}", words.view(np.int32), kind="weights"
        )
    elif lanes:
        words = pack_lanes(np.asarray(weight.data).reshape(weight.type.shape[0], -1), fmt)
        w_sym = "(const uint8_t *)" + ctx.const_int32(
            f"{weight.name}", words.view(np.int32), kind="weights"
        )
    else:
        w_sym = ctx.const_bytes(
            f"{weight.name}",
            pack(weight.data, fmt),
            kind="weights",
            comment=f"{weight.type.shape} {fmt}, packed",
            word_aligned=fmt.bits in (2, 4),  # rows of whole words are read a word at a time
        )
    bias_data = np.asarray(bias.data)
    if x_off:
        bias_data = folded_bias(bias_data, np.asarray(weight.data), x_off)
    if lanes:  # a short last block: its channels' bias is read (mico_lanes_finish), not stored
        bias_data = np.concatenate([bias_data, np.zeros(-len(bias_data) % (32 // fmt.bits),
                                                        dtype=bias_data.dtype)])  # fmt: skip
    tag = "" if not x_off else f"_xoff{x_off}" if x_off > 0 else f"_xoffm{-x_off}"
    b_sym = ctx.const_int32(f"{bias.name}{tag}", bias_data)
    return w_sym, b_sym, fmt.bits


def folded_bias(bias: np.ndarray, weight: np.ndarray, x_off: int) -> np.ndarray:
    """The bias of a layer whose kernel adds ``x_off`` to its input codes: ``bias - x_off *
    (sum of each output's weight codes)``, so that the kernel's sums are the layer's."""
    sums = np.asarray(weight, dtype=np.int64).reshape(len(bias), -1).sum(axis=1)
    return np.asarray(bias, dtype=np.int64) - int(x_off) * sums


def _window(attrs: dict) -> dict[str, int]:
    """Stride, padding and dilation fields shared by the 2-D window kernels."""
    return {
        "stride_h": attrs["stride"][0],
        "stride_w": attrs["stride"][1],
        "pad_h": attrs["padding"][0],
        "pad_w": attrs["padding"][1],
        "dil_h": attrs["dilation"][0],
        "dil_w": attrs["dilation"][1],
    }


def _call(ctx: EmitContext, kernel: str, params: str, *values: Value) -> list[str]:
    args = ", ".join(ctx.buffer(v) for v in values)
    return [f"{kernel}(&{params}, {args});"]


def quantize_table_kernel(fmt: QFormat) -> str:
    """The C function quantizing float32 to ``fmt`` by thresholds: one per width, the search
    unrolled (a program links only the one it calls)."""
    return f"mico_quantize_f32_table_b{fmt.bits}"


def quantize_exact_kernel(fmt: QFormat) -> str:
    """The C function quantizing float32 to ``fmt`` with one integer multiply and no table
    (mico.quant.exact_input): one per width, like the table kernels."""
    return f"mico_quantize_f32_exact_b{fmt.bits}"


def emit_quantize(node: Node, ctx: EmitContext) -> list[str]:
    """float32 input to codes. The scale is known here, so C needs no float multiply: codes of
    4 bits or more get the exact integer kernel (mico.quant.exact_input: no table, fewer
    instructions), narrower ones the codes' thresholds (mico.quant.thresholds: a table of at
    most 28 bytes, integer compares only). A scale the exact kernel cannot take keeps the table
    and one without a finite float32 reciprocal the float kernel."""
    fmt: QFormat = node.attrs["qformat"]
    scale = node.attrs["scale"]
    fmt_fields: dict[str, object] = {"bits": fmt.bits, "is_signed": int(fmt.signed)}
    if fmt.zero:
        fmt_fields["zero"] = fmt.zero
    fmt_sym = ctx.const_struct("MicoFmt", f"{node.name}_fmt", _fields(fmt_fields))
    ctx.need("mico_quant.c")
    scalar = np.ndim(scale) == 0
    exact = exact_params(float(scale), fmt) if scalar and exact_preferred(fmt) else None
    if exact is not None:
        fields = {k: c_int(v) for k, v in exact.c_fields().items()}
        q_sym = ctx.const_struct("MicoQuantExact", f"{node.name}_exact", _fields(fields))
        args = [ctx.buffer(node.inputs[0]), ctx.buffer(node.output)]
        args += [str(node.output.type.numel), f"&{q_sym}", fmt_sym]
        return [f"{quantize_exact_kernel(fmt)}({', '.join(args)});"]
    if scalar and table_usable(float(scale)):
        table = ctx.const_int32(f"{node.name}_thresholds", c_table(float(scale), fmt), "params")
        args = [ctx.buffer(node.inputs[0]), ctx.buffer(node.output)]
        args += [str(node.output.type.numel), table, fmt_sym, c_int(fmt.qmin)]
        return [f"{quantize_table_kernel(fmt)}({', '.join(args)});"]
    inv = float(inv_scale_f32(scale)).hex() + "f"
    args = [
        ctx.buffer(node.inputs[0]),
        ctx.buffer(node.output),
        str(node.output.type.numel),
        inv,
        fmt_sym,
        str(fmt.qmin),
        str(fmt.qmax),
    ]
    return [f"mico_quantize_f32({', '.join(args)});"]


#: layers of fewer MACs keep the plain kernels: the lanes path adds about 3 KB of code (driver,
#: block kernel, requantization) to a program, more flash than a small layer's saved
#: instructions are worth
LANES_MIN_MACS = 32768


def lanes_plan(
    w_fmt: QFormat | None,
    a_fmt: QFormat | None,
    out_per_group: int,
    pixels: int = 4,
    macs: int | None = None,
    weight: np.ndarray | None = None,
    groups: int = 1,
) -> dict[str, int] | None:
    """The ``MicoLanes`` of a conv / linear layer whose weights take channel lanes (and the
    weight width they are stored at, ``w_bits``), or None.

    Lanes need weights of 1, 2, 4 or 8 bits whose output channels fill words of F = 32 / bits
    per group, or one group (its last word filled up with channels of zero weights that are
    never stored, :func:`mico.quant.packing.pad_lane_rows`), activations of at most 8 bits,
    fewer estimated instructions per MAC than the plain kernels
    (mico.quant.packing.lane_plan) and, when ``macs`` is given, at least
    :data:`LANES_MIN_MACS` of them. ``weight``: the layer's weight codes, whose sums bound
    the taps a lane holds (more than the widths alone allow). A layer whose channels leave
    much of a word empty may take wider weights (2-bit codes as 4-bit ones) where that costs
    fewer instructions and no more flash than the padding would (LeNet's first conv: 6
    channels, of 16 a word at 2 bits, 8 at 4).
    """
    if w_fmt is None or a_fmt is None or w_fmt.bits not in (1, 2, 4, 8):
        return None
    if macs is not None and macs < LANES_MIN_MACS:
        return None
    best: dict | None = None
    for bits in (b for b in (1, 2, 4, 8) if b >= w_fmt.bits):
        if groups != 1 and out_per_group % lane_channels(bits):
            continue
        if bits != w_fmt.bits and _lane_word_bits(out_per_group, bits) > _lane_word_bits(
            out_per_group, w_fmt.bits
        ):
            continue  # wider weights only where they take no more flash than the padded ones
        fmt = w_fmt if bits == w_fmt.bits else QFormat(bits, True)
        plan = lane_plan(fmt, a_fmt, pixels, weight, channels=out_per_group, with_cost=True)
        if plan is not None and (best is None or plan["cost"] < best["cost"]):
            best = {**plan, "w_bits": bits}
    if best is None:
        return None
    best.pop("cost")
    return best


def _lane_word_bits(channels: int, bits: int) -> int:
    """Bits of one tap's lanes words for ``channels`` output channels of ``bits``-bit weights
    (the last word filled up)."""
    return -(-channels // lane_channels(bits)) * 32


#: the fields of a lanes plan that make its MicoLanes struct
LANES_FIELDS = ("s", "n", "is_signed")


#: taps (in_c k_h k_w) the pointwise lanes path takes (mico_conv_pw in mico_conv2d.c)
PW_LANES_MAX_TAPS = 64


def narrow_small_cost(w_max: int, a_max: int, taps: int) -> float:
    """Estimated rv32 instructions per MAC of a pointwise layer on mico_conv_narrow.c's small
    weights (weights of at most ``w_max`` in magnitude widened to bytes, codes of at most
    ``a_max``): chunks of taps whose 16-bit lanes fit, 1.4 a MAC in the loop, a split of the
    lanes per chunk and the per-output store (figures: benchmarks/results/kernels_rv32.md); the
    4 x 5 byte tile where no chunk of 8 taps fits."""
    tp = -(-taps // 8) * 8
    chunk = min(tp, (32767 // max(w_max * a_max, 1)) & ~7)
    if chunk < 8:
        return 2.47 + 14.0 / taps
    return 1.375 + 7.0 / chunk + 33.5 / taps


def pointwise_lanes_cost(w_fmt: QFormat, a_fmt: QFormat, taps: int, n: int, s: int) -> float:
    """Estimated rv32 instructions per MAC of mico_conv_pw (lanes of ``s`` bits, flushed every
    ``n`` taps): 1.35 a MAC in its register tile, about 24 instructions an output around it
    (requantization and store, unpacking, flush), 0.1 a MAC for each further flush (16-bit
    lanes whose sums fit 15 bits take one)."""
    q_w = 1 if w_fmt.bits == 1 else 1 << (w_fmt.bits - 1)
    centered = s == 16 and w_fmt.bits != 1 and taps * q_w * (1 << a_fmt.bits) < 32768
    segments = 1 if centered else -(-taps // max(n, 1))
    return 1.35 + 24.0 / taps + 0.1 * (segments - 1)


def widened_to_s8(
    w_fmt: QFormat | None,
    a_fmt: QFormat | None,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    macs: int | None = None,
    in_c: int | None = None,
    weight: np.ndarray | None = None,
) -> bool:
    """Whether a pointwise convolution (1x1, stride 1, no padding) of narrower weights on 8-bit
    activations takes the W8A8 byte path with its weights stored as int8 codes (small weights:
    two pixels a word, mico_conv_narrow.c), rather than the channel lanes (the layer is never
    slower than at W8A8 either way). Given its input channels ``in_c`` (and weight codes, whose
    largest magnitude and runs bound both paths' chunks), a layer the pointwise lanes path
    takes goes where the estimate is lower (:func:`narrow_small_cost`,
    :func:`pointwise_lanes_cost`): the lanes, for every benchmark layer (conv 1x1 32->32 at
    4/8: 2.31 instructions per MAC against 2.87). Without them, the bytes."""
    if w_fmt is None or a_fmt is None or w_fmt.bits >= 8 or a_fmt.bits != 8:
        return False
    if w_fmt.binary or (macs is not None and macs < CONV_S8_MIN_MACS):
        return False
    if not (tuple(kernel) == (1, 1) and tuple(stride) == (1, 1) and tuple(padding) == (0, 0)):
        return False
    if in_c is None or in_c > PW_LANES_MAX_TAPS:
        return True
    out_c = lane_channels(w_fmt.bits) if weight is None else int(np.asarray(weight).shape[0])
    plan = lanes_plan(w_fmt, a_fmt, out_c, macs=macs, weight=weight)  # what the layer would take
    if plan is None:
        return True
    w_max = max(-w_fmt.qmin, w_fmt.qmax) if weight is None else int(np.abs(weight).max(initial=0))
    a_max = max(-a_fmt.qmin, a_fmt.qmax)
    lw_fmt = QFormat(plan["w_bits"], True) if plan["w_bits"] != w_fmt.bits else w_fmt
    lanes = pointwise_lanes_cost(lw_fmt, a_fmt, in_c, plan["n"], plan["s"])
    return narrow_small_cost(w_max, a_max, in_c) <= lanes


def _weight_codes(node: Node) -> np.ndarray | None:
    """The weight codes of a conv / linear node (None when they are not constants)."""
    data = getattr(node.inputs[1], "data", None)
    return None if data is None else np.asarray(data)


def lanes_kernel(layer: str, plan: dict[str, int], w_bits: int) -> str:
    """The entry point of a lanes layer: its weight width and G = s / w_bits field groups."""
    return f"{layer}_lanes_w{w_bits}g{plan['s'] // w_bits}"


def _binary_call(ctx: EmitContext, node: Node, layer: str, params: str, taps: int) -> list[str]:
    """The call of a binary layer (mico_binary.c): its popcount path from the ISA extensions
    the context was given (none: the portable one), thresholds for 1-bit outputs."""
    a = node.attrs
    thr = binary_plan.thresholds(
        np.asarray(node.inputs[2].data), a.get("requant"), a.get("relu", False), taps
    )
    thr_sym = "NULL" if thr is None else ctx.const_int32(f"{node.name}_thr", thr, kind="scales")
    ctx.need("mico_binary.c")
    ctx.need("mico_conv2d.c")  # the kernels fall back on the plain ones for other shapes
    ctx.need("mico_linear.c")
    kernel = binary_plan.binary_kernel(layer, ctx.isa_extensions)
    x, out = ctx.buffer(node.inputs[0]), ctx.buffer(node.output)
    return [f"{kernel}(&{params}, {thr_sym}, {x}, {out});"]


def _lanes_struct(ctx: EmitContext, node: Node, plan: dict[str, int]) -> str:
    return ctx.const_struct(
        "MicoLanes", f"{node.name}_lanes", _fields({k: plan[k] for k in LANES_FIELDS})
    )


#: the capability of a target with vector units and caches (mico/targets/files/host.yaml; X:
#: non-standard): its convolution and linear layers take the int16 GEMM kernels of
#: mico_host_gemm.c
HOST_EXTENSION = "xautovec"
HOST_CONV = "mico_qconv2d_host"
HOST_LINEAR = "mico_qlinear_host"
HOST_ADD = "mico_add_host"


def host_kernels(ctx: EmitContext, x: Value) -> bool:
    """Whether a conv / linear layer reading ``x`` takes the host GEMM kernels: the target has
    :data:`HOST_EXTENSION` and the input is codes (int32 inputs keep the portable kernels)."""
    return HOST_EXTENSION in ctx.isa_extensions and fmt_of(x)[0] <= 8


def _need_host(ctx: EmitContext) -> None:
    """mico_host_gemm.c and the portable kernels its entry points fall back on."""
    for source in ("mico_host_gemm.c", "mico_conv2d.c", "mico_linear.c", "mico_eltwise.c"):
        ctx.need(source)


def conv_choice(node: Node, ctx: Any) -> dict[str, Any]:
    """How ``emit_qconv2d`` runs a conv node in this context (its ISA extensions, size gates,
    preference): ``host``, ``binary``, ``s8``, ``lanes`` (the :func:`lanes_plan` or None),
    ``depthwise`` (a :mod:`dwconv_plan` plan or None), ``kernel`` (the plain entry point when
    none of those takes it, else None), ``macs``, ``taps``. Nothing is emitted: the memory
    planner asks before emission which kernel a node calls (:mod:`mico.codegen.scratch`)."""
    x, out = node.inputs[0], node.output
    in_c = x.type.shape[1]
    _, out_c, out_h, out_w = out.type.shape
    k_h, k_w = node.inputs[1].type.shape[2:]
    a = node.attrs
    macs = out_c * out_h * out_w * (in_c // a["groups"]) * k_h * k_w
    # a band of a layer run in patches (mico.codegen.patch_plan) takes the whole layer's path
    # and shares its requantization constants
    macs = a.get("whole_macs", macs)
    macs = gate_macs(ctx, node, macs)  # a path the program links anyway: no size gate
    taps = in_c // a["groups"] * k_h * k_w
    host = host_kernels(ctx, x)
    binary = not host and binary_plan.takes_binary(
        node.inputs[1].qformat, x.qformat, taps, a["groups"], a["dilation"][1], k_w, macs,
        depthwise=binary_plan.node_depthwise_sliced(node),
    )  # fmt: skip
    s8 = (
        not host
        and not binary
        and widened_to_s8(
            node.inputs[1].qformat,
            x.qformat,
            (k_h, k_w),
            a["stride"],
            a["padding"],
            macs,
            in_c=in_c // a["groups"],
            weight=_weight_codes(node),
        )
    )
    lanes = (
        None
        if binary or host or s8
        else lanes_plan(
            node.inputs[1].qformat,
            x.qformat,
            out_c // a["groups"],
            macs=macs,
            weight=_weight_codes(node),
            groups=a["groups"],
        )
    )
    plain = not (host or binary)
    dw = dwconv_plan.node_plan(node) if plain and not prefers_size(ctx) else None
    kernel = None
    signs = plain and dw is None and not s8 and not prefers_size(ctx)  # weights as signs
    if signs and macs >= sign_lut_plan.MIN_MACS:
        # binary weights on wider codes: table lookups, no multiplication (mico_sign_lut.c)
        kernel = sign_lut_plan.conv_kernel(
            node.inputs[1].qformat, fmt_of(x)[0], taps, a["groups"], k_w, lanes is not None
        )
    if signs and kernel is None and macs >= LANES_MIN_MACS:
        # weights that are signs: sums of codes, no multiplication (mico_conv_addsub.c)
        kernel = addsub_plan.addsub_kernel(
            node.inputs[1].qformat, fmt_of(x)[0], taps, a["groups"], lanes is not None,
            _weight_codes(node), (out_h, out_w), k_w,
        )  # fmt: skip
    lanes = None if kernel is not None else lanes
    if plain and dw is None and lanes is None and kernel is None:
        w_fmt = node.inputs[1].qformat
        w_bits = 8 if s8 else (w_fmt.bits if w_fmt is not None else 0)
        kernel = conv2d_kernel(fmt_of(x)[0], a["groups"], in_c, out_c, (k_h, k_w),
                               a["dilation"][1], w_bits=w_bits, macs=macs,
                               words=not prefers_size(ctx))  # fmt: skip
    return {"host": host, "binary": binary, "s8": s8, "lanes": lanes, "depthwise": dw,
            "kernel": kernel, "macs": macs, "taps": taps}  # fmt: skip


def emit_qconv2d(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    _, in_c, in_h, in_w = x.type.shape
    _, out_c, out_h, out_w = out.type.shape
    k_h, k_w = node.inputs[1].type.shape[2:]
    a = node.attrs
    const_name = a.get("whole_name", node.name)
    choice = conv_choice(node, ctx)
    host, binary, s8, lanes = choice["host"], choice["binary"], choice["s8"], choice["lanes"]
    taps = choice["taps"]
    w_sym, b_sym, w_bits = _weights(ctx, node, lanes["w_bits"] if lanes else 0, binary, s8)
    params = ctx.const_struct(
        "MicoConv2d",
        f"{node.name}_params",
        _fields(
            {
                "in_c": in_c,
                "in_h": in_h,
                "in_w": in_w,
                "out_c": out_c,
                "out_h": out_h,
                "out_w": out_w,
                "k_h": k_h,
                "k_w": k_w,
                **_window(a),
                "groups": a["groups"],
                "in_fmt": _fmt(x),
                "w_bits": w_bits,
                "weight": w_sym,
                "bias": b_sym,
                "out": c_out(ctx, const_name, out, a.get("requant"), a.get("relu", False)),
            }
        ),
    )
    ctx.need("mico_conv2d.c")
    if host:
        _need_host(ctx)
        return _call(ctx, HOST_CONV, params, x, out)
    if binary:
        return _binary_call(ctx, node, "mico_qconv2d", params, taps)
    # depthwise 3x3: pixel lanes, byte or pair paths (mico_dwconv.c), unless preferring size
    dw = choice["depthwise"]
    if dw is not None:
        return dwconv_plan.emit_call(ctx, node, params, dw, w_bits)
    if lanes is not None:
        sym = _lanes_struct(ctx, node, lanes)
        kernel = lanes_kernel("mico_qconv2d", lanes, w_bits)
        return _scratch_call(ctx, node, params, kernel, f"&{sym}", ctx.buffer(x), ctx.buffer(out))
    kernel = choice["kernel"]
    if kernel == NARROW_CONV:
        ctx.need("mico_conv_narrow.c")
    if kernel in addsub_plan.KERNELS.values():
        ctx.need(addsub_plan.SOURCE)
    if kernel == sign_lut_plan.CONV_KERNEL:
        ctx.need(sign_lut_plan.SOURCE)
    return _scratch_call(ctx, node, params, kernel, ctx.buffer(x), ctx.buffer(out))


def _scratch_call(
    ctx: EmitContext, node: Node, params: str, kernel: str, *args: str, ctype: str = "MicoConv2d"
) -> list[str]:
    """The call of a conv kernel (or the sign tables' linear one: ``ctype`` MicoLinear); a
    node with planned scratch (:mod:`mico.codegen.scratch`) passes a copy of its flash params
    pointing at it (the arena's address is known at run time only)."""
    size = int(node.plan.get(SCRATCH_ATTR, 0) or 0)
    rest = ", ".join(args)
    if size <= 0 or scratch_name(node) not in ctx.plan.offsets:
        return [f"{kernel}(&{params}, {rest});"]
    return [
        "{",
        f"    {ctype} p_ = {params};",
        f"    p_.scratch = {ctx.scratch(node)};",
        f"    p_.scratch_bytes = {size};",
        f"    {kernel}(&p_, {rest});",
        "}",
    ]


#: W8A8 layers of at least this many MACs take the byte paths (mico_qconv2d_tiled_s8: about
#: 7 KB of rv32 code, 3.3-3.7 instructions per MAC against 6.6-6.9; mico_qlinear_s8: 2.7 KB,
#: 3.7 against 4.8); smaller ones keep the plain kernels, as for the lanes (LANES_MIN_MACS)
CONV_S8_MIN_MACS = 32768
LINEAR_S8_MIN_MACS = 8192
#: weight widths whose plain layers take the ``_sub`` entry points (mico_qconv2d_tiled_sub4 /
#: _sub2, mico_qlinear_sub4 / _sub2, one width's word kernels each): the same kernels plus
#: several products per multiply (rows read a word at a time, or a tap's codes of several pixels
#: in one word; linear layers on codes of at most 4 bits three 4-bit or four 2-bit products a
#: multiply, :data:`SUB_OFFSET_MAX_BITS`, in their own entry points behind a size gate,
#: :data:`SUB_OFFSET_MIN_MACS`), about 2 KB (conv) and 1 KB (linear) of rv32 code that
#: programs without such layers do not link; no size gate: they pay on any layer (their set-up
#: is per chunk of the layer, and small layers are where the plain kernels run)
SUB_WORD_BITS = (2, 4)
#: W8A8 convolutions with few taps (a first layer) or pointwise ones take the 4-channel x
#: 4-pixel byte tiles of mico_conv_narrow.c (figures: benchmarks/results/dscnn_layers.md); its
#: limits: taps of a patch (pointwise layers need none), taps x channels (rounded up to 4);
#: a layer with a patch needs NARROW_MIN_CHANNELS output channels to repay building it (a
#: LeNet-5 first conv, 1 -> 6 channels 5x5, runs 6.83 instructions per MAC on the tiles
#: against 5.19 on mico_qconv2d_tiled_s8; 2 -> 16 3x3: 4.84 against 5.06)
NARROW_CONV = "mico_qconv2d_narrow_s8"
NARROW_MAX_TAPS = 64
NARROW_MAX_WEIGHTS = 4096
NARROW_MIN_CHANNELS = 8


def conv2d_kernel(
    in_bits: int,
    groups: int,
    in_c: int,
    out_c: int,
    kernel: tuple[int, int],
    dil_w: int,
    w_bits: int | None = None,
    macs: int | None = None,
    words: bool = True,
) -> str:
    """The path ``mico_qconv2d`` takes for a layer, as the entry point to call.

    Calling the path directly (not the dispatcher) lets the linker drop the paths a model does
    not use: a model without depthwise layers carries no depthwise kernel, one without W8A8
    layers of :data:`CONV_S8_MIN_MACS` MACs or more no byte path, one without 4- or 2-bit
    weights (:data:`SUB_WORD_BITS`) no word kernels. ``words=False`` (a program preferring
    size): no word kernels either.
    """
    if in_bits > 8:
        return "mico_qconv2d_elementwise"
    if groups == in_c == out_c and tuple(kernel) == (3, 3) and dil_w == 1:
        return "mico_qconv2d_depthwise3x3"
    taps = in_c // max(groups, 1) * kernel[0] * kernel[1]
    if (
        w_bits == in_bits == 8
        and groups == 1
        and (tuple(kernel) == (1, 1) or (taps <= NARROW_MAX_TAPS and out_c >= NARROW_MIN_CHANNELS))
        and taps * ((out_c + 3) // 4 * 4) <= NARROW_MAX_WEIGHTS
        and macs is not None  # (a caller that does not know the size keeps mico_conv2d.c's)
        and macs >= CONV_S8_MIN_MACS
    ):
        return NARROW_CONV
    if w_bits == in_bits == 8 and (macs is None or macs >= CONV_S8_MIN_MACS):
        return "mico_qconv2d_tiled_s8"
    if w_bits in SUB_WORD_BITS and words:
        return f"mico_qconv2d_tiled_sub{w_bits}"  # each width's word kernels only
    return "mico_qconv2d_tiled"


#: input codes of at most this many bits that can be negative (signed, or asymmetric) are
#: offset by the word kernels (``MicoLinear.x_off``: 2^(bits - 1) for signed codes, the zero
#: point for asymmetric ones, the offset's products with the weights taken off the bias):
#: codes in [0, 2^bits) take three 4-bit products (mico_lin_t4) or four 2-bit ones a word's
#: worth at a time (mico_lin_t2, codes in [0, 5]) per multiply; wider unsigned or asymmetric
#: codes are centred instead (x_off = their offset - 2^(bits - 1)): the 16-bit lanes of the
#: word kernels hold chunks twice as long on codes of half the magnitude
SUB_OFFSET_MAX_BITS = 4


def linear_x_off(kernel: str, in_fmt: QFormat | None, weight: np.ndarray | None = None) -> int:
    """The offset ``kernel`` is given for its input codes (``MicoLinear.x_off``): for the word
    kernels ``mico_qlinear_sub4`` / ``_sub2`` (and ``_sub4t`` / ``_sub2t``), on codes of at most
    :data:`SUB_OFFSET_MAX_BITS` bits that can be negative the one that makes their fields'
    values non-negative (2^(bits - 1) for signed codes, 1 for binary ones, the zero point for
    asymmetric ones), on wider unsigned or asymmetric codes the one that centres them (the zero
    point less 2^(bits - 1)); else 0. ``weight``: the layer's weight codes, 0 when the bias it
    folds would leave int32."""
    words = (f"mico_qlinear_sub{b}" for b in SUB_WORD_BITS)
    if kernel.removesuffix("t") not in words or in_fmt is None:
        return 0
    if in_fmt.bits > 8:
        return 0
    if in_fmt.bits <= SUB_OFFSET_MAX_BITS:
        if not in_fmt.negative:
            return 0
        x_off = 1 if in_fmt.binary else (1 << (in_fmt.bits - 1)) if in_fmt.signed else in_fmt.zero
    else:
        x_off = 0 if in_fmt.signed else in_fmt.zero - (1 << (in_fmt.bits - 1))
    if x_off and weight is not None:
        sums = np.abs(np.asarray(weight, dtype=np.int64).reshape(len(weight), -1)).sum(axis=1)
        if len(sums) and int(sums.max()) * abs(x_off) >= 2**30:  # the folded bias stays in int32
            return 0
    return x_off


#: linear layers of at least this many MACs whose codes (plus x_off) fit the offset-code kernels
#: take them (``mico_qlinear_sub4t`` / ``_sub2t``: 4-bit weights on codes in [0, 15], 2-bit
#: ones on [0, 5]; cmsis_nn's FC 256 -> 64 on signed 4-bit codes 3.35 -> 2.27 rv32 instructions
#: a MAC, 2-bit 2.51 -> 1.61); they add about 2 KB of rv32 code (1.5 KB at 2 bits), which a
#: smaller layer's saved instructions do not repay (the lanes' rule, LANES_MIN_MACS, at about
#: the same instructions saved per byte); smaller layers keep ``mico_qlinear_sub4`` / ``_sub2``
#: unless their program links the offset-code entry anyway (mico.codegen.linked_paths)
SUB_OFFSET_MIN_MACS = 16384


def _field_range(fmt: QFormat) -> tuple[int, int]:
    """The least and greatest value a packed field of ``fmt`` reads as (``mico_field_map``:
    every field value counted, not only the codes the format's range produces)."""
    if fmt.binary:
        return -1, 1
    if fmt.signed:
        return -(1 << (fmt.bits - 1)), (1 << (fmt.bits - 1)) - 1
    return -fmt.zero, (1 << fmt.bits) - 1 - fmt.zero


def offset_kernels_take(w_bits: int, in_fmt: QFormat | None, x_off: int, in_features: int) -> bool:
    """Whether the offset-code kernels run a linear layer of ``w_bits`` weights on ``in_fmt``
    codes plus ``x_off`` (``mico_lin_mp_layer`` / ``mico_lin_mp_kind`` with them linked): rows
    of whole words, codes of at most 8 bits whose fields plus the offset lie in [0, 15] (4-bit
    weights) or [0, 5] (2-bit ones)."""
    if w_bits not in SUB_WORD_BITS or in_fmt is None or in_fmt.bits > 8:
        return False
    if in_features % (32 // w_bits):
        return False
    lo, hi = _field_range(in_fmt)
    return lo + x_off >= 0 and hi + x_off <= (15 if w_bits == 4 else 5)


def sub_offset_kernel(
    kernel: str, in_fmt: QFormat | None, x_off: int, in_features: int, macs: int | None
) -> str:
    """``kernel`` (``mico_qlinear_sub4`` / ``_sub2``) as its offset-code entry point
    (``..._sub4t`` / ``_sub2t``) when those kernels take the layer and it has
    :data:`SUB_OFFSET_MIN_MACS` MACs or more (any size when ``macs`` is None); else
    ``kernel``."""
    w_bits = next((b for b in SUB_WORD_BITS if kernel == f"mico_qlinear_sub{b}"), 0)
    if not w_bits or (macs is not None and macs < SUB_OFFSET_MIN_MACS):
        return kernel
    return f"{kernel}t" if offset_kernels_take(w_bits, in_fmt, x_off, in_features) else kernel


def linear_kernel(
    w_bits: int, in_fmt: QFormat | None, macs: int | None = None, words: bool = True
) -> str:
    """``mico_qlinear_s8`` for a W8A8 layer of :data:`LINEAR_S8_MIN_MACS` MACs or more (any
    size when ``macs`` is None) with symmetric or unsigned input codes (what its byte path
    takes), ``mico_qlinear_sub4`` / ``_sub2`` for 4- or 2-bit weights on codes
    (:data:`SUB_WORD_BITS`; not with ``words=False``, a program preferring size), else
    ``mico_qlinear``."""
    if (
        w_bits == 8
        and in_fmt is not None
        and in_fmt.bits == 8
        and (in_fmt.signed or not in_fmt.zero)
        and (macs is None or macs >= LINEAR_S8_MIN_MACS)
    ):
        return "mico_qlinear_s8"
    if w_bits in SUB_WORD_BITS and words and in_fmt is not None and in_fmt.bits <= 8:
        return f"mico_qlinear_sub{w_bits}"  # each width's word kernels only
    return "mico_qlinear"


def _linear_gates(node: Node, ctx: Any) -> tuple[int, int, bool, bool]:
    """What a linear node's first choices rest on: its rows, the MACs its size gates see
    (:func:`gate_macs`), whether it takes the host kernels and whether the popcount kernels
    (binary weights and activations)."""
    x = node.inputs[0]
    out_features, in_features = node.inputs[1].type.shape
    rows = x.type.numel // (in_features * x.type.shape[0])
    macs = gate_macs(ctx, node, rows * in_features * out_features)
    host = host_kernels(ctx, x)
    binary = not host and binary_plan.takes_binary(
        node.inputs[1].qformat, x.qformat, in_features, macs=macs,
        min_macs=binary_plan.LINEAR_MIN_MACS,
    )  # fmt: skip
    return rows, macs, host, binary


def linear_sign_lut(node: Node, ctx: Any, lanes: bool | None = None) -> str | None:
    """The sign tables' entry (:data:`sign_lut_plan.LINEAR_KERNEL`) when :func:`emit_qlinear`
    runs a linear node on them in this context, else None; ``lanes``: whether the channel
    lanes take the layer (worked out here when None). Nothing is emitted: the memory planner
    asks before emission (:mod:`mico.codegen.scratch`)."""
    x = node.inputs[0]
    out_features, in_features = node.inputs[1].type.shape
    _, macs, host, binary = _linear_gates(node, ctx)
    if binary or host or prefers_size(ctx) or macs < sign_lut_plan.MIN_MACS:
        return None
    if lanes is None:
        lanes = lanes_plan(node.inputs[1].qformat, x.qformat, out_features, pixels=1, macs=macs,
                           weight=_weight_codes(node)) is not None  # fmt: skip
    return sign_lut_plan.linear_kernel(node.inputs[1].qformat, fmt_of(x)[0], in_features, lanes)


def emit_qlinear(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    out_features, in_features = node.inputs[1].type.shape
    a = node.attrs
    rows, macs, host, binary = _linear_gates(node, ctx)
    # binary weights on wider codes: table lookups, no multiplication (mico_sign_lut.c)
    lanes = (
        None
        if binary or host
        else lanes_plan(
            node.inputs[1].qformat,
            x.qformat,
            out_features,
            pixels=1,
            macs=macs,
            weight=_weight_codes(node),
        )
    )
    sign_lut = linear_sign_lut(node, ctx, lanes is not None)
    lanes = None if sign_lut else lanes
    plain = not (host or binary or lanes is not None or sign_lut is not None)
    w_fmt = node.inputs[1].qformat
    kernel = (
        linear_kernel(w_fmt.bits, x.qformat, macs, words=not prefers_size(ctx))
        if plain and w_fmt is not None
        else None
    )
    x_off = linear_x_off(kernel, x.qformat, _weight_codes(node)) if kernel else 0
    if kernel:
        offset_macs = offset_gate_macs(ctx, node, rows * in_features * out_features)
        kernel = sub_offset_kernel(kernel, x.qformat, x_off, in_features, offset_macs)
    w_sym, b_sym, w_bits = _weights(ctx, node, lanes["w_bits"] if lanes else 0, binary, x_off=x_off)
    params = ctx.const_struct(
        "MicoLinear",
        f"{node.name}_params",
        _fields(
            {
                "rows": rows,
                "in_features": in_features,
                "out_features": out_features,
                "in_fmt": _fmt(x),
                "w_bits": w_bits,
                "weight": w_sym,
                "bias": b_sym,
                "out": c_out(ctx, node.name, out, a.get("requant"), a.get("relu", False)),
                **({"x_off": x_off} if x_off else {}),
            }
        ),
    )
    ctx.need("mico_linear.c")
    if host:
        _need_host(ctx)
        return _call(ctx, HOST_LINEAR, params, x, out)
    if binary:
        return _binary_call(ctx, node, "mico_qlinear", params, in_features)
    if lanes is not None:
        sym = _lanes_struct(ctx, node, lanes)
        kernel = lanes_kernel("mico_qlinear", lanes, w_bits)
        return [f"{kernel}(&{params}, &{sym}, {ctx.buffer(x)}, {ctx.buffer(out)});"]
    if sign_lut is not None:  # its working memory planned in the arena (mico.codegen.scratch)
        if linear_sign_lut(node, ctx) != sign_lut:  # the planner's view of the layer differs
            raise CompileError(f"'{node.name}': the scratch planner and the emitter disagree "
                               "on the sign tables")  # fmt: skip
        ctx.need(sign_lut_plan.SOURCE)
        args = (ctx.buffer(x), ctx.buffer(out))
        return _scratch_call(ctx, node, params, sign_lut, *args, ctype="MicoLinear")
    if kernel is None:
        kernel = linear_kernel(w_bits, x.qformat, macs, words=not prefers_size(ctx))
    return _call(ctx, kernel, params, x, out)


def _pool_geometry(node: Node) -> dict[str, int]:
    """Sizes, window, stride and padding fields shared by the pooling kernels."""
    x, out, a = node.inputs[0], node.output, node.attrs
    _, channels, in_h, in_w = x.type.shape
    _, _, out_h, out_w = out.type.shape
    return {
        "channels": channels,
        "in_h": in_h,
        "in_w": in_w,
        "out_h": out_h,
        "out_w": out_w,
        "k_h": a["kernel_size"][0],
        "k_w": a["kernel_size"][1],
        "stride_h": a["stride"][0],
        "stride_w": a["stride"][1],
        "pad_h": a["padding"][0],
        "pad_w": a["padding"][1],
    }


def emit_maxpool2d(node: Node, ctx: EmitContext) -> list[str]:
    x, out, a = node.inputs[0], node.output, node.attrs
    fields = {
        **_pool_geometry(node),
        "dil_h": a["dilation"][0],
        "dil_w": a["dilation"][1],
        "fmt": _fmt(x),
    }
    params = ctx.const_struct("MicoMaxPool2d", f"{node.name}_params", _fields(fields))
    ctx.need("mico_pool.c")
    return _call(ctx, "mico_maxpool2d", params, x, out)


def emit_avgpool2d(node: Node, ctx: EmitContext) -> list[str]:
    x, out, a = node.inputs[0], node.output, node.attrs
    fields = {
        **_pool_geometry(node),
        "count_include_pad": int(bool(a.get("count_include_pad", True))),
        "in_fmt": _fmt(x),
        "out": c_out(ctx, node.name, out, a["out"]),
    }
    params = ctx.const_struct("MicoAvgPool2d", f"{node.name}_params", _fields(fields))
    ctx.need("mico_pool.c")
    return _call(ctx, "mico_avgpool2d", params, x, out)


def emit_reshape(node: Node, ctx: EmitContext) -> list[str]:
    return []  # a view: the output shares its input's arena bytes


def emit_mean(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    count = int(node.attrs["count"])
    params = ctx.const_struct(
        "MicoMean",
        f"{node.name}_params",
        _fields(
            {
                "outer": x.type.numel // (count * x.type.shape[0]),
                "count": count,
                "in_fmt": _fmt(x),
                "out": c_out(ctx, node.name, out, node.attrs["out"]),
            }
        ),
    )
    ctx.need("mico_pool.c")
    return _call(ctx, "mico_mean", params, x, out)


def emit_requant(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    spec = node.attrs["out"]
    m = spec.get("m")
    channels = len(m) if m is not None and len(m) > 1 else 1
    shape = x.type.shape
    axis = int(node.attrs.get("axis", 1)) % len(shape)
    if channels > 1 and shape[axis] != channels:
        raise CompileError(f"'{node.name}': {channels} multipliers for axis {axis} of {x.type}")
    inner = math.prod(shape[axis + 1 :]) if channels > 1 else 1
    batch = shape[0]
    params = ctx.const_struct(
        "MicoRequant",
        f"{node.name}_params",
        _fields(
            {
                "n": x.type.numel // batch,
                "channels": channels,
                "inner": inner,
                "in_fmt": _fmt(x),
                "out": c_out(ctx, node.name, out, spec),
            }
        ),
    )
    ctx.need("mico_eltwise.c")
    return _call(ctx, "mico_requant", params, x, out)


def emit_add(node: Node, ctx: EmitContext) -> list[str]:
    a, b = node.inputs
    out = node.output
    m_a, m_b = node.attrs["m"]
    lo, hi = node.attrs["clamp"]
    params = ctx.const_struct(
        "MicoAdd",
        f"{node.name}_params",
        _fields(
            {
                "n": out.type.numel // out.type.shape[0],
                "a_fmt": _fmt(a),
                "b_fmt": _fmt(b),
                "fmt": _fmt(out),
                "m_a": m_a,
                "m_b": m_b,
                "shift": node.attrs["shift"],
                "lo": c_int(lo),
                "hi": c_int(hi),
            }
        ),
    )
    ctx.need("mico_eltwise.c")
    kernel = "mico_add"
    if HOST_EXTENSION in ctx.isa_extensions:
        _need_host(ctx)
        kernel = HOST_ADD
    return [f"{kernel}(&{params}, {ctx.buffer(a)}, {ctx.buffer(b)}, {ctx.buffer(out)});"]


def emit_concat(node: Node, ctx: EmitContext) -> list[str]:
    out = node.output
    dim = int(node.attrs["dim"])
    shape = out.type.shape
    outer = math.prod(shape[1:dim])
    out_inner = math.prod(shape[dim:])
    fmt, scale = node.attrs["qformat"], node.attrs["scale"]
    statements, offset = [], 0
    for i, (x, part) in enumerate(zip(node.inputs, node.attrs["parts"], strict=True)):
        in_inner = math.prod(x.type.shape[dim:])
        spec = None if part is None else mico_ops.out_spec(fmt, scale, [part["m"]], [part["shift"]])
        params = ctx.const_struct(
            "MicoConcatPart",
            f"{node.name}_part{i}_params",
            _fields(
                {
                    "outer": outer,
                    "in_inner": in_inner,
                    "out_inner": out_inner,
                    "offset": offset,
                    "in_fmt": _fmt(x),
                    "out": c_out(ctx, f"{node.name}_part{i}", out, spec),
                }
            ),
        )
        statements += _call(ctx, "mico_concat_part", params, x, out)
        offset += in_inner
    ctx.need("mico_eltwise.c")
    return statements


def emit_copy(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    shape, strides = list(node.attrs["shape"]), list(node.attrs["strides"])
    if len(shape) > 6:
        raise CompileError(f"'{node.name}' copies a rank-{len(shape)} tensor; at most 6 dims")
    pad = 6 - len(shape)
    params = ctx.const_struct(
        "MicoCopy",
        f"{node.name}_params",
        _fields(
            {
                "rank": len(shape),
                "shape": "{ " + ", ".join(map(str, shape + [1] * pad)) + " }",
                "stride": "{ " + ", ".join(map(str, strides + [0] * pad)) + " }",
                "offset": int(node.attrs["offset"]),
                "in_fmt": _fmt(x),
                "out": c_out(ctx, node.name, out, node.attrs.get("out")),
            }
        ),
    )
    ctx.need("mico_eltwise.c")
    return _call(ctx, "mico_copy", params, x, out)


def emit_lut(node: Node, ctx: EmitContext) -> list[str]:
    """A table of output codes, one per input code, indexed by the kernel."""
    x, out = node.inputs[0], node.output
    table = np.asarray(node.attrs["table"], dtype=np.int64)
    zero = out.qformat.zero if out.qformat is not None else 0
    raw = ((table + zero) & 0xFF).astype(np.uint8)  # fields: two's complement, or code + zero
    symbol = ctx.const_bytes(f"{node.name}_table", raw, kind="params",
                             comment=f"{node.op}: output code of each input code")  # fmt: skip
    ctx.need("mico_lut.c")
    n = x.type.numel // x.type.shape[0]
    return [
        f"mico_lut({ctx.buffer(x)}, {ctx.buffer(out)}, {n}, (MicoFmt){_fmt(x)}, "
        f"(MicoFmt){_fmt(out)}, {symbol}, {int(node.attrs['in_min'])});"
    ]


def _out_struct(ctx: EmitContext, node: Node) -> str:
    body = c_out(ctx, node.name, node.output, node.attrs["out"])
    return ctx.const_struct("MicoOut", f"{node.name}_out", body.strip()[1:-1].strip())


def emit_qmul(node: Node, ctx: EmitContext) -> list[str]:
    a, b = node.inputs
    o = _out_struct(ctx, node)
    ctx.need("mico_qops.c")
    n = a.type.numel // a.type.shape[0]
    return [
        f"mico_qmul({ctx.buffer(a)}, (MicoFmt){_fmt(a)}, {ctx.buffer(b)}, (MicoFmt){_fmt(b)}, "
        f"{ctx.buffer(node.output)}, &{o}, {n});"
    ]


def emit_qmatmul(node: Node, ctx: EmitContext) -> list[str]:
    a, b = node.inputs
    o = _out_struct(ctx, node)
    ctx.need("mico_qops.c")
    m, k = (int(d) for d in a.type.shape[-2:])
    n = int(b.type.shape[-1])
    batch = a.type.numel // (m * k)
    return [
        f"mico_qmatmul({ctx.buffer(a)}, (MicoFmt){_fmt(a)}, {ctx.buffer(b)}, "
        f"(MicoFmt){_fmt(b)}, {ctx.buffer(node.output)}, &{o}, {batch}, {m}, {k}, {n});"
    ]


def emit_qsoftmax(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    table = np.asarray(node.attrs["exp_q15"], dtype=np.int64)
    symbol = ctx.const_int32(f"{node.name}_exp", table, kind="params")
    n = int(x.type.shape[-1])
    rows = x.type.numel // x.type.shape[0] // n
    ctx.need("mico_softmax.c")
    return [
        f"mico_qsoftmax({ctx.buffer(x)}, (MicoFmt){_fmt(x)}, {ctx.buffer(out)}, "
        f"(MicoFmt){_fmt(out)}, {rows}, {n}, {symbol}, {len(table)}, "
        f"{int(node.attrs['qmax'])});"
    ]


def emit_qlayernorm(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    a = node.attrs
    g = ctx.const_int32(f"{node.name}_g", np.asarray(a["g"], dtype=np.int64), kind="params")
    b = ctx.const_int64(f"{node.name}_b", np.asarray(a["b"], dtype=np.int64))
    n = int(x.type.shape[-1])
    rows = x.type.numel // x.type.shape[0] // n
    lo, hi = a["clamp"]
    ctx.need("mico_layernorm.c")
    return [
        f"mico_qlayernorm({ctx.buffer(x)}, (MicoFmt){_fmt(x)}, {ctx.buffer(out)}, "
        f"(MicoFmt){_fmt(out)}, {rows}, {n}, INT64_C({int(a['eps_q'])}), "
        f"INT64_C({int(a['k'])}), {g}, {b}, {int(a['shift'])}, {int(lo)}, {int(hi)});"
    ]


def emit_gather(node: Node, ctx: EmitContext) -> list[str]:
    x, out = node.inputs[0], node.output
    index = np.asarray(node.attrs["index"], dtype=np.int64)
    table = ctx.const_i32_array(f"{node.name}_index", index)
    ctx.need("mico_qops.c")
    return [
        f"mico_qgather({ctx.buffer(x)}, (MicoFmt){_fmt(x)}, {ctx.buffer(out)}, {table}, "
        f"{len(index)}, {int(node.attrs['fill'])});"
    ]


def emit_adaptavg(node: Node, ctx: EmitContext) -> list[str]:
    x = node.inputs[0]
    o = _out_struct(ctx, node)
    (rs, re), (cs, ce) = node.attrs["rows"], node.attrs["cols"]
    tables = [ctx.const_i32_array(f"{node.name}_{k}", np.asarray(v, dtype=np.int64))
              for k, v in (("rs", rs), ("re", re), ("cs", cs), ("ce", ce))]  # fmt: skip
    _, c, h, w = (int(d) for d in x.type.shape)
    ctx.need("mico_qops.c")
    return [
        f"mico_qadaptavg({ctx.buffer(x)}, (MicoFmt){_fmt(x)}, {ctx.buffer(node.output)}, &{o}, "
        f"{c}, {h}, {w}, {len(rs)}, {len(cs)}, {', '.join(tables)});"
    ]


for _op, _fn in (
    (mico_ops.ADAPTAVG, emit_adaptavg),
    (mico_ops.GATHER, emit_gather),
    (mico_ops.QLAYERNORM, emit_qlayernorm),
    (mico_ops.QSOFTMAX, emit_qsoftmax),
    (mico_ops.QMUL, emit_qmul),
    (mico_ops.QMATMUL, emit_qmatmul),
    (mico_ops.LUT, emit_lut),
    (mico_ops.QUANTIZE, emit_quantize),
    (mico_ops.QCONV2D, emit_qconv2d),
    (mico_ops.QLINEAR, emit_qlinear),
    (mico_ops.MAXPOOL2D, emit_maxpool2d),
    (mico_ops.RESHAPE, emit_reshape),
    (mico_ops.MEAN, emit_mean),
    (mico_ops.AVGPOOL2D, emit_avgpool2d),
    (mico_ops.REQUANT, emit_requant),
    (mico_ops.ADD, emit_add),
    (mico_ops.CONCAT, emit_concat),
    (mico_ops.COPY, emit_copy),
):
    OpRegistry.attach(_op, "emit", _fn)
