"""A long fuzz run of the IR loader: every outcome must be truthful or an IRFormatError.

Run on demand (not a test):  python benchmarks/ir_fuzz.py [--n 100000] [--seed 0] [--out DIR]

It saves a small graph (weights, a constant, an alias, attributes), applies one to three
structure-aware mutations per input (the ones of tests/ir/ir_mutations.py: dropped, duplicated
and retyped fields, shapes, dtypes, swapped names, bad indices, deep nesting, bad attributes,
alias cycles, tampered weights, truncation, byte flips), loads each with ``load_ir`` and runs
what loads with ``execute_ir``. Outcomes:

* ``valid``: loaded, and every result has its declared shape and dtype (or the declared input
  is symbolic/huge, so only loading was tested);
* ``format_error``: ``IRFormatError``;
* ``exec_error``: loaded, then a mico error named the node that could not run;
* ``lie`` (a result contradicts its declared type) and ``bug`` (any other exception): failures.

Counts and up to 20 examples per failure kind go to ``benchmarks/results/ir_fuzz.json``/``.md``.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "ir"))
from ir_mutations import MUTATIONS, base_case, judge, mutate

OUTCOMES = ("valid", "format_error", "exec_error", "lie", "bug")


def run(n: int, seed: int) -> dict[str, Any]:
    """Fuzz ``n`` inputs from ``seed``; return counts, timings and failure examples."""
    rng = random.Random(seed)
    counts: Counter[str] = Counter()
    examples: dict[str, list[str]] = {"lie": [], "bug": []}
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        doc, weights = base_case(Path(tmp))
        for i in range(n):
            text, tampered = mutate(doc, weights, rng)
            outcome, detail = judge(text, tampered, Path(tmp))
            counts[outcome] += 1
            if outcome in examples and len(examples[outcome]) < 20:
                examples[outcome].append(f"input {i}: {detail}")
    seconds = time.perf_counter() - start
    return {
        "inputs": n,
        "seed": seed,
        "mutations": [m.__name__ for m in MUTATIONS],
        "counts": {k: counts[k] for k in OUTCOMES},
        "failures": counts["lie"] + counts["bug"],
        "seconds": round(seconds, 1),
        "inputs_per_second": round(n / seconds, 1) if seconds else None,
        "examples": examples,
        "python": platform.python_version(),
    }


def markdown(result: dict[str, Any]) -> str:
    """The result as a short Markdown report."""
    lines = [
        "# IR loader fuzz run",
        "",
        f"{result['inputs']} mutated IR files (seed {result['seed']}), "
        f"{result['seconds']} s ({result['inputs_per_second']} inputs/s), "
        f"Python {result['python']}.",
        "",
        "| outcome | count | meaning |",
        "|---|---:|---|",
    ]
    meaning = {
        "valid": "loaded; every result has its declared shape and dtype",
        "format_error": "IRFormatError at load (clean)",
        "exec_error": "loaded; a mico error named the node that could not run (clean)",
        "lie": "a result contradicts its declared type (failure)",
        "bug": "any other exception (failure)",
    }
    for key in OUTCOMES:
        lines.append(f"| {key} | {result['counts'][key]} | {meaning[key]} |")
    lines += ["", f"**Failures: {result['failures']}.**", ""]
    lines.append("Mutations: " + ", ".join(result["mutations"]) + ".")
    for kind, found in result["examples"].items():
        if found:
            lines += ["", f"## {kind} examples", ""] + [f"- `{e}`" for e in found]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000, help="inputs to fuzz (default 100000)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args()
    if args.n < 1:
        parser.error("--n must be at least 1")
    result = run(args.n, args.seed)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "ir_fuzz.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "ir_fuzz.md").write_text(markdown(result))
    print(markdown(result))
    sys.exit(1 if result["failures"] else 0)


if __name__ == "__main__":
    main()
