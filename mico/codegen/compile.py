"""Compile a PyTorch model to a C project, in either execution mode.

* ``dynamic`` (the seed framework's behaviour): float32 between layers, each quantized layer
  quantizes its input at run time. The Python reference is the extracted graph run op by op
  (the PyTorch model's ops, with reductions summed in a fixed order): the C output must equal
  it to float rounding (1e-5 relative); ``pytorch()`` gives the eager model's outputs.
* ``static``: calibrated scales, integer-only requantization, activations packed at their
  bit-width. The Python reference is the lowered integer graph run op by op
  (:func:`mico.execute.run_graph`): the C output must equal it bit for bit.

The project directory is written atomically: a failure leaves nothing half-written and an
existing project untouched; a directory mico did not write is never replaced without ``force``.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mico.atomic import atomic_directory, check_output_dir
from mico.codegen.dynamic import prepare_dynamic
from mico.codegen.project import CProject, check_model_name, emit_c_project
from mico.errors import CompileError, InputError
from mico.ir.graph import Graph
from mico.numerics import check_finite_parameters, check_finite_samples

MODES = ("dynamic", "static")

#: the zoo models the C backend compiles in both modes (every CNN, MLP and 1-D model, and the
#: ViT: integer attention, softmax, LayerNorm and GELU in the static mode)
DEPLOYABLE_MODELS = (
    "mlp", "harmlp", "lenet", "cnn", "small_cnn", "vgg", "resnet8", "resnet20", "mobilenetv2",
    "squeezenet", "shufflenetv2", "dscnn", "m5", "kws_conv1d", "mnist1d_cnn", "vit_tiny",
    "tinyllama",
)  # fmt: skip
#: zoo models the dynamic (float between layers) mode compiles and the static one not (none
#: now: the LLaMa's embedding, RMSNorm, rotary embedding and causal softmax have integer
#: kernels, mico/passes/lower_llama.py). Token ids arrive as exact float32 integers in both
DYNAMIC_ONLY_MODELS: tuple[str, ...] = ()


@dataclass
class CompiledModel:
    """A generated project, the graph it was emitted from and its Python reference."""

    project: CProject
    graph: Graph
    mode: str
    model: nn.Module  # the model the C computes (BN folded, eval mode)

    def reference(self, samples: np.ndarray | torch.Tensor, batch_size: int = 256) -> np.ndarray:
        """What the C program must output for ``samples`` (N, *input_shape[1:]): the graph it
        was emitted from, run op by op by the reference executor (one sample at a time in the
        dynamic mode, whose graph has batch 1)."""
        from mico.execute import run_graph

        check_finite_samples(samples)
        x = torch.as_tensor(np.asarray(samples, dtype=np.float32))
        x = token_example(self.model, x)  # token ids: checked, then int64
        outs = []
        with torch.no_grad():
            if self.mode == "static":
                for start in range(0, len(x), batch_size):
                    outs.append(run_graph(self.graph, x[start : start + batch_size])[0])
            else:
                outs = [self._dynamic_reference(x, i) for i in range(len(x))]
        if not outs:
            return np.zeros((0, *self.project.output_shape[1:]), dtype=self.project.output_dtype)
        return torch.cat(outs).numpy().astype(self.project.output_dtype)

    def _dynamic_reference(self, x: torch.Tensor, i: int) -> torch.Tensor:
        """Sample ``i`` through the dynamic graph; an overflow names the sample."""
        from mico.execute.executor import run_ir

        try:
            return run_ir(self.graph, [x[i : i + 1]])[0]
        except InputError as exc:
            raise InputError(f"input sample {i}: {exc}") from None

    def pytorch(self, samples: np.ndarray | torch.Tensor) -> np.ndarray:
        """The PyTorch model's own outputs (eval mode, BN folded), for comparison."""
        check_finite_samples(samples)
        x = torch.as_tensor(np.asarray(samples, dtype=np.float32))
        x = token_example(self.model, x)  # token ids: int64
        with torch.no_grad():
            return self.model(x).numpy()


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise CompileError(f"unknown mode '{mode}'; use one of {', '.join(MODES)}")


