"""Checkpoints that know what they hold: model, constructor arguments, plan, mico version.

A checkpoint is a ``torch.save`` file (loaded with ``weights_only=True``) holding a dict::

    format: "mico-checkpoint", format_version: 1, mico_version,
    model: {class, zoo_name, args, kwargs}, plan: {name: {w, a}} | None,
    quant_config: {...} | None, state_dict, extra

It is written to a temporary file and renamed, so an interrupted save never damages the
previous checkpoint. Loading refuses a checkpoint of another model with a message naming both.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mico.errors import CheckpointError, MicoError, brief
from mico.quant import QuantConfig, QuantPlan, bit_layers, format_bits, quantize_model
from mico.train.rebuild import rebuild
from mico.userfiles import check_input_file, shown

FORMAT = "mico-checkpoint"
FORMAT_VERSION = 1


def mico_version() -> str:
    from mico import __version__

    return __version__


@dataclass
class Checkpoint:
    """The contents of a checkpoint file."""

    model_class: str
    zoo_name: str | None
    args: list[Any]
    kwargs: dict[str, Any]
    plan: QuantPlan | None
    quant_config: QuantConfig | None
    state_dict: dict[str, torch.Tensor]
    mico_version: str
    extra: dict[str, Any] = field(default_factory=dict)
    #: a model from a file: {file, class, model_args, input_shape} (see mico.models.resolve)
    source: dict[str, Any] | None = None

    def describe(self) -> str:
        if self.source:
            return f"{self.source['class']} (from {self.source['file']})"
        zoo = f" (zoo '{self.zoo_name}')" if self.zoo_name else ""
        return f"{self.model_class}{zoo}"

    def build(self) -> nn.Module:
        """A fresh model of the recorded kind, quantized with the recorded plan, weights loaded.

        The recorded arguments are checked and bounded before anything is allocated
        (:mod:`mico.train.rebuild`).
        """
        from mico.models import from_zoo, zoo_entry

        what = f"the checkpoint's {self.describe()}"
        if self.source is not None:
            raise CheckpointError(
                f"the checkpoint holds {self.describe()}, a model from a file; mico never imports "
                "a file a checkpoint names: name it to rebuild the model, e.g. `mico compile "
                f"{self.source['file']}:{self.source['class']} --checkpoint CHECKPOINT` (Python: "
                "load_checkpoint(path, model) with the model built yourself)"
            )
        if self.zoo_name is None:
            cls = _mico_model_class(self.model_class)
            if cls is None:
                raise CheckpointError(
                    f"the checkpoint holds a {self.model_class}, which is not a mico model; "
                    "build the model yourself and pass it to load_checkpoint(path, model)"
                )
            model = rebuild(
                lambda: cls(*self.args, **self.kwargs), cls, self.args, self.kwargs, what
            )
        else:
            if self.args:
                raise CheckpointError(
                    f"{what} was built with positional arguments {brief(self.args)}; build it "
                    "yourself and pass it to load_checkpoint(path, model)"
                )
            entry = zoo_entry(self.zoo_name)
            merged = {**dict(entry.defaults), **self.kwargs}
            model = rebuild(
                lambda: from_zoo(self.zoo_name, **self.kwargs), entry.factory, [], merged, what
            )
        _load_into(self, model, strict=True, source="checkpoint")
        return model


def _mico_model_class(name: str) -> type | None:
    """The zoo class called ``name`` (a model saved from Python, not built by name); only mico's
    own registered model classes are considered, so a checkpoint never imports other code."""
    from mico.registry import ModuleRegistry

    for meta in ModuleRegistry.list_modules(category="model"):
        cls = meta.module_class
        if isinstance(cls, type) and cls.__name__ == name and cls.__module__.startswith("mico."):
            return cls
    return None


def _plan_of(model: nn.Module) -> QuantPlan | None:
    layers = bit_layers(model)
    if not layers:
        return None
    return QuantPlan.from_dict({n: {"w": m.w_bits, "a": m.a_bits} for n, m in layers.items()})


def _config_of(model: nn.Module) -> QuantConfig | None:
    layers = list(bit_layers(model).values())
    return layers[0].qconfig if layers else None


def save_checkpoint(model: nn.Module, path: str | Path, **extra: Any) -> Path:
    """Write ``model``'s checkpoint to ``path`` atomically; ``extra`` is stored alongside."""
    path = Path(path)
    args, kwargs = getattr(model, "init_args", ((), {}))
    if getattr(model, "model_source", None) is not None:
        args, kwargs = (), {}  # a model from a file is rebuilt from its source, not its wrapper
    plan = _plan_of(model)
    config = _config_of(model)
    payload = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "mico_version": mico_version(),
        "model": {
            "class": type(model).__name__,
            "zoo_name": getattr(model, "zoo_name", None),
            "args": list(args),
            "kwargs": dict(kwargs),
            "source": getattr(model, "model_source", None),
        },
        "plan": None
        if plan is None
        else {n: {"w": format_bits(b.w), "a": format_bits(b.a)} for n, b in plan.items()},
        "quant_config": None if config is None else config.to_dict(),
        "state_dict": {k: v.detach().cpu() for k, v in model.state_dict().items()},
        "extra": extra,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(payload, f)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def read_checkpoint(path: str | Path) -> Checkpoint:
    """Read and check a checkpoint file (no model needed)."""
    path = check_input_file(path, "checkpoint", CheckpointError)
    try:
        with warnings.catch_warnings():  # torch warns about odd pickle protocols before refusing
            warnings.simplefilter("ignore")
            data = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as exc:
        raise CheckpointError(
            f"checkpoint {shown(path)} cannot be read ({_unpickling_detail(exc)}): the file is "
            "corrupt or not a torch.save file, or it holds objects other than tensors and plain "
            "values, which mico never unpickles (they could run code)"
        ) from None
    except Exception as exc:
        raise CheckpointError(
            f"checkpoint {shown(path)} cannot be read ({type(exc).__name__}: "
            f"{_shorter(str(exc))}); the file is corrupt or not a torch.save file"
        ) from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        if isinstance(data, dict) and all(isinstance(v, torch.Tensor) for v in data.values()):
            return Checkpoint("unknown", None, [], {}, None, None, data, "unknown")
        raise CheckpointError(f"'{path}' is not a mico checkpoint (no '{FORMAT}' header)")
    version = data.get("format_version")
    if not isinstance(version, int):
        raise CheckpointError(f"checkpoint '{path}' is damaged: its format version is missing")
    if version > FORMAT_VERSION:
        raise CheckpointError(
            f"checkpoint '{path}' has format version {version}, newer than this mico "
            f"({mico_version()}, format {FORMAT_VERSION}) reads; upgrade mico"
        )
    missing = [k for k in ("model", "state_dict") if not isinstance(data.get(k), dict)]
    if missing:
        raise CheckpointError(
            f"checkpoint '{path}' is damaged: it has no {' or '.join(missing)}; save it again"
        )
    for key, value in data["state_dict"].items():
        if not isinstance(key, str) or not isinstance(value, torch.Tensor):
            raise CheckpointError(
                f"checkpoint '{path}' is damaged: state_dict entry {brief(key, 60)} is "
                f"{type(value).__name__}, not a tensor named by a string; save it again"
            )
    if not isinstance(data.get("extra", {}), dict):
        raise CheckpointError(f"checkpoint '{path}' is damaged: 'extra' is not a mapping")
    model = data["model"]
    if not isinstance(model.get("class"), str):
        raise CheckpointError(f"checkpoint '{path}' is damaged: the model class is not recorded")
    if not isinstance(model.get("args", []), list | tuple) or not isinstance(
        model.get("kwargs", {}), dict
    ):
        raise CheckpointError(
            f"checkpoint '{path}' is damaged: its model arguments are not a list and a mapping; "
            "save it again"
        )
    if not isinstance(model.get("zoo_name"), str | None):
        raise CheckpointError(f"checkpoint '{path}' is damaged: its zoo name is not a string")
    source = model.get("source")
    if source is not None and not _valid_source(source):
        raise CheckpointError(
            f"checkpoint '{path}' is damaged: its model source is not {{file, class, "
            "model_args, input_shape}; save it again"
        )
    try:
        plan = QuantPlan.from_dict(data["plan"]) if data.get("plan") else None
        config = QuantConfig.from_dict(data["quant_config"]) if data.get("quant_config") else None
    except MicoError as exc:
        raise CheckpointError(f"checkpoint '{path}' has an invalid plan: {exc}") from None
    return Checkpoint(
        model["class"],
        model.get("zoo_name"),
        list(model.get("args", [])),
        dict(model.get("kwargs", {})),
        plan,
        config,
        data["state_dict"],
        str(data.get("mico_version", "unknown"))[:40],
        dict(data.get("extra", {})),
        source,
    )


