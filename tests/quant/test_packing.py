"""Sub-byte packing: the little-endian, LSB-first bit stream the C kernels unpack."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.quant.arithmetic import QFormat
from mico.quant.packing import pack, packed_size, unpack

ALL_FORMATS = [QFormat(b, s) for b in range(1, 9) for s in (True, False)]


@st.composite
def formats_and_codes(draw: st.DrawFn) -> tuple[QFormat, list[int]]:
    fmt = draw(st.sampled_from(ALL_FORMATS))
    element = st.sampled_from([-1, 1]) if fmt.binary else st.integers(fmt.qmin, fmt.qmax)
    return fmt, draw(st.lists(element, min_size=0, max_size=200))


@settings(max_examples=200, deadline=None)
@given(case=formats_and_codes())
def test_pack_unpack_round_trip(case: tuple[QFormat, list[int]]) -> None:
    fmt, codes = case
    packed = pack(np.array(codes, dtype=np.int64), fmt)
    assert packed.dtype == np.uint8
    assert packed.size == packed_size(len(codes), fmt.bits)
    out = unpack(packed, len(codes), fmt)
    assert out.dtype == np.int64
    assert out.tolist() == codes


@settings(max_examples=100, deadline=None)
@given(case=formats_and_codes())
def test_unused_tail_bits_are_zero(case: tuple[QFormat, list[int]]) -> None:
    fmt, codes = case
    packed = pack(np.array(codes, dtype=np.int64), fmt)
    used = len(codes) * fmt.bits
    stream = np.unpackbits(packed, bitorder="little")
    assert not stream[used:].any()


@settings(max_examples=100, deadline=None)
@given(case=formats_and_codes(), extra=st.binary(min_size=1, max_size=4))
def test_unpack_ignores_trailing_bytes(case: tuple[QFormat, list[int]], extra: bytes) -> None:
    fmt, codes = case
    packed = pack(np.array(codes, dtype=np.int64), fmt)
    padded = np.concatenate([packed, np.frombuffer(extra, dtype=np.uint8)])
    assert unpack(padded, len(codes), fmt).tolist() == codes


@pytest.mark.parametrize(
    ("count", "bits", "size"),
    [
        (0, 1, 0),
        (0, 8, 0),
        (1, 1, 1),
        (8, 1, 1),
        (9, 1, 2),
        (3, 4, 2),
        (2, 4, 1),
        (3, 3, 2),
        (8, 3, 3),
        (5, 8, 5),
        (7, 7, 7),
        (1, 7, 1),
        (2, 7, 2),
    ],
)
def test_packed_size(count: int, bits: int, size: int) -> None:
    assert packed_size(count, bits) == size


def test_known_layout_unsigned_4bit() -> None:
    # code i occupies stream bits [4i, 4i+4), LSB first: byte0 = 1 | 2 << 4, byte1 = 3
    packed = pack(np.array([1, 2, 3]), QFormat(4, False))
    assert packed.tolist() == [0x21, 0x03]


def test_known_layout_unsigned_8bit_is_identity() -> None:
    codes = [0, 1, 127, 128, 255]
    assert pack(np.array(codes), QFormat(8, False)).tolist() == codes


def test_known_layout_signed_8bit_is_twos_complement() -> None:
    codes = [-127, -1, 0, 1, 127]
    assert pack(np.array(codes), QFormat(8, True)).tolist() == [0x81, 0xFF, 0x00, 0x01, 0x7F]


def test_known_layout_signed_3bit_straddles_bytes() -> None:
    # 3-bit two's complement fields: -3 -> 0b101, 1 -> 0b001, -2 -> 0b110
    # stream (bit position: value):
    #   code0 at 0..2: 1,0,1   code1 at 3..5: 1,0,0   code2 at 6..8: 0,1,1
    # byte0 = bits 0..7 = 1,0,1,1,0,0,0,1 -> 0b10001101 = 0x8D
    # byte1 = bit 8 = 1                    -> 0x01   (code2 straddles the byte boundary)
    packed = pack(np.array([-3, 1, -2]), QFormat(3, True))
    assert packed.tolist() == [0x8D, 0x01]
    assert unpack(packed, 3, QFormat(3, True)).tolist() == [-3, 1, -2]


def test_known_layout_signed_2bit_ternary() -> None:
    # fields: -1 -> 0b11, 0 -> 0b00, 1 -> 0b01, -1 -> 0b11, then 1 -> 0b01 in the next byte
    # byte0 = 0b11_01_00_11 = 0xD3, byte1 = 0x01
    packed = pack(np.array([-1, 0, 1, -1, 1]), QFormat(2, True))
    assert packed.tolist() == [0xD3, 0x01]


def test_known_layout_binary() -> None:
    # binary codes store -1 as 0 and +1 as 1, one bit each, LSB first
    # [1,-1,-1,1, 1,1,-1,1 | -1] -> bits 1,0,0,1,1,1,0,1 | 0
    # byte0 = 1 + 8 + 16 + 32 + 128 = 0xB9, byte1 = 0x00
    codes = [1, -1, -1, 1, 1, 1, -1, 1, -1]
    packed = pack(np.array(codes), QFormat(1, True))
    assert packed.tolist() == [0xB9, 0x00]
    assert unpack(packed, 9, QFormat(1, True)).tolist() == codes


def test_known_layout_unsigned_1bit() -> None:
    packed = pack(np.array([1, 0, 0, 1, 1, 1, 0, 1, 1]), QFormat(1, False))
    assert packed.tolist() == [0xB9, 0x01]


def test_known_layout_unsigned_5bit() -> None:
    # 31 -> 11111 at bits 0..4, 1 -> 10000 at bits 5..9
    # byte0 = 0b00111111 = 0x3F, byte1 = 0x00
    assert pack(np.array([31, 1]), QFormat(5, False)).tolist() == [0x3F, 0x00]
    # 17 -> 0b10001 at bits 5..9: bit5 = 1, bit9 = 1 -> byte0 = 0x20, byte1 = 0x02
    assert pack(np.array([0, 17]), QFormat(5, False)).tolist() == [0x20, 0x02]


def test_pack_flattens_multidimensional_codes() -> None:
    codes = np.array([[1, 2], [3, 4]])
    fmt = QFormat(4, False)
    assert pack(codes, fmt).tolist() == [0x21, 0x43]


def test_pack_empty() -> None:
    packed = pack(np.array([], dtype=np.int64), QFormat(3, True))
    assert packed.size == 0
    assert unpack(packed, 0, QFormat(3, True)).tolist() == []


@pytest.mark.parametrize(
    ("fmt", "codes"),
    [
        (QFormat(4, False), [0, 16]),
        (QFormat(4, False), [-1, 3]),
        (QFormat(4, True), [8]),
        (QFormat(4, True), [-8]),  # symmetric narrow range: -8 is not a 4-bit code
        (QFormat(8, True), [-128]),
        (QFormat(2, True), [2]),
        (QFormat(1, True), [-2, 1]),
        (QFormat(1, True), [2]),
        (QFormat(1, False), [2]),
        (QFormat(8, False), [256]),
    ],
)
def test_pack_rejects_out_of_range_codes(fmt: QFormat, codes: list[int]) -> None:
    with pytest.raises(ValueError, match=rf"outside {fmt} range \[{fmt.qmin}, {fmt.qmax}\]"):
        pack(np.array(codes), fmt)


@pytest.mark.parametrize(
    ("count", "bits", "nbytes"), [(3, 4, 1), (9, 1, 1), (1, 8, 0), (3, 3, 1), (8, 7, 6)]
)
def test_unpack_rejects_too_few_bytes(count: int, bits: int, nbytes: int) -> None:
    fmt = QFormat(bits, False)
    needed = packed_size(count, bits)
    with pytest.raises(ValueError, match=rf"{nbytes} bytes hold fewer than {count} codes") as info:
        unpack(np.zeros(nbytes, dtype=np.uint8), count, fmt)
    assert f"{needed} bytes needed" in str(info.value)
