"""Latency profiles: layer shapes × bit pairs measured on a target, stored as a resumable CSV.

A profile is the training set of a latency proxy. Shapes come from the zoo's real layers plus
Latin-hypercube samples of each layer kind's geometry; each shape is measured at every bit pair
the target runs. Rows are appended as they are measured, keyed by shape and bits, so a profile
interrupted half-way resumes where it stopped, and a profile of another schema version or
target configuration is never mixed in (its file name carries both).
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mico.errors import ConfigError
from mico.hw.keys import ProgramKey
from mico.hw.layers import KINDS, LayerShape

#: 3: the depthwise pair path's forms carry path labels of their own in the models file's nodes
#: (:func:`mico.hw.opshape.dwp_path`; version 2 labelled them all ``dwp_f1`` / ``dwp_f2``), and
#: program targets' samples add W1A1 rows
SCHEMA_VERSION = 3
FIELDS = (
    "kind", "in_channels", "out_channels", "kh", "kw", "sh", "sw", "groups",
    "in_h", "in_w", "out_h", "out_w", "w_bits", "a_bits", "latency", "key",
)  # fmt: skip

#: What each op name of ``mico profile --ops`` means.
OP_KINDS = {"conv2d": "conv2d", "dwconv": "dwconv2d", "conv1d": "conv1d", "linear": "linear"}

Measure = Callable[[LayerShape], float]
#: a program backend's measurement: the layer and its earlier (key, latency) rows -> the
#: latency and the key of the program measured (an earlier row's latency when the program
#: generated now is identical to the one it measured)
KeyedMeasure = Callable[[LayerShape, Sequence[tuple[ProgramKey, float]]], tuple[float, ProgramKey]]


def cache_dir() -> Path:
    """Where profiles and fitted proxies live (``$MICO_CACHE`` or ``~/.cache/mico``)."""
    root = os.environ.get("MICO_CACHE") or Path.home() / ".cache" / "mico"
    return Path(root) / "profiles"


def profile_path(target: str, fingerprint: str = "", root: Path | None = None) -> Path:
    """The CSV of ``target``'s profile, versioned by schema and target configuration."""
    tag = f"-{fingerprint[:10]}" if fingerprint else ""
    return (root or cache_dir()) / f"{target}{tag}-v{SCHEMA_VERSION}.csv"


def fingerprint(config: object) -> str:
    """A short hash of a target configuration (a dataclass or mapping)."""
    data = asdict(config) if hasattr(config, "__dataclass_fields__") else config
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()


def _row(layer: LayerShape, latency: float, key: ProgramKey | None = None) -> dict[str, object]:
    return {
        "kind": layer.kind, "in_channels": layer.in_channels, "out_channels": layer.out_channels,
        "kh": layer.kernel[0], "kw": layer.kernel[1], "sh": layer.stride[0],
        "sw": layer.stride[1], "groups": layer.groups, "in_h": layer.in_size[0],
        "in_w": layer.in_size[1], "out_h": layer.out_size[0], "out_w": layer.out_size[1],
        "w_bits": layer.w_bits, "a_bits": layer.a_bits, "latency": latency,
        "key": key.to_text() if key is not None and key.program else "",
    }  # fmt: skip


def _bits(value: str) -> float | int:
    number = float(value)
    return int(number) if number.is_integer() else number


def layer_from_row(row: dict[str, str]) -> LayerShape:
    """The :class:`LayerShape` a profile row describes."""
    return LayerShape(
        name=row["kind"],
        kind=row["kind"],
        in_channels=int(row["in_channels"]),
        out_channels=int(row["out_channels"]),
        kernel=(int(row["kh"]), int(row["kw"])),
        stride=(int(row["sh"]), int(row["sw"])),
        groups=int(row["groups"]),
        in_size=(int(row["in_h"]), int(row["in_w"])),
        out_size=(int(row["out_h"]), int(row["out_w"])),
        w_bits=_bits(row["w_bits"]),
        a_bits=_bits(row["a_bits"]),
    )


