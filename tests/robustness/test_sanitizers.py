"""ASan/UBSan (gcc and clang) and valgrind memcheck stay clean on the generated C, hostile
samples included (issue 12, part D).

The demo-sized model (SmallCNN 8/16 channels, the demo's mixed plan) is compiled in both
modes and run on finite extremes (denormals, ±0; ±3e38, which the static mode clamps and which
overflow float32 inside the dynamic model: status 4 there, as the Python reference refuses
them), on NaN/Inf samples (status 3) and on input files of the wrong size (status 1): no tool
may report a memory or undefined-behaviour error, and the outputs equal the Python reference.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from mico.codegen.compile import CompiledModel, compile_model
from mico.errors import BuildError, InputError
from mico.models import SmallCNN
from mico.pipeline import DEFAULT_PLAN
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host

#: exit statuses the tools use, apart from main.c's own 0..3
ASAN_EXIT, UBSAN_EXIT, VALGRIND_EXIT = 86, 87, 88
ENV = {
    "ASAN_OPTIONS": f"exitcode={ASAN_EXIT}:detect_leaks=1",
    "UBSAN_OPTIONS": f"print_stacktrace=1:halt_on_error=1:exitcode={UBSAN_EXIT}",
}
REPORTS = ("AddressSanitizer", "LeakSanitizer", "runtime error", "ERROR SUMMARY: 1")

#: finite samples no program may misbehave on: tiny ones every mode computes, and huge ones
#: that the static mode clamps and that may overflow float32 inside a dynamic-mode model
TINY = [1.4e-45, -1.4e-45, 1.1754944e-38, -1e-40, 0.0, -0.0]
HUGE = [3e38, -3e38, 1e30, -1e20]


def _compiled(mode: str, out: Path) -> CompiledModel:
    torch.manual_seed(0)
    model = SmallCNN(channels=(8, 16))
    quantize_model(model, DEFAULT_PLAN, QuantConfig(act_mode=mode))
    x = torch.randn(16, 1, 8, 8)
    model.eval()
    if mode == "static":
        calibrate(model, [x])
    return compile_model(model, x[:1], out, mode=mode, calibration=[x])


@pytest.fixture(scope="module", params=["static", "dynamic"])
def compiled(request, tmp_path_factory) -> CompiledModel:
    return _compiled(request.param, tmp_path_factory.mktemp(request.param) / "p")


def _extreme_samples(values: list[float], seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    rows = [np.full((1, 8, 8), v, np.float32) for v in values]
    mixed = rng.choice(np.array(values, np.float32), size=(3, 1, 8, 8))
    mixed[0] *= rng.standard_normal((1, 8, 8)).astype(np.float32) > 0  # some zeros in between
    randn = rng.standard_normal((2, 1, 8, 8))
    return np.concatenate([np.stack(rows), mixed, randn]).astype(np.float32)


def _finite_samples() -> np.ndarray:
    return _extreme_samples(TINY, 0)


def _huge_samples() -> np.ndarray:
    return _extreme_samples(HUGE, 1)


def _huge_status(compiled: CompiledModel) -> int:
    """What main.c must return on huge.bin: the Python reference decides (an overflow in the
    dynamic mode is InputError there and status 4 in C; the static mode clamps)."""
    try:
        compiled.reference(_huge_samples())
    except InputError as exc:
        assert compiled.mode == "dynamic" and "overflowed float32" in str(exc), exc
        return 4
    return 0


def _write_cases(work: Path, compiled: CompiledModel) -> list[tuple[list[str], int]]:
    """Input files and the exit status main.c must give on each."""
    finite = _finite_samples()
    finite.tofile(work / "finite.bin")
    _huge_samples().tofile(work / "huge.bin")
    cases: list[tuple[list[str], int]] = [
        (["finite.bin", "out.bin"], 0),
        (["huge.bin", "huge_out.bin"], _huge_status(compiled)),
    ]
    for i, value in enumerate([np.nan, np.inf, -np.inf, np.float32("-nan")]):
        bad = finite.copy()
        bad[1 + i, 0, i, 7 - i] = value
        bad.tofile(work / f"nonfinite{i}.bin")
        cases.append(([f"nonfinite{i}.bin", "o.bin"], 3))
    (work / "empty.bin").write_bytes(b"")
    (work / "short.bin").write_bytes(finite.tobytes()[:37])
    (work / "trailing.bin").write_bytes(finite.tobytes() + b"\1\2\3")
    for name in ("empty", "short", "trailing"):
        cases.append(([f"{name}.bin", "o.bin"], 1))
    cases += [(["missing.bin", "o.bin"], 1), (["finite.bin"], 2), (["a", "b", "c"], 2)]
    return cases


def _run_all(command: list[str], work: Path, env: dict[str, str], compiled: CompiledModel) -> None:
    for args, expected in _write_cases(work, compiled):
        result = subprocess.run(
            [*command, *args], cwd=work, capture_output=True, text=True, timeout=300, env=env
        )
        report = [r for r in REPORTS if r in result.stderr]
        assert not report and result.returncode == expected, (
            f"{args}: exit {result.returncode} (expected {expected})\n{result.stderr[-3000:]}"
        )


def _check_outputs(compiled: CompiledModel, work: Path) -> None:
    files = [("out.bin", _finite_samples())]
    if compiled.mode == "static":
        files.append(("huge_out.bin", _huge_samples()))
    for name, samples in files:
        c_out = np.fromfile(work / name, dtype=compiled.project.output_dtype)
        c_out = c_out.reshape(len(samples), -1)
        reference = compiled.reference(samples).reshape(len(samples), -1)
        if compiled.mode == "static":
            np.testing.assert_array_equal(c_out, reference)
        else:
            np.testing.assert_allclose(c_out, reference, rtol=1e-5, atol=1e-30)


@pytest.mark.parametrize("cc", ["gcc", "clang"])
def test_sanitizers_stay_clean_on_hostile_samples(compiled, cc, tmp_path):
    if shutil.which(cc) is None:
        pytest.skip(f"{cc} is not installed (Debian: apt-get install {cc})")
    try:
        exe = host.build(compiled.project, cc=cc, sanitize=True)
    except BuildError as exc:
        if "sanitizer runtime" in str(exc):
            pytest.skip(f"{cc} has no sanitizer runtime (apt-get install libclang-rt-dev)")
        raise
    _run_all([str(exe)], tmp_path, {**os.environ, **ENV}, compiled)
    _check_outputs(compiled, tmp_path)


def test_valgrind_memcheck_stays_clean_on_hostile_samples(compiled, tmp_path):
    if shutil.which("valgrind") is None:
        pytest.skip("valgrind is not installed (Debian: apt-get install valgrind)")
    exe = host.build(compiled.project, cc="gcc", sanitize=False)
    command = [
        "valgrind", "--tool=memcheck", "--quiet", f"--error-exitcode={VALGRIND_EXIT}",
        "--leak-check=full", "--errors-for-leak-kinds=definite,indirect", str(exe),
    ]  # fmt: skip
    _run_all(command, tmp_path, dict(os.environ), compiled)
    _check_outputs(compiled, tmp_path)
