"""Instructions per element of the graph input's quantization (float32 -> codes) on rv32imac.

Run on demand (not a test; tests/codegen/test_input_quant_table.py uses its harness):

    python benchmarks/input_quant.py [--out benchmarks/results] [--n 512]

Each case is one quantize node (a width, signed / unsigned / asymmetric codes, a scale) and
seeded float32 inputs. A C program quantizes them with both kernels of ``mico_quant.c`` and
prints the instructions each call retired (the ``instret`` CSR, qemu ``-icount shift=0``) and
the packed codes: **float** ``mico_quantize_f32`` (``x * inv_scale``, a soft-float multiply on
rv32imac, then integer rounding and clamping), **table** ``mico_quantize_f32_table_b<bits>``
(the code as a binary search of float-ordered integer keys in the thresholds of
``mico.quant.thresholds``; ``mico compile`` emits it for codes of 1 to 3 bits) and **exact**
``mico_quantize_f32_exact_b<bits>`` (one integer multiply, no table:
``mico.quant.exact_input``; emitted for 4 to 8 bits). All outputs are held to the Python
reference (``mico.quant.quantize``). Results: ``input_quant.{md,json}``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from mico.codegen.context import c_float
from mico.codegen.emitters import c_int, quantize_table_kernel
from mico.codegen.makefile import RV32_CC
from mico.quant.arithmetic import QFormat, inv_scale_f32, quantize
from mico.quant.exact_input import exact_params, exact_preferred
from mico.quant.packing import unpack
from mico.quant.thresholds import c_table

_KERNELS = Path(__file__).parent / "kernels_rv32.py"
if "kernels_rv32" in sys.modules:
    kernels_rv32 = sys.modules["kernels_rv32"]
else:  # the instret reader of the kernel benchmark, by import
    _spec = importlib.util.spec_from_file_location("kernels_rv32", _KERNELS)
    assert _spec is not None and _spec.loader is not None
    kernels_rv32 = importlib.util.module_from_spec(_spec)
    sys.modules["kernels_rv32"] = kernels_rv32
    _spec.loader.exec_module(kernels_rv32)

SOURCES = ("mico_nn_run.c", "mico_quant.c")
#: the float kernel, the table kernel of the width, the any-width one, the exact kernel of the
#: width (no table; widths 2..8 where exact_params allows)
PATHS = ("float", "table", "table_any", "exact")


@dataclass
class Case:
    """One quantize node: its format and scale, and the float32 inputs it gets."""

    label: str
    fmt: QFormat
    scale: float
    x: np.ndarray  # float32

    def reference(self) -> np.ndarray:
        return np.asarray(quantize(self.x, self.scale, self.fmt), dtype=np.int64)

    def paths(self) -> tuple[str, ...]:
        """The paths of :data:`PATHS` this case has (the exact kernel needs exact_params)."""
        return PATHS if exact_params(self.scale, self.fmt) is not None else PATHS[:3]


def _fmt(f: QFormat) -> str:
    zero = f", .zero = {f.zero}" if f.zero else ""
    return f"{{ .bits = {f.bits}, .is_signed = {int(f.signed)}{zero} }}"


def _case_code(case: Case, tag: str) -> tuple[list[str], list[str]]:
    """Constants of one case and its calls, one per path of :data:`PATHS`."""
    f, n = case.fmt, case.x.size
    xs = ", ".join(c_float(v) for v in case.x)
    table = ", ".join(str(int(v)) for v in c_table(case.scale, f))
    inv = c_float(inv_scale_f32(case.scale))
    code = [
        f"static const float {tag}x[{n}] = {{ {xs} }};",
        f"static const int32_t {tag}t[] = {{ {table} }};",
        f"static const MicoFmt {tag}f = {_fmt(f)};",
    ]
    calls = [
        f"mico_quantize_f32({tag}x, y, {n}, {inv}, {tag}f, {f.qmin}, {f.qmax})",
        f"{quantize_table_kernel(f)}({tag}x, y, {n}, {tag}t, {tag}f, {f.qmin})",
        f"mico_quantize_f32_table({tag}x, y, {n}, {tag}t, {tag}f, {f.qmin})",
    ]
    exact = exact_params(case.scale, f)
    if exact is not None:
        fields = ", ".join(f".{k} = {c_int(v)}" for k, v in exact.c_fields().items())
        code.append(f"static const MicoQuantExact {tag}q = {{ {fields} }};")
        calls.append(f"mico_quantize_f32_exact_b{f.bits}({tag}x, y, {n}, &{tag}q, {tag}f)")
    return code, calls


def quant_program(cases: list[Case]) -> str:
    """A C program printing, per case and path, ``instret <count> <packed codes in hex>``."""
    most = max((c.x.size * c.fmt.bits + 7) // 8 for c in cases)
    lines = ["#include <stdio.h>", '#include "mico_nn.h"', f"static uint8_t y[{most + 4}];",
             kernels_rv32.INSTRET]  # fmt: skip
    body = []
    for i, case in enumerate(cases):
        code, calls = _case_code(case, f"C{i}_")
        lines += code
        nbytes = (case.x.size * case.fmt.bits + 7) // 8
        for call in calls:
            body.append(f"""    t0 = mico_instret();
    {call};
    t1 = mico_instret();
    printf("instret %lu ", t1 - t0);
    for (i = 0; i < {nbytes}; i++) {{
        printf("%02x", y[i]);
    }}
    printf("\\n");""")
    lines.append("int main(void)\n{\n    unsigned long t0, t1;\n    size_t i;\n" + "\n".join(body)
                 + "\n    return 0;\n}")  # fmt: skip
    return "\n".join(lines) + "\n"


def run_cases(cases: list[Case], target: str = "host", cc: str = "gcc") -> list[dict]:
    """Build and run one program; per case ``{path: (instructions, codes)}``."""
    with tempfile.TemporaryDirectory(prefix="mico-input-quant-") as tmp:
        work = Path(tmp)
        csrc = resources.files("mico.csrc")
        for name in ("mico_nn.h", *SOURCES):
            (work / name).write_text((csrc / name).read_text())
        (work / "main.c").write_text(quant_program(cases))
        sources = [str(work / name) for name in ("main.c", *SOURCES)]
        text = kernels_rv32.build_and_run(work, sources, target, cc, timeout=600).split()
    marks = iter([i for i, token in enumerate(text) if token == "instret"])
    results = []
    for case in cases:
        row = {}
        for path in case.paths():
            j = next(marks)
            raw = np.frombuffer(bytes.fromhex(text[j + 2]), dtype=np.uint8)
            row[path] = (int(text[j + 1]), np.asarray(unpack(raw, case.x.size, case.fmt)))
        results.append(row)
    return results


# ----------------------------------------------------------------------------- benchmark
#: (label, bits, signed, zero point as a fraction of the code range)
FORMATS = [
    (f"{kind} {bits}-bit", bits, signed, zero)
    for bits in (8, 7, 6, 5, 4, 3, 2, 1)
    for kind, signed, zero in (
        ("signed", True, 0.0),
        ("unsigned", False, 0.0),
        ("asymmetric", False, 0.3),
    )
    if not (kind == "asymmetric" and bits == 1)
]


def random_case(label: str, bits: int, signed: bool, zero: float, n: int, seed: int) -> Case:
    """Inputs like a calibrated image: normal values whose range the codes span (about 2 %
    beyond it, clamped)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(n).astype(np.float32)
    if not signed:
        x = np.abs(x) if not zero else x
    z = round(zero * (2**bits - 1)) if not signed and bits > 1 else 0
    fmt = QFormat(bits, signed, z)
    top = float(np.quantile(np.abs(x), 0.98))
    scale = top / max(fmt.qmax, 1)
    return Case(label, fmt, scale, x)


