"""Run configs: one YAML file describing a whole ``mico run`` (model, data, training, plan, target).

The file is read with mico's bounded, duplicate-key-refusing YAML loader
(:mod:`mico.safe_yaml`) and validated completely before any work starts; each problem names its
section and field (``train.epochs``) and what is expected. See ``docs/run.md`` for the format.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mico.errors import ConfigError, MicoError, brief

TARGETS = ("host", "rv32", "rv64")
MODES = ("static", "dynamic")

SECTIONS: dict[str, tuple[str, ...]] = {
    "": (
        "name",
        "seed",
        "model",
        "model_args",
        "data",
        "train",
        "quantize",
        "search",
        "compile",
        "target",
        "verify",
    ),
    "data": ("dataset", "batch_size", "options"),
    "train": ("epochs", "lr"),
    "quantize": (
        "plan",
        "method",
        "qat_epochs",
        "calibration_batches",
        "per_channel",
        "act_asymmetric",
    ),
    "search": ("strategy", "trials", "budget", "objective", "bits"),
    "compile": ("mode", "name", "prefer"),
    "verify": ("samples",),
}


@dataclass
class RunConfig:
    """A validated run: every field has its default filled in."""

    name: str = "run"
    seed: int = 0
    model: Any = "small_cnn"  # a zoo name, a ModelFactory config (mapping) or "file.py:Class"
    model_args: dict[str, Any] = field(default_factory=dict)
    dataset: str | None = None
    batch_size: int = 64
    dataset_options: dict[str, Any] = field(default_factory=dict)
    epochs: int = 5
    lr: float = 1e-3
    plan: str | None = None
    method: str = "ptq"
    qat_epochs: int = 2
    calibration_batches: int = 4
    per_channel: bool = False
    act_asymmetric: bool = False
    search: dict[str, Any] | None = None
    mode: str = "static"
    c_name: str = "model"
    prefer: str = "speed"  # the kernels: "speed" (fast paths) or "size" (plain: least flash)
    targets: tuple[str, ...] = ("host",)
    samples: int = 32
    source: Path | None = None


def _check_search(check: _Checker, search: dict[str, Any]) -> dict[str, Any]:
    """The search section with defaults: strategy, trials, budget (required), objective, bits."""
    from mico.search.evaluator import OBJECTIVES
    from mico.search.strategies import STRATEGIES
    from mico.search.tune import parse_budgets

    checked: dict[str, Any] = {
        "strategy": check.choice(
            "search.strategy", search.get("strategy", "nlp"), tuple(sorted(STRATEGIES))
        ),
        "trials": check.integer("search.trials", search.get("trials", 10), 1, 10000),
        "objective": check.choice(
            "search.objective", search.get("objective", "ptq_acc"), OBJECTIVES
        ),
        "budget": None,
        "bits": [2, 4, 8],
    }
    budget = search.get("budget")
    if not isinstance(budget, str) or not budget.strip():
        check.fail("search.budget", "budgets such as 'bops=50%' or 'size=4KB,latency=2M'", budget)
    else:
        try:
            parse_budgets(budget)
            checked["budget"] = budget
        except MicoError as exc:
            check.errors.append(f"'search.budget': {exc}")
    bits = search.get("bits", [2, 4, 8])
    if (
        not isinstance(bits, list)
        or not bits
        or any(isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= 8 for b in bits)
    ):
        check.fail("search.bits", "a list of bit-widths from 1 to 8, e.g. [2, 4, 8]", bits)
    else:
        checked["bits"] = sorted(set(bits))
    return checked


def read_yaml(path: str | Path, what: str = "run config") -> Any:
    """Parse a YAML file with mico's bounded loader (size cap, duplicate keys refused, alias
    expansion bounded): every problem is a ConfigError naming the file."""
    from mico.safe_yaml import read_yaml as read_bounded

    return read_bounded(path, what, ConfigError)


def _brief(value: Any) -> str:
    return brief(value, 60)  # bounded even for a value of a hundred thousand nested items


class _Checker:
    """Collects every problem of a config, each named by its section and field."""

    def __init__(self) -> None:
        self.errors: list[str] = []

    def fail(self, where: str, expected: str, value: Any) -> None:
        self.errors.append(f"'{where}': expected {expected}, got {_brief(value)}")

    def section(self, raw: Mapping[str, Any], name: str) -> dict[str, Any]:
        value = raw.get(name, {})
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(name, "a mapping", value)
            return {}
        self.known(value, name)
        return dict(value)

    def known(self, value: Mapping[str, Any], section: str) -> None:
        allowed = SECTIONS[section]
        for key in value:
            if key not in allowed:
                where = f"{section}.{key}" if section else str(key)
                self.errors.append(f"'{where}': unknown field; fields: {', '.join(allowed)}")

    def integer(self, where: str, value: Any, low: int, high: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            self.fail(where, f"an integer in {low}..{high}", value)
            return low
        return value

    def number(self, where: str, value: Any, low: float, high: float) -> float:
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        if not ok or not math.isfinite(value) or not low < value <= high:
            self.fail(where, f"a number in ({low}, {high}]", value)
            return high
        return float(value)

    def choice(self, where: str, value: Any, choices: tuple[str, ...]) -> str:
        if value not in choices:
            self.fail(where, "one of " + ", ".join(choices), value)
            return choices[0]
        return value


def parse_run_config(raw: Any, source: Path | None = None) -> RunConfig:
    """Validate a parsed run config and fill in defaults; every problem is reported at once."""
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"a run config must be a mapping of sections (model, data, train, ...), got "
            f"{_brief(raw)}"
        )
    check = _Checker()
    check.known(raw, "")
    cfg = RunConfig(source=source)
    cfg.name = str(raw.get("name", "run"))
    cfg.seed = check.integer("seed", raw.get("seed", 0), 0, 2**31 - 1)
    model = raw.get("model", "small_cnn")
    if not isinstance(model, str | Mapping) or (isinstance(model, str) and not model.strip()):
        check.fail("model", "a zoo name, 'file.py:Class' or a layers config", model)
    cfg.model = model
    model_args = raw.get("model_args", {}) or {}
    if not isinstance(model_args, Mapping):
        check.fail("model_args", "a mapping of constructor arguments", model_args)
    cfg.model_args = dict(model_args) if isinstance(model_args, Mapping) else {}

    data = check.section(raw, "data")
    dataset = data.get("dataset")
    if dataset is not None and not isinstance(dataset, str):
        check.fail("data.dataset", "a dataset name (see `mico datasets`)", dataset)
    cfg.dataset = dataset
    cfg.batch_size = check.integer("data.batch_size", data.get("batch_size", 64), 1, 65536)
    options = data.get("options", {}) or {}
    if not isinstance(options, Mapping):
        check.fail("data.options", "a mapping", options)
    cfg.dataset_options = dict(options) if isinstance(options, Mapping) else {}

    train = check.section(raw, "train")
    cfg.epochs = check.integer("train.epochs", train.get("epochs", 5), 0, 100_000)
    cfg.lr = check.number("train.lr", train.get("lr", 1e-3), 0.0, 10.0)

    quant = check.section(raw, "quantize")
    plan = quant.get("plan")
    if isinstance(plan, Mapping):  # {conv1: 8/8, ...} written as a mapping
        plan = ",".join(f"{k}={v}" for k, v in plan.items())
    if plan is not None and not isinstance(plan, str):
        check.fail("quantize.plan", "'W/A', 'layer=W/A,...', a mapping or a plan file", plan)
    cfg.plan = plan
    cfg.method = check.choice("quantize.method", quant.get("method", "ptq"), ("ptq", "qat"))
    cfg.qat_epochs = check.integer("quantize.qat_epochs", quant.get("qat_epochs", 2), 0, 100_000)
    cfg.calibration_batches = check.integer(
        "quantize.calibration_batches", quant.get("calibration_batches", 4), 1, 10_000
    )
    per_channel = quant.get("per_channel", False)
    if not isinstance(per_channel, bool):
        check.fail("quantize.per_channel", "true or false", per_channel)
    cfg.per_channel = bool(per_channel)
    asymmetric = quant.get("act_asymmetric", False)
    if not isinstance(asymmetric, bool):
        check.fail("quantize.act_asymmetric", "true or false", asymmetric)
    cfg.act_asymmetric = bool(asymmetric)

    if "search" in raw:
        search = check.section(raw, "search")
        if plan is not None:
            check.errors.append("'search': give either quantize.plan or a search section, not both")
        cfg.search = _check_search(check, search)

    comp = check.section(raw, "compile")
    cfg.mode = check.choice("compile.mode", comp.get("mode", "static"), MODES)
    cfg.c_name = str(comp.get("name", "model"))
    from mico.codegen.linked_paths import PREFERENCES

    cfg.prefer = check.choice("compile.prefer", comp.get("prefer", "speed"), PREFERENCES)

    target = raw.get("target", "host")
    targets = [target] if isinstance(target, str) else target
    if not isinstance(targets, list) or not targets:
        check.fail("target", "a target or a list of them (" + ", ".join(TARGETS) + ")", target)
        targets = ["host"]
    cfg.targets = tuple(check.choice("target", t, TARGETS) for t in targets)

    verify = check.section(raw, "verify")
    cfg.samples = check.integer("verify.samples", verify.get("samples", 32), 1, 100_000)

    if check.errors:
        shown = "; ".join(check.errors[:6])
        more = f" (and {len(check.errors) - 6} more)" if len(check.errors) > 6 else ""
        where = f" {str(source)!r}" if source else ""
        raise ConfigError(f"invalid run config{where}: {shown}{more}")
    return cfg


def load_run_config(path: str | Path) -> RunConfig:
    """Read and validate a run config file."""
    return parse_run_config(read_yaml(path), Path(path))
