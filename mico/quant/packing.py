"""Sub-byte packing of integer codes, the layout the C kernels read (``mico_unpack``).

Codes are laid out as one little-endian bit stream: code ``i`` occupies bits ``[i*b, (i+1)*b)``,
least significant bit first, and may straddle a byte boundary. A field holds the code in b-bit
two's complement (signed) or plain binary (unsigned); binary {-1, +1} codes are stored as 0 / 1,
asymmetric codes (a zero point z) as the unsigned field ``code + z``.
"""

from __future__ import annotations

import numpy as np

from mico.quant.arithmetic import QFormat


def packed_size(count: int, bits: int) -> int:
    """Bytes needed for ``count`` codes of ``bits`` bits."""
    return (count * bits + 7) // 8


def pack(codes: np.ndarray, fmt: QFormat) -> np.ndarray:
    """Pack integer codes into a uint8 array of :func:`packed_size` bytes."""
    q = np.asarray(codes).astype(np.int64).ravel()
    if q.size and (q.min() < fmt.qmin or q.max() > fmt.qmax):
        raise ValueError(
            f"codes span [{q.min()}, {q.max()}], outside {fmt} range [{fmt.qmin}, {fmt.qmax}]"
        )
    q = q + fmt.zero  # asymmetric codes: the field is code + zero point
    fields = (
        (q > 0).astype(np.uint8) if fmt.binary else (q & ((1 << fmt.bits) - 1)).astype(np.uint8)
    )
    # bit j of code i goes to stream position i*b + j
    bits = ((fields[:, None] >> np.arange(fmt.bits, dtype=np.uint8)) & 1).astype(np.uint8).ravel()
    return np.packbits(bits, bitorder="little")[: packed_size(q.size, fmt.bits)]


def unpack(data: np.ndarray, count: int, fmt: QFormat) -> np.ndarray:
    """Inverse of :func:`pack`: the first ``count`` codes of a packed stream, as int64."""
    raw = np.asarray(data, dtype=np.uint8)
    if raw.size < packed_size(count, fmt.bits):
        raise ValueError(
            f"{raw.size} bytes hold fewer than {count} codes of {fmt.bits} bits "
            f"({packed_size(count, fmt.bits)} bytes needed)"
        )
    bits = np.unpackbits(raw, bitorder="little")[: count * fmt.bits].reshape(count, fmt.bits)
    fields = (bits.astype(np.int64) << np.arange(fmt.bits, dtype=np.int64)).sum(axis=1)
    if fmt.binary:
        return np.where(fields == 1, 1, -1).astype(np.int64)
    if fmt.signed:
        sign_bit = 1 << (fmt.bits - 1)
        return np.where(fields & sign_bit, fields - (1 << fmt.bits), fields)
    return fields - fmt.zero


# ----------------------------------------------------------------------------- channel lanes
#: weight widths the channel-lanes kernels read (F = 32 / bits output channels per word)
LANE_WEIGHT_BITS = (1, 2, 4, 8)
#: lane widths, and the (weight bits, field groups per word = lane width / bits) pairs the C
#: block kernels are compiled for (MICO_LANES_EACH in mico_nn.h)
LANE_WIDTHS = (4, 8, 16)
LANE_KERNELS = ((1, 4), (1, 8), (2, 4), (2, 8), (4, 2), (4, 4), (8, 2))
#: estimated instructions per MAC above which the lanes do not pay: the plain kernels' inner
#: loops (convolutions; the lanes' per-output work is about the same as theirs) and, for linear
#: layers, whose plain kernel has no register tile, a higher bar
PLAIN_INNER_COST = 2.5
PLAIN_LINEAR_COST = 3.2


def lane_channels(w_bits: int) -> int:
    """Output channels per lanes word (F)."""
    return 32 // w_bits


