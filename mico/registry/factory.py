"""``ModelFactory``: models built from a config of registered and unregistered modules (seed 004).

A config is a mapping with ``layers`` (a list) and optionally ``inputs``, ``outputs`` and
``input_shape``. Each layer has a ``name``, a ``module`` (a registered name or alias, or a class)
and optionally ``config`` (constructor arguments) and ``inputs`` (names of earlier layers or of
model inputs; default: the previous layer, which makes a plain list a sequential model). Several
inputs are passed to the module positionally, so ``add`` / ``cat`` layers join branches and a
residual block is four lines. The whole config is validated before any module is built, and
every error names the layer and the field.
"""

from __future__ import annotations

import inspect
import keyword
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from mico.errors import ConfigError
from mico.models.base import MiCoModel
from mico.registry.modules import ModuleRegistry, config_errors
from mico.registry.schema import brief, extract_config_schema

LAYER_KEYS = ("name", "module", "config", "inputs")
TOP_KEYS = ("layers", "inputs", "outputs", "input_shape", "input_dtype", "name")
MAX_LAYERS = 10_000


@dataclass(frozen=True)
class LayerSpec:
    """One validated layer: its name, class, constructor arguments and input names."""

    name: str
    module_class: Any
    config: dict[str, Any]
    inputs: tuple[str, ...]


class ConfigModel(MiCoModel):
    """A model whose layers and wiring come from a config (built by :class:`ModelFactory`)."""

    def __init__(
        self,
        layers: Sequence[LayerSpec],
        modules: Mapping[str, nn.Module],
        inputs: Sequence[str] = ("input",),
        outputs: Sequence[str] = (),
        input_shape: Sequence[int] | None = None,
        input_dtype: torch.dtype = torch.float32,
    ) -> None:
        super().__init__()
        self.layers = nn.ModuleDict(dict(modules))
        self.schedule = tuple((spec.name, spec.inputs) for spec in layers)
        self.input_names = tuple(inputs)
        self.output_names = tuple(outputs) or (self.schedule[-1][0],)
        if input_shape is not None:
            self.default_input_shape = tuple(int(d) for d in input_shape)
        self.input_dtype = input_dtype

    def forward(self, *args: torch.Tensor) -> Any:
        if len(args) != len(self.input_names):
            raise TypeError(
                f"this model takes {len(self.input_names)} input(s) "
                f"({', '.join(self.input_names)}), got {len(args)}"
            )
        values: dict[str, Any] = dict(zip(self.input_names, args, strict=True))
        for name, inputs in self.schedule:
            values[name] = self.layers[name](*(values[i] for i in inputs))
        outputs = tuple(values[n] for n in self.output_names)
        return outputs[0] if len(outputs) == 1 else outputs


class ModelFactory:
    """Builds models from configs; modules by registered name, alias or class."""

    @staticmethod
    def validate(config: Mapping[str, Any]) -> list[LayerSpec]:
        """Check ``config`` completely and return the layer specs (nothing is built)."""
        return _validate(config)

    @staticmethod
    def from_config(config: Mapping[str, Any], device: Any = None) -> ConfigModel:
        """Validate ``config``, then build the model (``device`` reaches modules that take it)."""
        specs = _validate(config)
        modules: dict[str, nn.Module] = {}
        for index, spec in enumerate(specs):
            kwargs = dict(spec.config)
            if device is not None and _accepts(spec.module_class, "device"):
                kwargs["device"] = device
            try:
                module = spec.module_class(**kwargs)
            except Exception as exc:  # the user's or torch's constructor refused the arguments
                raise ConfigError(
                    f"layer {index} '{spec.name}': building {_class_name(spec.module_class)} "
                    f"with {brief(spec.config, 120)} failed: {type(exc).__name__}: "
                    f"{brief(str(exc), 200)}"
                ) from exc
            if not isinstance(module, nn.Module):
                raise ConfigError(
                    f"layer {index} '{spec.name}': {_class_name(spec.module_class)} built a "
                    f"{type(module).__name__}, not a torch.nn.Module"
                )
            if device is not None:
                module = module.to(device)
            modules[spec.name] = module
        dtype_name = config.get("input_dtype", "float32")
        return ConfigModel(
            specs,
            modules,
            inputs=_model_inputs(config),
            outputs=_model_outputs(config, specs),
            input_shape=config.get("input_shape"),
            input_dtype=getattr(torch, dtype_name),
        )


def _accepts(module_class: Any, name: str) -> bool:
    target = module_class.__init__ if isinstance(module_class, type) else module_class
    try:
        params = inspect.signature(target).parameters
    except (TypeError, ValueError):
        return False
    return name in params or any(p.kind is p.VAR_KEYWORD for p in params.values())


def _class_name(module_class: Any) -> str:
    return getattr(module_class, "__qualname__", None) or repr(module_class)


def _valid_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and name.isidentifier()
        and not keyword.iskeyword(name)
        and len(name) <= 100
    )


def _model_inputs(config: Mapping[str, Any]) -> tuple[str, ...]:
    inputs = config.get("inputs", ["input"])
    return (inputs,) if isinstance(inputs, str) else tuple(inputs)


def _model_outputs(config: Mapping[str, Any], specs: Sequence[LayerSpec]) -> tuple[str, ...]:
    outputs = config.get("outputs")
    if outputs is None:
        return (specs[-1].name,)
    return (outputs,) if isinstance(outputs, str) else tuple(outputs)


