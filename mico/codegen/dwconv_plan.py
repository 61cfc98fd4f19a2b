"""Pixel lanes for depthwise 3x3 convolutions: the lane width, chosen at generation time.

A depthwise layer's output channel reads only its own input channel, so the channel lanes
(:func:`mico.quant.packing.lane_plan`) do not apply. ``mico_dwconv.c`` puts the lanes along a
row instead: a 32-bit word holds ``k = 32 / s`` pixels of one channel in ``s``-bit lanes, and
one multiply by a tap's weight gives ``k`` products. This module picks ``s`` (and the ``q``
lane words per chunk of the row) for a layer, or says the kernel does not take it.

Why the chosen width never overflows (the bound the kernel relies on). For channel ``c`` with
taps ``w_t`` and activation codes ``x`` in ``[x_min, x_max]`` (a range holding 0), every
window sum over any subset of the 9 taps (padding drops taps) lies in ``[lo_c, hi_c]`` with
``lo_c = sum_t min(w_t x_min, w_t x_max)`` and ``hi_c = sum_t max(w_t x_min, w_t x_max)``,
since each dropped term's range holds 0. The kernel starts every lane at ``B_c = -lo_c``, so
lane values end in ``[0, hi_c - lo_c]``. The arithmetic on a lane word is exact modulo 2^32
(products and sums of ``sum_i v_i 2^(s i)``), and a lane's final value below ``2^s`` is
therefore read back exactly as ``(acc >> (s i)) & (2^s - 1)``, whatever carries or borrows
happened on the way. So ``s`` is valid when ``max_c (hi_c - lo_c) <= 2^s - 1`` (``s = 32``:
one lane per word, always valid for int32 sums). The check uses the layer's actual weights,
which makes it exact, not a worst case over the weight format.
"""

from __future__ import annotations

import numpy as np

from mico.codegen.context import EmitContext
from mico.ir.graph import Node
from mico.quant.arithmetic import QFormat

#: lane widths the C kernel is compiled for (MICO_DWL_EACH in mico_dwconv.c)
DW_LANE_WIDTHS = (4, 6, 8, 12, 16, 32)
#: uint32 words of the kernel's ring of three input rows, int32 sums of one output row
DW_RING_WORDS = 640
DW_VALS = 320


def window_range(weight: np.ndarray, a_fmt: QFormat) -> int:
    """The widest span ``hi_c - lo_c`` of a channel's window sums (see the module docstring)."""
    w = np.asarray(weight, dtype=np.int64).reshape(len(weight), -1)
    a, b = w * int(a_fmt.qmin), w * int(a_fmt.qmax)
    return int((np.maximum(a, b).sum(axis=1) - np.minimum(a, b).sum(axis=1)).max(initial=0))


#: bytes per row and rows of the byte path's buffer (MICO_DW8_PITCH / _ROWS in mico_dwconv.c)
DW8_PITCH = 64
DW8_ROWS = 52


def _dw8_cost(n_fast: int, n_slow: int) -> int:
    """The kernel's estimate of a plane (``mico_dw8_cost``): 4-output tiles, lone outputs."""
    return n_slow * (128 * (n_fast >> 2) + 45 * (n_fast & 3) + 20)