def _key(layer: LayerShape) -> tuple:
    row = _row(layer, 0.0)
    row.pop("latency")
    row.pop("key")
    return tuple(str(_bits(str(v))) if k.endswith("bits") else str(v) for k, v in row.items())


def read_profile(path: Path) -> list[tuple[LayerShape, float]]:
    """The current (layer, latency) rows of a profile CSV: per layer and widths the last row
    whose program is still the one mico generates (:meth:`ProgramKey.fresh`; rows of an
    analytic backend carry no key and always are)."""
    latest: dict[tuple, tuple[LayerShape, float]] = {}
    for layer, latency, key in read_profile_rows(path):
        if not key.program or key.fresh():
            latest[_key(layer)] = (layer, latency)
    return list(latest.values())


def read_profile_rows(path: Path) -> list[tuple[LayerShape, float, ProgramKey]]:
    """Every row of a profile CSV with its program key; a damaged file is a clear error."""
    if not path.is_file():
        return []
    rows = []
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        if tuple(reader.fieldnames or ()) != FIELDS:
            raise ConfigError(
                f"profile {str(path)!r} has columns {reader.fieldnames}, expected {list(FIELDS)}; "
                "move it away and profile again"
            )
        for number, row in enumerate(reader, start=2):
            try:
                key = ProgramKey.from_text(row.get("key") or "")
                rows.append((layer_from_row(row), float(row["latency"]), key))
            except (TypeError, ValueError, KeyError):
                raise ConfigError(
                    f"profile {str(path)!r} line {number} is damaged; move the file away and "
                    "profile again (measurements resume from what is intact)"
                ) from None
    return rows


