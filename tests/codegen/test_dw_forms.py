"""The depthwise pair path's forms (mico_qconv2d_dwp_f<sf><suffix> in mico_dwconv.c, named by
mico.codegen.dwconv_plan.dwp_form): the generator's mirror of the kernel's choice agrees with
the kernel's own form code on every layer of the pair-path tests (an entry point given a layer
of another form would hand it to mico_qconv2d_depthwise3x3), the forms the header lists carry
the codes the mirror gives their names, and a program links only the plane functions of its
layers' forms (the bit-exactness of each form's entry point: test_dw_pairs.py and
test_dw_lut.py, whose cases go through the entry point of their form)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from mico.codegen.dwconv_plan import dwp_form, dwp_levels
from mico.codegen.makefile import RV32_ARCH, RV32_GC, RV32_SECTIONS
from mico.ir.ops.mico_ops import out_spec
from mico.quant.arithmetic import TERNARY, QFormat
from tests.codegen import test_dw_lut, test_dw_pairs
from tests.codegen.dscnn_graph import zoo_graph
from tests.codegen.test_dwconv_lanes import kernels_rv32

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None, reason="needs gcc")

A2, A4 = QFormat(2, False), QFormat(4, False)


def _forced(weight, a_fmt, in_hw, out_hw, stride, padding, dilation, out_fmt=None):
    return {"s": 0, "q": 0, "sf": int(stride[1]), "pair": 1}


def _all_layers() -> list:
    return (
        test_dw_pairs._widths() + test_dw_pairs._edges() + test_dw_pairs._lanes()
        + test_dw_pairs._levels() + test_dw_pairs._read2() + test_dw_lut._packed_rows()
        + test_dw_lut._fallbacks() + _forms()
    )  # fmt: skip


def _forms() -> list:
    """Layers of the forms the other cases leave out: transposed rows of 5 outputs (read field
    by field), 4-bit outputs stored packed at stride 2, 8-bit codes in short rows of 5 with
    outputs by thresholds, short rows at stride 2, words of K (and 5) lanes requantized and by
    table, with a channel whose levels are too far apart for its table (requantized words) or
    none, signed codes by table (no 5 lanes), rows of whole bytes by table (3-bit outputs) and
    stored packed, with such a channel."""
    lay = test_dw_lut._layer
    a8, o8, s4 = QFormat(8, False), QFormat(8, False), QFormat(4, True)
    layers = [
        lay(5, 40, a=QFormat(3, False), o=QFormat(3, False), wb=3, c=2, seed=200),
        lay(5, 40, a=A2, o=A2, wb=3, c=2, seed=201),
        lay(32, 32, wb=2, c=2, stride=2, seed=202),
        lay(16, 16, wb=2, c=2, seed=203),
        lay(25, 5, a=a8, o=A2, wb=4, c=2, seed=204),  # _s_t_r5
        lay(9, 7, c=2, stride=2, seed=205),  # f2 _s_q
        lay(20, 4, o=o8, c=2, seed=206),  # _s_k5_q (transposed)
        lay(20, 7, o=o8, c=2, seed=207),  # _s_k_q
        lay(20, 4, c=2, seed=208),  # _s_k5_l_x
        lay(25, 5, a=s4, o=A4, c=2, seed=209),  # _s_k_l_r5_x
    ]
    far = [  # one channel's levels 300 lane values apart: no table for it
        lay(20, 7, c=3, seed=210),  # _s_k_l
        lay(20, 4, c=3, seed=211),  # _s_k5_l
        lay(25, 5, c=3, seed=212),  # _s_k5_l_r5
        lay(25, 5, a=s4, o=A4, c=3, seed=213),  # _s_k_l_r5
        lay(16, 16, o=QFormat(3, False), c=3, seed=214),  # _r_k_l
        lay(16, 16, c=3, seed=215),  # _r_k_n
    ]
    for layer in far:
        layer.weight[1] = 7
        layer.m[1], layer.shift[1] = 2**36 // 300, 36
    # outputs of at most 4 codes with no channel's table (levels 290 lane values apart, the
    # first one near 0: a step past a byte): by thresholds in words of K lanes
    apart = [
        lay(16, 16, o=A2, c=2, seed=216),  # _r_k_t
        lay(20, 7, o=A2, c=2, seed=217),  # _s_k_t
        lay(25, 5, a=s4, o=A2, c=2, seed=218),  # _s_k_t_r5 (signed codes: no 5 lanes)
    ]
    for layer in apart:
        layer.weight[:] = 3  # sums of 27 codes: 3 lanes, a spare top bit (15 * 27 < 512)
        layer.m[:], layer.shift[:] = 2**36 // 290, 36
        layer.bias[:] = 145 - 5 + (8 * 27 if layer.a_fmt.signed else 0)  # t_1 = 5
    return layers + far + apart


def _mirror(layer) -> tuple[int, str]:
    spec = out_spec(layer.o_fmt, 1.0, list(layer.m), list(layer.shift))
    lvl = dwp_levels(layer.weight, layer.bias, spec, layer.relu, layer.a_fmt)
    s = layer.stride
    return dwp_form(layer.a_fmt, layer.o_fmt, layer.x.shape[1:], layer.out_hw, (s, s), s,
                    layer.w_fmt.bits, (layer.o_fmt.qmin, layer.o_fmt.qmax), lvl,
                    layer.relu)  # fmt: skip


def _kernel_codes(layers, monkeypatch, tmp_path: Path) -> list[int]:
    """The kernel's form code of each layer (mico_qconv2d_dwp_code; -1: not taken)."""
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    lines = ["#include <stdio.h>", '#include "mico_nn.h"', "static uint8_t y[4];"]
    body = []
    for i, layer in enumerate(layers):
        code, _ = kernels_rv32._layer_code(layer, f"L{i}_", ("chosen",))
        lines += code
        body.append(f'    printf("form %d\\n", (int)mico_qconv2d_dwp_code(&L{i}_p_dw, &L{i}_l_dw, '
                    f"{layer.stride}));")  # fmt: skip
    lines.append("int main(void)\n{\n    (void)y;\n" + "\n".join(body) + "\n    return 0;\n}")
    (tmp_path / "main.c").write_text("\n".join(lines) + "\n")
    sources = [str(tmp_path / "main.c"), *kernels_rv32._sources(tmp_path)]
    exe = tmp_path / "main"
    subprocess.run(["gcc", "-std=c99", "-O1", "-I", str(tmp_path), *sources, "-o", str(exe)],
                   check=True, capture_output=True, text=True)  # fmt: skip
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    return [int(v) for v in re.findall(r"form (-?\d+)", out)]