def measure(n: int = 512, target: str = "rv32") -> list[dict]:
    cases = [random_case(label, b, s, z, n, seed=i) for i, (label, b, s, z) in enumerate(FORMATS)]
    rows = []
    for case, got in zip(cases, run_cases(cases, target), strict=True):
        ref = case.reference()
        rows.append({
            "case": case.label,
            "format": str(case.fmt),
            "elements": n,
            "table_bytes": 4 * c_table(case.scale, case.fmt).size,
            "emitted": "exact" if "exact" in got and exact_preferred(case.fmt) else "table",
            **{f"{p}_per_element": got[p][0] / n if p in got else None for p in PATHS},
            "exact": all(bool(np.array_equal(got[p][1], ref)) for p in got),
        })  # fmt: skip
    return rows


# ----------------------------------------------------------------------------- whole models
#: (label, flat plan of the three layers' weight and activation widths, asymmetric activations)
MODEL_PLANS = [("8/8", "8/8", False), ("4/4", "4/4", False), ("8/8 asymmetric", "8/8", True),
               ("2/2", "2/2", False)]  # fmt: skip


def _tiny_cnn() -> Any:
    from torch import nn

    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4),
        nn.Flatten(), nn.Linear(8 * 4 * 4, 10),
    )  # fmt: skip