def _valid_source(source: Any) -> bool:
    """Whether a recorded model source has the fields and types save_checkpoint writes."""
    return (
        isinstance(source, dict)
        and isinstance(source.get("file"), str)
        and isinstance(source.get("class"), str)
        and source["class"].isidentifier()
        and isinstance(source.get("model_args"), dict)
        and isinstance(source.get("input_shape"), list)
        and all(isinstance(d, int) and d > 0 for d in source["input_shape"])
    )


def load_file_model_checkpoint(
    path: str | Path,
    spec: str,
    model_args: str | dict[str, Any] | None = None,
    input_shape: str | list[int] | None = None,
) -> nn.Module:
    """Rebuild the model of ``spec`` (``file.py:Class``, named by the user) and load ``path``.

    The constructor arguments and sample shape default to those the checkpoint recorded, so
    ``mico compile net.py:Net --checkpoint quantized.pt`` needs nothing else.
    """
    from mico.models.resolve import resolve_model

    ckpt = read_checkpoint(path)
    recorded = ckpt.source or {}
    class_name = spec.rpartition(":")[2]
    if recorded and recorded["class"] != class_name:
        raise CheckpointError(
            f"checkpoint '{path}' holds {ckpt.describe()}, not {class_name}; name the class it "
            f"was trained from ({recorded['file']}:{recorded['class']})"
        )
    args = model_args if model_args is not None else recorded.get("model_args")
    shape = input_shape if input_shape is not None else recorded.get("input_shape")
    model, _ = resolve_model(spec, args, shape)
    _load_into(ckpt, model, strict=True, source=f"checkpoint '{path}'")
    return model


