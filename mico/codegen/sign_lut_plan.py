"""Which layers take the sign tables (``mico_sign_lut.c``): binary weights by table lookup.

A binary weight (+1 / -1, a 1-bit code) times an activation code is the code or its negation,
so four taps' weights (a nibble of the packed weights) pick one of 16 signed sums of the four
codes. ``mico_qconv2d_sign_lut`` / ``mico_qlinear_sign_lut`` build those 16 sums once per group
of four taps and pair of pixels (or rows), two pixels a 32-bit word, and each output channel
then adds one entry a nibble: a load and an addition for eight products. On rv32imac
(``benchmarks/kernels_rv32.py``) binary weights on 8-bit codes ran 3.73 instructions per MAC on
a 1x1 conv of 32 -> 32 channels (the sign-weight sums) and 7.26 on an FC layer of 256 -> 64
(the plain kernel), against W8A8's 2.92 and 3.67: fewer bits cost more. The tables' cost is
shared by the channels of a block, and does not grow with the codes' width.
"""

from __future__ import annotations

from mico.quant.arithmetic import QFormat

#: activation widths the path takes (1-bit codes take the popcount kernels)
MIN_IN_BITS = 2
MAX_IN_BITS = 8
#: the narrowest codes it takes where the channel lanes also take the layer: on 2- and 4-bit
#: codes the lanes pack more products a multiply (rv32, 1x1 conv 32 -> 32 on 16x16: 1/4 runs
#: 1.82 instructions per MAC on the lanes against 2.46 here, FC 256 -> 64 1.51 against 2.28);
#: on 6-bit codes the tables win (3.00 against 3.72, 2.43 against 2.69)
MIN_BITS_WITH_LANES = 5
#: the widest kernel row: a chunk of at most 64 taps holds whole kernel rows whose taps fill
#: whole bytes of weights (lcm(k_w, 8) taps)
MAX_K_W = 8
#: layers of fewer MACs keep the plain kernels (the path's rv32 code: about 1.5 KB)
MIN_MACS = 8192
CONV_KERNEL = "mico_qconv2d_sign_lut"
LINEAR_KERNEL = "mico_qlinear_sign_lut"
SOURCE = "mico_sign_lut.c"


def _takes(w_fmt: QFormat | None, in_bits: int, taps: int, has_lanes: bool) -> bool:
    """Binary weights, codes of :data:`MIN_IN_BITS` (:data:`MIN_BITS_WITH_LANES` with lanes)
    to :data:`MAX_IN_BITS` bits, and a channel's weights in whole bytes (``taps`` a multiple of
    8)."""
    least = MIN_BITS_WITH_LANES if has_lanes else MIN_IN_BITS
    return (
        w_fmt is not None
        and w_fmt.bits == 1
        and w_fmt.signed
        and least <= in_bits <= MAX_IN_BITS
        and taps % 8 == 0
    )


def conv_kernel(
    w_fmt: QFormat | None,
    in_bits: int,
    taps: int,
    groups: int,
    k_w: int,
    has_lanes: bool = False,
) -> str | None:
    """:data:`CONV_KERNEL` for a one-group convolution of binary weights on 2- to 8-bit codes
    (:data:`MIN_BITS_WITH_LANES` or more where the channel lanes take the layer:
    ``has_lanes``) whose ``taps`` (in_c x k_h x k_w) fill whole bytes and whose kernel rows are
    at most :data:`MAX_K_W` wide, else None."""
    if groups != 1 or k_w > MAX_K_W or not _takes(w_fmt, in_bits, taps, has_lanes):
        return None
    return CONV_KERNEL


def linear_kernel(
    w_fmt: QFormat | None, in_bits: int, in_features: int, has_lanes: bool = False
) -> str | None:
    """:data:`LINEAR_KERNEL` for a linear layer of binary weights on 2- to 8-bit codes (as
    :func:`conv_kernel`) whose ``in_features`` fill whole bytes, else None."""
    return LINEAR_KERNEL if _takes(w_fmt, in_bits, in_features, has_lanes) else None


def layer_kernel(
    kind: str,
    w_fmt: QFormat | None,
    in_bits: int,
    taps: int,
    groups: int = 1,
    k_w: int = 1,
    has_lanes: bool = False,
) -> str | None:
    """:func:`conv_kernel` (``kind`` "conv") or :func:`linear_kernel` ("linear")."""
    if kind == "linear":
        return linear_kernel(w_fmt, in_bits, taps, has_lanes)
    return conv_kernel(w_fmt, in_bits, taps, groups, k_w, has_lanes)
