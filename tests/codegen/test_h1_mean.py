"""mico_mean on packed codes (mico_pool.c's portable path: 1-, 2-, 4- and 8-bit codes summed a
word at a time) against the Python integer reference, in one C program: every such width,
unsigned, signed, binary and with a zero point, runs starting at every bit and byte offset
(counts 1 to 70, inputs at addresses 0 to 3 past a word), a 3-bit run (the unpacking path),
one or per-channel multipliers, 8- and 4-bit outputs, ReLU, DS-CNN's 64 x 125 means; on the
host under ASan and UBSan, and on rv32 under qemu (with its instruction counts)."""

from __future__ import annotations

import shutil
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from mico.quant.arithmetic import QFormat, requantize
from mico.quant.packing import pack, unpack
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")
SOURCES = ("mico_pool.c", "mico_nn_run.c")
SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all")
kernels_rv32 = load_benchmark("kernels_rv32")


def _case(rng, outer, count, in_fmt, *, zero=0, out_bits=8, per_channel=True, relu=False,
          offset=0):  # fmt: skip
    lo = in_fmt.qmin if not zero else -zero
    hi = in_fmt.qmax if not zero else 2**in_fmt.bits - 1 - zero
    codes = rng.integers(lo, hi + 1, size=outer * count)
    if in_fmt.binary:
        codes = np.where(codes == 0, 1, codes)
    o_fmt = QFormat(out_bits, not relu)
    n = outer if per_channel else 1
    spread = max(1.0, count * max(abs(lo), abs(hi)) / 2)
    real = (o_fmt.qmax - o_fmt.qmin + 1) / (2 * spread) * rng.uniform(0.5, 2.0, size=n)
    shift = np.clip(np.floor(30 - np.log2(real)).astype(np.int64), 33, 62)
    m = np.clip(np.round(real * 2.0**shift), 1, 2**31 - 1).astype(np.int64)
    return dict(outer=outer, count=count, in_fmt=in_fmt, zero=zero, codes=codes, o_fmt=o_fmt,
                m=m, shift=shift, relu=relu, offset=offset)  # fmt: skip


def _cases() -> list[dict]:
    rng = np.random.default_rng(7)
    cases = []
    formats = [QFormat(b, s) for b in (1, 2, 4, 8) for s in (False, True)]
    for f in formats:
        for count in (1, 2, 3, 5, 7, 9, 13, 31, 33, 70):
            cases.append(_case(rng, 5, count, f, offset=count % 4))
    for f in (QFormat(2, False), QFormat(4, False), QFormat(8, False)):
        cases.append(_case(rng, 6, 37, f, zero=2 ** (f.bits - 1) - 1, offset=1))
    for bits in (2, 4, 8):  # DS-CNN's global mean: 64 channels of 25 x 5
        cases.append(_case(rng, 64, 125, QFormat(bits, False), per_channel=False, relu=True))
    cases.append(_case(rng, 9, 41, QFormat(4, True), out_bits=4, relu=True, offset=2))
    cases.append(_case(rng, 4, 23, QFormat(3, True), offset=3))  # unpacked, not summed in words
    cases.append(_case(rng, 70, 3, QFormat(2, False)))  # more outputs than a run of 48
    return cases


def _field(c) -> str:
    f = c["in_fmt"]
    zero = f", .zero = {c['zero']}" if c["zero"] else ""
    return f"{{ .bits = {f.bits}, .is_signed = {int(f.signed)}{zero} }}"