def _check_example(example: torch.Tensor) -> None:
    """An example input is one or more finite samples with at least one element each."""
    if not isinstance(example, torch.Tensor):
        raise InputError(f"the example input must be a torch.Tensor, got {type(example).__name__}")
    if example.dim() == 0 or example.numel() == 0:
        raise InputError(
            f"the example input has shape {tuple(example.shape)}, which holds no sample "
            "elements; give one sample of the model's input shape, e.g. torch.randn(1, 1, 8, 8)"
        )
    check_finite_samples(example, "example input sample")


def embedding_layers(model: nn.Module) -> list[str]:
    """Names of the model's ``nn.Embedding`` layers (models that start from token ids)."""
    return [name for name, m in model.named_modules() if isinstance(m, nn.Embedding)]


def check_float_input(model: nn.Module, mode: str = "static") -> None:
    """Both modes take a model that starts from token ids (nn.Embedding layers reading the
    input); kept for callers that checked it (no model is refused here any more)."""
    del model, mode


def token_vocabulary(model: nn.Module) -> int | None:
    """The rows of the first embedding table of a model that starts from token ids."""
    for module in model.modules():
        if isinstance(module, nn.Embedding):
            return int(module.num_embeddings)
    return None


def token_example(model: nn.Module, example: torch.Tensor) -> torch.Tensor:
    """A token model's samples as int64 ids (they may arrive as float32 integers), each
    checked to be an integer in [0, vocabulary) as the C program checks it."""
    vocab = token_vocabulary(model)
    if vocab is None:
        return example
    flat = example.reshape(len(example), -1) if example.dim() else example.reshape(1, 1)
    bad = (flat < 0) | (flat >= vocab) | (flat != flat.round())
    if bool(bad.any()):
        sample, element = (int(i) for i in torch.nonzero(bad)[0])
        raise InputError(
            f"sample {sample} element {element} is {float(flat[sample, element])!r}, not a token "
            f"id: the model takes integers in [0, {vocab}) (it starts with an nn.Embedding)"
        )
    return example.round().long() if example.is_floating_point() else example


def _check_nonempty(graph: Graph) -> None:
    """Refuse a graph with a tensor of zero elements (a ``Linear(64, 0)``): the device has
    nothing to compute and the planner and kernels divide by such sizes."""
    for node in graph.nodes:
        for value in node.outputs:
            shape = tuple(getattr(value.type, "shape", ()))
            if shape and all(isinstance(d, int) for d in shape) and 0 in shape:
                raise CompileError(
                    f"'{node.name}' ({node.op}) outputs a tensor of shape {tuple(shape)}, which "
                    "has no elements; a layer with zero outputs (e.g. Linear(64, 0)) cannot be "
                    "deployed: give every layer at least one output feature or channel"
                )


def lower(
    model: nn.Module,
    example: torch.Tensor,
    mode: str = "dynamic",
    calibration: Sequence[torch.Tensor] | None = None,
    fuse: bool = True,
) -> tuple[Graph, nn.Module]:
    """The graph to emit for ``model`` and the (BN-folded, eval) model it computes."""
    from mico.ir import extract_ir
    from mico.quant import fuse_model

    _check_mode(mode)
    _check_example(example)
    check_float_input(model, mode)
    example = token_example(model, example)
    check_finite_parameters(model)
    if example.shape[0] != 1:
        example = example[:1]
    folded = copy.deepcopy(model).eval()  # the caller's model keeps its mode and layers
    if fuse:
        folded = fuse_model(folded, example, inplace=True)
    check_finite_parameters(folded)  # folding BN divides by its running variance
    folded, segments = single_output(folded, example)
    ir = extract_ir(folded, example)
    _check_nonempty(ir)
    if mode == "dynamic":
        graph = prepare_dynamic(ir)
    else:
        from mico.passes import lower_static

        batches = list(calibration) if calibration is not None else [example]
        if token_vocabulary(model) is not None:  # token ids as int64, checked
            batches = [
                b if isinstance(b, list | tuple) else token_example(model, torch.as_tensor(b))
                for b in batches
            ]
        graph = lower_static(ir, batches)
    graph.output_segments = segments
    return graph, folded


