"""The depthwise kernels' layer programs (benchmarks/kernels_rv32.py) built under ASan and
UBSan, or run as built, and held to the Python reference: helpers for the depthwise tests."""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

import numpy as np

from tests.codegen.test_dwconv_lanes import kernels_rv32

SANITIZE = ("-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-g")


def pair_path_plan(weight, a_fmt, in_hw, out_hw, stride, padding, dilation, out_fmt=None):
    """A stand-in for ``kernels_rv32.dw_lane_plan``: the pair path's entry point of the
    layer's stride, whatever the plan would choose."""
    return {"s": 0, "q": 0, "sf": int(stride[1]), "pair": 1}


def pair_path_kernels(monkeypatch, layers: list) -> list[str]:
    """Run ``layers`` (one C program) on the pair path (:func:`pair_path_plan`) and on the
    plain kernel, hold every output to the reference, and return each layer's pair-path entry
    point."""
    monkeypatch.setattr(kernels_rv32, "dw_lane_plan", pair_path_plan)
    kernels = []
    for layer, results in zip(layers, kernels_rv32.run_layers(layers), strict=True):
        ref = layer.reference().ravel()
        for kernel, _, out in results:
            case = (kernel, layer.a_fmt, layer.o_fmt, layer.w_fmt, layer.x.shape, layer.stride,
                    layer.pad)  # fmt: skip
            assert np.array_equal(out, ref), (case, np.flatnonzero(out != ref)[:8])
        kernels.append(results[0][0])
    return kernels


def tight_program(layers: list) -> str:
    """The layers' program (chosen paths) with its output buffer cut to the largest output's
    bytes, no slack past the end: a store beyond it is an ASan report."""
    program = kernels_rv32.layers_program(layers, ("chosen",))
    n_bytes = max((lay.reference().size * lay.o_fmt.bits + 7) // 8 for lay in layers)
    assert f"y[{n_bytes + 4}]" in program
    return program.replace(f"y[{n_bytes + 4}]", f"y[{n_bytes}]")


def check_sanitized(program: str, layers: list, opt: str) -> None:
    """Build ``program`` with the depthwise kernels (and mico_conv2d.c, their fallback) under
    ASan + UBSan at ``opt``, run it, and hold every layer's output to the reference."""
    with tempfile.TemporaryDirectory(prefix="mico-dw-san-") as tmp:
        work = Path(tmp)
        (work / "main.c").write_text(program)
        kernels_rv32._sources(work)  # the headers and kernels; only these are built
        names = ("main.c", "mico_nn_run.c", "mico_dwconv.c", "mico_conv2d.c")
        sources = [str(work / f) for f in names]
        cmd = ["gcc", "-std=c99", opt, *SANITIZE, "-I", str(work), *sources, "-o", str(work / "m")]
        subprocess.run(cmd, check=True, capture_output=True, text=True)
        run = subprocess.run([str(work / "m")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    tokens = run.stdout.split()
    marks = [i for i, token in enumerate(tokens) if token == "instret"]
    for layer, i in zip(layers, marks, strict=True):
        raw = np.frombuffer(bytes.fromhex(tokens[i + 2]), dtype=np.uint8)
        out = kernels_rv32.unpack(raw, layer.reference().size, layer.o_fmt)
        assert np.array_equal(out, layer.reference().ravel()), (layer.x.shape, layer.o_fmt)