def _program(cases) -> str:
    lines = ["#include <stdio.h>", '#include "mico_nn.h"', "static uint32_t buf[4096];",
             "static uint8_t y[256];", "static unsigned long mico_instret(void)", "{",
             "#if defined(__riscv)", "    unsigned long v;",
             '    __asm__ volatile(".insn i 0x73, 2, %0, zero, -1022" : "=r"(v));',
             "    return v;", "#else", "    return 0;", "#endif", "}"]  # fmt: skip
    body = []
    for i, c in enumerate(cases):
        fields = c["codes"] + c["zero"]
        raw = pack(fields, QFormat(c["in_fmt"].bits, False) if c["zero"] else c["in_fmt"])
        o = c["o_fmt"]
        lines += [
            f"static const uint8_t x{i}[] = {{ {', '.join(str(int(v)) for v in raw)} }};",
            f"static const int32_t m{i}[] = {{ {', '.join(str(int(v)) for v in c['m'])} }};",
            f"static const int32_t s{i}[] = {{ {', '.join(str(int(v)) for v in c['shift'])} }};",
            f"static const MicoMean p{i} = {{ .outer = {c['outer']}, .count = {c['count']}, "
            f".in_fmt = {_field(c)}, .out = {{ .fmt = {{ .bits = {o.bits}, .is_signed = "
            f"{int(o.signed)} }}, .relu = {int(c['relu'])}, .n_mult = {len(c['m'])}, "
            f".m = m{i}, .shift = s{i}, .lo = {o.qmin}, .hi = {o.qmax} }} }};",
        ]
        n_out = (c["outer"] * o.bits + 7) // 8
        body.append(f"""    {{
        uint8_t *in = (uint8_t *)buf + {c["offset"]};
        for (i = 0; i < sizeof x{i}; i++) in[i] = x{i}[i];
        t0 = mico_instret(); mico_mean(&p{i}, in, y); t1 = mico_instret();
        printf("instret %lu ", t1 - t0);
        for (i = 0; i < {n_out}; i++) printf("%02x", y[i]);
        printf("\\n");
    }}""")
    lines.append("int main(void)\n{\n    unsigned long t0, t1;\n    size_t i;\n" + "\n".join(body)
                 + "\n    return 0;\n}")  # fmt: skip
    return "\n".join(lines) + "\n"


def _reference(c) -> np.ndarray:
    acc = c["codes"].reshape(c["outer"], c["count"]).sum(axis=1)
    if c["relu"]:
        acc = np.maximum(acc, 0)
    per = len(c["m"]) > 1
    return np.array([requantize(np.array([a]), int(c["m"][k if per else 0]),
                                int(c["shift"][k if per else 0]), c["o_fmt"])[0]
                     for k, a in enumerate(acc)])  # fmt: skip


def _run(work: Path, target: str) -> list[tuple[int, bytes]]:
    cases = _cases()
    csrc = resources.files("mico.csrc")
    (work / "mico_nn.h").write_text((csrc / "mico_nn.h").read_text())
    for name in SOURCES:
        (work / name).write_text((csrc / name).read_text())
    (work / "main.c").write_text(_program(cases))
    sources = [str(work / n) for n in ("main.c", *SOURCES)]
    text = kernels_rv32.build_and_run(work, sources, target, "gcc", 600, host_flags=SANITIZE)
    tokens = text.split()
    marks = [i for i, t in enumerate(tokens) if t == "instret"]
    assert len(marks) == len(cases)
    out = []
    for c, j in zip(cases, marks, strict=True):
        got = unpack(np.frombuffer(bytes.fromhex(tokens[j + 2]), np.uint8), c["outer"], c["o_fmt"])
        assert np.array_equal(got, _reference(c)), (c["in_fmt"], c["count"], c["offset"])
        out.append((int(tokens[j + 1]), c))
    return out


def test_mean_host_bit_exact(tmp_path):
    _run(tmp_path, "host")


@pytest.mark.skipif(not rv32.available(), reason="needs the rv32 toolchain and qemu")
def test_mean_rv32_bit_exact_and_cheap(tmp_path):
    """On rv32: bit-exact, and DS-CNN's 4- and 2-bit means cost no more than its 8-bit one."""
    results = _run(tmp_path, "rv32")
    dscnn = {c["in_fmt"].bits: n for n, c in results if (c["outer"], c["count"]) == (64, 125)}
    print("DS-CNN mean, rv32 instructions by input bits:", dscnn)
    assert dscnn[4] <= dscnn[8] and dscnn[2] <= dscnn[8], dscnn
