"""The generated C's boundary: ``<name>_run`` refuses NaN and Inf, ``main`` takes strict
arguments and never falls back silently (issue 12, part D)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from mico.codegen.compile import CompiledModel, compile_model
from mico.models import from_zoo
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host

MODES = ("static", "dynamic")


def _compiled(mode: str, out: Path) -> CompiledModel:
    torch.manual_seed(0)
    model = from_zoo("mlp")
    plan = ",".join(f"{n}=8/8" for n in model.quantize_layer_names())
    quantize_model(model, plan, QuantConfig(act_mode=mode))
    x = torch.randn(8, 1, 8, 8)
    model.eval()
    if mode == "static":
        calibrate(model, [x])
    compiled = compile_model(model, x[:1], out, mode=mode, calibration=[x])
    host.build(compiled.project)
    return compiled


@pytest.fixture(scope="module", params=MODES)
def compiled(request, tmp_path_factory) -> CompiledModel:
    return _compiled(request.param, tmp_path_factory.mktemp(request.param) / "p")


def _run(compiled: CompiledModel, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    exe = compiled.project.directory / compiled.project.name
    return subprocess.run(
        [str(exe), *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False
    )


def _samples(n: int = 5) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((n, 1, 8, 8)).astype(np.float32)


def test_a_lone_argument_is_a_usage_error_not_a_fallback(compiled, tmp_path):
    _samples().tofile(tmp_path / "inputs.bin")  # the old default would be read silently
    _samples().tofile(tmp_path / "mine.bin")
    for args in (["mine.bin"], ["a", "b", "c"]):
        result = _run(compiled, *args, cwd=tmp_path)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("usage: ") and "[INPUTS OUTPUTS]" in result.stderr
    assert not (tmp_path / "outputs.bin").exists()


def test_no_arguments_read_inputs_bin_and_two_arguments_name_the_files(compiled, tmp_path):
    samples = _samples()
    samples.tofile(tmp_path / "inputs.bin")
    samples.tofile(tmp_path / "in.bin")
    assert _run(compiled, cwd=tmp_path).returncode == 0
    assert _run(compiled, "in.bin", "out.bin", cwd=tmp_path).returncode == 0
    dtype = compiled.project.output_dtype
    default = np.fromfile(tmp_path / "outputs.bin", dtype=dtype).reshape(5, -1)
    named = np.fromfile(tmp_path / "out.bin", dtype=dtype).reshape(5, -1)
    np.testing.assert_array_equal(default, named)
    reference = compiled.reference(samples).reshape(5, -1)
    np.testing.assert_allclose(named, reference, rtol=1e-5, atol=0)


@pytest.mark.parametrize(
    ("content", "words"),
    [
        (None, ["No such file"]),
        (b"", ["holds no samples"]),
        (b"\0" * 100, ["ends inside sample 0", "100 of 256 bytes"]),
        (b"\0" * (64 * 4 * 2 + 8), ["ends inside sample 2", "8 of 256 bytes"]),
        (b"\0" * (64 * 4 + 3), ["ends inside sample 1", "3 of 256 bytes"]),
    ],
    ids=["missing", "empty", "short", "trailing-floats", "trailing-bytes"],
)
def test_a_missing_empty_or_short_input_file_is_an_error(compiled, tmp_path, content, words):
    if content is not None:
        (tmp_path / "in.bin").write_bytes(content)
    result = _run(compiled, "in.bin", "out.bin", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    for word in words:
        assert word in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.splitlines()) == 1


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_a_non_finite_sample_stops_the_program_naming_sample_and_element(compiled, tmp_path, value):
    samples = _samples()
    samples[3, 0, 2, 5] = value
    samples.tofile(tmp_path / "in.bin")
    result = _run(compiled, "in.bin", "out.bin", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    assert "sample 3 element 21 is NaN or Inf" in result.stderr
    # the rows before the bad sample are there and right; nothing after it
    rows = np.fromfile(tmp_path / "out.bin", dtype=compiled.project.output_dtype).reshape(3, -1)
    reference = compiled.reference(samples[:3]).reshape(3, -1)
    np.testing.assert_allclose(rows, reference, rtol=1e-5, atol=0)


def test_an_overflow_inside_the_dynamic_model_stops_c_and_python_alike(compiled, tmp_path):
    samples = _samples()
    samples[2] = 3e38  # finite, but the first layer's outputs overflow float32
    samples.tofile(tmp_path / "in.bin")
    result = _run(compiled, "in.bin", "out.bin", cwd=tmp_path)
    if compiled.mode == "static":  # integer-only: huge inputs clamp to the code range
        assert result.returncode == 0, result.stderr
        rows = np.fromfile(tmp_path / "out.bin", dtype=np.int32).reshape(5, -1)
        np.testing.assert_array_equal(rows, compiled.reference(samples).reshape(5, -1))
        return
    from mico.errors import InputError

    assert result.returncode == 4, result.stderr
    assert "sample 2 overflows float32 inside the model" in result.stderr
    with pytest.raises(InputError, match=r"input sample 2: an activation overflowed float32"):
        compiled.reference(samples)


HARNESS = r"""
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "model.h"

int main(void)
{
    static float x[MODEL_INPUT_SIZE];
    static model_output_t y[MODEL_OUTPUT_SIZE];
    static model_output_t untouched[MODEL_OUTPUT_SIZE];
    const float bad[3] = {NAN, INFINITY, -INFINITY};
    int i;
    memset(y, 0x5a, sizeof y);
    memcpy(untouched, y, sizeof y);
    for (i = 0; i < 3; i++) {
        x[MODEL_INPUT_SIZE - 1] = bad[i];
        if (model_run(x, y) != MODEL_ERR_NONFINITE || memcmp(y, untouched, sizeof y)) {
            return 10 + i;
        }
    }
    x[MODEL_INPUT_SIZE - 1] = 1e-45f; /* a denormal is finite */
    if (model_run(x, y) != MODEL_OK || !memcmp(y, untouched, sizeof y)) {
        return 20;
    }
    puts("ok");
    return 0;
}
"""


def test_run_returns_a_status_and_computes_nothing_on_non_finite_input(compiled, tmp_path):
    project = compiled.project.directory
    (tmp_path / "harness.c").write_text(HARNESS)
    sources = [str(project / f) for f in compiled.project.files if f.endswith(".c")]
    sources = [s for s in sources if not s.endswith("main.c")]
    exe = tmp_path / "harness"
    subprocess.run(
        ["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", "-I", str(project), "-o", str(exe),
         str(tmp_path / "harness.c"), *sources, "-lm"],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    result = subprocess.run([str(exe)], capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0 and result.stdout == "ok\n", result


def test_the_python_side_refuses_the_same_samples(compiled):
    from mico.errors import InputError

    samples = _samples()
    samples[3, 0, 2, 5] = np.nan
    for run in (compiled.reference, lambda s: host.run(compiled.project, s)):
        with pytest.raises(InputError, match=r"sample 3 holds nan at element 21"):
            run(samples)
    assert host.run(compiled.project, samples[:0]).shape == (0, 10)  # nothing to run
