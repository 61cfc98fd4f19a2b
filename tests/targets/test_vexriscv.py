"""The vexriscv target: the generated C, built for the VexRiscv test bench and run on the
verilated RTL core, equals qemu rv32 and the Python reference bit for bit; it retires exactly
qemu's instructions, and the bench's counts hold on a program whose count is known."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from mico.errors import BuildError, InputError
from mico.targets import rv32, vexriscv

pytestmark = pytest.mark.skipif(
    not vexriscv.available(),
    reason="vexriscv target missing (" + vexriscv.missing_tools_hint() + ")",
)

# Reads instret, runs 100 iterations of addi + bnez, reads instret again: the second read sees
# 1 (the first read) + 1 (li) + 200 instructions more. mcycle is read outside that window.
# The bench's VALUE register prints each difference; the exit status is 7.
TINY = """
    .option arch, +zicsr
    .section .text
    .globl _start
_start:
    li a5, 0xF0000000
    csrr s2, mcycle
    csrr s0, instret
    li t0, 100
1:  addi t0, t0, -1
    bnez t0, 1b
    csrr s1, instret
    csrr s3, mcycle
    sub a0, s1, s0
    sw a0, 0x0C(a5)
    sub a0, s3, s2
    sw a0, 0x0C(a5)
    li a0, 7
    sw a0, 0(a5)
2:  j 2b
"""


def _assemble(source: str, directory: Path, extra: tuple[str, ...] = ()) -> Path:
    """A bare program at the bench's RAM base (no libc, no crt)."""
    asm = directory / "tiny.S"
    asm.write_text(source)
    elf = directory / "tiny.elf"
    subprocess.run(
        ["riscv64-unknown-elf-gcc", "-march=rv32imac", "-mabi=ilp32", "-nostdlib",
         "-nostartfiles", "-Wl,-N", "-Wl,-Ttext=0x40000000", *extra, "-o", str(elf), str(asm)],
        check=True, capture_output=True,
    )  # fmt: skip
    return elf


def test_bench_counts_a_known_instruction_count(tmp_path):
    elf = _assemble(TINY, tmp_path)
    sim = vexriscv.simulate(elf)
    assert sim.status == 7
    printed = [int(line.split()[1]) for line in sim.stdout.splitlines()]
    instret, mcycle = printed
    assert instret == 202  # minstret is exact
    # the two reads the bench marked: their values differ by the same 202, and the cycles
    # between them are the program's mcycle difference less its two extra instructions' cycles
    assert sim.marks.shape == (2, 2)
    assert sim.marks[1, 1] - sim.marks[0, 1] == 202
    window = int(sim.marks[1, 0] - sim.marks[0, 0])
    assert 202 <= window <= mcycle <= window + 8
    # a taken bnez costs VexRiscv's branch penalty: 100 iterations take 2-4 cycles each
    assert 200 < window < 420
    assert sim.cycles > window


def test_bench_reports_traps_bad_elves_and_the_cycle_limit(tmp_path):
    spin = _assemble("    .globl _start\n_start:\n    j _start\n", tmp_path)
    with pytest.raises(BuildError, match=r"(?s)failed \(cycle limit\).*cycle limit of 5000"):
        vexriscv.simulate(spin, max_cycles=5000)
    not_elf = tmp_path / "junk.elf"
    not_elf.write_bytes(b"\x7fELF" + bytes(60))
    with pytest.raises(BuildError, match="not a 32-bit little-endian RISC-V ELF"):
        vexriscv.simulate(not_elf)
    with pytest.raises(BuildError, match=r"missing\.elf does not exist; build the project"):
        vexriscv.simulate(tmp_path / "missing.elf")
    with pytest.raises(BuildError, match=r"unknown VexRiscv variant 'Lite'.*IMAC, Full"):
        vexriscv.simulate(spin, variant="Lite")


@pytest.fixture(scope="module")
def vex_elf(project) -> Path:
    return vexriscv.build(project)


def test_model_equals_qemu_rv32_and_python_cycle_accurately(project, vex_elf, samples, reference):
    assert vex_elf.name == "cnn.vexriscv.elf" and vex_elf.read_bytes()[:4] == b"\x7fELF"
    result = vexriscv.run(project, samples)
    assert result.outputs.dtype == np.int32 and result.outputs.shape == (len(samples), 10)
    np.testing.assert_array_equal(result.outputs, reference)
    assert result.instructions.shape == result.cycles.shape == (len(samples),)
    assert result.instructions.min() > 1000
    assert (result.cycles >= result.instructions).all()
    assert (result.cycles < 4 * result.instructions).all()  # a pipelined core with caches
    if rv32.available():  # the same main.c, compiler, flags and picolibc: the same program
        rv32.build(project)
        qemu = rv32.run(project, samples)
        np.testing.assert_array_equal(result.outputs, qemu.outputs)
        np.testing.assert_array_equal(result.instructions, qemu.instructions)
    again = vexriscv.run(project, samples[:3])  # RTL simulation: cycles repeat exactly
    np.testing.assert_array_equal(again.cycles, result.cycles[:3])
    assert vexriscv.run(project, samples[:0]).outputs.shape == (0, 10)


