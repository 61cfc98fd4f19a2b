"""benchmarks/cmsis_nn.py: its Python reference of CMSIS-NN's int8 arithmetic, its refusal
without a CMSIS-NN checkout, and (only when ``CMSIS_NN`` names a checkout and the rv32 tools
are installed) one CMSIS-NN kernel run through the harness, bit-exact against the reference."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.benchmark_modules import load_benchmark

bench = load_benchmark("cmsis_nn")

FC = next(case for case in bench.CASES if case.fc)


def test_requantize_rounds_like_cmsis_nn() -> None:
    half = 1 << 30  # multiplier 0.5
    # 3 * 0.5 = 1.5 -> 2 (doubling high multiply rounds half up), then / 2 = 1 (half away)
    assert bench.requantize(np.array([3]), half, -1).tolist() == [1]
    # -3 * 0.5 / 2 = -0.75 -> -1 ; 5 * 0.5 / 4 = 0.625 -> 1 ; -6 * 0.5 / 2 = -1.5 -> -2
    assert bench.requantize(np.array([-3, 5, -6]), half, np.array([-1, -2, -1])).tolist() == [
        -1,
        1,
        -2,
    ]
    # a left shift multiplies first: 3 * 2 * 0.5 = 3
    assert bench.requantize(np.array([3]), half, 1).tolist() == [3]


def test_reference_fc_matches_plain_arithmetic() -> None:
    data = bench.make_data(FC)
    out = bench.reference(FC, data).astype(np.int64)
    acc = (data.x.astype(np.int64) + bench.INPUT_OFFSET) @ data.w.astype(np.int64).T + data.bias
    real = acc * float(data.mult[0]) / 2.0**31 * 2.0 ** float(data.shift[0])
    expected = np.clip(np.round(real) + bench.OUTPUT_OFFSET, -128, 127)
    assert np.abs(out - expected).max() <= 1  # the same value up to ties
    assert len(set(out.tolist())) > 20  # not all clamped


def test_no_checkout_exits_2(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CMSIS_NN", raising=False)
    assert bench.main(["--out", str(tmp_path)]) == 2
    assert bench.main(["--cmsis-nn", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert not list(tmp_path.iterdir())


@pytest.mark.skipif(not os.environ.get("CMSIS_NN"), reason="set CMSIS_NN to a CMSIS-NN checkout")
@pytest.mark.skipif(
    any(shutil.which(tool) is None for tool in bench.TOOLS), reason="needs the rv32 tools"
)
def test_fully_connected_runs_bit_exact(tmp_path: Path) -> None:
    root = Path(os.environ["CMSIS_NN"])
    flags = bench.rv32_flags()
    names = (
        "arm_fully_connected_s8",
        "arm_fully_connected_get_buffer_sizes_s8",
        "arm_nn_vec_mat_mult_t_s8",
    )
    library = bench.build_library(root, tmp_path, flags, names=names)
    data = bench.make_data(FC)
    result = bench.run_case(FC, data, root, library, tmp_path, flags)
    assert result.status == 0
    assert np.array_equal(result.output, bench.reference(FC, data).ravel())
    assert 2 < result.instructions / FC.macs < 20