def sample_shapes(
    kinds: Sequence[str],
    samples: int,
    seed: int = 0,
    include_zoo: bool = True,
    max_macs: int | None = None,
) -> list[LayerShape]:
    """Layer geometries: the zoo's real layers of these kinds, then Latin-hypercube samples.

    ``max_macs``: the sampled conv2d, depthwise and linear layers' channels are halved until
    they are at most this many MACs (:data:`SMALL_LAYER_MACS` for single-layer programs: the
    zoo's programs have the large layers, the small ones are where kernel paths switch);
    conv1d samples keep their own bound (:data:`CONV1D_MAX_MACS`)."""
    from scipy.stats import qmc

    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise ConfigError(f"unknown layer kind(s) {unknown}; kinds: {', '.join(KINDS)}")
    shapes: list[LayerShape] = []
    if include_zoo:
        shapes += [s for s in zoo_layer_shapes() if s.kind in kinds]
    sampler = qmc.LatinHypercube(d=4, seed=seed)
    per_kind = max(1, samples // max(1, len(kinds)))
    for kind in kinds:
        for u in sampler.random(per_kind):
            shape = _shape_from_unit(kind, u)
            shapes.append(shape if max_macs is None else _shrink(shape, max_macs))
    seen, unique = set(), []
    for shape in shapes:
        key = _key(shape.with_bits(8, 8))
        if key not in seen:
            seen.add(key)
            unique.append(shape.with_bits(8, 8))
    return unique


#: the most MACs of a conv2d, depthwise or linear layer sampled as a single-layer program:
#: twice the conv popcount gate (32,768 MACs, :mod:`mico.codegen.binary_plan`), eight times the
#: linear one (8,192), so that the samples straddle where small layers switch kernels
SMALL_LAYER_MACS = 1 << 16


#: kinds a program target samples at its extra pairs only (W1A1): the zoo's programs have its
#: linear layers at the other widths, and sampled alone at those they misled the fit (harmlp's
#: 561 in-features took the costs of sampled rows of another path: 36 -> 112 % left out)
BINARY_ONLY_KINDS = ("linear",)
#: kinds a program target also samples at its sign-weight pairs
#: (:attr:`mico.hw.measure.Backend.sign_pairs`: W1A8): one-group convolutions, which take the
#: sign tables (:mod:`mico.codegen.sign_lut_plan`; the profile of 7e56c2b's kernels measured
#: them on the sign-weight sums, :mod:`mico.codegen.addsub_plan`); depthwise layers have no
#: such path, and linear layers are sampled at W1A1 only
SIGN_WEIGHT_KINDS = ("conv2d", "conv1d")


def _shrink(shape: LayerShape, max_macs: int) -> LayerShape:
    """``shape`` with its channels halved (outputs first, a depthwise layer's both) until it
    has at most ``max_macs`` MACs; conv1d shapes are returned as they are."""
    if shape.kind == "conv1d":
        return shape
    data = asdict(shape)
    while LayerShape(**data).macs > max_macs:
        if shape.kind == "dwconv2d":
            if data["out_channels"] <= 1:
                break
            channels = max(1, data["out_channels"] // 2)
            data.update(in_channels=channels, out_channels=channels, groups=channels)
        elif data["out_channels"] > 4 and data["out_channels"] >= data["in_channels"]:
            data["out_channels"] //= 2
        elif data["in_channels"] > 1:
            data["in_channels"] //= 2
        elif data["out_channels"] > 1:
            data["out_channels"] //= 2
        else:
            break
    return LayerShape(**data)


def _log_choice(u: float, low: int, high: int) -> int:
    return round(float(np.exp(np.log(low) + u * (np.log(high) - np.log(low)))))


def _shape_from_unit(kind: str, u: np.ndarray) -> LayerShape:
    """A layer of ``kind`` from a point of the unit hypercube (channels and sizes log-spaced)."""
    channels_in = _log_choice(u[0], 1 if kind == "conv2d" else 4, 64)
    channels_out = _log_choice(u[1], 4, 64)
    size = _log_choice(u[2], 4, 32)
    kernel = (1, 3, 3, 5)[min(3, int(u[3] * 4))]
    stride = 2 if u[3] > 0.8 else 1
    if kind == "linear":
        return LayerShape("linear", "linear", _log_choice(u[0], 8, 512), _log_choice(u[1], 4, 256),
                          (1, 1), (1, 1), 1, (1, 1), (1, 1))  # fmt: skip
    if kind == "conv1d":
        return _conv1d_from_unit(u)
    pad = kernel // 2
    out = (size + 2 * pad - kernel) // stride + 1
    if kind == "dwconv2d":
        return LayerShape("dwconv2d", "dwconv2d", channels_out, channels_out, (kernel, kernel),
                          (stride, stride), channels_out, (size, size), (out, out))  # fmt: skip
    return LayerShape("conv2d", "conv2d", channels_in, channels_out, (kernel, kernel),
                      (stride, stride), 1, (size, size), (out, out))  # fmt: skip


#: 1-D kernels and strides a conv1d sample takes: taps of speech and sensor front ends
#: (M5's 80 taps by 16) as well as the short kernels of the layers after them
CONV1D_KERNELS = ((1, 1), (3, 1), (5, 1), (9, 2), (40, 8), (80, 16))
#: the most MACs of a sampled conv1d (a long row's channels are cut to it): seconds per program
CONV1D_MAX_MACS = 1 << 22


def _conv1d_from_unit(u: np.ndarray) -> LayerShape:
    """A conv1d layer: rows of 16 to 16384 samples (raw audio is thousands long), 1 to 64
    input channels (a waveform has one), the kernel and stride of :data:`CONV1D_KERNELS`;
    channels shrink until the layer is at most :data:`CONV1D_MAX_MACS` MACs."""
    channels_in = _log_choice(u[0], 1, 64)
    channels_out = _log_choice(u[1], 4, 64)
    length = _log_choice(u[2], 16, 16384)
    kernel, stride = CONV1D_KERNELS[min(len(CONV1D_KERNELS) - 1, int(u[3] * len(CONV1D_KERNELS)))]
    length = max(length, kernel)
    out = (length - kernel) // stride + 1
    while channels_in * channels_out * out * kernel > CONV1D_MAX_MACS and channels_out > 4:
        channels_out //= 2
    while channels_in * channels_out * out * kernel > CONV1D_MAX_MACS and channels_in > 1:
        channels_in //= 2
    return LayerShape("conv1d", "conv1d", channels_in, channels_out, (1, kernel), (1, stride),
                      1, (1, length), (1, out))  # fmt: skip


def zoo_layer_shapes(names: Iterable[str] | None = None) -> list[LayerShape]:
    """The layers of the deployable zoo models (8/8), in each model's execution order."""
    from mico.codegen.compile import DEPLOYABLE_MODELS
    from mico.hw.layers import model_layer_shapes
    from mico.models import from_zoo

    shapes = []
    for name in names or DEPLOYABLE_MODELS:
        model = from_zoo(name)
        shapes += model_layer_shapes(model, model.example_input())
    return shapes


def bit_pairs(
    bits: Sequence[float | int], extra: Sequence[tuple[float | int, float | int]] = ()
) -> list[tuple[float | int, float | int]]:
    """Every (weight, activation) pair of the target's bit-widths, then the ``extra`` pairs
    not among them (a program target's W1A1: :attr:`mico.hw.measure.Backend.extra_pairs`)."""
    pairs = [(w, a) for w in bits for a in bits]
    return pairs + [p for p in extra if p not in pairs]


@dataclass
class ProfileResult:
    path: Path
    measured: int
    reused: int


def run_profile(
    measure: Measure,
    shapes: Sequence[LayerShape],
    pairs: Sequence[tuple[float | int, float | int]],
    path: Path,
    log: Callable[[str], None] = print,
    keyed: KeyedMeasure | None = None,
    jobs: int = 1,
) -> ProfileResult:
    """Measure every shape at every pair, appending to ``path``; rows already there are reused.

    ``keyed`` (program backends): rows are reused while their program is current
    (:meth:`ProgramKey.fresh`), others measured again through it (see :data:`KeyedMeasure`);
    ``jobs`` of them at once in worker processes when it can be pickled (a program
    backend's is). Each row is flushed as soon as it is measured, so an interrupted profile
    loses at most the measurements in flight.
    """
    earlier: dict[tuple, list[tuple[ProgramKey, float]]] = {}
    for layer, latency, key in read_profile_rows(path):
        earlier.setdefault(_key(layer), []).append((key, latency))
    done = {k for k, rows in earlier.items() if any(not key.program or key.fresh()
                                                    for key, _ in rows)}  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.exists()
    todo: list[LayerShape] = []
    for shape in shapes:
        for w, a in pairs:
            layer = shape.with_bits(w, a)
            if _key(layer) not in done:
                done.add(_key(layer))
                todo.append(layer)
    total = len(shapes) * len(pairs)
    result = ProfileResult(path, 0, total - len(todo))
    step = max(1, total // 10)
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=FIELDS)
        if new_file:
            writer.writeheader()

        def write(layer: LayerShape, latency: float, program: ProgramKey | None) -> None:
            writer.writerow(_row(layer, float(latency), program))
            handle.flush()
            result.measured += 1
            if (result.measured + result.reused) % step == 0:
                log(f"  {result.measured + result.reused}/{total} layer x bit cases")

        if keyed is not None and jobs > 1 and len(todo) > 1:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor, as_completed

            context = multiprocessing.get_context("spawn")
            with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
                futures = {pool.submit(keyed, layer, earlier.get(_key(layer), [])): layer
                           for layer in todo}  # fmt: skip
                for future in as_completed(futures):
                    latency, program = future.result()
                    write(futures[future], latency, program)
            return result
        for layer in todo:
            if keyed is None:
                write(layer, measure(layer), None)
            else:
                write(layer, *keyed(layer, earlier.get(_key(layer), [])))
    return result