def test_bad_samples_and_unbuilt_projects_raise(project, vex_elf, static_graph, tmp_path):
    with pytest.raises(BuildError, match="do not match the model input"):
        vexriscv.run(project, np.zeros((2, 1, 4, 4), np.float32))
    with pytest.raises(InputError, match="refuses NaN and Inf inputs"):
        vexriscv.run(project, np.full((1, 1, 8, 8), np.nan, np.float32))
    from mico.codegen import emit_c_project

    fresh = emit_c_project(static_graph, tmp_path / "fresh", "cnn")
    with pytest.raises(BuildError, match=r"cnn\.vexriscv\.elf does not exist; build the project"):
        vexriscv.run(fresh, np.zeros((1, 1, 8, 8), np.float32))
    with pytest.raises(BuildError, match=r"compressed instructions.*variant='Full'"):
        vexriscv.run(project, np.zeros((1, 1, 8, 8), np.float32), variant="Full")


def test_program_faults_and_exit_statuses_are_reported(static_graph, tmp_path):
    from mico.codegen import emit_c_project

    project = emit_c_project(static_graph, tmp_path / "bad", "cnn")
    main = project.directory / "main.c"
    main.write_text(
        "int main(void)\n{\n    *(volatile int *)0x10000000 = 1; /* nothing is mapped there */\n"
        "    return 0;\n}\n"
    )
    vexriscv.build(project)
    with pytest.raises(BuildError, match=r"(?s)\(bus error\).*wrote to 0x10000000 on the data"):
        vexriscv.run(project, np.zeros((1, 1, 8, 8), np.float32), timeout=60)
    main.write_text(  # fadd.s: no F extension, an illegal instruction the trap handler reports
        'int main(void)\n{\n    __asm__ volatile(".word 0x00000053");\n    return 0;\n}\n'
    )
    vexriscv.build(project)
    with pytest.raises(BuildError, match=r"(?s)\(trap\).*mcause 2 \(illegal instruction\)"):
        vexriscv.run(project, np.zeros((1, 1, 8, 8), np.float32), timeout=60)
    main.write_text(
        '#include <stdio.h>\nint main(void)\n{\n    fprintf(stderr, "no samples\\n");\n'
        "    return 3;\n}\n"
    )
    vexriscv.build(project)
    with pytest.raises(BuildError, match=r"(?s)failed \(exit 3\).*no samples"):
        vexriscv.run(project, np.zeros((1, 1, 8, 8), np.float32), timeout=60)


def test_compiler_errors_surface_with_the_tool_output(static_graph, tmp_path):
    from mico.codegen import emit_c_project

    project = emit_c_project(static_graph, tmp_path / "broken", "cnn")
    (project.directory / "cnn.c").write_text("int broken = ;\n")
    with pytest.raises(BuildError, match=r"(?s)building .* for vexriscv \(IMAC\) failed.*cnn\.c"):
        vexriscv.build(project)


def test_verilator_failures_raise_build_error(tmp_path, monkeypatch):
    """A bench that does not compile: verilator's error is in the message, nothing is cached."""
    bench = tmp_path / "bench"
    shutil.copytree(vexriscv.BENCH_DIR, bench)
    (bench / "bench.cpp").write_text("int main() { return undeclared; }\n")
    monkeypatch.setattr(vexriscv, "BENCH_DIR", bench)
    monkeypatch.setenv("MICO_CACHE", str(tmp_path / "cache"))
    with pytest.raises(
        BuildError, match=r"(?s)verilator failed to build the IMAC simulator.*undeclared"
    ):
        vexriscv.simulator("IMAC")
    assert not any((tmp_path / "cache" / "vexriscv").iterdir())


def test_full_variant_runs_the_rv32im_build(project, vex_elf, samples, reference):
    """Full (no C, no A): the project rebuilt for rv32im gives the same outputs and, here, the
    same instruction counts as rv32imac (compression changes sizes, not counts)."""
    imac = vexriscv.run(project, samples[:3])
    elf = vexriscv.build(project, "Full")
    assert not int.from_bytes(elf.read_bytes()[36:40], "little") & 1  # no EF_RISCV_RVC
    full = vexriscv.run(project, samples[:3], variant="Full")
    np.testing.assert_array_equal(full.outputs, reference[:3])
    np.testing.assert_array_equal(full.instructions, imac.instructions)
    assert (full.cycles >= full.instructions).all()
    vexriscv.build(project)  # back to IMAC for the module's other tests


def test_makefile_needs_the_bench_directory(project):
    result = subprocess.run(
        ["make", "-C", str(project.directory), "TARGET=vexriscv"], capture_output=True, text=True
    )
    assert result.returncode != 0
    assert "TARGET=vexriscv needs MICO_VEXRISCV=" in result.stderr


def test_mico_verify_runs_on_the_rtl_core_and_reports_cycles(tmp_path):
    import json

    from typer.testing import CliRunner

    from mico.cli import app

    out = tmp_path / "v"
    result = CliRunner().invoke(app, ["verify", "small_cnn", "--plan", "4/8", "--mode", "static",
                                      "--samples", "3", "--target", "rv32", "--target",
                                      "vexriscv", "-o", str(out)])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "vexriscv: 3/3 bit-exact" in result.output and "cycles/inference" in result.output
    rows = {r["target"]: r for r in json.loads((out / "verify.json").read_text())["targets"]}
    # the same program retires the same instructions on the core as under qemu
    assert (
        rows["vexriscv"]["instructions_per_inference"] == rows["rv32"]["instructions_per_inference"]
    )
    assert rows["vexriscv"]["cycles_per_inference"] > rows["vexriscv"]["instructions_per_inference"]
    assert "cycles / inference" in (out / "verify.md").read_text()
