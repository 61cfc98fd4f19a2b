"""Program latency proxies (rv32, host): nodes with their kernel path, fitting on whole
programs, the evaluator's proxy mode and the estimates in the compile and verify reports.

Nothing here runs qemu except the last test (skipped without the rv32 toolchain): the
"measured" counts are synthetic, made by a known cost formula over the real nodes of real
lowered graphs, so the tests see whether the proxy learns what determines a count."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from torch import nn

from mico.codegen.compile import compile_model
from mico.hw import LatencyProxy, fit_proxy, mape
from mico.hw.layers import LayerShape, model_layer_shapes
from mico.hw.modelprof import ModelRecord, plan_text, read_records
from mico.hw.opshape import OpShape, graph_op_shapes, kernel_path, layers_as_ops, op_from_layer
from mico.hw.profile import read_profile
from mico.hw.proxy import ALGORITHMS
from mico.quant import QuantConfig, QuantPlan, calibrate, quantize_model


class Net(nn.Module):
    """Two convs (one large enough for the lanes kernels at low widths), a pool, a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.pool = nn.MaxPool2d(2)
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.conv1(x))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc(x.flatten(1))


NAMES = ("conv1", "conv2", "fc")


def _quantized(bits: str) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = Net().eval()
    x = torch.rand(4, 1, 8, 8)
    plan = QuantPlan.parse(",".join(f"{n}={bits}" for n in NAMES))
    quantize_model(model, plan, QuantConfig(act_mode="static"), x[:1])
    calibrate(model, [x])
    return model, x


def _compiled(tmp_path, bits: str):
    model, x = _quantized(bits)
    name = bits.replace("/", "_")
    return compile_model(model, x[:1], tmp_path / name, "net", "static", calibration=[x])


@pytest.fixture(scope="module")
def programs(tmp_path_factory):
    """The net compiled at three uniform plans (graph and C source)."""
    tmp = tmp_path_factory.mktemp("programs")
    return {bits: _compiled(tmp, bits) for bits in ("8/8", "4/4", "2/2")}


def test_nodes_carry_the_kernel_path_the_generator_emits(programs):
    seen = set()
    for compiled in programs.values():
        source = (compiled.project.directory / "net.c").read_text()
        ops = graph_op_shapes(compiled.graph)
        assert [op.kind for op in ops][:2] == ["quantize", "conv2d"]
        for op in ops:
            if not op.is_mac:
                continue
            block = source.split(f"/* {op.name}:")[1].split("MICO_DUMP")[0]
            called = re.search(r"(mico_q\w+)\(", block).group(1)
            if op.path == "lanes":
                assert "_lanes_w" in called and f"w{op.w_bits}" in called, (op, called)
                assert op.lane_s in (4, 8, 16)
            else:
                assert "_lanes_" not in called, (op, called)
                assert kernel_path(called) == op.path, (op, called)  # e.g. _sub4 -> sub
            seen.add(op.path)
            assert op.macs > 0 and op.in_elements > 0 and op.out_elements > 0
    assert "lanes" in seen and seen - {"lanes"}  # both paths occur in these programs


def test_layers_alone_guess_the_same_paths(programs):
    """From layer shapes only (no graph), the first layer reads signed codes and the others
    unsigned: on a ReLU network with signed inputs that is what the graph says."""
    for bits, compiled in programs.items():
        model, x = _quantized(bits)
        layers = model_layer_shapes(model, (x[:1] - 0.5))
        guessed = {op.layer: op.path for op in layers_as_ops(layers)}
        graph_ops = {op.layer: op for op in graph_op_shapes(compiled.graph) if op.is_mac}
        for name in NAMES[1:]:  # after a ReLU: unsigned in both
            assert guessed[name] == graph_ops[name].path, (bits, name)
    layer = LayerShape("c", "conv2d", 16, 16, (3, 3), (1, 1), 1, (8, 8), (8, 8), 4, 4)
    assert op_from_layer(layer).path == "lanes"
    assert op_from_layer(layer.with_bits(8, 8)).path == "tiled_s8"  # W8A8: the byte path
    assert op_from_layer(layer.with_bits(3, 8)).path == "tiled"  # no 3-bit lanes


def _cost(op: OpShape) -> float:
    """A synthetic count: per MAC by path and widths, per element for the other ops."""
    if op.is_mac:
        per_mac = 1.5 + op.w_bits / 4 if op.path == "lanes" else 5.0 + 8 / max(op.in_bits, 1)
        return op.macs * per_mac + 30 * op.out_elements + 200
    if op.kind == "quantize":
        return 150.0 * op.in_elements + 40
    return (12 + 16 / max(op.in_bits, 1)) * op.in_elements + 60


