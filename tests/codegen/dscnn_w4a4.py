"""The DS-CNN graph the depthwise end-to-end tests compile: the zoo's dscnn at W4A4 (8-bit input
codes for the first layer), fused, calibrated on seeded data and lowered to static mode."""

from __future__ import annotations

from typing import Any


def dscnn_w4a4_graph() -> tuple[Any, Any, Any]:
    """(lowered graph, example input, the seeded generator, advanced past calibration: draw the
    test's samples from it)."""
    import torch

    from mico.ir import extract_ir
    from mico.models import from_zoo
    from mico.passes import lower_static
    from mico.quant import calibrate, fuse_model

    torch.manual_seed(3)
    model = from_zoo("dscnn")
    n = model.n_layers
    model.set_qscheme([[4] * n, [8] + [4] * (n - 1)], act_mode="static")
    example = model.example_input()
    gen = torch.Generator().manual_seed(3)
    model = fuse_model(model, example).eval()
    calibrate(model, [torch.randn((4, *example.shape[1:]), generator=gen)])
    graph = lower_static(extract_ir(model, example), [torch.randn((4, *example.shape[1:]))])
    return graph, example, gen
