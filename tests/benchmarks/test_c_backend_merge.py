"""benchmarks/c_backend.py --merge: a rerun of some models or modes replaces exactly their cases,
keeps every other case with the run it came from, and the grid table says which run each
model's cases come from; the run keeps one kernel-object cache unless the user set one."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.benchmark_modules import load_benchmark

bench = load_benchmark("c_backend")


def case(model: str, plan: str, mode: str, run: str, agrees: bool = True) -> dict:
    agreement = {"agrees": agrees, "exact": 8 if agrees else 3, "samples": 8,
                 "all_within_tolerance": agrees}  # fmt: skip
    return {"model": model, "plan": plan, "mode": mode, "run": run, "agreement": agreement}


def rerun_of_lenet() -> list[dict]:
    """lenet's static cases run again: W8A8 agrees, W4A4 does not."""
    return [
        case("lenet", p, "static", "new (2026-11-26)", agrees=p == "W8A8") for p in ("W8A8", "W4A4")
    ]


OLD = [
    case(m, p, mode, "old (2026-11-20)")
    for m in ("mlp", "lenet", "dscnn")
    for mode in ("dynamic", "static")
    for p in ("W8A8", "W4A4")
]


def test_merge_replaces_only_the_rerun_models_and_modes() -> None:
    new = rerun_of_lenet()
    merged = bench.merged_records(OLD, new, ["lenet"], ["static"])
    keys = [(r["model"], r["plan"], r["mode"]) for r in merged]
    assert len(keys) == len(set(keys)) == len(OLD)
    runs = {(r["model"], r["mode"]): r["run"] for r in merged}
    assert runs[("lenet", "static")].startswith("new")
    assert runs[("lenet", "dynamic")].startswith("old")  # a mode not rerun is kept
    assert runs[("mlp", "static")].startswith("old") and runs[("dscnn", "static")].startswith("old")
    # the models keep the earlier file's order
    assert list(dict.fromkeys(r["model"] for r in merged)) == ["mlp", "lenet", "dscnn"]


def test_merge_drops_a_rerun_models_earlier_failure_to_build() -> None:
    failed = {"model": "lenet", "plan": "-", "mode": "-", "run": "old", "errors": {"model": "x"}}
    merged = bench.merged_records([*OLD, failed], [case("lenet", "W8A8", "static", "new")],
                                  ["lenet"], ["static"])  # fmt: skip
    assert not any(r.get("errors") for r in merged)


def test_grid_table_names_the_runs_and_counts_disagreements() -> None:
    new = rerun_of_lenet()
    merged = bench.merged_records(OLD, new, ["lenet"], ["static"])
    meta = {"date": "2026-11-26", "machine": "m", "cc": "gcc", "sanitize": True, "seed": 0,
            "samples": 8, "modes": ["static"]}  # fmt: skip
    text = bench.grid_markdown(merged, meta)
    assert "several runs (`--merge`)" in text
    # lenet's two modes come from two runs: the runs are named by mode
    assert "- old (2026-11-20), dynamic mode: mlp, lenet, dscnn" in text
    assert "- new (2026-11-26), static mode: lenet" in text
    assert "- old (2026-11-20), static mode: mlp, dscnn" in text
    assert "## static mode: 5/6 cases agree" in text
    assert "## dynamic mode: 6/6 cases agree" in text  # the earlier run's mode is still shown
    assert "| lenet | ✓ | ✗ 3/8 |" in text
    single = bench.grid_markdown(new, meta)
    assert "Every case ran at new (2026-11-26)." in single


def test_earlier_records_are_stamped_with_their_date(tmp_path: Path) -> None:
    path = tmp_path / "c_backend_grid.json"
    assert bench._earlier_records(path) == []
    unstamped = [{k: v for k, v in r.items() if k != "run"} for r in OLD[:2]]
    path.write_text(json.dumps({"meta": {"date": "2026-11-21"}, "results": unstamped}))
    assert {r["run"] for r in bench._earlier_records(path)} == {"an earlier run (2026-11-21)"}


def test_the_run_keeps_a_kernel_cache_unless_the_user_set_one(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(bench.BUILD_CACHE_ENV, raising=False)
    with bench._build_cache(str(tmp_path)):
        assert os.environ[bench.BUILD_CACHE_ENV] == str(tmp_path / "objects")
    assert bench.BUILD_CACHE_ENV not in os.environ
    monkeypatch.setenv(bench.BUILD_CACHE_ENV, "/somewhere/else")
    with bench._build_cache(str(tmp_path)):
        assert os.environ[bench.BUILD_CACHE_ENV] == "/somewhere/else"
    assert os.environ[bench.BUILD_CACHE_ENV] == "/somewhere/else"


def test_grid_table_adds_the_rv32_runs_and_the_isa_extensions() -> None:
    new = rerun_of_lenet()
    new[0]["rv32"] = {"agreement": {**new[0]["agreement"]}}
    new[1]["rv32"] = {"agreement": None}  # the rv32 stage failed
    meta = {"date": "2026-11-26", "machine": "m", "cc": "gcc", "sanitize": True, "seed": 0,
            "samples": 8, "modes": ["static"], "isa_extensions": ["zbb"]}  # fmt: skip
    text = bench.grid_markdown(new, meta)
    assert "ISA extensions zbb" in text
    assert "### static mode on rv32 (qemu, 4 samples a case): 1/2 agree" in text
    assert "| lenet | ✓ | ✗ 3/8 |" in text and "| lenet | ✓ | ERR |" in text
    # without rv32 runs, no rv32 table
    assert "on rv32" not in bench.grid_markdown(rerun_of_lenet(), meta)
    options = bench.argparse.Namespace(host_kernels=False, isa=["zbb"])
    assert bench.isa_extensions(options) == ("zbb",)
    options.host_kernels = True
    assert bench.isa_extensions(options) == ("xautovec", "zbb")


def test_merge_of_some_plans_keeps_the_others_and_the_column_order() -> None:
    new = [case("lenet", "W8A8", "static", "new (2026-11-26)", agrees=False)]
    merged = bench.merged_records(OLD, new, ["lenet"], ["static"], ["W8A8"])
    lenet = [
        (r["plan"], r["run"][:3]) for r in merged if r["model"] == "lenet" and r["mode"] == "static"
    ]
    assert lenet == [("W8A8", "new"), ("W4A4", "old")]
    assert len(merged) == len(OLD)