def _records(programs, scale: float = 1.0) -> list[ModelRecord]:
    """Synthetic whole-program records of varied geometries: the net's nodes resized."""
    records = []
    rng = np.random.default_rng(0)
    for k in range(12):
        for bits, compiled in programs.items():
            factor = float(rng.uniform(0.3, 3.0))
            nodes = []
            ops = graph_op_shapes(compiled.graph)
            if k % 2:  # programs of more nodes: an extra copy before the classifier
                copy = OpShape("copy", "copy", in_elements=256, out_elements=256, in_bits=8)
                ops = [*ops[:-1], copy, ops[-1]]
            for op in ops:
                grown = OpShape.from_dict({
                    **op.to_dict(),
                    "macs": int(op.macs * factor), "in_elements": int(op.in_elements * factor),
                    "out_elements": int(op.out_elements * factor),
                    "out_pixels": max(1, int(op.out_pixels * factor)),
                })  # fmt: skip
                nodes.append((grown, _cost(grown) * scale + 9))  # + the marker's glue
            release = sum(v for _, v in nodes) - 9 * len(nodes) + 250
            records.append(ModelRecord(f"m{k}", bits, release, tuple(nodes), 250.0))
    return records


HELD = ("m0", "m1")


@pytest.fixture(scope="module")
def trained(programs):
    """A proxy fitted on the synthetic programs but m0 and m1 (fitted once: trees take time)."""
    train = [r for r in _records(programs) if r.model not in HELD]
    return fit_proxy([], "rv32", "instructions", seed=0, models=train)


def test_fitting_on_programs_predicts_held_out_programs(programs, trained, tmp_path):
    records = _records(programs)
    proxy = trained
    assert proxy.programs == len(records) - 2 * len(programs)
    assert {"conv2d", "linear", "quantize", "maxpool2d", "other"} <= set(proxy.kinds)
    assert proxy.overhead_per_node == pytest.approx(-9, abs=0.5)
    held = [r for r in records if r.model in HELD]
    predicted = [proxy.predict_model([op for op, _ in r.nodes]) for r in held]
    assert mape(predicted, [r.release for r in held]) < 10
    for model in proxy.kinds.values():
        assert model.algorithm in ALGORITHMS  # the path-cost candidates included
    # round trip, every algorithm and the overheads
    loaded = LatencyProxy.load(proxy.save(tmp_path / "p.json"))
    ops = [op for op, _ in held[0].nodes]
    assert loaded.predict_model(ops) == pytest.approx(proxy.predict_model(ops), rel=1e-6)
    assert loaded.overhead_per_node == proxy.overhead_per_node
    # an op no program had takes the fallback regressor; a view costs nothing
    odd = OpShape("x", "qsoftmax", in_elements=100, out_elements=100, in_bits=8, out_bits=8)
    view = OpShape("v", "reshape", in_elements=100, out_elements=100, path="alias")
    assert proxy.predict_ops([odd, view])[0] > 0 and proxy.predict_ops([view]) == [0.0]


def test_models_file_resumes_and_skips_a_torn_last_line(programs, tmp_path):
    path = tmp_path / "m.jsonl"
    records = _records(programs)[:3]
    path.write_text("".join(r.to_json() + "\n" for r in records) + '{"model": "to')
    read = read_records(path)
    assert [(r.model, r.plan_name) for r in read] == [(r.model, r.plan_name) for r in records]
    assert read[0].nodes == records[0].nodes
    assert plan_text("mixed", ["a", "b", "c"]) == "a=8/8,b=2/4,c=8/8"
    assert plan_text("W4A8", ["a"]) == "a=4/8"


@pytest.fixture
def fitted_rv32(trained, monkeypatch, tmp_path):
    """The synthetic proxy, saved where mico looks for rv32's (in a cache of its own)."""
    from mico.hw.latency import default_proxy_path
    from mico.targets.catalog import get_target

    monkeypatch.setenv("MICO_CACHE", str(tmp_path / "cache"))
    return trained.save(default_proxy_path(get_target("rv32")))


def test_eval_latency_proxy_mode_predicts_the_whole_program(fitted_rv32):
    from mico.search import MiCoEval

    torch.manual_seed(0)
    x = torch.rand(16, 1, 8, 8)
    y = torch.randint(0, 10, (16,))
    data = torch.utils.data.TensorDataset(x, y)
    loader = torch.utils.data.DataLoader(data, batch_size=8)
    ev = MiCoEval(Net(), 0, loader, loader, None, config=QuantConfig(act_mode="static"),
                  latency_target="rv32", latency_mode="proxy")  # fmt: skip
    costs = {q: ev.eval_latency([q] * 6) for q in (8, 4, 2)}
    assert all(c > 0 for c in costs.values())
    assert costs[8] > costs[4] > costs[2]  # the synthetic counts fall with the widths
    # the same figure as the proxy on the scheme's lowered graph: every node, not only layers
    proxy = LatencyProxy.load(fitted_rv32)
    graph = ev._lowered([4] * 6)
    assert costs[4] == pytest.approx(proxy.predict_graph(graph), rel=1e-6)
    layers = model_layer_shapes(ev.model, ev.example, {n: (4, 4) for n in NAMES})
    layers_only = sum(proxy.predict_layers(layers))
    assert costs[4] > layers_only