def model_rows(plan: str, asymmetric: bool) -> dict[str, dict]:
    """The input quantize node of a static 3x32x32 CNN, as ``mico verify --per-layer`` counts
    it on rv32 (:func:`mico.hw.nodes.node_costs`), with each path: instructions per input
    element, and the whole inference. ``exact`` is forced for every width here (programs take
    it from :data:`mico.quant.exact_input.EXACT_MIN_BITS` bits on); ``emitted`` names the path
    ``mico compile`` takes."""
    import torch

    from mico.codegen import emitters
    from mico.codegen.compile import compile_model
    from mico.hw.nodes import node_costs
    from mico.ir.ops import mico_ops
    from mico.quant import QuantConfig, calibrate, quantize_model
    from mico.targets import rv32

    torch.manual_seed(0)
    model = _tiny_cnn().eval()
    config = QuantConfig(act_mode="static", act_asymmetric=asymmetric)
    quantize_model(model, plan, config, example_inputs=torch.zeros(1, 3, 32, 32))
    batches = [torch.randn(8, 3, 32, 32) for _ in range(2)]
    calibrate(model, batches)
    sample = batches[0][0].numpy()
    rows: dict[str, Any] = {}
    usable, preferred = emitters.table_usable, emitters.exact_preferred
    for path in ("float", "table", "exact"):
        # the float path is what a scale without a finite reciprocal still gets
        emitters.table_usable = usable if path == "table" else (lambda scale: False)
        emitters.exact_preferred = lambda fmt, path=path: path == "exact"
        try:
            with tempfile.TemporaryDirectory(prefix="mico-input-quant-") as tmp:
                compiled = compile_model(model, batches[0][:1], Path(tmp) / "m", "m",
                                         mode="static", calibration=batches)  # fmt: skip
                elf = rv32.build(compiled.project)
                costs = node_costs(compiled.project, "qemu-rv32", sample)
                size = subprocess.run([RV32_CC.replace("gcc", "size"), str(elf)], check=True,
                                      capture_output=True, text=True).stdout  # fmt: skip
        finally:
            emitters.table_usable, emitters.exact_preferred = usable, preferred
        (node,) = [n for n in compiled.graph.nodes if n.op == mico_ops.QUANTIZE]
        count = dict(costs.nodes)[node.name]
        total = sum(c for _, c in costs.nodes) + costs.tail
        rows[path] = {
            "format": str(node.attrs["qformat"]),
            "elements": node.output.type.numel,
            "per_element": count / node.output.type.numel,
            "node": count,
            "total": total,
            "share_pct": 100.0 * count / total,
            "constants_bytes": sum(compiled.project.flash.values()),
            "text_bytes": int(size.splitlines()[1].split()[0]),  # code and const data
        }
    fmt = node.attrs["qformat"]
    rows["emitted"] = "exact" if preferred(fmt) else "table"
    return rows


