"""The models a command line names: a zoo name, ``path/to/file.py:ClassName``, or a saved
``torch.export`` program (``.pt2``).

``file.py:Class`` imports the user's file (running its code, as ``python file.py`` would: give
only files you trust) and builds the class with ``model_args`` (a JSON object, or a YAML/JSON
file of them); a ``.pt2`` program is loaded with ``torch.export.load``. Either is wrapped as a
:class:`~mico.models.MiCoModel` with the sample shape from ``input_shape``, the class's own
``default_input_shape``, or the program's example input.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from mico.errors import ConfigError
from mico.errors import brief as _brief


class ExportedModel(nn.Module):
    """A loaded ``torch.export`` program as a model: inference only (its graph has no train
    mode to switch), with the sample shape mico needs for examples."""

    def __init__(self, module: nn.Module, input_shape: Sequence[int]) -> None:
        super().__init__()
        with_eval = getattr(torch.ao.quantization, "move_exported_model_to_eval", None)
        self.program = with_eval(module) if with_eval is not None else module
        self.default_input_shape = tuple(int(d) for d in input_shape)

    def train(self, mode: bool = True) -> ExportedModel:
        self.training = mode  # the program's own modules stay as exported (inference)
        return self

    def example_input(self, batch_size: int = 1) -> torch.Tensor:
        return torch.zeros((batch_size, *self.default_input_shape))

    def quantize_layer_names(self) -> list[str]:
        return []  # a flat program has no layer modules to quantize: it compiles in float

    def forward(self, x: torch.Tensor) -> Any:
        if x.shape[0] == 1 or torch.compiler.is_compiling():
            return self.program(x)
        # programs are usually exported for batch 1: run a batch one sample at a time
        return torch.cat([self.program(x[i : i + 1]) for i in range(x.shape[0])])


def parse_shape(text: str | Sequence[int] | None) -> tuple[int, ...] | None:
    """``"3,32,32"`` (or ``3x32x32``): one sample's shape, without the batch dimension."""
    if text is None:
        return None
    if isinstance(text, str):
        parts = [p for p in text.replace("x", ",").split(",") if p.strip()]
        try:
            shape = tuple(int(p) for p in parts)
        except ValueError:
            raise ConfigError(
                f"--input-shape {_brief(text)} is not a list of integers; write e.g. 3,32,32"
            ) from None
    else:
        shape = tuple(int(d) for d in text)
    if not shape or any(d <= 0 for d in shape) or len(shape) > 6:
        raise ConfigError(
            f"--input-shape {_brief(text)} must be 1 to 6 positive sizes of one sample, e.g. "
            "3,32,32"
        )
    return shape


def parse_model_args(text: str | dict | None) -> dict[str, Any]:
    """Constructor arguments: a JSON object, or a path to a JSON/YAML file holding one."""
    if text is None or isinstance(text, dict):
        return dict(text or {})
    path = Path(text)
    if text.strip().startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ConfigError(
                f"--model-args is not valid JSON ({exc.msg}); write e.g. '{{\"num_classes\": 10}}'"
            ) from None
    elif path.suffix in (".yaml", ".yml", ".json") or path.exists():
        from mico.safe_yaml import read_yaml

        value = read_yaml(path, "--model-args file", ConfigError)
    else:
        raise ConfigError(
            f"--model-args {_brief(text)} is neither a JSON object nor a YAML/JSON file"
        )
    if not isinstance(value, dict):
        raise ConfigError(f"--model-args must hold an object of arguments, got {_brief(value)}")
    return value


def is_model_spec(spec: str) -> bool:
    """Whether ``spec`` names a file (``file.py:Class`` or ``.pt2``) rather than a zoo model."""
    return spec.endswith(".pt2") or (".py:" in spec)