def _resolve_module(index: int, name: str, ref: Any) -> Any:
    where = f"layer {index} '{name}'"
    if isinstance(ref, str):
        cls = ModuleRegistry.get_module(ref)
        if cls is None:
            try:
                ModuleRegistry.resolve(ref)  # raises with close-match hints
            except Exception as exc:
                raise ConfigError(f"{where}: field 'module': {exc}") from None
        return cls
    if isinstance(ref, type) or callable(ref):
        return ref
    raise ConfigError(
        f"{where}: field 'module' must be a registered module name or a class, got {brief(ref)}"
    )


def _validate(config: Mapping[str, Any]) -> list[LayerSpec]:
    if not isinstance(config, Mapping):
        raise ConfigError(f"a model config must be a mapping with 'layers', got {brief(config)}")
    unknown = [k for k in config if k not in TOP_KEYS]
    if unknown:
        raise ConfigError(
            f"unknown model config key(s) {', '.join(map(brief, unknown))}; keys: "
            f"{', '.join(TOP_KEYS)}"
        )
    layers = config.get("layers")
    if not isinstance(layers, list) or not layers:
        raise ConfigError("model config: 'layers' must be a non-empty list of layer mappings")
    if len(layers) > MAX_LAYERS:
        raise ConfigError(f"model config: {len(layers)} layers is more than {MAX_LAYERS}")
    inputs = config.get("inputs", ["input"])
    inputs = [inputs] if isinstance(inputs, str) else inputs
    if not isinstance(inputs, list | tuple) or not inputs or not all(map(_valid_name, inputs)):
        raise ConfigError(f"model config: 'inputs' must be a list of names, got {brief(inputs)}")
    shape = config.get("input_shape")
    if shape is not None and (
        not isinstance(shape, list | tuple)
        or not shape
        or not all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape)
    ):
        raise ConfigError(
            f"model config: 'input_shape' must be a list of positive integers (one sample, no "
            f"batch), got {brief(shape)}"
        )
    dtype = config.get("input_dtype", "float32")
    if dtype not in ("float32", "long", "int64"):
        raise ConfigError(
            f"model config: 'input_dtype' must be float32 or long, got {brief(dtype)}"
        )

    known: list[str] = list(inputs)
    specs: list[LayerSpec] = []
    errors: list[str] = []
    for index, layer in enumerate(layers):
        if not isinstance(layer, Mapping):
            raise ConfigError(
                f"layer {index}: expected a mapping with name/module, got {brief(layer)}"
            )
        name = layer.get("name", f"layer{index}")
        where = f"layer {index} '{name}'" if isinstance(name, str) else f"layer {index}"
        if not _valid_name(name):
            raise ConfigError(
                f"{where}: field 'name' must be a Python identifier (letters, digits, _), got "
                f"{brief(name)}"
            )
        if name in known:
            raise ConfigError(
                f"{where}: field 'name': '{name}' is already used by an input or layer"
            )
        extra = [k for k in layer if k not in LAYER_KEYS]
        if extra:
            raise ConfigError(
                f"{where}: unknown field(s) {', '.join(map(brief, extra))}; fields: "
                f"{', '.join(LAYER_KEYS)}"
            )
        if "module" not in layer:
            raise ConfigError(f"{where}: field 'module' is missing (a registered name or a class)")
        module_class = _resolve_module(index, name, layer["module"])
        layer_config = layer.get("config", {}) or {}
        metadata = ModuleRegistry.metadata_of(module_class)
        schema = metadata.config_schema if metadata else extract_config_schema(module_class)
        if "device" in layer_config:
            errors.append(f"{where}: field 'config.device': pass device to from_config instead")
        for problem in config_errors(schema, layer_config):
            errors.append(f"{where}: config: {problem}")
        layer_inputs = layer.get("inputs", [known[-1]] if not specs else [specs[-1].name])
        if isinstance(layer_inputs, str):
            layer_inputs = [layer_inputs]
        if not isinstance(layer_inputs, list | tuple) or not layer_inputs:
            errors.append(f"{where}: field 'inputs' must be a non-empty list of names")
            layer_inputs = []
        for source in layer_inputs:
            if source not in known:
                errors.append(
                    f"{where}: field 'inputs': {brief(source)} is not a model input or an earlier "
                    f"layer (known: {', '.join(known[-8:])})"
                )
        known.append(name)
        specs.append(LayerSpec(name, module_class, dict(layer_config), tuple(layer_inputs)))

    outputs = config.get("outputs")
    if outputs is not None:
        outputs = [outputs] if isinstance(outputs, str) else outputs
        layer_names = {s.name for s in specs}
        if not isinstance(outputs, list | tuple) or not outputs:
            errors.append("model config: 'outputs' must be a layer name or a list of them")
        else:
            for out in outputs:
                if out not in layer_names and out not in inputs:
                    errors.append(f"model config: 'outputs': {brief(out)} is not a layer")
    if errors:
        shown = "; ".join(errors[:5])
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        raise ConfigError(f"invalid model config: {shown}{more}")
    return specs


class Add(nn.Module):
    """Sum of every input (joins a residual branch)."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        total = inputs[0]
        for other in inputs[1:]:
            total = total + other
        return total


class Concat(nn.Module):
    """Concatenation of every input along ``dim`` (channels by default)."""

    def __init__(self, dim: int = 1) -> None:
        super().__init__()
        self.dim = dim

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        return torch.cat(inputs, dim=self.dim)


class Multiply(nn.Module):
    """Element-wise product of every input (gates, attention-style scaling)."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, *inputs: torch.Tensor) -> torch.Tensor:
        total = inputs[0]
        for other in inputs[1:]:
            total = total * other
        return total
