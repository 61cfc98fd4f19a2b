"""The host kernels' sub-byte paths (mico_host_gemm.c) against the Python integer arithmetic:
pointwise layers of few input channels whose sub-byte codes take int32 sums (mico_host_pw_takes
prefers them to the int16 micro-kernel there) and of many (int16 sums), rows of taps, GEMM
and depthwise layers, each with sub-byte outputs that wait in the stage (plane sizes that are
and are not whole bytes, every requantization path: 32-bit multiplies, shifts above and
below 32, extreme scales). One program, built the way a host project is."""

from __future__ import annotations

import shutil

import pytest

from mico.quant.arithmetic import TERNARY, QFormat
from tests.codegen.test_host_gemm import case, kernels, run

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

SUB = [
    (QFormat.for_bits(b, True), QFormat(a, s, z))
    for b, (a, s, z) in (
        (4, (4, False, 0)), (2, (2, False, 0)), (TERNARY, (2, True, 0)), (4, (4, True, 0)),
        (2, (2, False, 1)), (1, (4, False, 7)), (3, (3, False, 0)), (8, (4, False, 0)),
        (4, (8, False, 0)),
    )
]  # fmt: skip
OUTS = [QFormat(4, False), QFormat(2, False), QFormat(4, True), QFormat(2, False, 1),
        QFormat(1, True), QFormat(3, False), QFormat(8, False)]  # fmt: skip
GEOMETRY = [
    dict(in_c=8, out_c=13, hw=(23, 25)),  # pointwise, few input channels: int32 sums
    dict(in_c=8, out_c=12, hw=(24, 24)),
    dict(in_c=16, out_c=9, hw=(12, 12)),
    dict(in_c=48, out_c=8, hw=(24, 24)),  # many input channels: int16 sums
    dict(in_c=40, out_c=7, hw=(9, 11)),
    dict(in_c=3, out_c=6, hw=(17, 19), k=(3, 3), pad=(1, 1)),  # rows of taps
    dict(in_c=3, out_c=5, hw=(33, 31), k=(3, 3), pad=(1, 1), stride=(2, 2)),
    dict(in_c=12, out_c=10, hw=(7, 9), k=(3, 3), pad=(1, 1)),  # GEMM
    dict(in_c=24, out_c=24, hw=(11, 13), k=(3, 3), pad=(1, 1), groups=24),  # depthwise
    dict(in_c=16, out_c=16, hw=(30, 27), k=(3, 3), pad=(1, 1), groups=16),
]


def test_subbyte_paths(tmp_path_factory):
    cases = [
        case("conv", w, a, seed=i * 31 + j, o_fmt=OUTS[(i + j) % len(OUTS)],
             relu=bool((i + j) % 2), extreme=(i + j) % 5 == 4, **g)
        for i, (w, a) in enumerate(SUB)
        for j, g in enumerate(GEOMETRY)
    ]  # fmt: skip
    run(cases, kernels(tmp_path_factory, "gcc", True))
