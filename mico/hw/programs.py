"""Per-layer latency profiles on targets that run programs: one single-layer C program per
layer shape and bit pair.

``program_backend(spec)`` is a :class:`mico.hw.measure.Backend` for a target file whose runner
runs C (``host``, ``qemu-rv32``, ``verilator-vexriscv``): to measure a layer it builds a model
of that one layer (Conv2d, depthwise Conv2d, Conv1d or Linear with the shape's geometry and
seeded weights), quantizes it statically at the pair's widths, calibrates it on seeded inputs,
emits its C project and measures the layer's own node in an instrumented build
(:mod:`mico.hw.nodes`): the input quantization and output copy around it are not counted.
One layer costs one compile and one run (seconds), so a profile of this kind is slow but
resumable; ``mico profile --target rv32`` uses it.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
import tempfile
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

import torch
from torch import nn

from mico.errors import ConfigError
from mico.hw.keys import ProgramKey
from mico.hw.layers import LayerShape
from mico.hw.measure import Backend
from mico.hw.profile import fingerprint
from mico.targets.catalog import TargetSpec

#: runners whose programs the per-node counters measure
PROGRAM_RUNNERS = ("host", "qemu-rv32", "verilator-vexriscv")
#: the widths a program profile measures (each of them against each): BitFusion's, so that the
#: proxies of different targets see the same pairs
PROFILE_BITS = (2, 4, 8)
#: pairs a program profile measures besides those, when the target runs them: binary layers
#: take popcount kernels (from a size on, :mod:`mico.codegen.binary_plan`) that no other pair
#: shows
PROFILE_EXTRA_PAIRS = ((1, 1),)
#: pairs a program profile measures for :data:`mico.hw.profile.SIGN_WEIGHT_KINDS` only, when
#: the target runs them: binary weights on 8-bit codes take the sign tables
#: (``mico_qconv2d_sign_lut``, :mod:`mico.codegen.sign_lut_plan`) from a size on, which no
#: other pair shows (ternary weights on wide codes, W2A8, are among the
#: pairs of :data:`PROFILE_BITS`: 2-bit signed codes are ternary, ``mico_qconv2d_addsub2``)
PROFILE_SIGN_PAIRS = ((1, 8),)
CALIBRATION_SAMPLES = 8


class _One(nn.Module):
    """A model of one layer (named ``layer``), as a plan names it."""

    def __init__(self, layer: nn.Module) -> None:
        super().__init__()
        self.layer = layer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layer(x)


def _padding(size: int, out: int, kernel: int, stride: int) -> int:
    """The symmetric padding that turns ``size`` into ``out`` (0 when none is needed)."""
    return max(0, math.ceil(((out - 1) * stride + kernel - size) / 2))


def single_layer(shape: LayerShape) -> tuple[nn.Module, tuple[int, ...]]:
    """A one-layer model with ``shape``'s geometry and one sample's input shape."""
    (kh, kw), (sh, sw) = shape.kernel, shape.stride
    (ih, iw), (oh, ow) = shape.in_size, shape.out_size
    if shape.kind in ("conv2d", "dwconv2d"):
        padding = (_padding(ih, oh, kh, sh), _padding(iw, ow, kw, sw))
        layer: nn.Module = nn.Conv2d(
            shape.in_channels, shape.out_channels, (kh, kw), (sh, sw), padding,
            groups=shape.groups,
        )  # fmt: skip
        sample: tuple[int, ...] = (shape.in_channels, ih, iw)
    elif shape.kind == "conv1d":
        layer = nn.Conv1d(shape.in_channels, shape.out_channels, kw, sw,
                          _padding(iw, ow, kw, sw), groups=shape.groups)  # fmt: skip
        sample = (shape.in_channels, iw)
    elif shape.kind == "linear":
        layer = nn.Linear(shape.in_channels, shape.out_channels)
        sample = (shape.in_channels,) if iw == 1 else (iw, shape.in_channels)
    else:
        raise ConfigError(f"no single-layer program for layer kind '{shape.kind}'")
    return _One(layer), sample


def _layer_project(shape: LayerShape, spec: TargetSpec, tmp: Path, seed: int) -> tuple:
    """The single-layer program of ``shape`` generated for ``spec`` into ``tmp``: its project,
    graph and input sample."""
    from mico.codegen import emit_c_project
    from mico.hw.measure import spec_extensions
    from mico.pipeline import lower_model, quantize_ptq
    from mico.quant import QuantConfig, QuantPlan
    from mico.quant.arithmetic import format_bits

    torch.manual_seed(seed)
    model, sample = single_layer(shape)
    model.eval()
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn((CALIBRATION_SAMPLES, *sample), generator=generator)
    plan = QuantPlan.parse(f"layer={format_bits(shape.w_bits)}/{format_bits(shape.a_bits)}")
    quantized = quantize_ptq(model, plan, [inputs], QuantConfig(act_mode="static"))
    graph = lower_model(quantized, inputs[:1], "layer", calibration=[inputs])
    project = emit_c_project(graph, tmp / "layer", "layer", sample_inputs=inputs[:1],
                             isa_extensions=spec_extensions(spec))  # fmt: skip
    return project, graph, inputs[0].numpy()


def measure_layer_keyed(
    shape: LayerShape,
    spec: TargetSpec,
    known: Sequence[tuple[ProgramKey, float]] = (),
    seed: int = 0,
) -> tuple[float, ProgramKey]:
    """The layer's own cost (instructions, or cycles on VexRiscv) in a single-layer program,
    and the key of that program; an earlier measurement of the identical program (``known``)
    is returned without building anything."""
    from mico.hw.nodes import node_costs, profiling_main

    with tempfile.TemporaryDirectory(prefix="mico-layer-") as tmp:
        project, graph, sample = _layer_project(shape, spec, Path(tmp), seed)
        key = ProgramKey.of_project(project.directory, profiling_main(project.name))
        for old, latency in reversed(list(known)):
            if old.same_program(key):
                return latency, key
        costs = node_costs(project, spec.runner, sample, isa=spec.isa)
    layer_nodes = {n.name for n in graph.nodes if n.attrs.get("layer") == "layer"}
    values = [count for name, count in costs.nodes if name in layer_nodes]
    if not values:
        raise ConfigError(f"the single-layer program of {shape.kind} has no node of the layer")
    return float(sum(values)), key


def measure_layer(shape: LayerShape, spec: TargetSpec, seed: int = 0) -> float:
    """The layer's own cost (instructions, or cycles on VexRiscv) in a single-layer program."""
    return measure_layer_keyed(shape, spec, (), seed)[0]


