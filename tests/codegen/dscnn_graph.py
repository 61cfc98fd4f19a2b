"""The DS-CNN graphs the depthwise end-to-end tests compile: the zoo's dscnn at one weight and
activation width (8-bit input codes for the first layer), fused, calibrated on seeded data and
lowered to static mode; and the check that its generated program, under ASan + UBSan, calls a
kernel on every depthwise layer and equals the Python reference."""

from __future__ import annotations

from pathlib import Path
from typing import Any


def zoo_graph(name: str, w_bits: list, a_bits: list, seed: int) -> tuple[Any, Any, Any]:
    """The zoo model ``name`` at per-layer widths, fused, calibrated on seeded data and lowered
    to static mode: (lowered graph, example input, the seeded generator, advanced past
    calibration: draw the test's samples from it)."""
    import torch

    from mico.ir import extract_ir
    from mico.models import from_zoo
    from mico.passes import lower_static
    from mico.quant import calibrate, fuse_model

    torch.manual_seed(seed)
    model = from_zoo(name)
    model.set_qscheme([list(w_bits), list(a_bits)], act_mode="static")
    example = model.example_input()
    gen = torch.Generator().manual_seed(seed)
    model = fuse_model(model, example).eval()
    calibrate(model, [torch.randn((4, *example.shape[1:]), generator=gen)])
    graph = lower_static(extract_ir(model, example), [torch.randn((4, *example.shape[1:]))])
    return graph, example, gen


def dscnn_graph(bits: int, seed: int) -> tuple[Any, Any, Any]:
    """DS-CNN at ``bits`` (8-bit input codes for the first layer), as :func:`zoo_graph`."""
    from mico.models import from_zoo

    n = from_zoo("dscnn").n_layers
    return zoo_graph("dscnn", [bits] * n, [8] + [bits] * (n - 1), seed)


def check_sanitized_dscnn(bits: int, seed: int, call: str, folder: Path) -> None:
    """DS-CNN at ``bits`` calls ``call`` (a prefix of the kernel name, with what follows it) on
    its four depthwise layers, and its program built with ASan + UBSan equals the reference."""
    import numpy as np
    import torch

    from mico.codegen import emit_c_project
    from mico.execute import run_graph
    from mico.targets import host

    graph, example, gen = dscnn_graph(bits, seed)
    project = emit_c_project(graph, folder / "c", "m")
    assert (project.directory / "m.c").read_text().count(call) == 4
    host.build(project, sanitize=True)
    samples = torch.randn((2, *example.shape[1:]), generator=gen)
    reference = run_graph(graph, samples)[0].numpy()
    c_out = host.run(project, samples.numpy())
    assert np.array_equal(c_out.reshape(reference.shape), reference)