def _header_forms() -> dict[str, int]:
    """{entry point: form code} of the header's MICO_DWP_FORMS."""
    header = (resources.files("mico.csrc") / "mico_nn.h").read_text()
    forms = {}
    for sf, name, code in re.findall(r"X\((\d), (_\w+), (?:[^)]*), (-?\d+)\)", header):
        forms[f"mico_qconv2d_dwp_f{sf}{name}"] = int(code)
    return forms


def test_mirror_agrees_with_the_kernel(monkeypatch, tmp_path):
    """On every pair-path test layer the kernel takes, the generator's form code is the
    kernel's, and its entry point exists with that code; the layers meet every form."""
    layers = _all_layers()
    codes = _kernel_codes(layers, monkeypatch, tmp_path)
    forms = _header_forms()
    assert len(codes) == len(layers)
    seen = set()
    for layer, code in zip(layers, codes, strict=True):
        mine, suffix = _mirror(layer)
        name = f"mico_qconv2d_dwp_f{layer.stride}{suffix}"
        assert name in forms, name
        if code >= 0:  # (layers the path does not take: any entry point hands them over)
            case = (layer.a_fmt, layer.o_fmt, layer.w_fmt, layer.x.shape, layer.stride, name)
            assert mine == code == forms[name], (case, mine, code)
            seen.add(name)
    assert seen == set(forms), sorted(set(forms) - seen)  # every form met


def test_forms_of_the_header():
    """Each listed form's code is the one its name says, every name distinct."""
    forms = _header_forms()
    assert len(forms) == 41
    for name, code in forms.items():
        suffix = name.split("_f", 1)[1][1:]
        parts = suffix.strip("_").split("_")
        rd = "gsr".index(parts[0])
        k, k5 = "k" in parts or "k5" in parts, "k5" in parts
        out = next("qtln".index(p) for p in parts if p in ("q", "t", "l", "n"))
        r5 = "r5" in parts
        assert code == rd | k << 2 | k5 << 3 | out << 4 | r5 << 6, name


RV32_CC = "riscv64-unknown-elf-gcc"


