"""``MiCoEval``: score a bit-width configuration of a trained model (MiCo's evaluator).

Each evaluation starts from fresh weights (the pretrained checkpoint), so one evaluation never
leaks into the next. Objectives: ``ptq_acc`` (calibrate, then test) and ``qat_acc`` (calibrate,
fine-tune ``epochs``, then test). Costs: ``bops``, ``size`` (flash bytes of the emitted C
project's constants: packed weights, biases, scales, tables, as ``mico compile`` reports them),
``flash`` (the whole program's flash on rv32: constants, the run function, the kernel code it
links and the runtime, predicted from the compiled objects' section graph, see
:mod:`mico.hw.codesize`), ``macs``, ``latency`` (BitFusion cycles), ``ram`` (bytes of
the static arena the emitted C project plans in the evaluator's mode, computed by the code
generator's planner on the lowered graph, without any C compiler) and ``ram_total`` (the
program's whole RAM on rv32: the arena, the other static data and bss it links, the runtime's
and the stack bound of its run function, see :func:`mico.hw.stack.program_ram`).

With a ``cache`` (:class:`~mico.search.cache.EvalCache`), objective values are kept under a key
of the model, its weights, the data, the mode, the target and the scheme, and reused across
runs and worker processes.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader

from mico.errors import PlanError, UnsupportedOpError
from mico.quant import QuantConfig, as_plan, calibrate, model_costs, quantize_model
from mico.quant.order import quantizable_layers
from mico.train.checkpoint import load_checkpoint
from mico.train.loop import accuracy, fit

OBJECTIVES = ("ptq_acc", "qat_acc")
CONSTRAINTS = ("bops", "size", "flash", "macs", "latency", "ram", "ram_total")
#: latency targets: bitfusion is analytic; the others run the scheme's C program (measured:
#: rv32 instructions under qemu -icount, host instructions under callgrind, VexRiscv cycles)
#: or ask the target's fitted proxy (mode "proxy", see mico profile)
LATENCY_TARGETS = ("bitfusion", "rv32", "host", "vexriscv")
LATENCY_MODES = ("measured", "proxy")
#: what needs the rv32 toolchain for the ram_total cost (named in the error without it)
RAM_TOTAL = "the ram_total cost (the rv32 program's static data and stack bound)"


def _latency_kind(target: str) -> str:
    """``bitfusion``, ``rv32``, ``host`` or ``vexriscv``: how ``target`` (a built-in latency
    target or a target file of one of their runners, e.g. rv32zbb) is measured."""
    from mico.errors import MicoError
    from mico.hw.measure import latency_kind

    try:
        return latency_kind(target)
    except MicoError as exc:
        raise UnsupportedOpError(
            f"latency target '{target}' is not available in MiCoEval ({exc}); use "
            f"{', '.join(LATENCY_TARGETS)} or a target file of their runners"
        ) from None


class MiCoEval:
    """Evaluate qschemes (``[w bits…, a bits…]`` or ``[[w…], [a…]]``) of one trained model."""

    def __init__(
        self,
        model: nn.Module,
        epochs: int,
        train_loader: DataLoader,
        test_loader: DataLoader,
        pretrained_model: str | Path | None,
        lr: float = 0.0001,
        objective: str = "ptq_acc",
        constraint: str = "bops",
        output_json: str | Path | None = None,
        *,
        calibration_batches: int = 8,
        config: QuantConfig | None = None,
        example_inputs: Any = None,
        latency_target: str = "bitfusion",
        latency_mode: str = "measured",
        cache: Any = None,
        data_name: str | None = None,
        model_name: str | None = None,
        prefer: str = "speed",
    ) -> None:
        from mico.codegen.linked_paths import check_preference

        check_preference(prefer)
        if objective not in OBJECTIVES:
            raise PlanError(f"objective must be one of {', '.join(OBJECTIVES)}; got {objective!r}")
        if constraint not in CONSTRAINTS:
            raise PlanError(
                f"constraint must be one of {', '.join(CONSTRAINTS)}; got {constraint!r}"
            )
        if latency_target not in LATENCY_TARGETS:
            try:  # a target file of one of their runners (rv32zbb), or refused
                _latency_kind(latency_target)
            except UnsupportedOpError:
                raise PlanError(
                    f"latency target must be one of {', '.join(LATENCY_TARGETS)} or a target "
                    f"file of their runners (mico targets); got {latency_target!r}"
                ) from None
        if latency_mode not in LATENCY_MODES:
            raise PlanError(
                f"latency mode must be one of {', '.join(LATENCY_MODES)}; got {latency_mode!r}"
            )
        proxied = latency_mode == "proxy" and _latency_kind(latency_target) != "bitfusion"
        if prefer == "size" and proxied:
            raise PlanError(
                "a latency proxy predicts the fast kernel paths of a program preferring speed; "
                "with --prefer size measure latency instead (--latency-mode measured)"
            )
        #: the kernel preference of the programs the costs count (mico.codegen.linked_paths):
        #: "speed" (the fast paths) or "size" (the plain kernels only: least flash)
        self.prefer = prefer
        self.latency_target = latency_target
        self.latency_mode = latency_mode
        self._latency: dict[tuple[str, str, str], float] = {}
        self.model = model
        self.epochs = epochs
        self.train_loader = train_loader
        self.test_loader = test_loader
        self.pretrained_model = None if pretrained_model is None else Path(pretrained_model)
        self.lr = lr
        self.objective = objective
        self.constraint = constraint
        self.output_json = None if output_json is None else Path(output_json)
        self.config = config or QuantConfig(act_mode="static")
        self.example = example_inputs
        if self.example is None and hasattr(model, "example_input"):
            self.example = model.example_input()
        if self.example is None:
            self.example = next(iter(test_loader))[0][:1]
        self.layer_names = quantizable_layers(model, self.example)
        self.n_layers = len(self.layer_names)
        self._calibration = [x for x, _ in train_loader][:calibration_batches]
        self.history: list[dict[str, Any]] = []
        self.mode = "static" if self.config.act_mode == "static" else "dynamic"
        self.cache = cache
        self.data_name = data_name or "unnamed"
        self.model_name = model_name or getattr(model, "zoo_name", None) or type(model).__name__
        self.last_from_cache = False
        #: set by :mod:`mico.search.study`: runs each objective evaluation as a study trial
        self.trial_runner: Callable[[list[Any]], float] | None = None
        self._deployed_costs: dict[str, tuple[int, dict[str, int]]] = {}
        self._program_flash: dict[str, Any] = {}
        self._program_ram: dict[str, Any] = {}
        self._key_fields: dict[str, str] | None = None

    # ----------------------------------------------------------------- models
    def _fresh(self, qscheme: Sequence[Any]) -> nn.Module:
        """A copy of the model with pretrained weights, quantized with ``qscheme``."""
        plan = as_plan(list(qscheme), self.layer_names)
        model = copy.deepcopy(self.model)
        if self.pretrained_model is not None:
            load_checkpoint(self.pretrained_model, model)
        quantize_model(model, plan, self.config, self.example)
        calibrate(model, self._calibration)
        return model

    def _plan_bits(self, qscheme: Sequence[Any]) -> dict[str, tuple[Any, Any]]:
        plan = as_plan(list(qscheme), self.layer_names)
        return {n: (b.w, b.a) for n, b in plan.items()}

    # ----------------------------------------------------------------- objectives
    def eval_ptq_acc(self, qscheme: Sequence[Any]) -> float:
        return accuracy(self._fresh(qscheme), self.test_loader)

    def eval_qat_acc(self, qscheme: Sequence[Any]) -> float:
        model = self._fresh(qscheme)
        fit(model, self.train_loader, self.epochs, lr=self.lr)
        return accuracy(model, self.test_loader)

    def eval_f(self, qscheme: Sequence[Any]) -> float:
        """The objective (accuracy) of ``qscheme``; recorded in ``history`` and ``output_json``.

        Runs as a trial of the attached study when there is one (``trial_runner``), else
        through :meth:`objective_value` (the cache, then the evaluation)."""
        if self.trial_runner is not None:
            value = self.trial_runner(list(qscheme))
        else:
            value = self.objective_value(qscheme)
        self._record(qscheme, self.objective, value)
        return value

    def objective_value(self, qscheme: Sequence[Any]) -> float:
        """The objective of ``qscheme`` from the cache, or evaluated (and then cached)."""
        self.last_from_cache = False
        key = self.cache_key(qscheme) if self.cache is not None else None
        if key is not None:
            cached = self.cache.get(key)
            if cached is not None:
                self.last_from_cache = True
                return cached
        evaluate: Callable[[Sequence[Any]], float] = getattr(self, f"eval_{self.objective}")
        value = float(evaluate(qscheme))
        if key is not None:
            self.cache.put(key, value)
        return value

    # ----------------------------------------------------------------- cache key
    def scheme_key(self, qscheme: Sequence[Any]) -> str:
        """The scheme as canonical plan text (``conv1=8/8,...``; ternary stays ``1.58``)."""
        return as_plan(list(qscheme), self.layer_names).to_string()

    def key_fields(self) -> dict[str, str]:
        """What an objective value depends on besides the scheme (computed once)."""
        if self._key_fields is None:
            model = copy.deepcopy(self.model)
            if self.pretrained_model is not None:
                load_checkpoint(self.pretrained_model, model)
            data = hashlib.sha256(self.data_name.encode())
            for x, y in self.test_loader:
                data.update(_tensor_bytes(x) + _tensor_bytes(y))
            for x in self._calibration:
                data.update(_tensor_bytes(x))
            self._key_fields = {
                "model": self.model_name,
                "checkpoint": _state_hash(model),
                "data": f"{self.data_name}:{data.hexdigest()[:16]}",
                "mode": f"{self.mode}/{self.config.weight_granularity}",
                "target": self.latency_target,
            }
        objective = f"{self.objective}:epochs={self.epochs}:lr={self.lr:g}"
        return {**self._key_fields, "objective": objective}

    def cache_key(self, qscheme: Sequence[Any]) -> dict[str, str]:
        return {**self.key_fields(), "scheme": self.scheme_key(qscheme)}

    # ----------------------------------------------------------------- constraints
    def _costs(self, qscheme: Sequence[Any]):
        return model_costs(self.model, self.example, self._plan_bits(qscheme))

    def eval_bops(self, qscheme: Sequence[Any]) -> float:
        """Bit operations of one inference: Σ MACs·w·a."""
        return self._costs(qscheme).bops

    def eval_size(self, qscheme: Sequence[Any]) -> float:
        """Flash bytes of the constants of the C project ``mico compile`` emits for this scheme
        in the evaluator's mode: packed weights, biases, requantization scales and the other
        tables (lookup tables, shapes) — the ``flash`` figure compile reports. Code is not
        counted (:meth:`eval_flash` counts it). See :meth:`flash_bytes` for the split."""
        return float(sum(self.flash_bytes(qscheme).values()))

    def flash_bytes(self, qscheme: Sequence[Any]) -> dict[str, int]:
        """The scheme's project constants by kind (``weights``, ``bias``, ``scales``,
        ``params``), from the code generator's emission of the lowered graph (no file is
        written, no compiler runs)."""
        return dict(self._deployed(qscheme)[1])

    def eval_flash(self, qscheme: Sequence[Any]) -> float:
        """Flash bytes of the scheme's whole C program on rv32 (the evaluator's mode): its
        constants, its run function, the kernel code and tables the run function links (with
        the picolibc / libgcc functions they call) and the runtime every program links.

        Sub-byte kernel paths link much more code than W8A8 ones, so a scheme whose constants
        fit a device may not fit as a program; this is the figure a device's flash must hold.
        Predicted without linking (:func:`mico.hw.codesize.program_flash`: the closure of
        ``<name>_run`` over the objects' section graph, within 0.2 % of the linked ELF on the
        zoo models). Needs the rv32 toolchain (a :class:`~mico.errors.BuildError` says what
        to install); see :meth:`program_flash` for the split. The program is the one of the
        evaluator's kernel preference (``prefer="size"``: the plain kernels only, whose code
        does not grow at fewer bits)."""
        return float(self.program_flash(qscheme).total)

    def program_flash(self, qscheme: Sequence[Any]) -> Any:
        """The scheme's rv32 program flash by part (a :class:`mico.hw.codesize.ProgramFlash`:
        constants, model object, kernels, libraries, runtime), remembered per scheme."""
        key = self.scheme_key(qscheme)
        if key not in self._program_flash:
            from mico.hw.codesize import program_flash, require_tools

            require_tools()  # before lowering: a missing toolchain is said at once
            self._program_flash[key] = program_flash(self._lowered(qscheme), prefer=self.prefer)
        return self._program_flash[key]

    def eval_macs(self, qscheme: Sequence[Any]) -> float:
        return float(self._costs(qscheme).macs)

    def eval_ram(self, qscheme: Sequence[Any]) -> float:
        """Bytes of the static arena of the C project ``mico compile`` emits for this scheme in
        the evaluator's mode (the planner of :mod:`mico.codegen.planner` on the lowered graph,
        with the kernels' working memory planned in it: the ``arena`` figure compile
        reports). The stack is not counted: where the code generator leaves a kernel family's
        scratch on the stack the arena shrinks and the stack grows; :meth:`eval_ram_total`
        counts both."""
        return float(self._deployed(qscheme)[0])

    def eval_ram_total(self, qscheme: Sequence[Any]) -> float:
        """Bytes of RAM the scheme's rv32 program needs (the evaluator's mode and kernel
        preference): its arena (:meth:`eval_ram`), the other static data and bss its run
        function links, the runtime's data and bss, and the static bound of the run
        function's stack (its frame and the deepest chain of kernel frames it can call, from
        GCC's ``-fstack-usage``), the stack the kernels' scratch may take included. This is
        the figure a device's RAM must hold beside the caller's own frames and buffers; the
        code generator places the scratch to make it least (``scratch_placement`` in
        ``mico.json``). Needs the rv32 toolchain (a :class:`~mico.errors.BuildError` says what
        to install); see :meth:`program_ram` for the split."""
        return float(self.program_ram(qscheme).total)

    def program_ram(self, qscheme: Sequence[Any]) -> Any:
        """The scheme's rv32 program RAM by part (a :class:`mico.hw.stack.ProgramRam`: arena,
        static, runtime, stack bound and its chain of frames), remembered per scheme."""
        key = self.scheme_key(qscheme)
        if key not in self._program_ram:
            from mico.hw.codesize import require_tools
            from mico.hw.stack import program_ram

            require_tools(RAM_TOTAL)  # before lowering: a missing toolchain is said at once
            self._program_ram[key] = program_ram(self._lowered(qscheme), prefer=self.prefer)
        return self._program_ram[key]

    def _deployed(self, qscheme: Sequence[Any]) -> tuple[int, dict[str, int]]:
        """Arena bytes and flash bytes by kind of the scheme's C project, remembered per scheme
        (lowering takes a while: 0.05 s for the digits CNN, 0.25 s for DS-CNN)."""
        key = self.scheme_key(qscheme)
        if key not in self._deployed_costs:
            from mico.codegen.project import project_costs

            self._deployed_costs[key] = project_costs(self._lowered(qscheme), prefer=self.prefer)
        return self._deployed_costs[key]

    def eval_latency(
        self, qscheme: Sequence[Any], target: str | None = None, mode: str | None = None
    ) -> float:
        """Latency of one inference on ``target`` (default: the evaluator's latency target).

        ``bitfusion``: cycles of the analytic model of :mod:`mico.hw.bitfusion` over the layers'
        geometry and widths. ``rv32`` / ``host`` / ``vexriscv`` in ``mode="measured"``: the
        scheme's C program (the evaluator's mode), built and run on one sample — rv32
        instructions (qemu ``-icount``), host instructions (callgrind), VexRiscv cycles (RTL).
        ``mode="proxy"``: the target's fitted proxy (``mico profile --target T``). Remembered
        per scheme, target and mode.
        """
        target = target or self.latency_target
        mode = mode or self.latency_mode
        kind = _latency_kind(target)
        if mode not in LATENCY_MODES:
            raise PlanError(f"latency mode must be one of {', '.join(LATENCY_MODES)}; got {mode!r}")
        key = (self.scheme_key(qscheme), target, mode if kind != "bitfusion" else "measured")
        if key in self._latency:
            return self._latency[key]
        from mico.hw import model_cycles, model_layer_shapes

        layers = model_layer_shapes(self.model, self.example, self._plan_bits(qscheme))
        if kind == "bitfusion" and mode == "measured":
            value = float(model_cycles(layers).cycles)
        elif mode == "proxy":
            from mico.hw.latency import proxy_report
            from mico.targets.catalog import get_target

            graph = self._lowered(qscheme) if kind != "bitfusion" else None  # every node
            report = proxy_report(layers, get_target(target), graph=graph)
            value = float(sum(row.value for row in report.rows))
        else:
            value = self._measured_latency(qscheme, target)
        self._latency[key] = value
        return value

    def _lowered(self, qscheme: Sequence[Any]) -> Any:
        """The scheme's lowered graph in the evaluator's mode: the graph ``mico compile`` (and
        ``mico tune``'s compiled best plan) emits — the checkpoint's weights, calibrated on the
        evaluator's calibration batches."""
        from mico.codegen.compile import lower

        model = self._fresh(qscheme).eval()
        return lower(model, self.example[:1], self.mode, self._calibration or [self.example])[0]

    def check_latency_falls_with_bits(self, qtypes: Sequence[Any]) -> None:
        """Refuse a latency search the searchers would get wrong: they assume fewer bits never
        cost more (they repair a scheme by lowering widths). On a measured target whose kernels
        are slower at fewer bits that is false, so say so with the figures."""
        if self.latency_target == "bitfusion" and self.latency_mode == "measured":
            return  # the analytic model falls with the widths by construction
        self.check_cost_falls_with_bits("latency", qtypes)

    def check_cost_falls_with_bits(self, cost: str, qtypes: Sequence[Any]) -> None:
        """Refuse a search under a ``cost`` budget (``latency``, ``flash``, ``ram_total``) when
        that cost does not fall with fewer bits for this model (uniform schemes): the searchers
        assume it does. Kernel code makes ``flash`` rise at fewer bits on models whose sub-byte
        paths link more code than their constants save (DS-CNN: 83 KB at W8A8, 136 KB at
        W2A2); a sub-byte kernel's deeper stack can do the same to ``ram_total``."""
        widths = sorted(qtypes)
        value = self.eval_latency if cost == "latency" else getattr(self, f"eval_{cost}")
        costs = {q: value([q] * (2 * self.n_layers)) for q in widths}
        for low, high in itertools.pairwise(widths):
            if costs[low] > costs[high]:
                keep = [widths[-1]]  # from the widest down, each narrower one cheaper
                for q in reversed(widths[:-1]):
                    if costs[q] <= costs[keep[0]]:
                        keep.insert(0, q)
                figures = ", ".join(f"W{q}A{q} {costs[q]:,.0f}" for q in widths)
                what = (f"latency on {self.latency_target} ({self.latency_mode})"
                        if cost == "latency" else f"{cost} on rv32")  # fmt: skip
                other = "Search only the widths where it does"
                if cost == "flash" and self.prefer == "speed":
                    other = ("Search with --prefer size (the plain kernels: the least flash, "
                             "every layer slower), or only the widths where it does")  # fmt: skip
                if cost == "latency":
                    other = "Search with --latency-target bitfusion, or only the widths that do"
                raise PlanError(
                    f"{what} does not fall with fewer bits for this model ({figures}); the "
                    f"searchers assume fewer bits cost less. {other}: --bits "
                    f"{','.join(str(q) for q in keep)}"
                )

    def _measured_latency(self, qscheme: Sequence[Any], target: str) -> float:
        """Compile the scheme's C program for ``target`` (with the ISA extensions its file
        declares, as ``mico verify --target`` does) into a temporary folder and count one
        inference on the runner of its kind."""
        from mico.codegen.compile import compile_model
        from mico.hw.measure import generation_extensions

        plan = as_plan(list(qscheme), self.layer_names)
        model = copy.deepcopy(self.model).eval()
        quantize_model(model, plan, self.config, self.example)
        batches = self._calibration[:1] or [self.example]
        if self.mode == "static":
            calibrate(model, batches)
        sample = np.asarray(self.example[:1], dtype=np.float32)
        with tempfile.TemporaryDirectory(prefix="mico-latency-") as tmp:
            compiled = compile_model(model, self.example[:1], Path(tmp) / "c", "model",
                                     self.mode, calibration=batches,
                                     isa_extensions=generation_extensions(target),
                                     prefer=self.prefer)  # fmt: skip
            project = compiled.project
            kind = _latency_kind(target)
            if kind == "rv32":
                from mico.targets import rv32

                rv32.build(project)
                return float(rv32.run(project, sample).instructions_per_inference)
            if kind == "vexriscv":
                from mico.targets import vexriscv

                vexriscv.build(project)
                return float(vexriscv.run(project, sample).cycles_per_inference)
            from mico.targets import host

            host.build(project)
            # the steady state: the host kernels' one-time weight layout is not per inference
            counts, _ = host.steady_callgrind_counts(project, sample, Path(tmp))
            return float(counts.max())

    def eval_constraint(self, qscheme: Sequence[Any]) -> float:
        if self.constraint == "latency":
            return self.eval_latency(qscheme)
        return float(getattr(self, f"eval_{self.constraint}")(qscheme))

    # ----------------------------------------------------------------- history
    def _record(self, qscheme: Sequence[Any], name: str, value: float) -> None:
        self.history.append({"qscheme": _plain(qscheme), name: value})
        if self.output_json is None:
            return
        self.output_json.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.output_json.name}.", dir=self.output_json.parent)
        with os.fdopen(fd, "w") as f:
            json.dump(self.history, f, indent=2)
        os.replace(tmp, self.output_json)


def _tensor_bytes(x: Any) -> bytes:
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().contiguous().numpy().tobytes()
    return repr(x).encode()


def _state_hash(model: nn.Module) -> str:
    """A hash of a model's weights and buffers (names, shapes, dtypes, values)."""
    digest = hashlib.sha256()
    for name, value in sorted(model.state_dict().items()):
        digest.update(f"{name}:{tuple(value.shape)}:{value.dtype}".encode())
        digest.update(_tensor_bytes(value))
    return digest.hexdigest()[:24]


def _plain(qscheme: Sequence[Any]) -> list[Any]:
    return [_plain(q) if isinstance(q, list | tuple) else q for q in qscheme]
