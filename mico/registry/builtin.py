"""Registration of what mico ships: layers, datasets, planners, searchers and targets.

Zoo models register themselves through :func:`mico.models.register_model` when
:mod:`mico.models` is imported; this module registers the rest. It runs once, the first time the
registry is queried (so ``import mico`` stays cheap), and each group is skipped quietly when its
package is not there yet.
"""

from __future__ import annotations

import importlib
from typing import Any

from torch import nn

from mico.registry.modules import ModuleRegistry

#: Plain torch layers that configs may name, with what both C modes can compile.
TORCH_LAYERS: dict[str, tuple[type[nn.Module], str, tuple[str, ...]]] = {
    "conv1d": (nn.Conv1d, "1-D convolution (quantizable)", ("quantizable",)),
    "conv2d": (nn.Conv2d, "2-D convolution (quantizable)", ("quantizable",)),
    "linear": (nn.Linear, "fully connected layer (quantizable)", ("quantizable",)),
    "batchnorm1d": (nn.BatchNorm1d, "batch normalisation, folded into the previous layer", ()),
    "batchnorm2d": (nn.BatchNorm2d, "batch normalisation, folded into the previous layer", ()),
    "relu": (nn.ReLU, "rectified linear unit", ("activation",)),
    "relu6": (nn.ReLU6, "ReLU clipped at 6", ("activation",)),
    "hardtanh": (nn.Hardtanh, "clamp to [min_val, max_val]", ("activation",)),
    "maxpool1d": (nn.MaxPool1d, "1-D max pooling", ("pooling",)),
    "maxpool2d": (nn.MaxPool2d, "2-D max pooling", ("pooling",)),
    "avgpool2d": (nn.AvgPool2d, "2-D average pooling", ("pooling",)),
    "adaptiveavgpool2d": (nn.AdaptiveAvgPool2d, "2-D adaptive average pooling", ("pooling",)),
    "flatten": (nn.Flatten, "flatten all dimensions after start_dim", ("shape",)),
    "dropout": (nn.Dropout, "dropout (identity at inference)", ()),
    "identity": (nn.Identity, "identity", ()),
}

#: Data sets generated or bundled with mico (no files needed).
OFFLINE_DATASETS = ("digits", "mnist1d", "synthetic", "synthetic_tokens")

_loaded = False


def load_builtin() -> None:
    """Register every built-in module once (idempotent)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    importlib.import_module("mico.models")  # zoo models register on import
    _declare_model_hardware()
    _register_layers()
    _register_datasets()
    _register_planners()
    for hook in ("mico.search.registration", "mico.targets.registration"):
        try:
            module = importlib.import_module(hook)
        except ModuleNotFoundError as exc:
            if exc.name != hook:
                raise
            continue
        module.register(ModuleRegistry)


def _add(obj: Any, name: str, category: str, **kwargs: Any) -> None:
    if ModuleRegistry.get_module(name) is None:
        ModuleRegistry.add(obj, name, category, **kwargs)


#: Tags a zoo model gets from its default data set, so that searches by task find it.
DATASET_TAGS: dict[str, tuple[str, ...]] = {
    "digits": ("vision", "image-classification", "digits"),
    "mnist": ("vision", "image-classification", "digits"),
    "fashion_mnist": ("vision", "image-classification"),
    "cifar10": ("vision", "image-classification"),
    "cifar100": ("vision", "image-classification"),
    "mnist1d": ("1d-signal", "classification"),
    "speechcommands": ("audio", "keyword-spotting", "speech"),
    "ucihar": ("sensor", "activity-recognition"),
    "tinystories": ("language", "text-generation"),
}


def _declare_model_hardware() -> None:
    """Zoo models the C backend compiles run on every C target; the others only in PyTorch."""
    from mico.codegen.compile import DEPLOYABLE_MODELS, DYNAMIC_ONLY_MODELS

    for meta in ModuleRegistry._registry.values():
        if meta.category != "model" or "zoo" not in meta.tags:
            continue
        dataset = meta.extra.get("dataset", "")
        for tag in (dataset, *DATASET_TAGS.get(dataset, ())):
            if tag and tag not in meta.tags:
                meta.tags.append(tag)
        if meta.hardware_support:
            continue
        if meta.name in DEPLOYABLE_MODELS:
            meta.hardware_support = ["host", "rv32", "rv64"]
        elif meta.name in DYNAMIC_ONLY_MODELS:
            meta.hardware_support = ["host", "rv32", "rv64"]
            meta.tags.append("dynamic-mode-only")
        elif "zoo" in meta.tags and "pytorch-only" not in meta.tags:
            meta.tags.append("pytorch-only")


def _register_layers() -> None:
    from mico.registry.factory import Add, Concat, Multiply

    for name, (cls, text, tags) in TORCH_LAYERS.items():
        _add(
            cls,
            name,
            "layer",
            description=text,
            tags=["torch", *tags],
            author="PyTorch",
            version="2.13",
            hardware_support=["host", "rv32", "rv64"],
        )
    for cls, name, text in (
        (Add, "add", "element-wise sum of every input (residual joins)"),
        (Concat, "cat", "concatenation of every input along a dimension"),
        (Multiply, "mul", "element-wise product of every input"),
    ):
        _add(
            cls,
            name,
            "layer",
            description=text,
            tags=["join"],
            author="mico",
            hardware_support=["host", "rv32", "rv64"],
        )
    from mico.quant.layers import BitConv1d, BitConv2d, BitLinear

    for cls, name, alias in (
        (BitConv1d, "bit-conv1d", "BitConv1d"),
        (BitConv2d, "bit-conv2d", "BitConv2d"),
        (BitLinear, "bit-linear", "BitLinear"),
    ):
        _add(
            cls,
            name,
            "layer",
            alias=alias,
            tags=["quantized", "mico"],
            author="mico",
            hardware_support=["host", "rv32", "rv64"],
        )


def _register_datasets() -> None:
    from mico.data import _DATASETS

    for name, loader in sorted(_DATASETS.items()):
        offline = name in OFFLINE_DATASETS
        _add(
            loader,
            name,
            "dataset",
            author="mico",
            tags=["offline" if offline else "on-disk"],
            description=(loader.__doc__ or name).strip(),
            offline=offline,
        )


def _register_planners() -> None:
    from mico.codegen.planner import plan_graph

    _add(
        plan_graph,
        "arena",
        "planner",
        author="mico",
        tags=["static", "default"],
        hardware_support=["host", "rv32", "rv64"],
        description="One static arena: buffers live at once never share bytes; searches "
        "placement orders and in-place ties, reports the lower bound (peak live bytes).",
    )