def _measure_keyed(
    spec: TargetSpec, shape: LayerShape, known: Sequence[tuple[ProgramKey, float]]
) -> tuple[float, ProgramKey]:
    """:func:`measure_layer_keyed` with the target first: a backend's ``keyed`` measurement as
    a picklable partial, which ``mico profile --jobs`` runs in worker processes."""
    return measure_layer_keyed(shape, spec, known)


def kernels_hash() -> str:
    """A hash of all of mico's C kernels (what benchmarks record beside their figures; the
    profiles key each record by its own program instead, :mod:`mico.hw.keys`)."""
    digest = hashlib.sha256()
    folder = resources.files("mico.csrc")
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith((".c", ".h")):
            digest.update(entry.name.encode())
            digest.update(entry.read_bytes())
    return digest.hexdigest()


def program_backend(spec: TargetSpec) -> Backend:
    """A profiling backend that measures single-layer C programs on ``spec``'s runner."""
    if spec.runner not in PROGRAM_RUNNERS:
        raise ConfigError(
            f"target '{spec.name}' (runner {spec.runner}) runs no programs mico can count per "
            f"layer; program runners: {', '.join(PROGRAM_RUNNERS)}"
        )
    bits = tuple(b for b in PROFILE_BITS if b in spec.weight_bits and b in spec.activation_bits)
    if not bits:
        raise ConfigError(
            f"target '{spec.name}' runs none of the profiled widths {PROFILE_BITS} for both "
            "weights and activations"
        )
    unit = "cycles" if spec.cost == "cycles" else "instructions"
    # the records are keyed by their programs (mico.hw.keys), not by the kernels of the day:
    # the file is the target's, whatever the kernels
    identity = {"runner": spec.runner, "isa": spec.isa, "cost": spec.cost,
                "extensions": sorted(spec.extensions), "records": "keyed"}  # fmt: skip
    extra = tuple((w, a) for w, a in PROFILE_EXTRA_PAIRS
                  if w in spec.weight_bits and a in spec.activation_bits)  # fmt: skip
    sign = tuple((w, a) for w, a in PROFILE_SIGN_PAIRS
                 if w in spec.weight_bits and a in spec.activation_bits)  # fmt: skip
    return Backend(
        spec.name, unit, lambda layer: measure_layer(layer, spec), bits, fingerprint(identity),
        keyed=functools.partial(_measure_keyed, spec), extra_pairs=extra, sign_pairs=sign,
    )  # fmt: skip


def resolve_backend(target: str, targets_dirs: Sequence[str | os.PathLike[str]] = ()) -> Backend:
    """The profiling backend of ``target``: a built-in one (bitfusion), BitFusion's model for
    other ``analytic-bitfusion`` target files, single-layer programs for the others."""
    import dataclasses

    from mico.hw.bitfusion import BitFusionConfig
    from mico.hw.measure import BACKENDS, bitfusion_backend
    from mico.targets.catalog import load_catalog

    if target in BACKENDS:
        return BACKENDS[target]()
    catalog = load_catalog(targets_dirs)
    if target not in catalog:
        raise ConfigError(
            f"no per-layer latency backend for target '{target}'; backends: "
            f"{', '.join(sorted({*BACKENDS, *catalog}))} (a board: a YAML file in "
            "--targets-dir or $MICO_TARGETS_DIR, see mico targets)"
        )
    spec = catalog[target]
    if spec.runner == "analytic-bitfusion":
        config = BitFusionConfig(frequency_hz=spec.frequency_hz or BitFusionConfig.frequency_hz)
        return dataclasses.replace(bitfusion_backend(config), target=spec.name)
    return program_backend(spec)