def _linked(tmp_path: Path, layer) -> tuple[str, set[str]]:
    """The entry point of the layer's form and the functions a program calling it links (for
    rv32, one section a function, --gc-sections, as mico.targets.rv32.model_sizes)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    program = kernels_rv32.layers_program([layer], ("chosen",))
    (tmp_path / "main.c").write_text(program)
    sources = [tmp_path / "main.c", tmp_path / "mico_dwconv.c", tmp_path / "mico_conv2d.c"]
    kernels_rv32._sources(tmp_path)
    objects = []
    for src in sources:
        obj = tmp_path / f"{src.stem}.o"
        subprocess.run([RV32_CC, *shlex.split(RV32_ARCH), "--specs=picolibc.specs", "-O2",
                        "-std=c99", *shlex.split(RV32_SECTIONS), "-I", str(tmp_path), "-c",
                        str(src), "-o", str(obj)], check=True)  # fmt: skip
        objects.append(str(obj))
    elf = tmp_path / "m.elf"
    subprocess.run([RV32_CC, *shlex.split(RV32_ARCH), "-nostdlib", "-nostartfiles", RV32_GC,
                    "-Wl,-e,main", "-Wl,--unresolved-symbols=ignore-all", "-o", str(elf),
                    *objects], check=True, capture_output=True)  # fmt: skip
    nm = subprocess.run(["riscv64-unknown-elf-nm", str(elf)], check=True, capture_output=True,
                        text=True).stdout  # fmt: skip
    names = {line.split()[-1].split(".")[0] for line in nm.splitlines() if line.strip()}
    entry = re.search(r"(mico_qconv2d_dw\w+)\(", program).group(1)
    return entry, names


@pytest.mark.skipif(
    shutil.which(RV32_CC) is None,
    reason="needs the rv32 toolchain "
    "(apt-get install gcc-riscv64-unknown-elf picolibc-riscv64-unknown-elf)",
)
def test_a_program_links_only_its_forms(tmp_path):
    """The form of words of 5 lanes, outputs by table, rows of 5 (DS-CNN's planes of 3-bit
    codes into 4 bits; its W4A4 layer's form before mico_qconv2d_dw4) links its table plane
    functions and none of the requantizing words or pairs, the packed rows' reads, the
    stride-2 or packed-store planes, the pairs' other reads; a pairs-only form (16 x 16 planes
    of 8-bit codes, rows read for both lanes at once) links no words of K lanes at all; the
    bit-sliced path's stride-1 entry point not the stride-2 kernel; DS-CNN's W4A4 layer
    (mico_qconv2d_dw4) none of the pair path but its table fill and weight decoding."""
    a3 = QFormat(3, False)
    dscnn = test_dw_lut._layer(25, 5, a=a3, o=A4, c=4, seed=22)
    entry, names = _linked(tmp_path / "a", dscnn)
    assert entry == "mico_qconv2d_dwp_f1_s_k5_l_r5_x"
    assert {"mico_dwp_m", "mico_dwp_k3_3r5", "mico_dwp_k4_3r5", "mico_dwp_lut"} <= names
    assert {"mico_dwp_fill_s", "mico_dwp_kbuild_s"} <= names
    unused = {"mico_dwp_k3_0", "mico_dwp_k4_0", "mico_dwp_k5_0", "mico_dwp_k3_0r5",
              "mico_dwp_kbuild_p", "mico_dwp_fill_r", "mico_dwp_fill_g", "mico_dwp_k4_4s2",
              "mico_dwp_k3_4", "mico_dwp_p1_0", "mico_dwp_p1_2", "mico_dwp_k5_2", "mico_dwp_p",
              "mico_dwp_kbuild5", "mico_qconv2d_dwp_f1", "mico_dwl", "mico_dwp_p5_0",
              "mico_dwp_p5_1"}  # fmt: skip
    assert not unused & names, unused & names
    pairs = test_dw_lut._layer(16, 16, wb=8, c=3, seed=16)
    entry, names = _linked(tmp_path / "b", pairs)
    assert entry.startswith("mico_qconv2d_dwp_f1_r_") and "_k" not in entry
    assert {"mico_dwp_p", "mico_dwp_fill_r", "mico_dwp_p1_0"} <= names
    assert not {"mico_dwp_m", "mico_dwp_k3_3", "mico_dwp_kbuild_s", "mico_dwp_kbuild5"} & names
    # the bit-sliced path at stride 1 (DS-CNN W2A2) links its own kernel only, no pair path
    sliced = test_dw_lut._layer(25, 5, a=A2, o=A2, wb=TERNARY, c=3, seed=24)
    entry, names = _linked(tmp_path / "c", sliced)
    assert entry == "mico_qconv2d_dwbs_s1" and "mico_dwb" in names
    assert not {"mico_dwb2", "mico_dwp_p", "mico_dwp_m", "mico_dwl"} & names
    rows5 = test_dw_lut._layer(25, 5, c=4, seed=22)
    entry, names = _linked(tmp_path / "d", rows5)
    assert entry == "mico_qconv2d_dw4"
    assert {"mico_qconv2d_dw4", "mico_dwp_lut", "mico_dwp_weights"} <= names
    assert not {"mico_dwp_p", "mico_dwp_m", "mico_dwl", "mico_dwb", "mico_dw8"} & names


def test_forms_bit_exact(monkeypatch):
    """The layers of the forms the other tests leave out equal the reference through their
    form's entry point, the plain kernel and the entry point of any form."""
    layers = _forms()
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", _forced)
    for layer, results in zip(layers, kernels_rv32.run_layers(layers), strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            case = (kernel, layer.a_fmt, layer.o_fmt, layer.x.shape, layer.stride)
            assert np.array_equal(out, ref), (case, np.flatnonzero(out != ref)[:8])
        assert results[0][0] == f"mico_qconv2d_dwp_f{layer.stride}{_mirror(layer)[1]}"
    # and through the entry points of any form (the kernel choosing, every function linked)
    monkeypatch.setattr(kernels_rv32, "dwp_form", lambda *args: (-1, ""))
    any_form = kernels_rv32.run_layers(layers, paths=("chosen",))
    for layer, results in zip(layers, any_form, strict=True):
        assert results[0][0] == f"mico_qconv2d_dwp_f{layer.stride}"
        assert np.array_equal(results[0][2], layer.reference().ravel())


def test_dscnn_form_bit_exact_in_one_entry(monkeypatch):
    """The chosen call of a DS-CNN-like layer (3-bit codes into 4 bits: at W4A4 the layer
    takes mico_qconv2d_dw4) is its form's entry point and equals the reference (the plan's
    own choice, not forced)."""
    layer = test_dw_lut._layer(25, 5, a=QFormat(3, False), o=A4, c=6, seed=23)
    (chosen, _, out), _ = kernels_rv32.run_layer(layer)
    assert chosen == "mico_qconv2d_dwp_f1_s_k5_l_r5_x"
    assert np.array_equal(out, layer.reference().ravel())


def test_generated_dscnn_calls_its_form(tmp_path):
    """End to end: dscnn with 4-bit weights and 3-bit activations (at W4A4 its depthwise
    layers take mico_qconv2d_dw4) emits its depthwise layers' form (words of 5 lanes, outputs
    by table, rows of 5), the kernel's own code for each call (no hand-over), and the program
    equals the Python reference."""
    import torch

    from mico.codegen import emit_c_project
    from mico.execute import run_graph
    from mico.models import from_zoo
    from mico.targets import host

    n = from_zoo("dscnn").n_layers
    graph, example, gen = zoo_graph("dscnn", [4] * n, [8] + [3] * (n - 1), 3)
    project = emit_c_project(graph, tmp_path / "c", "m")
    source = (project.directory / "m.c").read_text()
    calls = re.findall(r"(mico_qconv2d_dwp_f1\w*)\(&(\w+), &(\w+),", source)
    assert [c[0] for c in calls] == ["mico_qconv2d_dwp_f1_s_k5_l_r5_x"] * 4
    checks = "".join(
        f'    printf("form %d\\n", (int)mico_qconv2d_dwp_code(&{p}, &{lanes}, 1));\n'
        for _, p, lanes in calls
    )
    (project.directory / "m.c").write_text(
        source
        + "\n#include <stdio.h>\nvoid m_forms(void);\nvoid m_forms(void)\n{\n"
        + checks
        + "}\n"
    )
    (tmp_path / "forms.c").write_text("void m_forms(void);\nint main(void)\n{\n    m_forms();\n}\n")
    sources = [str(f) for f in project.directory.glob("*.c") if f.name != "main.c"]
    exe = tmp_path / "forms"
    subprocess.run(["gcc", "-std=c99", "-O1", "-I", str(project.directory), *sources,
                    str(tmp_path / "forms.c"), "-o", str(exe), "-lm"], check=True)  # fmt: skip
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    assert [int(v) for v in re.findall(r"form (-?\d+)", out)] == [_header_forms()[calls[0][0]]] * 4
    (project.directory / "m.c").write_text(source)
    host.build(project)
    samples = torch.randn((2, *example.shape[1:]), generator=gen)
    reference = run_graph(graph, samples)[0].numpy()
    c_out = host.run(project, samples.numpy())
    assert np.array_equal(c_out.reshape(reference.shape), reference)
