"""Targets are data: one YAML file per target, read strictly.

A target file declares what a board or accelerator is (name, description, ISA and extensions,
flash and RAM, the weight and activation bit-widths it runs) and how mico measures a model on
it (the ``runner`` and its ``cost`` model). mico ships files for host, rv32, rv64, vexriscv
and bitfusion (``mico/targets/files``); a user adds a board by dropping a file in a folder
named by ``--targets-dir`` or ``$MICO_TARGETS_DIR`` (several folders: separated by ``:``)::

    name: my_board
    description: GD32VF103 (Bumblebee core), 128 KiB flash, 32 KiB SRAM
    isa: rv32imac
    extensions: [zicsr]
    memory: {flash: 128 KiB, ram: 32 KiB}
    bits: {weight: [2, 4, 8], activation: [4, 8]}
    runner: qemu-rv32
    cost: instructions

Every mistake (an unknown key, a bad ISA, a negative size, an unknown runner, a cost model the
runner cannot measure) is a ConfigError naming the file and the field. ``availability`` says
whether the tools a target's runner needs are installed, and if not what to install.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import shutil
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from mico.errors import ConfigError, PlanError, brief
from mico.quant.arithmetic import check_bits
from mico.safe_yaml import read_yaml

ENV_DIRS = "MICO_TARGETS_DIR"
FIELDS = (
    "name", "description", "isa", "extensions", "memory", "bits", "runner", "cost",
    "frequency_hz",
)  # fmt: skip
REQUIRED = ("name", "description", "isa", "memory", "bits", "runner", "cost")
COSTS = {
    "instructions": "retired instructions, counted exactly",
    "cycles": "clock cycles of a cycle-accurate model",
    "wall": "wall-clock time of the running program",
    "analytic": "cycles of an analytic model (no program runs)",
}
#: ISAs that are not RISC-V strings
OTHER_ISAS = {"native": "the machine mico runs on", "none": "no instruction set (an accelerator)"}
_RISCV = re.compile(r"^rv(32|64)([ieg])([a-z]*)\Z")
_STANDARD = set("mafdqcbvhpkjtln")  # single-letter RISC-V extensions after the base
_EXTENSION = re.compile(r"^[zxs][a-z][a-z0-9]*\Z")
_NAME = re.compile(r"^[a-z0-9][a-z0-9_.\-]*\Z")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmg]i?b|b)?\s*$", re.I)
_UNITS = {"b": 1, "kb": 1000, "mb": 10**6, "gb": 10**9, "kib": 1024, "mib": 2**20, "gib": 2**30}


@dataclass(frozen=True)
class Runner:
    """How a runner builds and measures: the ISA it compiles for and the costs it reports."""

    description: str
    isa: str  # "native", "none", or the RISC-V ISA its build uses (-march)
    costs: tuple[str, ...]
    tools: Mapping[str, str] = field(default_factory=dict)  # tool -> Debian package
    module: str = ""  # a mico module the runner needs


RUNNERS: dict[str, Runner] = {
    "host": Runner(
        "the host C compiler; instructions under valgrind --tool=callgrind",
        "native", ("instructions", "wall"),
        {"make": "make", "gcc": "gcc", "valgrind": "valgrind"},
    ),
    "qemu-rv32": Runner(
        "rv32imac bare metal under qemu-system-riscv32 -icount (instret per inference)",
        "rv32imac", ("instructions",),
        {"make": "make", "riscv64-unknown-elf-gcc": "gcc-riscv64-unknown-elf "
         "picolibc-riscv64-unknown-elf", "qemu-system-riscv32": "qemu-system-misc"},
    ),
    "qemu-rv64": Runner(
        "rv64gc Linux under qemu-user (outputs only: qemu-user counts nothing)",
        "rv64gc", ("wall",),
        {"make": "make", "riscv64-linux-gnu-gcc": "gcc-riscv64-linux-gnu",
         "qemu-riscv64": "qemu-user"},
    ),
    "verilator-vexriscv": Runner(
        "the VexRiscv RTL core simulated cycle-accurately by verilator",
        "rv32im", ("cycles",),
        {"make": "make", "riscv64-unknown-elf-gcc": "gcc-riscv64-unknown-elf "
         "picolibc-riscv64-unknown-elf", "verilator": "verilator"},
        module="mico.targets.vexriscv",
    ),
    "analytic-bitfusion": Runner(
        "BitFusion's analytic cycle model (mico.hw.bitfusion)", "none", ("analytic",),
        module="mico.hw.bitfusion",
    ),
}  # fmt: skip


@dataclass(frozen=True)
class TargetSpec:
    """One target: what the hardware is and how mico measures a model on it."""

    name: str
    description: str
    isa: str
    runner: str
    cost: str
    weight_bits: tuple[float, ...]
    activation_bits: tuple[float, ...]
    flash_bytes: int | None = None  # None: not limited (a host, an accelerator's DRAM)
    ram_bytes: int | None = None
    extensions: tuple[str, ...] = ()
    frequency_hz: float | None = None
    source: str = ""  # the file it was read from

    def check_bits(self, w_bits: float, a_bits: float, layer: str = "") -> None:
        """Raise ConfigError when the target does not run W/A ``w_bits``/``a_bits``."""
        where = f"layer '{layer}': " if layer else ""
        for kind, bits, allowed in (
            ("weight", w_bits, self.weight_bits),
            ("activation", a_bits, self.activation_bits),
        ):
            if not any(abs(float(bits) - float(b)) < 1e-6 for b in allowed):
                raise ConfigError(
                    f"{where}target '{self.name}' runs {kind} bit-widths "
                    f"{_bits_text(allowed)}, not {bits:g}; change the plan or pick a target "
                    f"that runs {bits:g}-bit {kind}s (mico targets)"
                )


def _bits_text(bits: Iterable[float]) -> str:
    return ", ".join(f"{b:g}" for b in bits)


def builtin_dir() -> Path:
    """The folder of the target files mico ships."""
    return Path(str(resources.files("mico.targets") / "files"))


def target_dirs(
    extra: Sequence[str | os.PathLike[str]] = (), include_env: bool = True
) -> list[Path]:
    """Folders searched for target files: mico's own, ``$MICO_TARGETS_DIR``, then ``extra``."""
    dirs = [builtin_dir()]
    env = os.environ.get(ENV_DIRS, "") if include_env else ""
    dirs += [Path(p) for p in env.split(os.pathsep) if p.strip()]
    dirs += [Path(p) for p in extra]
    return dirs