class _Concatenated(nn.Module):
    """A model with several outputs as one: each output flattened per sample, concatenated."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, *args: Any) -> torch.Tensor:
        outputs = self.model(*args)
        return torch.cat([o.reshape(o.shape[0], -1) for o in outputs], dim=1)


def single_output(model: nn.Module, example: torch.Tensor) -> tuple[nn.Module, list[dict]]:
    """``model`` and its outputs' segments of the C program's one output buffer.

    A model returning a tuple or list of tensors is wrapped so that its outputs, flattened per
    sample, follow one another in one buffer; each segment (name, shape, offset, size) is in
    the project's ``mico.json`` and header, and ``mico verify`` checks each one."""
    try:
        with torch.no_grad():
            result = model(example)
    except Exception:  # the extraction that follows names the problem (a zero-size layer...)
        return model, []
    if isinstance(result, torch.Tensor):
        return model, [{"name": "output", "shape": list(result.shape[1:]), "offset": 0,
                        "size": int(result[0].numel())}]  # fmt: skip
    if (
        not isinstance(result, tuple | list)
        or not result
        or not all(isinstance(o, torch.Tensor) for o in result)
    ):
        raise CompileError(
            f"the model returns {type(result).__name__}; the C backend takes one tensor or a "
            "tuple/list of tensors"
        )
    segments, offset = [], 0
    for i, out in enumerate(result):
        if out.dim() == 0 or out.shape[0] != example.shape[0]:
            raise CompileError(f"output {i} has shape {tuple(out.shape)}; give it a batch dim")
        size = int(out[0].numel())
        segments.append({"name": f"output{i}", "shape": list(out.shape[1:]), "offset": offset,
                         "size": size})  # fmt: skip
        offset += size
    wrapped = _Concatenated(model).eval()
    return wrapped, segments


def compile_model(
    model: nn.Module,
    example: torch.Tensor,
    out_dir: str | Path,
    name: str = "model",
    mode: str = "dynamic",
    calibration: Sequence[torch.Tensor] | None = None,
    align: int = 8,
    fuse: bool = True,
    *,
    force: bool = False,
    extras: Callable[[CompiledModel], None] | None = None,
    sample_inputs: Any = None,
    weights_file: bool = False,
    isa_extensions: Sequence[str] = (),
    patch: str = "off",
    prefer: str = "speed",
) -> CompiledModel:
    """Lower ``model`` (quantized or float) and write its C project into ``out_dir``.

    ``out_dir`` is refused before any work when it holds files mico did not write (unless
    ``force``), see :mod:`mico.atomic`. ``sample_inputs`` (default: ``example``) are bundled as
    the project's ``inputs.bin`` for ``make run``. ``extras`` writes further files (reports,
    plots) into the project while it is still the temporary directory, so they appear with it.
    ``weights_file``: the constants go to a weights file the program loads at run time
    (:mod:`mico.codegen.weights_file`) instead of its code. ``isa_extensions``: the target
    core's ISA extensions (its target file's ``extensions``), from which kernels choose their
    path (Zbb: ``cpop`` in the binary layers); other targets still build the project.
    ``patch``: ``"auto"`` runs the first high-resolution layers in row bands when that lowers
    the arena (:mod:`mico.codegen.patch_plan`; ``project.patch`` reports the arena with and
    without and the recomputed MACs), ``"off"`` keeps whole tensors. ``prefer``: ``"speed"``
    (the fast kernel paths) or ``"size"`` (the plain kernels only: least flash, slower).
    """
    check_model_name(name)
    from mico.codegen.linked_paths import check_preference
    from mico.codegen.patch_plan import check_patch_mode

    check_patch_mode(patch)
    check_preference(prefer)
    final = check_output_dir(out_dir, force=force)
    graph, folded = lower(model, example, mode, calibration, fuse)
    with atomic_directory(final, force=force, command="compile_model") as tmp:
        bundled = sample_inputs if sample_inputs is not None else example
        project = emit_c_project(graph, tmp, name, align=align, sample_inputs=bundled,
                                 weights_file=weights_file,
                                 isa_extensions=isa_extensions, patch=patch,
                                 prefer=prefer)  # fmt: skip
        if extras is not None:
            extras(CompiledModel(project, graph, mode, folded))
    project = dataclasses.replace(project, directory=final)
    return CompiledModel(project, graph, mode, folded)