def test_compile_writes_a_labelled_estimate(fitted_rv32, tmp_path):
    from mico.deploy import _write_compile_report

    compiled = _compiled(tmp_path, "4/4")
    _write_compile_report(compiled)
    data = json.loads((compiled.project.directory / "latency_estimate.json").read_text())
    rv = data["rv32"]
    assert rv["estimated"] is True and rv["unit"] == "instructions (estimated)"
    assert rv["total"] == pytest.approx(sum(n["value"] for n in rv["nodes"]) + rv["overhead"],
                                        abs=1)  # fmt: skip
    assert {n["op"] for n in rv["nodes"]} >= {"quantize", "conv2d", "maxpool2d", "linear"}
    assert any(n["path"] == "lanes" for n in rv["nodes"])
    assert "host" in data["skipped"]  # no host proxy here: said, not failed


def test_verify_per_layer_shows_the_estimate_beside_the_counts(fitted_rv32, tmp_path):
    from mico.targets import rv32

    if not rv32.available():
        pytest.skip(rv32.missing_tools_hint())
    from mico.deploy import _per_layer_lines, per_layer_hook

    compiled = _compiled(tmp_path, "4/4")
    rv32.build(compiled.project)
    x = np.random.default_rng(0).random((1, 1, 8, 8), dtype=np.float32)
    data = per_layer_hook(compiled, x, "rv32", lambda _m: None)
    assert data["ok"] and data["estimate"]["total"] > 0
    assert all("estimated" in r for r in data["layers"] if r["node"] != "(output copy)")
    text = "\n".join(_per_layer_lines("rv32", data))
    assert "estimated (proxy)" in text and "never measurements" in text


def test_cli_profile_fits_rv32_on_a_whole_program_and_latency_uses_it(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from mico.cli import app
    from mico.targets import rv32

    if not rv32.available():
        pytest.skip(rv32.missing_tools_hint())
    monkeypatch.setenv("MICO_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    out = tmp_path / "rv32.csv"
    args = ["profile", "--target", "rv32", "--models", "mlp", "--plans", "W8A8,W2A2",
            "-o", str(out), "-q"]  # fmt: skip
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "2 measured, 0 regenerated identical, 0 reused" in first.output
    assert "per-model overhead" in first.output
    records = read_records(tmp_path / "rv32.models.jsonl")
    assert {r.plan_name for r in records} == {"W8A8", "W2A2"}
    assert read_profile(out) == []  # no random single-layer shapes by default on rv32
    assert all(r.release > 0 and r.nodes[0][0].kind == "quantize" for r in records)
    again = runner.invoke(app, args)
    assert "0 measured, 0 regenerated identical, 2 reused" in again.output
    proxy = tmp_path / "rv32.proxy.json"
    assert LatencyProxy.load(proxy).programs == 2
    shown = runner.invoke(app, ["latency", "mlp", "--plan", "8/8", "--target", "rv32", "--mode",
                                "proxy", "--proxy", str(proxy)])  # fmt: skip
    assert shown.exit_code == 0, shown.output
    assert "instructions (predicted)" in shown.output and "quantize" in shown.output
    assert "every node of the program" in shown.output
    # within a few percent of what it was fitted on (its own program: a sanity check only)
    total = float(re.search(r"total\s+([\d,]+)", shown.output).group(1).replace(",", ""))
    w8 = next(r for r in records if r.plan_name == "W8A8")
    assert total == pytest.approx(w8.release, rel=0.1)
    bad = runner.invoke(app, ["profile", "--target", "bitfusion", "--models", "mlp", "-o",
                              str(tmp_path / "bf.csv")])  # fmt: skip
    assert bad.exit_code == 2 and "counted node by node on rv32" in bad.output


def test_report_layers_carry_latency_columns(programs, fitted_rv32, tmp_path):
    """report.json / report.md (mico demo): a measured per-node column and the estimate."""
    from mico.hw.latency import estimate_program
    from mico.report import Report, layer_rows

    compiled = programs["4/4"]
    estimate = estimate_program(compiled.graph)["rv32"]
    measured = {n["node"]: 1000.0 for n in estimate["nodes"]}  # stands for node_costs' counts
    latency = {
        "rv32_instructions": measured,
        "rv32_estimated": {n["node"]: n["value"] for n in estimate["nodes"]},
    }
    rows = layer_rows(compiled.graph, compiled.project, latency)
    assert all(r["rv32_instructions"] == 1000.0 for r in rows if r["node"] in measured)
    assert sum(r["rv32_estimated"] or 0 for r in rows) == pytest.approx(
        estimate["total"] - estimate["overhead"], abs=1
    )
    md, js = Report("t", [("a", "b")], rows).write(tmp_path)
    header = md.read_text().split("## Layers")[1].splitlines()[2]
    assert "rv32 instructions" in header and "rv32 estimated" in header
    assert json.loads(js.read_text())["layers"][1]["rv32_estimated"] > 0