def digits_constants() -> dict[str, dict[str, int]]:
    """The constants (``MiCoEval.eval_size``: :func:`mico.codegen.project.project_flash`) of
    the digits CNN (SmallCNN(4, 8), 1x8x8 inputs) at W8A8, static, with its input quantized by
    the table and by the exact kernel, by kind."""
    import torch

    from mico.codegen import emitters
    from mico.codegen.project import project_flash
    from mico.models import SmallCNN
    from mico.pipeline import lower_model
    from mico.quant import QuantConfig, calibrate, quantize_model

    torch.manual_seed(0)
    model = SmallCNN(channels=(4, 8)).eval()
    quantize_model(model, "8/8", QuantConfig(act_mode="static"),
                   example_inputs=torch.zeros(1, 1, 8, 8))  # fmt: skip
    calibrate(model, [torch.rand(16, 1, 8, 8) * 16 for _ in range(2)])
    graph = lower_model(model, torch.zeros(1, 1, 8, 8), "cnn")
    out = {}
    preferred = emitters.exact_preferred
    for path in ("table", "exact"):
        emitters.exact_preferred = lambda fmt, path=path: path == "exact"
        try:
            out[path] = project_flash(graph)
        finally:
            emitters.exact_preferred = preferred
    return out


def _num(v: float | None) -> str:
    return "–" if v is None else f"{v:.1f}"


def _kernel_rows(rows: list[dict]) -> list[str]:
    out = [
        "| case | format | float | table | exact | any-width table | emitted | table bytes "
        "| flash saved | bit-exact |",
        "|---|---|---:|---:|---:|---:|---|---:|---:|---|",
    ]
    for r in rows:
        emitted = "exact" if r["emitted"] == "exact" else "table"
        saved = r["table_bytes"] if emitted == "exact" else 0
        out.append(
            f"| {r['case']} | {r['format']} | {_num(r['float_per_element'])} | "
            f"{_num(r['table_per_element'])} | {_num(r['exact_per_element'])} | "
            f"{_num(r['table_any_per_element'])} | {emitted} | {r['table_bytes']} | {saved} | "
            f"{'yes' if r['exact'] else 'NO'} |"
        )
    return out


def _model_rows(models: dict[str, dict]) -> list[str]:
    out = [
        "| plan | input format | emitted | float | table | exact | share float / table / exact "
        "| inference float / table / exact | constants table → exact | text float / table / "
        "exact |",
        "|---|---|---|---:|---:|---:|---|---|---|---|",
    ]
    for label, m in models.items():
        f, t, e = m["float"], m["table"], m["exact"]
        out.append(
            f"| {label} | {t['format']} | {m['emitted']} | {f['per_element']:.1f} | "
            f"{t['per_element']:.1f} | {e['per_element']:.1f} | {f['share_pct']:.1f} / "
            f"{t['share_pct']:.1f} / {e['share_pct']:.1f} % | {f['total']:,} / {t['total']:,} / "
            f"{e['total']:,} | {t['constants_bytes']:,} → {e['constants_bytes']:,} | "
            f"{f['text_bytes']:,} / {t['text_bytes']:,} / {e['text_bytes']:,} |"
        )
    return out


