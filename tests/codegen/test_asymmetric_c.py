"""Asymmetric (zero-point) activations in C: static projects equal the Python reference bit for
bit at every width (lanes, LUT activations, pooling, residual add and concat on shifted codes),
dynamic ones within the usual tolerance."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mico.codegen.compile import compile_model
from mico.errors import CompileError
from mico.quant import QuantConfig, calibrate, quantize_model
from mico.targets import host, rv32


class Skewed(nn.Module):
    """GELU / SiLU activations (ranges like [-0.17, 6]) through a product, residual add, max and
    average pooling, concat and a global mean: the static ops that read or write shifted codes."""

    def __init__(self) -> None:
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.c2 = nn.Conv2d(32, 32, 3, padding=1)
        self.c3 = nn.Conv2d(32, 16, 1)
        self.c4 = nn.Conv2d(48, 16, 3, padding=1)
        self.fc = nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = F.gelu(self.c1(x))
        b = F.gelu(self.c2(a)) * a  # a product of shifted and free codes
        c = F.silu(self.c3(F.max_pool2d(a + b, 2)))
        d = F.gelu(self.c4(torch.cat([c, F.max_pool2d(b, 2)], 1)))
        return self.fc(F.avg_pool2d(d, 2).mean((2, 3)))


def build(plan, mode: str, tmp_path, name: str = "m"):
    torch.manual_seed(0)
    model = Skewed().eval()
    config = QuantConfig(act_mode=mode, act_asymmetric=True)
    quantize_model(model, plan, config, example_inputs=torch.zeros(1, 3, 12, 12))
    batches = [torch.randn(8, 3, 12, 12) + 0.5 for _ in range(2)]
    calibrate(model, batches)
    compiled = compile_model(model, batches[0][:1], tmp_path / name, name, mode=mode,
                             calibration=batches)  # fmt: skip
    return model, compiled


def samples(n: int = 4) -> np.ndarray:
    return np.random.default_rng(1).standard_normal((n, 3, 12, 12)).astype(np.float32) + 0.5


# flat plans: the weights of the 5 layers, then their activations
MIXED = [8, 4, 2, 4, 8, 8, 5, 3, 6, 7]


@pytest.mark.parametrize("plan", ["8/8", "4/4", "2/2", "3/3", MIXED], ids=str)
def test_static_asymmetric_is_bit_exact(tmp_path, plan):
    model, compiled = build(plan, "static", tmp_path)
    zeros = [layer.act_zero for layer in model.modules() if hasattr(layer, "act_zero")]
    assert any(zeros)  # some layer really has a zero point
    source = "".join(p.read_text() for p in (tmp_path / "m").glob("m*.[ch]"))
    assert ".zero = " in source
    if plan == "4/4":  # shifted codes in signed channel lanes
        assert "_lanes_w4" in source
    host.build(compiled.project)
    x = samples()
    assert np.array_equal(host.run(compiled.project, x), compiled.reference(x))


@pytest.mark.parametrize("plan", ["8/8", "4/4", MIXED], ids=str)
def test_dynamic_asymmetric_matches_within_tolerance(tmp_path, plan):
    model, compiled = build(plan, "dynamic", tmp_path)
    params = (tmp_path / "m" / "m_weights.h").read_text()
    assert ".asymmetric = 1" in params  # a zero point per call
    host.build(compiled.project)
    x = samples()
    x[1] = 0.0  # scale 1, zero point 0
    x[2] = -np.abs(x[2])  # never positive: zero point 2^b - 1
    out, ref = host.run(compiled.project, x), compiled.reference(x)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    with torch.no_grad():
        eager = model(torch.from_numpy(x)).numpy()
    np.testing.assert_allclose(ref, eager, rtol=1e-5, atol=1e-5)


def test_static_zero_point_is_refused_in_dynamic_mode(tmp_path):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 4)).eval()
    quantize_model(model, "8/8", QuantConfig(act_asymmetric=True))
    calibrate(model, [torch.randn(16, 8)])
    with pytest.raises(CompileError, match="dynamic"):
        compile_model(model, torch.zeros(1, 8), tmp_path / "d", "d", mode="dynamic")


@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
def test_static_asymmetric_on_rv32(tmp_path):
    _, compiled = build(MIXED, "static", tmp_path)
    rv32.build(compiled.project)
    x = samples(2)
    assert np.array_equal(rv32.run(compiled.project, x).outputs, compiled.reference(x))


# --------------------------------------------------------------------------- C primitives
PRIMITIVES = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mico_nn.h"

/* p bits zero start n codes...: mico_pack at `start` over bytes 0xa5, then every reader.
 * q bits zero inv n floats (hex bit patterns)...: mico_quantize_f32, loaded back. */
int main(void)
{
    char cmd;
    MicoFmt f;
    long i, start, n;
    int bits, zero;
    f.is_signed = 0;
    while (scanf(" %c %d %d", &cmd, &bits, &zero) == 3) {
        int32_t codes[512], i32[512];
        int16_t i16[512];
        uint8_t buf[600], other[600];
        int32_t qmin, qmax;
        f.bits = bits;
        f.zero = (int16_t)zero;
        qmin = -f.zero;
        qmax = (1 << f.bits) - 1 - f.zero;
        if (cmd == 'q') {
            union { unsigned u; float x; } v[512];
            float inv;
            if (scanf("%x %ld", &v[0].u, &n) != 2) {
                return 2;
            }
            inv = v[0].x;
            for (i = 0; i < n; i++) {
                if (scanf("%x", &v[i].u) != 1) {
                    return 2;
                }
            }
            for (i = 0; i < n; i++) {
                float x = v[i].x;
                mico_quantize_f32(&x, buf, 1, inv, f, qmin, qmax);
                printf("%d ", mico_load(buf, 0, f));
            }
            printf("\n");
            continue;
        }
        if (scanf("%ld %ld", &start, &n) != 2) {
            return 2;
        }
        for (i = 0; i < n; i++) {
            if (scanf("%d", &codes[i]) != 1) {
                return 2;
            }
        }
        for (i = 0; i < 600; i++) {
            buf[i] = 0xa5;
            other[i] = 0xa5;
        }
        mico_pack(buf, (size_t)start, codes, (int32_t)n, f);
        for (i = 0; i < n; i++) {
            mico_store(other, (size_t)(start + i), codes[i], f);
        }
        mico_unpack(buf, (size_t)start, (int32_t)n, f, i16);
        mico_unpack_i32(buf, (size_t)start, (int32_t)n, f, i32);
        for (i = 0; i < (start + n) * f.bits / 8 + 2; i++) {
            printf("%d ", buf[i] == other[i] ? buf[i] : -1);
        }
        printf("|");
        for (i = 0; i < n; i++) {
            printf(" %d %d %d", i16[i], i32[i], mico_load(buf, (size_t)(start + i), f));
        }
        printf("\n");
    }
    return 0;
}
"""


