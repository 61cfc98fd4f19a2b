"""Quantization plans: the weight and activation bit-width of every quantizable layer.

A plan is written ``conv1=8/8,conv2=4/4,fc=2/8`` (``layer=W/A``) on the command line, or as YAML,
one line per layer: ``conv1: {w: 8, a: 8}``. MiCo's list form ``[[w1, w2, …], [a1, a2, …]]`` is
accepted too, given the model's layer names. A plan is checked against the model before any work.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from mico.errors import PlanError, brief
from mico.quant.arithmetic import TERNARY, BitWidth, check_bits, format_bits, is_ternary
from mico.safe_yaml import read_yaml
from mico.userfiles import path_kind


@dataclass(frozen=True)
class LayerBits:
    """Bit-widths of one layer: ``w`` for its weights, ``a`` for its input activations.

    Each is an integer 1..8 or ``1.58`` (ternary).
    """

    w: BitWidth
    a: BitWidth

    def __str__(self) -> str:
        return f"W{format_bits(self.w)}A{format_bits(self.a)}"


_ENTRY = re.compile(r"^\s*([\w.]+)\s*[=:]\s*(\S+?)\s*/\s*(\S+?)\s*$")


def _bits(value: object, layer: str, kind: str) -> BitWidth:
    """Parse one bit-width: ``8``, ``"4"``, ``1.58`` / ``"ternary"`` / ``"t"``."""
    if is_ternary(value):
        return TERNARY
    number: object = value
    if isinstance(value, str):
        try:
            number = int(value.strip())
        except ValueError:
            try:
                number = float(value.strip())
            except ValueError:
                number = value
    return check_bits(number, f"layer {brief(layer, 60)}: {kind} bit-width")


def _some(names: Sequence[str], shown: int = 8) -> str:
    """The first ``shown`` names (each shortened), and how many more there are."""
    text = ", ".join(n if len(n) <= 40 else n[:37] + "..." for n in names[:shown])
    return text + (f" and {len(names) - shown} more" if len(names) > shown else "")


class QuantPlan(Mapping[str, LayerBits]):
    """An ordered, validated mapping from layer name to :class:`LayerBits`."""

    def __init__(self, layers: Mapping[str, LayerBits]) -> None:
        if not layers:
            raise PlanError("a quantization plan needs at least one layer")
        for name, bits in layers.items():
            check_bits(bits.w, f"layer {brief(name, 60)}: weight bit-width")
            check_bits(bits.a, f"layer {brief(name, 60)}: activation bit-width")
        self._layers = dict(layers)

    def __getitem__(self, name: str) -> LayerBits:
        return self._layers[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._layers)

    def __len__(self) -> int:
        return len(self._layers)

    def __repr__(self) -> str:
        return f"QuantPlan({self.to_string()!r})"

    @classmethod
    def parse(cls, text: str) -> QuantPlan:
        """Parse ``name=W/A`` entries separated by commas."""
        layers: dict[str, LayerBits] = {}
        for entry in filter(None, (e.strip() for e in text.split(","))):
            match = _ENTRY.match(entry)
            if not match:
                raise PlanError(
                    f"plan entry {brief(entry)} is not of the form layer=W/A "
                    "(for example conv1=8/8)"
                )
            name, w, a = match.groups()
            if name in layers:
                raise PlanError(f"layer {brief(name, 60)} appears twice in the plan; give it once")
            layers[name] = LayerBits(_bits(w, name, "weight"), _bits(a, name, "activation"))
        return cls(layers)

    @classmethod
    def from_dict(cls, data: object) -> QuantPlan:
        """Build from ``{name: {w: 4, a: 8}}`` (the YAML form); ``{name: (4, 8)}`` works too."""
        if not isinstance(data, Mapping):
            raise PlanError("a YAML plan must be a mapping of layer names to {w: W, a: A}")
        layers: dict[str, LayerBits] = {}
        for name, entry in data.items():
            if isinstance(entry, LayerBits):
                w, a = entry.w, entry.a
            elif isinstance(entry, Mapping) and set(entry) == {"w", "a"}:
                w, a = entry["w"], entry["a"]
            elif isinstance(entry, Sequence) and not isinstance(entry, str) and len(entry) == 2:
                w, a = entry
            else:
                raise PlanError(
                    f"layer {brief(name, 60)}: expected {{w: W, a: A}} or (W, A), "
                    f"got {brief(entry)}"
                )
            if not isinstance(name, str | int):
                raise PlanError(f"layer name {brief(name)} is not a name; use the layer's name")
            layers[str(name)] = LayerBits(
                _bits(w, str(name), "weight"), _bits(a, str(name), "activation")
            )
        return cls(layers)

    @classmethod
    def from_qscheme(
        cls, qscheme: Sequence[Sequence[int]], layer_names: Sequence[str]
    ) -> QuantPlan:
        """Build from MiCo's ``[[w bits…], [a bits…]]`` in the model's layer order."""
        if len(qscheme) != 2:
            raise PlanError(
                f"a qscheme is [[weight bits…], [activation bits…]]; got {len(qscheme)} lists"
            )
        weights, acts = qscheme
        n = len(layer_names)
        for kind, bits in (("weight", weights), ("activation", acts)):
            if len(bits) != n:
                raise PlanError(
                    f"the qscheme has {len(bits)} {kind} bit-widths but the model has {n} "
                    f"quantizable layers ({', '.join(layer_names)}); give one per layer"
                )
        return cls(
            {
                name: LayerBits(_bits(w, name, "weight"), _bits(a, name, "activation"))
                for name, w, a in zip(layer_names, weights, acts, strict=True)
            }
        )

    @classmethod
    def load(cls, spec: str | Path) -> QuantPlan:
        """A plan from a YAML file path, or from ``name=W/A,…`` text."""
        text = str(spec)
        kind = path_kind(text)
        if text.endswith((".yaml", ".yml")) or kind in ("file", "dir", "other"):
            fix = "give a YAML plan file or layer=W/A,... text"
            data = read_yaml(text, "plan file", PlanError, fix=fix)
            return cls.from_dict(data)
        if kind == "too-long" and "=" not in text:
            raise PlanError(
                f"plan {brief(text)} is neither a file nor layer=W/A text; "
                "give a YAML plan file or layer=W/A,... (for example conv1=8/8)"
            )
        return cls.parse(text)

    @classmethod
    def uniform(cls, layer_names: Sequence[str], w: BitWidth, a: BitWidth) -> QuantPlan:
        return cls({name: LayerBits(w, a) for name in layer_names})

    def validate_for(self, layer_names: Sequence[str]) -> QuantPlan:
        """Check that the plan names exactly the model's quantizable layers; return it."""
        known = list(layer_names)
        unknown = [n for n in self if n not in known]
        missing = [n for n in known if n not in self]
        if unknown or missing or len(self) != len(known):
            parts = []
            if unknown:
                parts.append(f"unknown layer(s) {_some(unknown)}")
            if missing:
                parts.append(f"no bit-widths for {_some(missing)}")
            raise PlanError(
                f"the plan has {len(self)} layer(s) but the model has {len(known)} quantizable "
                f"layers ({', '.join(known)}): {'; '.join(parts)}. "
                f"Give one entry per layer, e.g. {','.join(f'{n}=8/8' for n in known)}"
            )
        return QuantPlan({n: self[n] for n in known})  # model order

    def to_string(self) -> str:
        return ",".join(f"{n}={format_bits(b.w)}/{format_bits(b.a)}" for n, b in self.items())

    def to_yaml(self) -> str:
        """One line per layer, ``conv1: {w: 8, a: 8}``; names YAML would misread are quoted."""
        return "".join(
            yaml.safe_dump({n: {"w": b.w, "a": b.a}}, default_flow_style=None, sort_keys=False)
            for n, b in self.items()
        )

    def qscheme(self) -> list[list[BitWidth]]:
        """MiCo's ``[[w bits…], [a bits…]]`` form."""
        return [[b.w for b in self.values()], [b.a for b in self.values()]]