def _markdown(rows: list[dict], models: dict[str, dict], digits: dict, meta: dict) -> str:
    out = [
        "# Input quantization on rv32imac (benchmarks/input_quant.py)",
        "",
        f"Run {meta['date']} on {meta['host']}; {meta['cc']} -O2 -march=rv32imac, qemu "
        "-icount shift=0. **float**: `mico_quantize_f32` (x * inv_scale through the soft-float "
        "library, integer rounding and clamping; kept for scales without a finite float32 "
        "reciprocal). **table**: `mico_quantize_f32_table_b<bits>`, the float's bits as an "
        "int32 key ordered like the floats, a branch-free binary search of `bits` steps in the "
        "code thresholds (`mico.quant.thresholds`, an int32 table of 2^bits - 1 entries in "
        "flash). **exact**: `mico_quantize_f32_exact_b<bits>`, no table: the float32 product's "
        "24-bit rounding and the rounding half away from zero done together on the high word "
        "of one 32x32 multiply (`mico.quant.exact_input`, a 16-byte struct of constants). Both "
        "write their fields straight (bytes of 8 / bits fields, or through a bit buffer). "
        "**any-width table**: `mico_quantize_f32_table`, the search with the width read at run "
        "time, codes packed through `mico_pack`. Static programs take the exact kernel for "
        "codes of 4 bits or more and the table below (**emitted**). All are held to "
        "`mico.quant.quantize` bit for bit.",
        "",
        f"## The kernels alone ({rows[0]['elements']} float32 inputs a call, packing included; "
        "instructions per element)",
        "",
        *_kernel_rows(rows),
    ]
    if digits:
        t, e = digits["table"], digits["exact"]
        kinds = ", ".join(f"{k} {t[k]} → {e[k]}" for k in t)
        out += [
            "",
            "## Constants of the digits CNN (what `MiCoEval.eval_size` counts)",
            "",
            f"SmallCNN(4, 8) on 1x8x8 digits, W8A8 static, bytes by kind with the input "
            f"quantized by the table → by the exact kernel: {kinds}; total "
            f"{sum(t.values()):,} → {sum(e.values()):,}.",
        ]
    if models:
        out += [
            "",
            "## The input quantize node of a whole model",
            "",
            "A static CNN on 3x32x32 inputs (conv 3->8, conv 8->8, linear; seeded weights, "
            "calibrated on normal inputs), its input quantize node as `mico verify --per-layer` "
            "counts it on rv32 (`mico.hw.nodes.node_costs`: the node's count includes the "
            "run function's NaN / Inf check of the input, about 6 instructions an element), "
            "instructions per input element with each kernel and as a share of the inference; "
            "constants are the project's flash constants, program size the ELF's text (code "
            "and constants). The exact column is forced at every width (the 2/2 plan emits the "
            "table).",
            "",
            *_model_rows(models),
        ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("--out", default=str(Path(__file__).parent / "results"))
    ap.add_argument("--n", type=int, default=512, help="float32 inputs per case")
    ap.add_argument("--no-models", action="store_true", help="the kernels alone")
    args = ap.parse_args(argv)
    rows = measure(args.n)
    for r in rows:
        verdict = "exact" if r["exact"] else "MISMATCH"
        print(f"{r['case']:22s} float {_num(r['float_per_element']):>6}  table "
              f"{_num(r['table_per_element']):>5}  exact {_num(r['exact_per_element']):>5}  "
              f"{verdict}")  # fmt: skip
    digits = digits_constants()
    print("digits CNN constants", {p: sum(v.values()) for p, v in digits.items()})
    models = {}
    for label, plan, asymmetric in [] if args.no_models else MODEL_PLANS:
        models[label] = model_rows(plan, asymmetric)
        print(f"model {label:16s}", {p: round(models[label][p]["per_element"], 1)
                                    for p in ("float", "table", "exact")})  # fmt: skip
    cc = subprocess.run([RV32_CC, "--version"], capture_output=True, text=True).stdout
    meta = {
        "date": __import__("datetime").date.today().isoformat(),
        "host": f"{platform.machine()} {platform.system()}",
        "cc": cc.splitlines()[0] if cc else RV32_CC,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"meta": meta, "results": rows, "digits_constants": digits, "models": models}
    (out / "input_quant.json").write_text(json.dumps(data, indent=1))
    (out / "input_quant.md").write_text(_markdown(rows, models, digits, meta) + "\n")
    return 0 if all(r["exact"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