@pytest.fixture(scope="module")
def primitives(tmp_path_factory):
    import subprocess
    from importlib import resources

    work = tmp_path_factory.mktemp("asym")
    csrc = resources.files("mico.csrc")
    for name in ("mico_nn.h", "mico_nn_run.c", "mico_quant.c"):
        (work / name).write_text((csrc / name).read_text())
    (work / "h.c").write_text(PRIMITIVES)
    exe = work / "h"
    subprocess.run(
        ["cc", "-std=c99", "-O1", "-Wall", "-Wextra", "-Werror", "-fsanitize=address,undefined",
         "-fno-sanitize-recover=all", "-o", str(exe), str(work / "h.c"),
         str(work / "mico_nn_run.c"), str(work / "mico_quant.c"), "-lm"],
        check=True,
    )  # fmt: skip

    def run(text: str) -> list[str]:
        out = subprocess.run([str(exe)], input=text, capture_output=True, text=True, check=True)
        return out.stdout.splitlines()

    return run


def test_c_primitives_store_and_read_shifted_codes(primitives):
    """mico_pack / mico_store write the fields code + z, and mico_unpack, mico_unpack_i32 and
    mico_load read them back, for every width 2..8, zero points across the range, any start
    and run length (the byte-at-a-time paths and the bit buffer)."""
    from mico.quant import QFormat, pack, unpack

    rng = np.random.default_rng(0)
    cases, lines = [], []
    for bits in range(2, 9):
        for zero in sorted({0, 1, 2 ** (bits - 1), 2**bits - 1, int(rng.integers(0, 2**bits))}):
            for start, n in ((0, 40), (3, 1), (5, 37), (8, 64), (1, 7)):
                fmt = QFormat.asymmetric(bits, zero)
                codes = rng.integers(fmt.qmin, fmt.qmax + 1, n)
                cases.append((fmt, start, codes))
                lines.append(f"p {bits} {zero} {start} {n} " + " ".join(map(str, codes)))
    for (fmt, start, codes), line in zip(cases, primitives("\n".join(lines)), strict=True):
        raw, _, reads = line.partition("|")
        stored = np.array(raw.split(), dtype=np.int64)
        assert (stored >= 0).all()  # mico_pack and mico_store wrote the same bytes
        fields = unpack(stored.astype(np.uint8), start + codes.size, QFormat(fmt.bits, False))
        assert np.array_equal(fields[start:], codes + fmt.zero)  # code + zero point
        before = unpack(np.full(8, 0xA5, np.uint8), start, QFormat(fmt.bits, False))
        assert np.array_equal(fields[:start], before)  # the elements before are kept
        got = np.array(reads.split(), dtype=np.int64).reshape(-1, 3)
        assert (got == codes[:, None]).all()
        assert np.array_equal(unpack(pack(codes, fmt), codes.size, fmt), codes)


def test_c_input_quantization_clamps_to_shifted_codes(primitives):
    from mico.quant import QFormat, quantize
    from mico.quant.arithmetic import inv_scale_f32

    rng = np.random.default_rng(1)
    cases, lines = [], []
    for bits in range(2, 9):
        zero = int(rng.integers(1, 2**bits))
        scale = float(rng.uniform(0.01, 0.5))
        x = (rng.standard_normal(60) * scale * 2**bits / 3).astype(np.float32)
        x[:3] = [0.0, -1e9, 1e9]
        inv = inv_scale_f32(scale)
        hexes = " ".join(f"{v:08x}" for v in x.view(np.uint32))
        lines.append(f"q {bits} {zero} {np.float32(inv).view(np.uint32):08x} {x.size} {hexes}")
        cases.append(quantize(x, scale, QFormat.asymmetric(bits, zero)))
    for expected, line in zip(cases, primitives("\n".join(lines)), strict=True):
        assert np.array_equal(np.array(line.split(), dtype=np.int64), expected)