def _fail(path: Path, field_name: str, problem: str) -> ConfigError:
    where = f", field '{field_name}'" if field_name else ""
    return ConfigError(f"target file '{path}'{where}: {problem}")


def _isa(path: Path, value: Any, runner: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _fail(path, "isa", f"expected a string such as rv32imac, got {brief(value)}")
    isa = value.strip().lower()
    needed = RUNNERS[runner].isa
    if isa in OTHER_ISAS or needed in OTHER_ISAS:
        if isa != needed:
            raise _fail(
                path, "isa", f"runner '{runner}' runs isa '{needed}' "
                f"({OTHER_ISAS.get(needed, 'RISC-V')}), got {brief(value)}",
            )  # fmt: skip
        return isa
    match = _RISCV.match(isa)
    if not match:
        raise _fail(
            path, "isa", f"{brief(value)} is not an ISA: write rv32 or rv64, a base (i, e or "
            "g), then single-letter extensions (e.g. rv32imac); Z/X/S extensions go in "
            "'extensions'; or 'native' (host), 'none' (accelerator)",
        )  # fmt: skip
    letters = match.group(3)
    unknown = sorted(set(letters) - _STANDARD)
    if unknown:
        raise _fail(path, "isa", f"unknown single-letter extension(s) {', '.join(unknown)} "
                    f"in {brief(value)}; known: {''.join(sorted(_STANDARD))}")  # fmt: skip
    if len(set(letters)) != len(letters):
        raise _fail(path, "isa", f"{brief(value)} names an extension twice")
    have = _letters(isa)
    want = _letters(needed)
    if isa[:4] != needed[:4] or not want <= have:
        missing = "".join(sorted(want - have)) or needed[:4]
        raise _fail(
            path, "isa", f"runner '{runner}' builds {needed} code, which {isa} cannot run "
            f"(missing: {missing}); pick a runner for this ISA or correct the ISA",
        )  # fmt: skip
    return isa


def _letters(isa: str) -> set[str]:
    base, rest = isa[4], isa[5:]
    letters = set(rest) | ({"i", "m", "a", "f", "d"} if base == "g" else {base})
    return letters


def _extensions(path: Path, value: Any) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _fail(path, "extensions", f"expected a list such as [zbb, zicsr], got {brief(value)}")
    out = []
    for item in value:
        if not isinstance(item, str) or not _EXTENSION.match(item.strip().lower()):
            raise _fail(
                path, "extensions", f"{brief(item)} is not a Z, X or S extension name "
                "(e.g. zbb, zicsr, xcorev); single letters belong in 'isa'",
            )  # fmt: skip
        name = item.strip().lower()
        if name in out:
            raise _fail(path, "extensions", f"'{name}' is listed twice")
        out.append(name)
    return tuple(out)


def _size(path: Path, key: str, value: Any) -> int | None:
    where = f"memory.{key}"
    if value is None:
        return None
    if isinstance(value, bool):
        raise _fail(path, where, f"expected bytes, got {brief(value)}")
    if isinstance(value, int):
        number = value
    elif isinstance(value, str) and (match := _SIZE.match(value)):
        number = float(match.group(1)) * _UNITS[(match.group(2) or "b").lower()]
        if not float(number).is_integer():
            raise _fail(path, where, f"{brief(value)} is not a whole number of bytes")
        number = int(number)
    else:
        raise _fail(
            path, where, f"expected bytes (an integer, or e.g. '256 KiB', '4 MiB'), or null "
            f"for no limit; got {brief(value)}",
        )  # fmt: skip
    if number <= 0:
        raise _fail(path, where, f"must be positive, got {brief(value)}")
    return number


def _memory(path: Path, value: Any) -> tuple[int | None, int | None]:
    if not isinstance(value, dict):
        raise _fail(
            path, "memory", f"expected a mapping {{flash: ..., ram: ...}}, got {brief(value)}"
        )
    unknown = sorted(set(map(str, value)) - {"flash", "ram"})
    if unknown:
        raise _fail(path, "memory", f"unknown key(s) {', '.join(unknown)}; use flash and ram")
    for key in ("flash", "ram"):
        if key not in value:
            raise _fail(path, f"memory.{key}", "missing; give bytes, or null for no limit")
    return _size(path, "flash", value["flash"]), _size(path, "ram", value["ram"])


def _bits(path: Path, value: Any) -> tuple[tuple[float, ...], tuple[float, ...]]:
    if not isinstance(value, dict):
        raise _fail(
            path, "bits", f"expected {{weight: [...], activation: [...]}}, got {brief(value)}"
        )
    unknown = sorted(set(map(str, value)) - {"weight", "activation"})
    if unknown:
        raise _fail(path, "bits", f"unknown key(s) {', '.join(unknown)}; use weight and activation")
    out = []
    for key in ("weight", "activation"):
        items = value.get(key)
        if not isinstance(items, list) or not items:
            raise _fail(path, f"bits.{key}", f"expected a non-empty list such as [2, 4, 8], got "
                        f"{brief(items)}")  # fmt: skip
        widths: list[float] = []
        for item in items:
            try:
                bits = check_bits(item, f"bits.{key} entry")
            except PlanError as exc:
                raise _fail(path, f"bits.{key}", str(exc)) from None
            if bits in widths:
                raise _fail(path, f"bits.{key}", f"{item} is listed twice")
            widths.append(bits)
        out.append(tuple(sorted(widths)))
    return out[0], out[1]


def load_target_file(path: str | os.PathLike[str]) -> TargetSpec:
    """Read and validate one target file; every problem names the file and the field."""
    p = Path(path)
    data = read_yaml(p, "target file", ConfigError, fix="see docs/latency.md (target files)")
    if not isinstance(data, dict):
        raise _fail(p, "", f"expected a mapping of {', '.join(REQUIRED)}, got {brief(data)}")
    unknown = sorted(str(k) for k in data if k not in FIELDS)
    if unknown:
        raise _fail(p, unknown[0], f"unknown key; a target file holds {', '.join(FIELDS)}")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise _fail(p, missing[0], "missing (required: " + ", ".join(REQUIRED) + ")")
    name = data["name"]
    if not isinstance(name, str) or not _NAME.match(name):
        raise _fail(p, "name", f"expected lower-case letters, digits, '-', '_' or '.', got "
                    f"{brief(name)}")  # fmt: skip
    description = data["description"]
    if not isinstance(description, str) or not description.strip():
        raise _fail(p, "description", "expected a non-empty string")
    runner = data["runner"]
    if runner not in RUNNERS:
        raise _fail(p, "runner", f"unknown runner {brief(runner)}; runners: {', '.join(RUNNERS)}")
    cost = data["cost"]
    if cost not in COSTS:
        raise _fail(p, "cost", f"unknown cost model {brief(cost)}; cost models: {', '.join(COSTS)}")
    if cost not in RUNNERS[runner].costs:
        raise _fail(p, "cost", f"runner '{runner}' measures {' or '.join(RUNNERS[runner].costs)}, "
                    f"not {cost}")  # fmt: skip
    isa = _isa(p, data["isa"], runner)
    flash, ram = _memory(p, data["memory"])
    weight_bits, activation_bits = _bits(p, data["bits"])
    frequency = data.get("frequency_hz")
    if frequency is not None:
        if isinstance(frequency, bool) or not isinstance(frequency, int | float) or frequency <= 0:
            raise _fail(
                p, "frequency_hz", f"expected a positive number of Hz, got {brief(frequency)}"
            )
        frequency = float(frequency)
    return TargetSpec(
        name=name, description=" ".join(description.split()), isa=isa, runner=runner, cost=cost,
        weight_bits=weight_bits, activation_bits=activation_bits, flash_bytes=flash,
        ram_bytes=ram, extensions=_extensions(p, data.get("extensions")),
        frequency_hz=frequency, source=str(p),
    )  # fmt: skip


def load_catalog(
    extra_dirs: Sequence[str | os.PathLike[str]] = (), include_env: bool = True
) -> dict[str, TargetSpec]:
    """Every target file of :func:`target_dirs`, by name; a name declared twice is an error."""
    targets: dict[str, TargetSpec] = {}
    for folder in target_dirs(extra_dirs, include_env):
        if not folder.is_dir():
            raise ConfigError(
                f"targets folder '{folder}' does not exist or is not a directory; check "
                f"--targets-dir or ${ENV_DIRS}"
            )
        files = sorted([*folder.glob("*.yaml"), *folder.glob("*.yml")])
        for path in files:
            spec = load_target_file(path)
            if spec.name in targets:
                raise ConfigError(
                    f"target '{spec.name}' is declared twice: '{targets[spec.name].source}' and "
                    f"'{path}'; rename one (the 'name' field)"
                )
            targets[spec.name] = spec
    return targets


def get_target(name: str, extra_dirs: Sequence[str | os.PathLike[str]] = ()) -> TargetSpec:
    """The target called ``name``; an unknown name lists the known ones."""
    catalog = load_catalog(extra_dirs)
    if name not in catalog:
        raise ConfigError(
            f"unknown target '{name}'; targets: {', '.join(sorted(catalog))} (add one with a "
            f"YAML file in --targets-dir or ${ENV_DIRS}; see mico targets)"
        )
    return catalog[name]


def availability(spec: TargetSpec) -> tuple[bool, str]:
    """Whether ``spec`` can be measured here, and if not, what is missing and how to get it."""
    runner = RUNNERS[spec.runner]
    tools = dict(runner.tools)
    if spec.runner == "host" and spec.cost == "wall":
        tools.pop("valgrind", None)  # wall time needs no callgrind
    missing = [tool for tool in tools if shutil.which(tool) is None]
    reasons = []
    if missing:
        packages = " ".join(sorted({p for t in missing for p in tools[t].split()}))
        reasons.append(f"{', '.join(missing)} not on PATH (apt-get install {packages})")
    if runner.module and importlib.util.find_spec(runner.module) is None:
        reasons.append(f"module {runner.module} is not installed (not part of this mico yet)")
    elif runner.module and not missing:
        module = importlib.import_module(runner.module)
        check, hint = (
            getattr(module, "available", None),
            getattr(module, "missing_tools_hint", None),
        )
        if check is not None and not check():
            reasons.append(hint() if hint is not None else f"{runner.module} is not available")
    return (not reasons, "; ".join(reasons) or "ready")