def _unpickling_detail(exc: Exception) -> str:
    """The one useful sentence of torch's long weights-only refusal."""
    text = str(exc)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1].split("Check the documentation", 1)[0]
    return _shorter(text, 100)


def _shorter(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _load_into(ckpt: Checkpoint, model: nn.Module, strict: bool, source: str) -> None:
    if ckpt.model_class != "unknown":
        kind = type(model).__name__
        zoo = getattr(model, "zoo_name", None)
        if kind != ckpt.model_class or (zoo and ckpt.zoo_name and zoo != ckpt.zoo_name):
            here = f"{kind} (zoo '{zoo}')" if zoo else kind
            raise CheckpointError(
                f"{source} holds a {ckpt.describe()} but the model is a {here}; build a "
                f"{ckpt.model_class} to load it (or use mico.train.load_checkpoint(path) to "
                "rebuild it from the checkpoint)"
            )
    if ckpt.plan is not None:
        quantize_model(model, ckpt.plan, ckpt.quant_config)
    try:
        result = model.load_state_dict(ckpt.state_dict, strict=strict)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()
        detail = "; ".join(line.strip() for line in first[1:4]) or first[0]
        raise CheckpointError(
            f"{source} does not fit this {type(model).__name__}: {detail}. Was it saved from "
            f"a model built with other arguments (checkpoint: {ckpt.kwargs or ckpt.args})?"
        ) from None
    del result


def load_checkpoint(
    path: str | Path, model: nn.Module | None = None, strict: bool = True
) -> nn.Module:
    """Load a checkpoint into ``model`` (or rebuild the zoo model it records) and return it.

    The checkpoint's plan is applied first, so a quantized checkpoint loads into a float model
    of the same kind. A checkpoint of another model raises :class:`CheckpointError`.
    """
    ckpt = read_checkpoint(path)
    if model is None:
        return ckpt.build()
    _load_into(ckpt, model, strict, f"checkpoint '{path}'")
    return model