def _load_class(spec: str) -> type:
    file_part, _, class_name = spec.rpartition(":")
    path = Path(file_part)
    if not path.is_file():
        raise ConfigError(f"model file {_brief(file_part)} does not exist (from {_brief(spec)})")
    if not class_name.isidentifier():
        raise ConfigError(f"{_brief(class_name)} is not a class name (write file.py:ClassName)")
    module_name = f"mico_user_model_{abs(hash(str(path.resolve())))}"
    loader_spec = importlib.util.spec_from_file_location(module_name, path)
    if loader_spec is None or loader_spec.loader is None:
        raise ConfigError(f"cannot import {_brief(str(path))} as Python")
    module = importlib.util.module_from_spec(loader_spec)
    sys.modules[module_name] = module
    try:
        loader_spec.loader.exec_module(module)
    except Exception as exc:  # the user's file failed: name it and the error
        sys.modules.pop(module_name, None)
        raise ConfigError(
            f"importing {_brief(str(path))} failed: {type(exc).__name__}: {str(exc)[:200]}"
        ) from None
    cls = getattr(module, class_name, None)
    if cls is None:
        names = [n for n, v in vars(module).items() if isinstance(v, type) and
                 issubclass(v, nn.Module) and v.__module__ == module_name]  # fmt: skip
        raise ConfigError(
            f"{_brief(str(path))} has no class {class_name!r}; its nn.Module classes: "
            f"{', '.join(names) or 'none'}"
        )
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise ConfigError(f"{class_name} in {_brief(str(path))} is not a torch.nn.Module class")
    return cls


def _build(cls: type, args: dict[str, Any]) -> nn.Module:
    signature = inspect.signature(cls.__init__)
    accepts_any = any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values())
    unknown = [k for k in args if k not in signature.parameters and not accepts_any]
    if unknown:
        known = [n for n in signature.parameters if n != "self"]
        raise ConfigError(
            f"{cls.__name__} takes no argument {unknown[0]!r} (--model-args); it takes: "
            f"{', '.join(known) or 'none'}"
        )
    try:
        return cls(**args)
    except Exception as exc:
        raise ConfigError(
            f"building {cls.__name__}({_brief(args, 120)}) failed: {type(exc).__name__}: "
            f"{str(exc)[:200]}"
        ) from None


def resolve_model(
    spec: str,
    model_args: str | dict | None = None,
    input_shape: str | Sequence[int] | None = None,
) -> tuple[nn.Module, str | None]:
    """The model ``spec`` names, ready to quantize and compile, and its zoo name (or None)."""
    from mico.models import from_zoo
    from mico.models.base import MiCoModel
    from mico.models.wrap import from_torch

    shape = parse_shape(input_shape)
    if not is_model_spec(spec):
        if model_args or shape:
            raise ConfigError("--model-args and --input-shape apply to models from files only")
        return from_zoo(spec), spec
    if spec.endswith(".pt2"):
        path = Path(spec)
        if not path.is_file():
            raise ConfigError(f"program {_brief(spec)} does not exist")
        try:
            program = torch.export.load(str(path))
        except Exception as exc:
            raise ConfigError(
                f"{_brief(spec)} is not a saved torch.export program ({type(exc).__name__}: "
                f"{str(exc)[:160]}); save one with torch.export.save"
            ) from None
        if shape is None:
            example = (getattr(program, "example_inputs", None) or ((),))[0]
            if not example or not isinstance(example[0], torch.Tensor):
                raise ConfigError(f"{_brief(spec)} holds no example input; pass --input-shape")
            shape = tuple(example[0].shape[1:])
        return ExportedModel(program.module(), shape), None
    args = parse_model_args(model_args)
    model = _build(_load_class(spec), args)
    if isinstance(model, MiCoModel) and getattr(model, "default_input_shape", ()):
        if shape is not None:
            model.default_input_shape = shape
        wrapped: nn.Module = model
    else:
        if shape is None:
            shape = tuple(getattr(model, "default_input_shape", ()) or ())
        if not shape:
            raise ConfigError(
                f"{type(model).__name__} has no default_input_shape; pass --input-shape, e.g. "
                "--input-shape 3,32,32 (one sample, no batch)"
            )
        wrapped = from_torch(model, shape)
    file_part, _, class_name = spec.rpartition(":")
    # how to rebuild it: recorded in checkpoints, used only when the user names the file again
    wrapped.model_source = {  # type: ignore[assignment]
        "file": str(Path(file_part).resolve()),
        "class": class_name,
        "model_args": args,
        "input_shape": list(wrapped.default_input_shape),
    }
    return wrapped, None
