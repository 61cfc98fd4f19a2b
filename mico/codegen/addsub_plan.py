"""Which convolutions take the sign-weight path (``mico_conv_addsub.c``).

A weight of -1, 0 or +1 (ternary, stored as 2-bit codes) or of -1 / +1 (binary 1-bit codes)
times an activation code is the code, its negation or nothing. ``mico_qconv2d_addsub2`` /
``_addsub1`` compute such a layer as sums of activation codes, two output pixels per 32-bit
addition (16-bit lanes), zero weights skipped, with no multiplication. On rv32imac
(``benchmarks/kernels_rv32.py``) it beats the channel lanes where they multiply 8-bit codes
by few weights a word: a 3x3 conv of 32 -> 32 channels on 16x16 runs ternary/8 at 1.68
instructions per MAC against 2.45 on the lanes (16 -> 16: 2.14 against 2.57), binary weights
on 8-bit codes at 1.98 against 7.70 on the plain kernels. What it spends outside the additions
(building the tap words, flushing the lanes, requantizing: about 1.2 per MAC on 16 channels)
is shared by the channels of a block, so a layer needs enough taps (:data:`MIN_TAPS`) where
the lanes also take it; narrower codes keep the lanes, which pack more products a multiply.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mico.quant.arithmetic import QFormat

#: activation widths the path takes: wide codes, where the lanes hold few products a word
MIN_IN_BITS = 5
MAX_IN_BITS = 8
#: taps (in_c x k_h x k_w) from which the path beats the channel lanes (a 3x3 conv from 8
#: input channels); a layer without lanes takes it from any number of taps
MIN_TAPS = 72
#: the least share of a tile's 16 pixel lanes a layer's tiles fill on average: a 1-D layer of
#: 20 outputs (tiles of 16 and 4) runs 3.65 instructions per MAC on the path against the lanes'
#: 2.94 (mnist1d_cnn's mixed plan), one of 25 (16 and 9) 2.79 against 3.59 (kws_conv1d's)
MIN_FILL = 0.75
TILE = 16
#: taps of a chunk (MICO_AS_TAPS): the kernel takes a layer whose kernel row is longer element
#: by element (mico_qconv2d_elementwise: m5's first layer, a 1-D kernel of 80 taps at stride
#: 16, ran 196 instructions per MAC there against 3.1 on the lanes), so the path refuses it
MAX_K_W = 64
#: the entry points, by weight width
KERNELS = {2: "mico_qconv2d_addsub2", 1: "mico_qconv2d_addsub1"}
SOURCE = "mico_conv_addsub.c"


def tile_fill(out_size: tuple[int, int], k_w: int) -> float:
    """The share of the tiles' pixel lanes a layer's outputs fill: tiles of :data:`TILE`
    pixels within an output row (an even width and k_w > 1: the words come from input rows),
    else across rows in raster order (``mico_as_layer``)."""
    out_h, out_w = out_size
    rowwise = k_w > 1 and out_w % 2 == 0
    n = out_w if rowwise else out_h * out_w
    return n / (-(-n // TILE) * TILE)


def addsub_kernel(
    w_fmt: QFormat | None,
    in_bits: int,
    taps: int,
    groups: int,
    has_lanes: bool,
    weight: Any = None,
    out_size: tuple[int, int] | None = None,
    k_w: int = 1,
) -> str | None:
    """The sign-weight entry point for a plain (not depthwise, not popcount) convolution, or
    None: signed weights of 2 bits (codes in {-1, 0, +1}: ``weight``, when given, holds no -2)
    or 1 bit, one group, activation codes of :data:`MIN_IN_BITS` to :data:`MAX_IN_BITS` bits,
    and :data:`MIN_TAPS` taps or more unless the layer has no channel lanes (``has_lanes``),
    kernel rows of at most :data:`MAX_K_W` taps;
    given the output plane ``out_size`` and kernel width ``k_w``, tiles filled to
    :data:`MIN_FILL` at least (:func:`tile_fill`) where the lanes take the layer."""
    if w_fmt is None or not w_fmt.signed or w_fmt.bits not in KERNELS or groups != 1:
        return None
    if k_w > MAX_K_W:
        return None  # a kernel row longer than a chunk: the kernel would go element by element
    if not MIN_IN_BITS <= in_bits <= MAX_IN_BITS:
        return None
    if has_lanes and taps < MIN_TAPS:
        return None
    if has_lanes and out_size is not None and tile_fill(out_size, k_w) < MIN_FILL:
        return None
    if w_fmt.bits == 2 and weight is not None and np.any(np.asarray(weight) < -1):
        return None  # a -2 code: the kernel would take the layer element by element
    return KERNELS[w_fmt.bits]
