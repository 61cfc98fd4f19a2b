"""The full grid of unseen models: every model x plan x mode, on the host and on rv32.

The test suite (tests/codegen/test_unseen_models.py) rotates the plans over the models to stay
quick; this benchmark runs the whole cross product — 8 models written for the purpose (not the
zoo) x W8A8, W4A4, W2A2, ternary and a mixed plan x static and dynamic x host and rv32 — and
writes which cases agree with the Python reference (static: bit for bit, dynamic: within 1e-5).

    .venv/bin/python benchmarks/unseen_grid.py [--targets host,rv32] [--out benchmarks/results]
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


def _models_module():
    path = ROOT / "tests" / "codegen" / "test_unseen_models.py"
    spec = importlib.util.spec_from_file_location("unseen_models", path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default="host,rv32")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    args = parser.parse_args(argv)
    from mico.codegen import compile_model
    from mico.deploy import DeployOptions, verify_compiled
    from mico.errors import MicoError
    from mico.targets import rv32

    targets = [t for t in args.targets.split(",") if t]
    if "rv32" in targets and not rv32.available():
        print(f"rv32 skipped: {rv32.missing_tools_hint()}", file=sys.stderr)
        targets.remove("rv32")
    grid = _models_module()
    rows = []
    started = time.time()
    for index, (model_class, shape) in enumerate(grid.MODELS):
        for plan in grid.PLANS:
            for mode in ("static", "dynamic"):
                row = {"model": model_class.__name__, "plan": plan, "mode": mode}
                try:
                    qmodel, batches = grid.build(model_class, shape, plan, mode, seed=index)
                    with tempfile.TemporaryDirectory() as tmp:
                        compiled = compile_model(qmodel, batches[0][:1], Path(tmp) / "c", "net",
                                                 mode, calibration=batches)  # fmt: skip
                        samples = np.random.default_rng(7).standard_normal((6, *shape))
                        options = DeployOptions(targets=tuple(targets), rtol=1e-5)
                        result = verify_compiled(compiled, samples.astype(np.float32), options,
                                                 log=lambda _m: None)  # fmt: skip
                    for r in result.results:
                        a = r.agreement
                        ok = a.all_exact if mode == "static" else a.all_within_tolerance
                        row[r.target] = "ok" if ok else f"DIFF ({a.summary()})"
                except MicoError as exc:
                    row["error"] = str(exc)[:200]
                rows.append(row)
                print(row, flush=True)
    cases = len(rows) * len(targets)
    passed = sum(1 for r in rows for t in targets if r.get(t) == "ok")
    data = {
        "targets": targets,
        "cases": cases,
        "passed": passed,
        "seconds": round(time.time() - started, 1),
        "torch": torch.__version__,
        "rows": rows,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "unseen_grid.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "# Unseen models: the full grid",
        "",
        f"{passed}/{cases} cases agree with the Python reference (static: bit for bit; "
        f"dynamic: within 1e-5), {len(grid.MODELS)} models x {len(grid.PLANS)} plans x 2 modes "
        f"x {', '.join(targets)}; {data['seconds']} s. Models: "
        "tests/codegen/test_unseen_models.py.",
        "",
        "| model | plan | mode | " + " | ".join(targets) + " |",
        "|---|---|---|" + "---|" * len(targets),
    ]
    for r in rows:
        cells = [r.get(t, r.get("error", "-")) for t in targets]
        lines.append(f"| {r['model']} | {r['plan']} | {r['mode']} | " + " | ".join(cells) + " |")
    (args.out / "unseen_grid.md").write_text("\n".join(lines) + "\n")
    print(f"{passed}/{cases} cases agree; {args.out / 'unseen_grid.md'}")
    return 0 if passed == cases else 1


if __name__ == "__main__":
    raise SystemExit(main())
