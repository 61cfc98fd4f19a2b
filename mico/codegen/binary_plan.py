"""When a conv / linear layer takes the popcount kernels (``mico_binary.c``), and their tables.

Binary weights {-1, +1} times 1-bit activations (unsigned {0, 1}, or binary {-1, +1}) are
sums of AND / XOR popcounts. The kernels are exact for every such layer with one group and
unit column dilation; which popcount they use is a property of the target's ISA: a core with
Zbb (``extensions: [.., zbb]`` in its target file) counts a word with one ``cpop``, any other
with a SWAR count in plain C. The choice is made here, at generation time, from the
extensions.

Depthwise 3x3 layers (stride 1, or 2 on even widths; padding 1) take the
same entry points: there ``mico_binary.c`` counts the nine taps of 32 pixels at once by
carry-save adders over shifted copies of the channel's plane (no popcount), see
:func:`depthwise_sliced`.

A layer whose output is 1-bit codes needs no requantization at run time: the stored bit is a
monotone function of the integer sum, so it is 1 exactly from a threshold on. The thresholds
are found with the reference arithmetic itself (:func:`mico.ir.ops.mico_ops.finish` over every
sum the layer can produce), so the kernel is bit-exact by construction.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from mico.ir.ops.mico_ops import finish
from mico.quant.arithmetic import QFormat

#: popcount flavours: ISA extension -> kernel suffix (the first one the target has wins)
POPCOUNT_PATHS = (("zbb", "cpop"),)
PORTABLE_PATH = "swar"
#: at most this many weight-row words (half the patch buffer of mico_binary.c: binary
#: activations with padding keep a validity mask beside each patch)
MAX_WORDS = 288
#: layers of fewer MACs keep the other kernels: the popcount path adds about 7 KB of code to a
#: program (the lanes' rule, emitters.LANES_MIN_MACS, for the same reason)
MIN_MACS = 32768
#: ... and linear layers from this many: their popcount kernel is about 1.5 KB of rv32 code
#: (as emitters.LINEAR_S8_MIN_MACS for the W8A8 byte path); a 256 -> 64 layer (16,384 MACs)
#: ran 7.11 rv32 instructions per MAC on the plain kernel, above W8A8's 3.69
LINEAR_MIN_MACS = 8192


#: the bit-sliced depthwise path's limits (mico_binary.c: MICO_BDW_WORDS words of a plane,
#: rows of at most 64 pixels, so that the rows above and below fit its copies' margins)
DW_MAX_PIXELS = 1024
DW_MAX_WIDTH = 64


def depthwise_sliced(
    groups: int,
    in_c: int,
    out_c: int,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    in_hw: Sequence[int],
) -> bool:
    """Whether a depthwise layer's shape is one mico_binary.c's bit-sliced path takes (its
    ``mico_bdw_takes``): 3x3, stride 1 (or 2 on rows of an even width), no dilation, padding
    1, rows of at most :data:`DW_MAX_WIDTH` and planes of at most :data:`DW_MAX_PIXELS`
    pixels."""
    h, w = int(in_hw[0]), int(in_hw[1])
    return (
        groups == in_c == out_c
        and tuple(kernel) == (3, 3)
        and (tuple(stride) == (1, 1) or (tuple(stride) == (2, 2) and w % 2 == 0))
        and tuple(dilation) == (1, 1)
        and tuple(padding) == (1, 1)
        and w <= DW_MAX_WIDTH
        and h * w <= DW_MAX_PIXELS
    )


def node_depthwise_sliced(node: Any) -> bool:
    """:func:`depthwise_sliced` of a conv node (its input, weight and attributes)."""
    _, in_c, in_h, in_w = node.inputs[0].type.shape
    out_c = node.output.type.shape[1]
    a = node.attrs
    kernel = node.inputs[1].type.shape[2:]
    return depthwise_sliced(
        a["groups"], in_c, out_c, kernel, a["stride"], a["padding"], a["dilation"], (in_h, in_w)
    )


def popcount_path(extensions: Iterable[str] = ()) -> str:
    """The popcount a target's ISA extensions allow: ``cpop`` (Zbb) or ``swar`` (plain C)."""
    have = {str(e).strip().lower() for e in extensions}
    for ext, path in POPCOUNT_PATHS:
        if ext in have:
            return path
    return PORTABLE_PATH


def binary_kernel(layer: str, extensions: Iterable[str] = ()) -> str:
    """The entry point of a binary layer: ``mico_qconv2d_bin_cpop``, ``..._swar``, ..."""
    return f"{layer}_bin_{popcount_path(extensions)}"


def takes_binary(
    w_fmt: QFormat | None,
    a_fmt: QFormat | None,
    taps: int,
    groups: int = 1,
    dil_w: int = 1,
    k_w: int = 1,
    macs: int | None = None,
    depthwise: bool = False,
    min_macs: int | None = None,
) -> bool:
    """Whether a layer of these formats and shape takes the popcount kernels.

    Binary weights, 1-bit activations (not asymmetric: 1-bit codes never are), one group, unit
    column dilation, kernel rows of at most 32 taps, rows of at most :data:`MAX_WORDS` words
    and, when ``macs`` is given, at least ``min_macs`` of them (:data:`MIN_MACS`; linear
    layers :data:`LINEAR_MIN_MACS`). ``depthwise``: the layer
    is a depthwise one of a shape :func:`depthwise_sliced` accepts (then any group count).
    """
    if w_fmt is None or a_fmt is None or not w_fmt.binary:
        return False
    if macs is not None and macs < (MIN_MACS if min_macs is None else min_macs):
        return False
    if depthwise:
        return a_fmt.bits == 1 and not a_fmt.zero
    if a_fmt.bits != 1 or a_fmt.zero or groups != 1 or dil_w != 1 or k_w > 32:
        return False
    return 0 < (taps + 31) // 32 <= MAX_WORDS


def thresholds(
    bias: np.ndarray,
    spec: dict[str, Any] | None,
    relu: bool,
    taps: int,
) -> np.ndarray | None:
    """Per output channel, the smallest sum ``s`` (bias excluded) stored as bit 1, or None.

    Only for 1-bit outputs (unsigned {0, 1} or binary {-1, +1}) that are requantized; the sum
    of ``taps`` products of magnitude at most 1 lies in [-taps, taps], so a threshold lies in
    [-taps, taps + 1] (taps + 1: never 1). None when the output is wider, or when some
    channel's stored bit were not monotone in the sum (it always is: ReLU, rounding half away
    from zero with a non-negative multiplier and clamping all are).
    """
    fmt: QFormat | None = None if spec is None else spec.get("qformat")
    if fmt is None or fmt.bits != 1 or spec is None or spec.get("m") is None:
        return None
    b = np.asarray(bias, dtype=np.int64).ravel()
    s = np.arange(-taps, taps + 1, dtype=np.int64)
    acc = b[:, None] + s[None, :]
    m = np.atleast_1d(spec["m"])
    if m.size not in (1, b.size):
        return None
    codes = finish(acc, spec, relu, axis=0).numpy()
    bits = (codes > 0) if fmt.binary else (codes == 1)
    if np.any(bits[:, 1:] < bits[:, :-1]):  # not monotone: keep the general path
        return None
    first = np.where(bits.any(axis=1), bits.argmax(axis=1), s.size)
    return (first - taps).astype(np.int64)
