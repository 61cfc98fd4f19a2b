"""Kernel working memory planned in the arena (issue 16).

Some conv kernels need a few KB of working memory while they run: the channel-lanes paths by
rows and pointwise (``mico_conv_lr`` / ``mico_conv_pw`` in mico_conv2d.c: unpacked input rows,
tap tables, sums, lane weights) and the W8A8 byte tiles (``mico_nw`` in mico_conv_narrow.c:
rearranged weights, the patch, staged outputs, requantization constants). They used to keep
it on their stack at the size of the largest layer they take (about 9-10 KB each), RAM the
arena plan neither saw nor shared. So do the kernels of weights that are signs: the sign
tables' convolution (``mico_qconv2d_sign_lut`` in mico_sign_lut.c: the patch, the tile, two
pixel pairs' tables; 6 KB at most) and the sign-weight sums (``mico_qconv2d_addsub1/2`` in
mico_conv_addsub.c: the patch or phase arrays, the taps' pointers, the tile; 4.4 KB at most),
and the sign tables' linear layer (``mico_qlinear_sign_lut``: a chunk's codes, the sums, the
tables; 3 KB at most, ``MicoLinear.scratch``).

Here the generator sizes that memory for each layer, exactly as the kernel carves it (the C
computes the same sizes: ``mico_nw_scratch``, the blocks at the top of ``mico_conv_lr`` and
``mico_conv_pw``, ``mico_qconv2d_sign_lut_scratch``, ``mico_qlinear_sign_lut_scratch``,
``mico_qconv2d_addsub_scratch``), and
:func:`annotate` records it on the node (``Node.plan``, :data:`~mico.codegen.planner.
SCRATCH_ATTR`). The planner then places it as a buffer live at
that node's step only, so it shares bytes with tensors dead by then and adds to the arena
only where the node's live tensors plus its scratch are the peak. The kernel receives it as
``MicoConv2d.scratch`` / ``scratch_bytes`` (a copy of the flash params, made at the call).
A caller that plans none (NULL, or too few bytes) gets the same path with the memory on the
kernel's stack, bit-exact: the dynamic mode, the host harnesses, the bands of a patch stage.

Sizes follow the C: every part rounded up to 8 bytes; pointers counted as 8 bytes (a program
generated once builds for rv32 and for 64-bit hosts).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from mico.codegen import addsub_plan, sign_lut_plan
from mico.codegen.planner import SCRATCH_ATTR
from mico.ir.graph import Node
from mico.ir.ops import mico_ops

#: limits of the paths (mico_conv2d.c / mico_conv_narrow.c)
LR_BUF, LR_TAPS, LR_TILE, LR_SUMS, LR_COLS, LR_MIN_W = 1536, 400, 512, 256, 64, 8
PW_BUF, PW_PX, PW_WSUMS, PW_WX = 2048, 32, 256, 512
NW_TAPS, NW_PTAPS, NW_PIX, NW_LPIX, NW_CB, NW_WEIGHTS = 64, 128, 20, 16, 64, 4096
NW_RQ_BYTES = 20  # sizeof(MicoNwRq): five 32-bit fields
#: limits of the sign tables' convolution (mico_sign_lut.c): pixels of a tile, taps of a chunk,
#: channels of a block, bytes from one pixel pair's tables to the next's
SL_PX, SL_TAPS, SL_OCT, SL_SET = 16, 64, 32, 1024
#: and of its linear layer: taps of a chunk, outputs of a block
SL_LTAPS, SL_O = 128, 64
#: limits of the sign-weight sums (mico_conv_addsub.c): pixels of a tile, taps of a chunk,
#: channels of a block, int16 codes of an input span (mico_as_rows)
AS_PX, AS_TAPS, AS_OCT, AS_SPAN = 16, 64, 32, 96
POINTER_BYTES = 8  # sizeof(const int16_t *) at most (rv32: 4)
#: the sign-weight sums' entry points and their weights' widths
ADDSUB_BITS = {kernel: bits for bits, kernel in addsub_plan.KERNELS.items()}


def _up8(n: int) -> int:
    return (n + 7) // 8 * 8


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def narrow_bytes(
    geom: dict[str, int], out_bits: int, weight: np.ndarray | None = None, in_signed: bool = False
) -> int:
    """Working memory of ``mico_qconv2d_narrow_s8`` (``mico_nw_scratch``) for a layer of
    ``geom`` (MicoConv2d fields) storing ``out_bits``-bit outputs; 0 when the path does not
    take it (then mico_qconv2d_tiled_s8 runs, no scratch). ``weight`` (the int8 codes): small
    weights take packed patches of 16-bit lanes (2 bytes a code), which the size follows;
    without them the larger patch is assumed."""
    taps = geom["in_c"] * geom["k_h"] * geom["k_w"]
    c4 = (geom["out_c"] + 3) // 4 * 4
    pointwise = _pointwise(geom)
    patched = taps <= (NW_PTAPS if pointwise else NW_TAPS)
    tp = (taps + 7) // 8 * 8 if patched else taps
    if geom["groups"] != 1 or (not pointwise and not patched) or tp * c4 > NW_WEIGHTS:
        return 0
    cb = min(c4, NW_CB)
    small = patched and tp <= NW_PTAPS // 2 and _nw_chunk(weight, tp, in_signed) >= 8
    n = _up8(tp * c4) + (_up8(tp * (2 * NW_LPIX if small else NW_PIX)) if patched else 0)
    n += _up8(cb * NW_PIX) if out_bits < 8 else 0
    return n + _up8(cb * NW_RQ_BYTES)


def _nw_chunk(weight: np.ndarray | None, tp: int, in_signed: bool) -> int:
    """``chunk`` of mico_nw_layer: taps a 16-bit lane sums for these weights (0: none; no
    weights given: assumed small)."""
    if weight is None:
        return tp
    wmax = int(np.abs(np.asarray(weight, dtype=np.int64)).max(initial=0))
    if wmax > 16:
        return 0
    if wmax == 0:
        return tp
    amax = 128 if in_signed else 255
    return min((32767 // (wmax * amax)) & ~7, tp)


def _pointwise(g: dict[str, int]) -> bool:
    return (g["k_h"], g["k_w"], g["stride_h"], g["stride_w"], g["pad_h"], g["pad_w"]) == (
        1, 1, 1, 1, 0, 0,
    )  # fmt: skip


def pointwise_bytes(
    geom: dict[str, int], lanes: dict[str, int], in_fmt: tuple[int, ...], patched: bool
) -> int:
    """Working memory of ``mico_conv_pw`` (``patched``: through the im2col patch) for a layer
    it takes, else 0: the unpacked fields (taps x 32 bytes), the tile of a block's sums (or
    the patch's input rows, the larger), the weight sums (offset codes), the lane weights."""
    g, w_bits = geom, lanes["w_bits"]
    taps = g["in_c"] * g["k_h"] * g["k_w"]
    bits, offset = in_fmt[0], _field_offset(in_fmt)
    pointwise = _pointwise(g)
    if (
        (not pointwise and not patched)
        or g["groups"] != 1
        or bits > 8
        or (bits == 1 and in_fmt[1])  # binary {-1, +1} codes
        or taps * PW_PX > PW_BUF
        or (offset and g["out_c"] > PW_WSUMS)
    ):
        return 0
    rows = 0
    if not pointwise:
        rows = _patch_rows(g)
        if rows > 64 * PW_PX:
            return 0
    f = 32 // w_bits
    nblk = _ceil(g["out_c"], f)
    per = taps * (lanes["s"] // w_bits)
    wx = nblk * per if nblk * per <= PW_WX else per
    tile = max(f * PW_PX * 4, rows * 2)
    return _up8(taps * PW_PX) + _up8(tile) + (_up8(g["out_c"] * 4) if offset else 0) + _up8(wx * 4)


def _field_offset(in_fmt: tuple[int, ...]) -> int:
    """``mico_pw_offset``: the offset of the input's unsigned fields (0: none)."""
    bits, signed = in_fmt[0], in_fmt[1]
    if signed:
        return 1 if bits == 1 else (1 << (bits - 1)) - 1
    return in_fmt[2] if len(in_fmt) > 2 else 0


def _patch_rows(g: dict[str, int]) -> int:
    """``mico_pw_patch_len``: int16 of the input rows a block of 32 output pixels reads."""
    span = (PW_PX - 1 + g["out_w"] - 1) // g["out_w"]
    nr = span * g["stride_h"] + (g["k_h"] - 1) * g["dil_h"] + 1
    wp = (g["out_w"] - 1) * g["stride_w"] + (g["k_w"] - 1) * g["dil_w"] + 1
    return g["in_c"] * nr * wp


def rows_bytes(geom: dict[str, int], lanes: dict[str, int], in_fmt: tuple[int, ...]) -> int:
    """Working memory of ``mico_conv_lr`` (by output rows) for a layer it takes, else 0: a
    chunk's unpacked rows, its tap table, the tile, the row sums, the column arrays."""
    g = dict(geom)
    npix = g["out_h"] * g["out_w"]
    w = 32 if npix % 32 == 0 else g["out_w"]
    if _pointwise(g) and w > g["out_w"]:  # mico_lr_flat
        g.update(in_h=npix // w, out_h=npix // w, in_w=w, out_w=w)
    if g["out_w"] < LR_MIN_W and (
        (g["k_h"], g["k_w"]) == (1, 1) or g["in_c"] // g["groups"] == 1
    ):  # mico_lr_narrow: the pointwise path's patch instead
        return 0
    ipg, opg = g["in_c"] // g["groups"], g["out_c"] // g["groups"]
    kh, kw, sw, dw = g["k_h"], g["k_w"], g["stride_w"], g["dil_w"]
    rr = (kh - 1) * g["dil_h"] + 1
    npx, n = 16 // (lanes["s"] // lanes["w_bits"]), lanes["n"]
    f = 32 // lanes["w_bits"]
    nblk = _ceil(opg, f)
    opw = _ceil(g["out_w"], npx) * npx
    wq = ((opw - 1) * sw + (kw - 1) * dw) // sw + 1
    length = sw * wq
    if (
        in_fmt[0] > 8
        or opw > LR_COLS
        or length > 2 * LR_COLS
        or rr * length > LR_SUMS
        or rr > LR_COLS
        or kw > LR_COLS
    ):
        return 0
    icc = LR_BUF // (rr * length)
    t = (LR_TAPS - 1) * n // (n + 1)
    icc = min(icc, t // (kh * kw))
    passes = LR_TILE // (f * opw)
    if icc == 0 or passes == 0:
        return 0
    icc = _ceil(ipg, _ceil(ipg, icc))
    passes = min(passes, nblk)
    taps = icc * kh * kw
    parts = (
        icc * rr * length * 2,
        (taps + _ceil(taps, n)) * POINTER_BYTES,
        passes * f * opw * 4,
        rr * length * 4,
        opw * 4,
        opw * 4,
        rr * 4,
        kh * 4,
        kw * 4,
    )
    return sum(_up8(p) for p in parts)


def _code_maxabs(in_fmt: tuple[int, ...]) -> int:
    """``mico_code_maxabs``: the largest magnitude of a code less its zero point."""
    bits, signed = in_fmt[0], in_fmt[1]
    if signed:
        return 1 << (bits - 1)
    zero = in_fmt[2] if len(in_fmt) > 2 else 0
    return max((1 << bits) - 1 - zero, zero)


def _sl_chunk(k_w: int, cap: int, most: int) -> int:
    """``mico_sl_chunk``: taps of a chunk, whole kernel rows filling whole weight bytes."""
    unit = k_w
    while unit % 8:
        unit += k_w
    return min(cap, most) // unit * unit


def sign_lut_bytes(geom: dict[str, int], in_fmt: tuple[int, ...], w_bits: int) -> int:
    """Working memory of ``mico_qconv2d_sign_lut`` (``mico_sl_conv_bytes``) for a layer it
    takes, else 0: the patch (a chunk's taps x 16 pixels of int16), the tile (a block's
    channels x 16 int32 sums), the two pixel pairs' tables (the second set 1 KB after the
    first, 64 bytes a group of four taps)."""
    taps = geom["in_c"] * geom["k_h"] * geom["k_w"]
    if w_bits != 1 or geom["groups"] != 1 or not 2 <= in_fmt[0] <= 8 or taps % 8:
        return 0
    kc = _sl_chunk(geom["k_w"], 32767 // _code_maxabs(in_fmt), SL_TAPS)
    if kc == 0:
        return 0
    return kc * SL_PX * 2 + min(geom["out_c"], SL_OCT) * SL_PX * 4 + SL_SET + kc // 4 * 64


def sign_lut_linear_bytes(
    rows: int, in_features: int, out_features: int, in_fmt: tuple[int, ...], w_bits: int
) -> int:
    """Working memory of ``mico_qlinear_sign_lut`` (``mico_sl_linear_bytes``) for a layer it
    takes, else 0: a chunk's codes of a row (two rows when rows pair; int16), the sums of a
    block's outputs (two an output when rows pair; int32), the chunk's tables (64 bytes a group
    of four taps), whose bytes a row's requantized outputs (int32) take over after the sums."""
    if w_bits != 1 or not 2 <= in_fmt[0] <= 8 or in_features % 8:
        return 0
    cap = 32767 // _code_maxabs(in_fmt) if rows > 1 else SL_LTAPS
    kc = min(_sl_chunk(1, cap, SL_LTAPS), in_features)
    if kc == 0:
        return 0
    nx = 2 if rows > 1 else 1
    no = min(out_features, SL_O)
    return _up8(nx * kc * 2) + _up8(nx * no * 4) + _up8(max(kc // 4 * 64, no * 4))


def addsub_bytes(geom: dict[str, int], in_fmt: tuple[int, ...], w_bits: int) -> int:
    """Working memory of ``mico_qconv2d_addsub1/2`` (``mico_as_bytes``) for a layer they take,
    else 0: a chunk's patch (its taps x 16 pixels of int16) or, for tiles within an output
    row, its kernel rows' phase arrays (2 stride_w arrays of ``per`` words each), the taps'
    pointers, the tile (a block's channels x 16 int32 sums)."""
    g = geom
    if w_bits not in (1, 2) or not 1 <= in_fmt[0] <= 8:
        return 0
    k_w, sw, nph = g["k_w"], g["stride_w"], 2 * g["stride_w"]
    per = AS_PX // 2 + (k_w - 1) * g["dil_w"] // nph + 1
    rowwise = k_w > 1 and g["out_w"] % 2 == 0 and per * nph + sw <= AS_SPAN
    rows = g["in_c"] // g["groups"] * g["k_h"]
    rpc = min(32767 // _code_maxabs(in_fmt), AS_TAPS) // k_w
    if rowwise and rpc * nph * per > AS_TAPS * AS_PX // 2:
        rpc = AS_TAPS * AS_PX // 2 // (nph * per)
    if rpc == 0:
        return 0
    rpc = _ceil(rows, _ceil(rows, rpc))  # balanced over the chunks
    buf = rpc * nph * per * 4 if rowwise else rpc * k_w * AS_PX * 2
    tile = min(g["out_c"] // g["groups"], AS_OCT) * AS_PX * 4
    return _up8(buf) + _up8(rpc * k_w * POINTER_BYTES) + _up8(tile)


def lanes_bytes(geom: dict[str, int], lanes: dict[str, int], in_fmt: tuple[int, ...]) -> int:
    """Working memory of ``mico_qconv2d_lanes_*`` (``mico_lanes_rows``): that of the first of
    its paths that takes the layer (pointwise, by rows, through the patch; 0: none does)."""
    return (
        pointwise_bytes(geom, lanes, in_fmt, patched=False)
        or rows_bytes(geom, lanes, in_fmt)
        or pointwise_bytes(geom, lanes, in_fmt, patched=True)
    )


def conv_geometry(node: Node) -> dict[str, int]:
    """The MicoConv2d shape fields of a conv node."""
    _, in_c, in_h, in_w = node.inputs[0].type.shape
    _, out_c, out_h, out_w = node.output.type.shape
    k_h, k_w = node.inputs[1].type.shape[2:]
    a = node.attrs
    return {
        "in_c": in_c, "in_h": in_h, "in_w": in_w, "out_c": out_c, "out_h": out_h,
        "out_w": out_w, "k_h": k_h, "k_w": k_w, "stride_h": a["stride"][0],
        "stride_w": a["stride"][1], "pad_h": a["padding"][0], "pad_w": a["padding"][1],
        "dil_h": a["dilation"][0], "dil_w": a["dilation"][1], "groups": a["groups"],
    }  # fmt: skip


def node_scratch(node: Node, ctx: Any) -> int:
    """Bytes of arena working memory ``node``'s kernel takes as emitted in ``ctx`` (its ISA
    extensions, size gates, preference: :func:`mico.codegen.emitters.conv_choice`); 0 for a
    node whose kernel keeps only small buffers."""
    from mico.codegen.emitters import NARROW_CONV, conv_choice, fmt_of

    if node.op == mico_ops.QLINEAR:
        return linear_scratch(node, ctx)
    if node.op != mico_ops.QCONV2D:
        return 0
    choice = conv_choice(node, ctx)
    geom = conv_geometry(node)
    in_fmt = fmt_of(node.inputs[0])
    if choice["lanes"] is not None:
        return lanes_bytes(geom, choice["lanes"], in_fmt)
    if choice["kernel"] in ADDSUB_BITS:
        return addsub_bytes(geom, in_fmt, ADDSUB_BITS[choice["kernel"]])
    if choice["kernel"] == sign_lut_plan.CONV_KERNEL:
        return sign_lut_bytes(geom, in_fmt, 1)
    if choice["kernel"] == NARROW_CONV:
        weight = getattr(node.inputs[1], "data", None)
        signed = bool(in_fmt[1]) if len(in_fmt) < 3 else False
        return narrow_bytes(geom, fmt_of(node.output)[0], weight, signed)
    return 0


def linear_scratch(node: Node, ctx: Any) -> int:
    """Bytes of arena working memory a linear node's kernel takes as emitted in ``ctx``: the
    sign tables' (:func:`sign_lut_linear_bytes`), else 0."""
    from mico.codegen.emitters import fmt_of, linear_sign_lut

    if linear_sign_lut(node, ctx) is None:
        return 0
    x = node.inputs[0]
    out_features, in_features = node.inputs[1].type.shape
    rows = x.type.numel // (in_features * x.type.shape[0])
    return sign_lut_linear_bytes(rows, in_features, out_features, fmt_of(x), 1)


#: the ops whose kernels may take planned scratch
_OPS = (mico_ops.QCONV2D, mico_ops.QLINEAR)


def annotate(nodes: Iterable[Node], ctx: Any) -> dict[str, int]:
    """Record each conv or linear node's kernel working memory (:func:`node_scratch`) as its planned
    scratch (``Node.plan[SCRATCH_ATTR]``, replacing what an earlier generation recorded);
    returns the nodes that got some, with their bytes."""
    sizes: dict[str, int] = {}
    for node in nodes:
        if node.op not in _OPS:
            continue
        size = node_scratch(node, ctx)
        if size > 0:
            node.plan[SCRATCH_ATTR] = size
            sizes[node.name] = size
        else:
            node.plan.pop(SCRATCH_ATTR, None)
    return sizes


def clear(nodes: Iterable[Node]) -> None:
    """Drop the conv and linear nodes' planned scratch (a generation whose kernels take their
    stack)."""
    for node in nodes:
        if node.op in _OPS:
            node.plan.pop(SCRATCH_ATTR, None)


#: the function each kernel family calls, with its working memory on its own stack, for a
#: layer whose scratch is not planned (mico_conv2d.c, mico_conv_narrow.c)
STACK_FALLBACKS = {
    "lanes": "mico_lanes_rows_stack",
    "narrow": "mico_nw_stack",
    "sign_lut": "mico_sl_conv_stack",
    "sign_lut_linear": "mico_sl_linear_stack",
    "addsub": "mico_as_stack",
}

#: the plain kernel a family's entry calls for a layer none of its fast paths takes, as a call
#: ``caller>callee`` (``*``: every entry) that a program whose every layer of the family has a
#: non-zero size here never makes (:mod:`mico.hw.stack` leaves it out of the bound). Only the
#: lanes: :func:`lanes_bytes` is 0 exactly when none of ``mico_lanes_rows``' paths takes the
#: layer. :func:`narrow_bytes` is not: ``mico_nw_layer`` also leaves layers whose shifts are
#: 32 or less with large weights to ``mico_qconv2d_tiled_s8``, which the size here ignores.
PATH_FALLBACKS = {"lanes": "mico_qconv2d_lanes_*>mico_conv_lanes"}

PLACEMENTS = ("auto", "arena", "stack")
#: where kernel scratch goes: ``auto`` (arena or stack, whichever makes arena + stack bound the
#: least; see :func:`mico.codegen.project.place_scratch`), ``arena``, ``stack`` (tests)
PLACEMENT = "auto"


def node_family(node: Node, ctx: Any) -> str | None:
    """``lanes``, ``narrow``, ``sign_lut`` or ``addsub``: the kernel family
    (:data:`STACK_FALLBACKS`) of a conv node that takes working memory (:func:`node_scratch`);
    ``sign_lut_linear`` for a linear node on the sign tables; else None."""
    from mico.codegen.emitters import NARROW_CONV, conv_choice, linear_sign_lut

    if node.op == mico_ops.QLINEAR:
        return "sign_lut_linear" if linear_sign_lut(node, ctx) is not None else None
    if node.op != mico_ops.QCONV2D:
        return None
    choice = conv_choice(node, ctx)
    if choice["lanes"] is not None:
        return "lanes"
    kernel = choice["kernel"]
    if kernel == NARROW_CONV:
        return "narrow"
    if kernel == sign_lut_plan.CONV_KERNEL:
        return "sign_lut"
    return "addsub" if kernel in ADDSUB_BITS else None


def keep_on_stack(nodes: Iterable[Node], ctx: Any, families: Iterable[str]) -> None:
    """Drop the planned scratch of the nodes of kernel ``families``: their kernels then take
    the stack fallback (:data:`STACK_FALLBACKS`)."""
    chosen = set(families)
    if not chosen:
        return
    for node in nodes:
        if SCRATCH_ATTR in node.plan and node_family(node, ctx) in chosen:
            node.plan.pop(SCRATCH_ATTR, None)