def lane_cost(b: int, groups: int, n: int, negative: bool, pixels: int = 4) -> float:
    """Estimated rv32 instructions per MAC of the lanes kernels' inner loops (mico_conv2d.c
    mico_lr_*: NPX = 16 / G pixels, a tap pointer each; mico_linear.c mico_ll_*: NB = 4 blocks,
    2 for G = 8 and binary weights, sharing each code), their flushes every ``n`` taps included."""
    s, f = b * groups, lane_channels(b)
    flush = 8.0 if s == 16 else 7.0 * (32 // s) if negative else 18.0  # per lane word
    if pixels == 1:
        nb = 2 if groups == 8 or b == 1 else 4
        per_tap = 3 + nb * (2 + (2 * groups - 1) + 2 * groups)
        return (per_tap + nb * groups * flush / n) / (nb * f)
    npx = 16 // groups
    per_tap = 6 + (2 * groups - 1) + npx + 2 * groups * npx
    return (per_tap + groups * npx * flush / n) / (f * npx)


#: taps summed between flushes when the layer's weights never fill a lane (any run of taps)
LANE_RUN_UNBOUNDED = 1 << 20


def lane_offsets(codes: np.ndarray, fmt: QFormat) -> np.ndarray:
    """The offset weights w' the lanes multiply (:func:`pack_lanes`), as int64 rows
    ``(out, taps)``: w + 2^(bits-1), binary {-1, +1} as {0, 1}."""
    q = np.asarray(codes).astype(np.int64)
    q = q.reshape(q.shape[0], -1)
    return (q > 0).astype(np.int64) if fmt.binary else q + (1 << (fmt.bits - 1))


def longest_run(offsets: np.ndarray, budget: int) -> int:
    """The most consecutive taps whose offset weights w' (rows ``(out, taps)``, w' >= 0) sum
    to at most ``budget`` in every row and wherever the run starts (the kernels cut a reduction
    into runs of at most n consecutive taps): 0 when a single tap exceeds it,
    :data:`LANE_RUN_UNBOUNDED` when whole rows fit."""
    w = np.asarray(offsets, dtype=np.int64)
    if w.size == 0 or int(w.sum(axis=1).max()) <= budget:
        return LANE_RUN_UNBOUNDED
    csum = np.concatenate([np.zeros((w.shape[0], 1), np.int64), np.cumsum(w, axis=1)], axis=1)

    def fits(n: int) -> bool:
        return int((csum[:, n:] - csum[:, :-n]).max()) <= budget

    lo, hi = 0, w.shape[1]  # fits(lo) (vacuously for 0), not fits(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if fits(mid) else (lo, mid)
    return lo


def lane_plan(
    w_fmt: QFormat,
    a_fmt: QFormat,
    pixels: int = 4,
    weight: np.ndarray | None = None,
    channels: int | None = None,
    with_cost: bool = False,
) -> dict[str, int] | None:
    """The lanes (``MicoLanes``) for weights ``w_fmt`` times activations ``a_fmt``, or None.

    A lane of s bits holds n products |w'| * |x| (w' = w + 2^(bits-1) in [1, 2^bits - 1],
    binary: {0, 1}) without carrying into the next: n * max|x| * max w' < 2^s (2^(s-1) for
    signed activations, whose lanes hold signed sums). Given the layer's weight codes
    (``weight``, output channels first), n is the exact bound instead: the longest run of
    consecutive taps whose w' sum, times max|x|, fits a lane in every channel
    (:func:`longest_run`), never below the bound from the widths alone. Of the lane widths the
    kernels take, the one with the fewest estimated instructions per MAC (:func:`lane_cost`)
    wins (``pixels``: 1 for a linear layer, else a convolution); None when no lane width fits,
    the widths are not ones the kernels read, or the plain kernels would be as fast.
    ``channels`` (else the rows of ``weight``): the output channels, whose last block of F may
    be short (:func:`pad_lane_rows`): the padding's share is added to the estimate, and its rows
    bound n like the others. ``with_cost``: the plan carries its estimate as ``cost`` (a float).

    The pointwise path (mico_conv_pw) multiplies signed and asymmetric codes as unsigned
    fields u = x - qmin <= qmax - qmin <= 2 max|x| in unsigned lanes (twice the signed lanes'
    range), so the same n holds for it.
    """
    b = w_fmt.bits
    if b not in LANE_WEIGHT_BITS or not w_fmt.signed or a_fmt.bits > 8:
        return None
    w_max = 1 if b == 1 else 2**b - 1
    negative = a_fmt.negative  # signed or asymmetric codes: signed lane sums
    x_max = max(a_fmt.qmax, -a_fmt.qmin)
    rows = None if weight is None else pad_lane_rows(weight, w_fmt)
    offsets = None if rows is None else lane_offsets(rows, w_fmt)
    if channels is None and weight is not None:
        channels = int(np.asarray(weight).shape[0])
    f = lane_channels(b)
    waste = 1.0 if not channels else -(-channels // f) * f / channels  # padded / real channels
    best: tuple[float, dict[str, int]] | None = None
    for s in LANE_WIDTHS:
        groups = s // b
        if s % b or (b, groups) not in LANE_KERNELS:
            continue
        cap = 2 ** (s - 1) - 1 if negative else 2**s - 1
        n = cap // (x_max * w_max)
        if offsets is not None:
            n = max(n, longest_run(offsets, cap // x_max))
        if n < 1:
            continue
        cost = lane_cost(b, groups, n, negative, pixels) * waste
        if best is None or cost < best[0]:
            best = (cost, {"s": s, "n": min(n, LANE_RUN_UNBOUNDED), "is_signed": int(negative)})
    bar = PLAIN_LINEAR_COST if pixels == 1 else PLAIN_INNER_COST
    if best is None or best[0] >= bar:
        return None
    return best[1] if not with_cost else {**best[1], "cost": best[0]}  # type: ignore[return-value]


def pad_lane_rows(codes: np.ndarray, fmt: QFormat) -> np.ndarray:
    """Weight rows ``(out, taps)`` filled up to a multiple of F = 32 / bits rows with rows of
    zero codes (binary: -1, whose lane weight is 0), which the lanes compute and never store:
    a layer whose channels do not fill words (LeNet's 6, 84 or 120 at 2 bits) keeps the lanes
    at the cost of the padding's multiplies. The rows are what bounds the taps a lane sums
    (:func:`lane_plan`), padding included."""
    q = np.asarray(codes)
    q = q.reshape(q.shape[0], -1)
    f = lane_channels(fmt.bits)
    short = -q.shape[0] % f
    if not short:
        return q
    fill = -1 if fmt.binary else 0
    return np.concatenate([q, np.full((short, q.shape[1]), fill, dtype=q.dtype)])


def pack_lanes(codes: np.ndarray, fmt: QFormat) -> np.ndarray:
    """Signed weight codes ``(out, taps)`` as lanes words (uint32, ``ceil(out / F) * taps``).

    Word ``(block, t)`` holds channel ``block * F + c`` at tap ``t`` in its bits
    ``[c * bits, (c + 1) * bits)`` as the offset weight ``w + 2^(bits-1)`` (in [1, 2^bits - 1];
    binary {-1, +1} as 0 / 1): as many bytes as :func:`pack` takes, ready to multiply. When
    ``out`` is not a multiple of F = 32 / bits, the last block is filled up with channels of
    zero codes (binary: -1) that the kernels compute and never store (:func:`pad_lane_rows`).
    """
    q = np.asarray(codes).astype(np.int64)
    q = q.reshape(q.shape[0], -1)
    f = lane_channels(fmt.bits)
    if fmt.bits not in LANE_WEIGHT_BITS:
        raise ValueError(f"{fmt} weights do not take channel lanes (widths {LANE_WEIGHT_BITS})")
    if q.size and (q.min() < fmt.qmin or q.max() > fmt.qmax):
        raise ValueError(f"codes outside {fmt} range [{fmt.qmin}, {fmt.qmax}]")
    q = pad_lane_rows(q, fmt)
    offset = 0 if fmt.binary else 1 << (fmt.bits - 1)
    fields = ((q > 0) if fmt.binary else q + offset).astype(np.uint64)
    blocks = fields.reshape(q.shape[0] // f, f, q.shape[1])  # (block, c, t)
    shifts = (np.arange(f, dtype=np.uint64) * np.uint64(fmt.bits))[None, :, None]
    words = (blocks << shifts).sum(axis=1, dtype=np.uint64)  # (block, t)
    return words.astype(np.uint32).ravel()


# ----------------------------------------------------------------------------- binary rows
def binary_row_words(taps: int) -> int:
    """32-bit words of one weight row of ``taps`` binary codes (:func:`pack_binary_rows`)."""
    return (int(taps) + 31) // 32


def pack_binary_rows(codes: np.ndarray, fmt: QFormat) -> np.ndarray:
    """Binary weight codes ``(out, taps...)`` as rows of whole uint32 words (the popcount
    kernels' layout, ``mico_binary.c``).

    Row ``o`` is :func:`pack` of ``codes[o]`` (tap ``t`` at bit ``t % 32`` of word ``t // 32``,
    1 for +1, in the plain OIHW / row-major tap order) followed by zero bits up to
    :func:`binary_row_words` words: ``out * words`` words in all.
    """
    if not fmt.binary:
        raise ValueError(f"binary rows hold binary {{-1, +1}} codes, not {fmt}")
    q = np.asarray(codes).astype(np.int64)
    q = q.reshape(q.shape[0], -1)
    if q.size and (q.min() < fmt.qmin or q.max() > fmt.qmax):
        raise ValueError(f"codes outside {fmt} range [{fmt.qmin}, {fmt.qmax}]")
    words = binary_row_words(q.shape[1])
    bits = np.zeros((q.shape[0], words * 32), dtype=np.uint8)
    bits[:, : q.shape[1]] = q > 0
    return np.packbits(bits, axis=1, bitorder="little").view("<u4").astype(np.uint32).ravel()