def dw8_plan(
    a_fmt: QFormat | None,
    out_fmt: QFormat | None,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> dict[str, int] | None:
    """The byte path of a depthwise 3x3 layer with 8-bit codes in and out (``mico_dw8`` in
    ``mico_dwconv.c``), or None when the kernel would not take it (:func:`dw8_estimate`
    without its estimate)."""
    plan = dw8_estimate(a_fmt, out_fmt, in_hw, out_hw, stride, padding, dilation)
    return None if plan is None else {k: v for k, v in plan.items() if k != "cost"}


def dw8_estimate(
    a_fmt: QFormat | None,
    out_fmt: QFormat | None,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> dict[str, int] | None:
    """The byte path of a depthwise 3x3 layer with 8-bit codes in and out (``mico_dw8`` in
    ``mico_dwconv.c``), or None when the kernel would not take it.

    Mirrors the kernel's own choice: buffer rows along the input rows, or along its columns
    (transposed) when the kernel's estimate says so (:func:`_dw8_cost`); the stride along a
    buffer row (1 or 2) names the entry point; the padded plane must fit the
    buffer. ``s = q = 0``: no lanes (the entry takes the lanes' signature); ``cost``: the
    estimated rv32 instructions of a channel.
    """
    if a_fmt is None or a_fmt.binary or getattr(a_fmt, "zero", 0) or a_fmt.bits != 8:
        return None
    if out_fmt is None or out_fmt.bits != 8 or getattr(out_fmt, "zero", 0):
        return None
    if tuple(dilation) != (1, 1) or min(padding) < 0:
        return None
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    (sh, sw), (ph, pw) = (int(v) for v in stride), (int(v) for v in padding)
    big = 2**31 - 1
    best = None
    for sf in (1, 2):
        cost_n = _dw8_cost(out_w, out_h) if sw == sf else big
        cost_t = _dw8_cost(out_h, out_w) + out_h * out_w // 2 if sh == sf else big
        trans = cost_t < cost_n
        cost = cost_t if trans else cost_n
        if cost == big:
            continue
        n_fast, n_slow, ss = (out_h, out_w, sw) if trans else (out_w, out_h, sh)
        fast_in, slow_in, pf, ps = (in_h, in_w, ph, pw) if trans else (in_w, in_h, pw, ph)
        if (
            (n_fast - 1) * sf + 3 > DW8_PITCH
            or pf + fast_in > DW8_PITCH
            or (n_slow - 1) * ss + 3 > DW8_ROWS
            or ps + slow_in > DW8_ROWS
        ):
            continue
        best = {"s": 0, "q": 0, "sf": sf, "cost": cost}
    if best is not None:  # the plane's copy, the weights' decoding (fitted on rv32)
        best["cost"] += int(4.5 * in_h * in_w) + 300
    return best


#: words per row and rows of the pair path's lane buffer, bytes of its staged output plane
#: (MICO_DWP_PITCH / _ROWS / _BYTES in mico_dwconv.c)
DWP_PITCH = 36
DWP_ROWS = 18
DWP_BYTES = 1024
#: the widest lane sum the pair path's 16-bit lanes hold
DWP_LANE_MAX = 0xFFFF


def _dwp_cost(n_fast: int, n_slow: int) -> int:
    """The kernel's estimate of a plane (``mico_dwp_cost``): pairs of output lines of 8-output
    tiles and lone pairs."""
    return ((n_slow + 1) >> 1) * (100 * (n_fast >> 1) + 56 * (n_fast & 1) + 24)


def pair_span(weight: np.ndarray, a_fmt: QFormat) -> int:
    """The widest lane sum of the pair path over the layer's channels: ``(2^b - 1) * sum |w|``
    (its lanes hold the codes' unsigned fields, see ``mico_dwconv.c``)."""
    w = np.abs(np.asarray(weight, dtype=np.int64).reshape(len(weight), -1))
    return (2 ** int(a_fmt.bits) - 1) * int(w.sum(axis=1).max(initial=0))


def _code_format(fmt: QFormat | None) -> bool:
    """Codes the pair path reads and writes: 1..8 bits, signed, unsigned or asymmetric, not
    binary {-1, +1}."""
    return fmt is not None and not fmt.binary and 1 <= fmt.bits <= 8


def dwp_plan(
    weight: np.ndarray,
    a_fmt: QFormat | None,
    out_fmt: QFormat | None,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> dict[str, int] | None:
    """The pair path of a depthwise 3x3 layer (``mico_dwp`` in ``mico_dwconv.c``: two output
    lines per multiply in 16-bit lanes), or None when the kernel would not take it.

    Mirrors the kernel's choice: the orientation of fewer estimated instructions
    (:func:`_dwp_cost`) among those whose stride along a buffer row is 1 or 2, the lane buffer
    and the byte planes within their sizes, and every channel's lane sums within 16 bits
    (:func:`pair_span`, from the layer's weights: the kernel's own guard then never fires).
    ``pair = 1`` marks the plan; ``s = q = 0``: no pixel lanes.
    """
    w = np.asarray(weight)
    if not (_code_format(a_fmt) and _code_format(out_fmt)) or w.ndim != 4:
        return None
    if w.shape[1:] != (1, 3, 3) or tuple(dilation) != (1, 1) or min(padding) < 0:
        return None
    if pair_span(w, a_fmt) > DWP_LANE_MAX:
        return None
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    sh, sw = (int(v) for v in stride)
    direct = out_fmt.bits == 8 and (out_fmt.signed or not out_fmt.zero)
    if not direct and out_h * out_w + 3 > DWP_BYTES:
        return None
    big = 2**31 - 1
    best = None
    for sf in (1, 2):
        cost_n = _dwp_cost(out_w, out_h) if sw == sf else big
        cost_t = _dwp_cost(out_h, out_w) if sh == sf else big
        trans = cost_t < cost_n
        if min(cost_n, cost_t) == big:
            continue
        n_fast, n_slow, ss = (out_h, out_w, sw) if trans else (out_w, out_h, sh)
        half = (n_slow + 1) // 2
        if (n_fast - 1) * sf + 3 > DWP_PITCH or (half - 1) * ss + 3 > DWP_ROWS:
            continue
        best = {"s": 0, "q": 0, "sf": sf, "pair": 1, "cost": cost_t if trans else cost_n}
        rows = (half - 1) * ss + 3
        words = rows * (in_h if trans else in_w)  # lane words built
        # unsigned bytes read straight along the rows, four words at a time (mico_dwp_read2)
        bytes4 = not trans and not a_fmt.signed and not getattr(a_fmt, "zero", 0)
        # rows of 5 unsigned 4-bit codes: a line word a row, not the plane unpacked
        # (mico_dwp_lines5)
        lines = bytes4 and in_w == 5 and a_fmt.bits == 4
    if best is not None:  # the codes read into the lanes, the packing (fitted on rv32)
        codes = in_h * in_w * (1 + 3 / max(1, min(out_h, out_w)))
        short = in_w < 8 and in_h * in_w <= DWP_BYTES  # unpacked at once, then spread
        if a_fmt.bits == 8 and (short or not bytes4):  # bytes into the lanes, two a word
            best["cost"] += (6 if short else 13) * words + 370
        elif a_fmt.bits == 8:
            best["cost"] += int(6.5 * words) + 45 * rows + 370
        elif short and lines:
            best["cost"] += 7 * int(codes)
        else:
            best["cost"] += int(11 * codes if short else 4 * codes + 15 * (in_h + in_w))
        best["cost"] += 0 if direct else int(2.5 * out_h * out_w)
        rows_k = _rows_k_estimate(w, a_fmt, out_fmt, in_hw, out_hw, stride)
        best["cost"] = best["cost"] if rows_k is None else min(best["cost"], rows_k)
    return best


def _rows_k_estimate(
    weight: np.ndarray,
    a_fmt: QFormat,
    out_fmt: QFormat,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
) -> int | None:
    """Estimated rv32 instructions of a channel through the pair path's words of K lanes read
    straight from rows of whole bytes (``mico_dwp_readkk``: 2- and 4-bit codes, unsigned
    without a zero point or signed, stride 1, weights of at most 4 bits, every channel's sums
    within 3 lanes of 10 bits; 4 lanes of 8 bits when they fit), outputs of at most 4 bits by
    table or thresholds (fitted on rv32: 16 x 16, 32 channels, W4A4 3 lanes 6,800 to 7,000,
    W2A2 4 lanes 5,900), or None when the kernel would not take that form (so the pairs'
    estimate stands)."""
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    b = int(a_fmt.bits)
    if b not in (2, 4) or getattr(a_fmt, "zero", 0) or tuple(int(v) for v in stride) != (1, 1):
        return None
    if (in_w < 8 and in_h * in_w <= DWP_BYTES) or (in_w * b) % 8 or (in_h * in_w * b) % 8:
        return None
    if _dwp_cost(out_h, out_w) < _dwp_cost(out_w, out_h):  # the plane transposed
        return None
    w = np.asarray(weight)
    if w.size == 0 or np.abs(w).max() > 8 or out_fmt.bits > 4:
        return None
    span = pair_span(w, a_fmt)
    k = 4 if span <= 0xFF else 3 if span <= DWP_K_SPAN else 0
    if not k:
        return None
    lines = -(-out_h // k)
    words = (lines + 2) * in_w
    tiles = lines * -(-out_w // 2)
    return tiles * (140 if k == 4 else 120) + 7 * words + int(2.5 * out_h * out_w) + 400


def dwp_form(
    a_fmt: QFormat,
    out_fmt: QFormat,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
    sf: int,
    w_bits: int,
    out_range: tuple[int, int],
    lvl: np.ndarray | None = None,
    relu: bool = False,
) -> tuple[int, str]:
    """The form of a pair-path layer at stride ``sf`` along the buffer rows: its code
    (``mico_dwp``'s, which the entry point checks) and the suffix of its entry point
    (``mico_qconv2d_dwp_f<sf><suffix>``, the ``MICO_DWP_FORMS`` of ``mico_nn.h``), so that a
    program links only the plane functions its layers' forms use.

    Mirrors the kernel's choices from the layer's geometry and formats: the buffer's
    orientation (:func:`_dwp_cost`), the pairs' read (rows of whole bytes, short rows as bytes,
    or field by field), words of K lanes (short rows at stride 1 of codes and weights of at most
    4 bits, or rows of whole bytes of 2- and 4-bit unsigned codes), of 5 lanes (planes of at
    most 5 columns), the outputs (by thresholds for at most 4 codes; by table where the
    generator gave ``lvl``, stored packed for 4-bit codes of even rows), rows of 5 outputs.
    ``w_bits``: the stored weight width (``MicoConv2d.w_bits``); ``out_range``: the outputs'
    ``lo, hi`` (``MicoOut``); ``lvl``: :func:`dwp_levels`; ``relu``: the layer's (signed
    codes out without a ReLU, ``lo < 0``, go by table from 3 codes up; 3 or 4 codes from 0 by
    table in words of K lanes at stride 1, by thresholds elsewhere). A form whose every
    channel has its table (every channel then takes words of K lanes, :func:`dwp_levels`)
    leaves out the requantizing plane functions, the words of K lanes' and the pairs' (``_x``)."""
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    sh, sw = (int(v) for v in stride)
    lo, hi = (int(v) for v in out_range)
    lo = max(lo, 0) if relu else lo  # (the table's codes after a ReLU: from 0)
    big = 2**31 - 1
    cost_n = _dwp_cost(out_w, out_h) if sw == sf else big
    cost_t = _dwp_cost(out_h, out_w) if sh == sf else big
    trans = cost_t < cost_n
    n_fast, ss = (out_h, sw) if trans else (out_w, sh)
    b, signed = int(a_fmt.bits), bool(a_fmt.signed)
    in_plane = in_h * in_w
    short = in_w < 8 and in_plane <= DWP_BYTES
    rows2 = not short and not trans and b in (1, 2, 4, 8) and (in_w * b) % 8 == 0
    rows2 = rows2 and (in_plane * b) % 8 == 0
    upad = 2 ** (b - 1) if signed else int(getattr(a_fmt, "zero", 0))
    n = hi - lo
    table = lvl is not None and n <= 15 and (n >= 4 if lo >= 0 else not relu and n >= 2)
    small = lvl is not None and lo >= 0 and 2 <= n <= 3  # (words of K lanes at stride 1 only)
    levels = 0 <= hi <= 3 and not table
    multi = short and sf == 1 and ss == 1 and (upad == 0 or signed) and w_bits <= 4 and b <= 4
    packed = not multi and rows2 and ss == sf and (upad == 0 or signed) and b in (2, 4)
    packed = packed and (sf == 1 or table or levels) and (w_bits <= 4 or (sf == 2 and levels))
    multi = multi or packed
    table = table or (small and multi and sf == 1)
    levels = levels and not table
    nib = packed and table and out_fmt.bits == 4
    nib = nib and (out_fmt.signed or not getattr(out_fmt, "zero", 0)) and not trans
    nib = nib and out_w % 2 == 0
    k5 = multi and sh == sw == 1 and in_w <= 5 and out_w <= 5 and out_h + 2 <= DWP_PITCH
    k5 = k5 and b < 8 and not signed
    r5 = sf == 1 and ss == 1 and n_fast == 5
    out = 1 if levels else 0 if not (multi and table) else 3 if nib else 2
    rd = 2 if rows2 else 1 if short else 0
    code = rd | int(multi) << 2 | int(k5) << 3 | out << 4 | int(r5) << 6
    suffix = "_" + "gsr"[rd] + ("_k5" if k5 else "_k" if multi else "") + "_" + "qtln"[out]
    suffix += "_r5" if r5 else ""
    if multi and sf == 1 and out >= 2:  # (a channel without its table: requantized)
        t1 = np.asarray(lvl).reshape(-1, hi - lo + 1)[:, :2]
        suffix += "" if ((t1[:, 0] == 0xFF) & (t1[:, 1] == 0xFF)).any() else "_x"
    return code, suffix


#: pixels of a plane and of a row the bit-sliced path takes (MICO_DWB_WORDS * 32 in
#: mico_dwconv.c; rows of at most 64 codes, not a multiple of 32)
DWB_PIXELS = 1024
DWB_ROW = 64


def dwb_plan(
    weight: np.ndarray,
    a_fmt: QFormat | None,
    out_fmt: QFormat | None,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> dict[str, int] | None:
    """The bit-sliced path of a depthwise 3x3 layer (``mico_qconv2d_dwbs``: 2-bit unsigned
    codes in, weights in {-1, 0, 1}, 1- or 2-bit unsigned codes out, stride 1 or 2, padding 1), or
    None when the kernel would not take it (mirrors ``mico_dwb_shape`` and its weight check;
    a bias within 32 of the int32 limits sends the kernel to mico_qconv2d_depthwise3x3).
    ``sliced = 1`` marks the plan, ``stride`` names its entry point; ``s = q = 0``: no pixel
    lanes."""
    w = np.asarray(weight)
    if a_fmt is None or out_fmt is None or w.ndim != 4 or w.shape[1:] != (1, 3, 3):
        return None
    if a_fmt.bits != 2 or a_fmt.signed or a_fmt.binary or getattr(a_fmt, "zero", 0):
        return None
    if out_fmt.bits not in (1, 2) or out_fmt.signed or getattr(out_fmt, "zero", 0):
        return None
    if w.size == 0 or np.abs(w).max() > 1:
        return None
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    st = tuple(int(v) for v in stride)
    if tuple(int(v) for v in padding) != (1, 1) or tuple(dilation) != (1, 1):
        return None
    if in_h < 1 or in_w < 1:
        return None
    if st == (1, 1):
        ok = (in_h, in_w) == (out_h, out_w) and in_w <= DWB_ROW and in_w % 32
        ok = ok and in_h * in_w <= DWB_PIXELS
    elif st == (2, 2):  # rows of at most 62 codes (31 outputs)
        ok = (out_h, out_w) == ((in_h - 1) // 2 + 1, (in_w - 1) // 2 + 1) and in_w <= 62
        ok = ok and out_h * out_w <= DWB_PIXELS
    else:
        ok = False
    return {"s": 0, "q": 0, "sliced": 1, "stride": st[0]} if ok else None


def _dwb_estimate(in_hw: tuple[int, int]) -> int:
    """Estimated rv32 instructions of a channel through the bit-sliced path at stride 1
    (fitted on benchmarks/kernels_rv32.py: 16 x 16, 25 x 5)."""
    return 17 * in_hw[0] * in_hw[1] + 300


def _pair_lanes_estimate(
    weight: np.ndarray,
    a_fmt: QFormat,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
) -> float | None:
    """Estimated rv32 instructions of a channel of 2-bit unsigned codes with outputs of at
    most 4 codes through the pair path's words of K lanes read from the packed rows
    (``mico_dwp_k``: 4 lanes of 8 bits or 3 of 10 as the sums' span allows, outputs by
    thresholds, staged and packed; fitted on benchmarks/kernels_rv32.py), or None when the
    kernel would not take that form (rows not on whole bytes, buffer rows along the columns,
    unequal strides, sums too wide for the thresholds of 3 lanes)."""
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    sh, sw = (int(v) for v in stride)
    if a_fmt.bits != 2 or a_fmt.signed or getattr(a_fmt, "zero", 0) or sh != sw:
        return None
    if (in_w * 2) % 8 or (in_h * in_w * 2) % 8 or in_w < 8:
        return None
    if _dwp_cost(out_h, out_w) < _dwp_cost(out_w, out_h):  # the plane transposed
        return None
    span = pair_span(weight, a_fmt)
    k = 4 if span < 0x80 else 3 if span < 0x200 else 0
    if not k:
        return None
    lines = -(-out_h // k)
    words = ((lines - 1) * sh + 3) * in_w
    tiles = lines * -(-out_w // 2)
    return tiles * (140 if k == 4 else 120) + 7 * words + 2.5 * out_h * out_w + 400


def dwb_thresholds(weight: np.ndarray, bias: np.ndarray, spec, relu: bool) -> np.ndarray:
    """The bit-sliced path's thresholds, 3 per channel (``MicoDwLanes.thr``): with ``U`` the
    kernel's count (0..27) of a window, ``acc = bias - 3 n + U`` (``n`` the channel's weights
    -1 and 0), t_L is the smallest ``U`` whose stored code is at least ``L`` (28: none), found
    with the reference arithmetic itself (:func:`mico.ir.ops.mico_ops.finish` over every
    ``U``), so the kernel's codes are the reference's by construction (the requantization is
    monotonic in the sum)."""
    from mico.ir.ops.mico_ops import finish

    w = np.asarray(weight, dtype=np.int64).reshape(len(weight), -1)
    n = ((w == -1) | (w == 0)).sum(axis=1)
    acc = (np.asarray(bias, dtype=np.int64).ravel() - 3 * n)[:, None] + np.arange(28)[None, :]
    codes = np.asarray(finish(acc, spec, relu, axis=0).numpy())
    out = np.empty((len(w), 3), dtype=np.int64)
    for level in (1, 2, 3):
        reached = codes >= level
        out[:, level - 1] = np.where(reached.any(axis=1), reached.argmax(axis=1), 28)
    return out.ravel()


#: bytes of the pair path's table of output codes (MICO_DWP_LUT): lane spans below it
DWP_LUT = 1088
#: the largest lane span the kernel's words of K lanes take (3 lanes of 10 bits), the only
#: readers of a channel's table: a channel of a wider span takes the pairs, which requantize
DWP_K_SPAN = 0x3FF


def dwp_levels(
    weight: np.ndarray,
    bias: np.ndarray,
    spec,
    relu: bool,
    a_fmt: QFormat,
    negative: bool = False,
) -> np.ndarray | None:
    """The pair path's tables of output codes (``MicoDwLanes.lvl``), or None when its outputs
    have fewer than 3 or more than 16 codes (``hi - lo`` levels of the clamp; after a ReLU
    from ``lo = max(lo, 0)``, no code below 0 being stored; signed outputs without a ReLU,
    ``lo < 0``: ``mico_dwp_lut`` stores their two's-complement fields). Tables of 3 or 4
    codes from 0 only words of K lanes at stride 1 read (:func:`dwp_form`; the others count
    thresholds, and the generator leaves such a table out).

    The kernel's lane value of a window is ``v = acc - bb`` in ``[0, span]`` with ``acc`` the
    reference's accumulator, ``bb = bias - u_pad sum(w) + umax neg`` and ``span = umax (pos -
    neg)`` (``neg`` / ``pos``: the sums of the channel's negative / positive weights, ``umax
    = 2^b - 1``, ``u_pad`` the field of the code 0: ``2^(b-1)`` for signed codes, else the
    zero point). Per channel, ``n + 1`` bytes: ``t_1`` (two bytes, little-endian), then
    ``t_L - t_(L-1)`` for ``L = 2..n``, ``t_L`` the smallest ``v`` whose stored code is at
    least ``lo + L`` (``span + 1``: none), found with the reference arithmetic itself
    (:func:`mico.ir.ops.mico_ops.finish` over every ``v``), so the kernel's table holds the
    reference's codes by construction. A channel whose span does not fit the kernel's words
    of K lanes (:data:`DWP_K_SPAN`, below the table's :data:`DWP_LUT`: they alone read it) or
    whose steps do not fit a byte gets ``t_1 = 0xffff``: the kernel requantizes it as before
    (so a layer whose every channel has its table takes only words of K lanes: its form, the
    ``_x`` of :func:`dwp_form`, links no requantizing plane function). None too for codes of
    more than 4 bits (only the kernel's words of K lanes read the table) and when no channel's
    table fits. ``negative``: the table of ``mico_qconv2d_dw4s`` (which holds ``code + 8``;
    the thresholds do not depend on the codes' bytes), from 5 codes as before.
    """
    from mico.ir.ops.mico_ops import code_range, finish

    fmt = spec.get("qformat") if spec else None
    if fmt is None or spec.get("m") is None:
        return None
    lo, hi = spec.get("clamp") or code_range(fmt)
    if relu:
        lo = max(int(lo), 0)
    n = int(hi) - int(lo)
    # (the pair path's table: code bytes; signed codes without a ReLU, lo < 0: their fields,
    # from 3 codes up, as mico_dwp in mico_dwconv.c takes them)
    if not (4 if negative else 2) <= n <= 15:
        return None
    if a_fmt.bits > 4:  # (only the words of K lanes, of codes of at most 4 bits, read it)
        return None
    w = np.asarray(weight, dtype=np.int64).reshape(len(weight), -1)
    b = int(a_fmt.bits)
    umax = 2**b - 1
    upad = 2 ** (b - 1) if a_fmt.signed else int(getattr(a_fmt, "zero", 0))
    neg = np.where(w < 0, w, 0).sum(axis=1)
    pos = np.where(w > 0, w, 0).sum(axis=1)
    bb = np.asarray(bias, dtype=np.int64).ravel() - upad * w.sum(axis=1) + umax * neg
    span = umax * (pos - neg)
    v = np.arange(DWP_LUT)
    codes = np.asarray(finish(bb[:, None] + v[None, :], spec, relu, axis=0).numpy())
    out = np.zeros((len(w), n + 1), dtype=np.int64)
    for c in range(len(w)):
        reach = codes[c, : span[c] + 1] if span[c] <= DWP_K_SPAN else None
        if reach is None:
            out[c, :2] = 0xFF
            continue
        t = [int(np.argmax(reach >= lo + lvl)) if (reach >= lo + lvl).any() else int(span[c]) + 1
             for lvl in range(1, n + 1)]  # fmt: skip
        steps = np.diff(t)
        if (steps > 255).any():
            out[c, :2] = 0xFF
            continue
        out[c, 0], out[c, 1] = t[0] & 0xFF, t[0] >> 8
        out[c, 2:] = steps
    if (out[:, 0] == 0xFF).all() and (out[:, 1] == 0xFF).all():
        return None  # no channel's table fits: no flash for it
    return out.ravel()


#: the widest lane sum of ``mico_qconv2d_dw4`` (3 lanes of 10 bits)
DW4_SPAN = 0x3FF


def dw4_plan(
    weight: np.ndarray,
    a_fmt: QFormat | None,
    out_fmt: QFormat | None,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
) -> dict[str, int] | None:
    """The rows-of-5 path of a depthwise 3x3 layer (``mico_qconv2d_dw4``: planes of 5 columns,
    unsigned 4-bit codes in and out without a zero point, stride 1, padding 1; ``_dw4s``:
    signed codes in and out), or None when the kernel would not take it (mirrors
    ``mico_dw4_shape``) or a channel's window sums span more than its 10-bit lanes (``15 sum
    |w|`` above :data:`DW4_SPAN`: the kernel would compute that channel one output at a time).
    Where it applies it is below every other path on rv32 (DS-CNN's 25 x 5: W4A4 3.94 -> 2.45
    instructions a MAC against the pair path's words of 5 lanes; below the pair path on every
    plane of 5 columns measured, 1 to 100 rows, docs/codegen.md). ``dw4 = 1`` marks the plan,
    ``signed = 1`` the signed codes' entry point; ``s = q = 0``: no pixel lanes."""
    w = np.asarray(weight, dtype=np.int64)
    if a_fmt is None or out_fmt is None or w.ndim != 4 or w.shape[1:] != (1, 3, 3):
        return None
    for fmt in (a_fmt, out_fmt):
        if fmt.bits != 4 or fmt.binary or getattr(fmt, "zero", 0) or fmt.signed != a_fmt.signed:
            return None
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    geometry = (tuple(int(v) for v in stride), tuple(int(v) for v in padding), tuple(dilation))
    if geometry != ((1, 1), (1, 1), (1, 1)) or in_w != 5 or (in_h, in_w) != (out_h, out_w):
        return None
    if in_h < 1 or w.size == 0 or 15 * pair_span(w, QFormat(1, False)) > DW4_SPAN:
        return None
    return {"s": 0, "q": 0, "dw4": 1, "signed": int(bool(a_fmt.signed))}


def dw_lane_plan(
    weight: np.ndarray,
    a_fmt: QFormat | None,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    out_fmt: QFormat | None = None,
) -> dict[str, int] | None:
    """The ``MicoDwLanes`` (``s``, ``q``) of a depthwise 3x3 layer, or None.

    ``weight``: the layer's weight codes ``(C, 1, 3, 3)``. The kernel takes activations of
    1..8 bits, signed or not (not binary {-1, +1}, not asymmetric), unit dilation, stride_w 1
    or 2, pad_w 0 or 1, rows whose lane words fit its ring. Of the widths that fit the bound,
    the one of fewest estimated instructions wins (more lanes per multiply, but whole chunks
    of ``k * q`` pixels are computed: a row that fills few of them wastes lanes); ``s = 32``
    (one pixel per word, the W8A8 case) is the plain form of the same kernel. None too when
    the estimate is above the plain kernel's (mico_qconv2d_depthwise3x3).
    """
    rows5 = dw4_plan(weight, a_fmt, out_fmt, in_hw, out_hw, stride, padding, dilation)
    if rows5 is not None:
        return rows5
    sliced = dwb_plan(weight, a_fmt, out_fmt, in_hw, out_hw, stride, padding, dilation)
    pair = dwp_plan(weight, a_fmt, out_fmt, in_hw, out_hw, stride, padding, dilation)
    if sliced is not None:  # counted bit-sliced: cheaper than any lanes, unless words of K
        # lanes of the pair path beat it at stride 1 (at stride 2, rows split by a byte table,
        # it was below the pair path on each of 29 planes measured on rv32, 1 x 1 to 64 x 32,
        # 32 channels: 32 x 32 2.64 against 3.28 instructions a MAC)
        if sliced["stride"] == 2:
            return sliced
        lanes_k = _pair_lanes_estimate(weight, a_fmt, in_hw, out_hw, stride, padding)
        if pair is None or lanes_k is None or _dwb_estimate(in_hw) <= lanes_k:
            return sliced
        return {k: v for k, v in pair.items() if k != "cost"}
    lanes = _lane_plan(weight, a_fmt, in_hw, out_hw, stride, padding, dilation, out_fmt)
    if pair is not None and (lanes is None or pair["cost"] <= lanes[0]):
        return {k: v for k, v in pair.items() if k != "cost"}
    return None if lanes is None else lanes[1]


def _lane_plan(
    weight: np.ndarray,
    a_fmt: QFormat | None,
    in_hw: tuple[int, int],
    out_hw: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int],
    out_fmt: QFormat | None,
) -> tuple[float, dict[str, int]] | None:
    """The byte path or the pixel lanes of :func:`dw_lane_plan` with their estimated rv32
    instructions per channel (the byte path, which takes only 8-bit codes in and out, against
    the pair path alone: 8-bit codes with narrower weights whose sums fit its lanes)."""
    if a_fmt is None or a_fmt.binary or getattr(a_fmt, "zero", 0) or not 1 <= a_fmt.bits <= 8:
        return None
    if getattr(out_fmt, "zero", 0):
        return None
    byte = dw8_estimate(a_fmt, out_fmt, in_hw, out_hw, stride, padding, dilation)
    if byte is not None and np.asarray(weight).shape[1:] == (1, 3, 3):
        return float(byte.pop("cost")), byte
    w = np.asarray(weight)
    if w.ndim != 4 or w.shape[1:] != (1, 3, 3) or tuple(dilation) != (1, 1):
        return None
    (in_h, in_w), (out_h, out_w) = in_hw, out_hw
    sw, pw = int(stride[1]), int(padding[1])
    if sw not in (1, 2) or pw not in (0, 1) or int(stride[0]) < 1:
        return None
    b, span = a_fmt.bits, window_range(w, a_fmt)
    # outputs of at most 4 codes requantize by thresholds, all lanes at once, when the lanes
    # keep a spare top bit (mico_dwl_levels)
    few = out_fmt is not None and out_fmt.qmax - out_fmt.qmin <= 3
    out8 = out_fmt is None or out_fmt.bits == 8
    rows_per_out = max(1, -(-in_h // max(out_h, 1)))
    # estimated rv32 instructions per output row (fitted to benchmarks/kernels_rv32.py): the
    # plain kernel (mico_qconv2d_depthwise3x3) is the bar the lanes must beat
    plain = out_w * (75 if b >= 4 else 110) * (1.4 if sw == 2 else 1.0)
    best: tuple[float, dict[str, int]] | None = None
    for s in DW_LANE_WIDTHS:
        k = 32 // s
        if k > 1:
            if s % b or span > 2**s - 1 or s // b < 2 or (s // b) % sw:
                continue
            q = s // b
            nch = -(-out_w // (k * q // sw))
            nrow = max(nch, -(-in_w // (k * q)))
            if nrow * (q + 3) * 3 > DW_RING_WORDS or nch * k * (q // sw) > DW_VALS:
                continue
            build = nrow * (50 + 12 * q)
        else:  # one pixel per word, the whole row one chunk (the kernel sizes it)
            q = -(-in_w // sw) * sw
            nch = 1
            if (q + 3) * 3 > DW_RING_WORDS or q // sw > DW_VALS:
                continue
            build = (5 if b == 8 else 14) * in_w + 20
        # output words (9 taps, then a requantization per lane, or thresholds for all lanes)
        # and the input rows built for the output row (each once per channel)
        if few and k > 1 and span < 2 ** (s - 1):
            per_word = 70 + 3 * k
        else:  # one pixel per word: 8-bit outputs are stored straight, others packed after
            per_word = 18 + 29 * k if k > 1 or out8 else 55
        # (several lanes: a chunk also costs its loop, neighbour words and partial store)
        cost = nch * ((q // sw) * per_word + (90 if k > 1 else 0)) + build * rows_per_out
        if cost < plain and (best is None or cost < best[0]):
            best = (cost, {"s": s, "q": q})
    if best is None:
        return None
    # per output row -> per channel, in the pair path's units (fitted on rv32: dscnn and
    # 16x16 layers, W4A4 and W2A2)
    return best[0] * out_h * 1.0, best[1]


def dw_kernel(plan: dict[str, int], form: str = "") -> str:
    """The entry point of a pixel-lanes layer (or of the byte path: ``sf`` set; of the pair
    path: ``pair`` set too, ``form`` the suffix of its form, :func:`dwp_form`, or none: the
    entry point of any form; of the bit-sliced path: ``sliced`` set, the entry point of its
    ``stride``, or of either)."""
    if plan.get("dw4"):
        return "mico_qconv2d_dw4s" if plan.get("signed") else "mico_qconv2d_dw4"
    if plan.get("sliced"):
        return f"mico_qconv2d_dwbs_s{plan['stride']}" if plan.get("stride") else "mico_qconv2d_dwbs"
    if plan.get("pair"):
        return f"mico_qconv2d_dwp_f{plan['sf']}{form}"
    if plan.get("sf"):
        return f"mico_qconv2d_dw8_f{plan['sf']}"
    return f"mico_qconv2d_dwl_s{plan['s']}"


def node_plan(node: Node) -> dict[str, int] | None:
    """The pixel lanes (or byte or pair path) of a ``mico.qconv2d`` node, or None when it is
    not a depthwise 3x3 layer these kernels take (asymmetric codes: the pair path only)."""
    x, weight, out = node.inputs[0], node.inputs[1], node.output
    a = node.attrs
    if weight.data is None or x.qformat is None or x.type.rank != 4:
        return None
    _, in_c, in_h, in_w = x.type.shape
    _, out_c, out_h, out_w = out.type.shape
    if not a["groups"] == in_c == out_c:
        return None
    return dw_lane_plan(
        np.asarray(weight.data), x.qformat, (in_h, in_w), (out_h, out_w),
        a["stride"], a["padding"], a["dilation"], out.qformat,
    )  # fmt: skip


def emit_call(
    ctx: EmitContext, node: Node, params: str, plan: dict[str, int], w_bits: int
) -> list[str]:
    """The call of a pixel-lanes layer (``params``: its ``MicoConv2d``, plainly packed weights
    of ``w_bits`` bits; the pair path's entry point of the layer's form)."""
    fields = f".s = {plan['s']}, .q = {plan['q']}"
    form = ""
    if plan.get("sliced"):  # the thresholds of the bit-sliced path, from the generator
        a = node.attrs
        thr = dwb_thresholds(
            node.inputs[1].data, node.inputs[2].data, a.get("requant"), a.get("relu", False)
        )
        fields += f", .thr = {ctx.const_bytes(f'{node.name}_dwb_thr', thr, kind='scales')}"
    if plan.get("dw4"):  # its table's levels, as the pair path's (dwp_levels)
        a = node.attrs
        lvl = dwp_levels(
            node.inputs[1].data, node.inputs[2].data, a.get("requant"), a.get("relu", False),
            node.inputs[0].qformat, negative=True,
        )  # fmt: skip
        if lvl is not None:
            fields += f", .lvl = {ctx.const_bytes(f'{node.name}_dwp_lvl', lvl, kind='scales')}"
    if plan.get("pair"):  # outputs of 5..16 codes by table (dwp_levels)
        from mico.ir.ops.mico_ops import code_range

        a = node.attrs
        lvl = dwp_levels(
            node.inputs[1].data, node.inputs[2].data, a.get("requant"), a.get("relu", False),
            node.inputs[0].qformat,
        )  # fmt: skip
        x, out, spec = node.inputs[0], node.output, a.get("requant") or {}
        code, form = dwp_form(
            x.qformat, out.qformat, tuple(x.type.shape[2:]), tuple(out.type.shape[2:]),
            a["stride"], plan["sf"], w_bits, spec.get("clamp") or code_range(out.qformat), lvl,
            bool(a.get("relu", False)),
        )  # fmt: skip
        if lvl is not None and (code >> 4 & 3) < 2 and lvl.size <= 4 * len(node.inputs[1].data):
            lvl = None  # (a table of 3 or 4 codes only words of K lanes at stride 1 read)
        if lvl is not None:
            fields += f", .lvl = {ctx.const_bytes(f'{node.name}_dwp_lvl', lvl, kind='scales')}"
    sym = ctx.const_struct("MicoDwLanes", f"{node.name}_dwl", fields)
    ctx.need("mico_dwconv.c")
    ctx.need("mico_conv2d.c")  # the fallback of shapes the ring cannot hold
    x, out = ctx.buffer(node.inputs[0]), ctx.buffer(node.output)
    return [f"{dw_kernel(plan, form)}(&{params}, &{sym}, {x}, {out});"]
