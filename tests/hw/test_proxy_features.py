"""The proxies' features are what they document, and the BitFusion proxy reproduces its model."""

from __future__ import annotations

import math

import pytest

from mico.hw import LayerShape, fit_proxy, layer_cycles, mape
from mico.hw.measure import backend
from mico.hw.opshape import OpShape, op_from_layer
from mico.hw.profile import bit_pairs, sample_shapes
from mico.hw.proxy import (
    ARRAY_FEATURES,
    FEATURES,
    ArrayCycles,
    LatencyProxy,
    array_terms,
    feature_set_of,
    features,
    scale_of,
)


def conv(ic, oc, size, k=3, stride=1, w=4, a=4, kind="conv2d", groups=1):
    out = (size + 2 * (k // 2) - k) // stride + 1
    return LayerShape("c", kind, ic, oc, (k, k), (stride, stride), groups, (size, size),
                      (out, out), w, a)  # fmt: skip


def test_array_cycles_of_a_known_layer():
    # 16 -> 32 channels, 3x3 on 8x8 at 4/4: 4 engines per unit, 64 input lanes, 64 pixel
    # tiles of one column tile; im2col 64 * ceil(144 / 64) = 192 beats channel-wise 576;
    # traffic 18432 weight + 4096 input + 16384 output bits over 192 -> 203 cycles
    op = op_from_layer(conv(16, 32, 8))
    cycles = ArrayCycles.of(op)
    assert (cycles.compute, cycles.im2col, cycles.memory, cycles.fill, cycles.passes) == (
        192, 192, 203, 48, 1,
    )  # fmt: skip
    terms = dict(zip(ARRAY_FEATURES, array_terms(op), strict=True))
    assert terms["log_compute_per_mac"] == pytest.approx(math.log(192 / op.macs))
    assert terms["log_memory_over_compute"] == pytest.approx(math.log(203 / 192))
    assert terms["log_fill_over_compute"] == pytest.approx(math.log(48 / 192))
    assert scale_of(op, "bitfusion") == 192 and scale_of(op) == op.macs


@pytest.mark.parametrize(
    "layer",
    [
        conv(16, 32, 8),
        conv(3, 64, 32, w=8, a=8),
        conv(64, 64, 16, k=3, w=2, a=8, kind="dwconv2d", groups=64),
        conv(256, 512, 14, k=3, w=8, a=8),  # weights in several passes, inputs re-read
        LayerShape("fc", "linear", 512, 1000, (1, 1), (1, 1), 1, (1, 1), (1, 1), 2, 2),
        LayerShape("c1", "conv1d", 1, 32, (1, 80), (1, 16), 1, (1, 16000), (1, 996), 8, 8),
    ],
)
def test_array_cycles_are_the_cycle_models_terms(layer):
    op = op_from_layer(layer)
    cycles, model = ArrayCycles.of(op), layer_cycles(layer)
    assert cycles.compute == model.compute_cycles
    assert cycles.memory == model.memory_cycles
    assert cycles.fill == model.fill_cycles and cycles.passes == model.weight_passes


def test_feature_vectors_by_feature_set():
    layer = LayerShape("c1", "conv1d", 2, 8, (1, 5), (1, 1), 1, (1, 4000), (1, 3996), 8, 8)
    op = op_from_layer(layer)
    generic = dict(zip(FEATURES, features(op), strict=True))
    assert generic["log_in_plane"] == pytest.approx(math.log(4000))  # a 1-D row's length
    assert generic["w_bits"] == 8 and generic["kernel"] == 5
    assert len(features(op, feature_set="bitfusion")) == len(FEATURES) + len(ARRAY_FEATURES)
    assert feature_set_of("bitfusion") == "bitfusion"
    assert feature_set_of("rv32") == feature_set_of("host") == "generic"


@pytest.fixture(scope="module")
def small_profile():
    bf = backend("bitfusion")
    shapes = sample_shapes(["conv2d", "linear"], 60, seed=2, include_zoo=False)
    return [(s.with_bits(w, a), bf.measure(s.with_bits(w, a)))
            for s in shapes for w, a in bit_pairs(bf.bits)]  # fmt: skip


def test_bitfusion_proxy_predicts_an_unseen_model_within_its_reported_error(small_profile):
    proxy = fit_proxy(small_profile, "bitfusion", "cycles", seed=0)
    assert proxy.feature_set == "bitfusion"
    reported = proxy.kinds["conv2d"].holdout_mape[proxy.kinds["conv2d"].algorithm]
    # small_cnn's layers (tiny: the array's fill is a third of their cycles), never profiled
    layers = [
        LayerShape("c1", "conv2d", 1, 8, (3, 3), (1, 1), 1, (8, 8), (8, 8)),
        LayerShape("c2", "conv2d", 8, 16, (3, 3), (1, 1), 1, (4, 4), (4, 4)),
    ]
    bf = backend("bitfusion")
    for w, a in [(8, 8), (4, 4), (2, 2)]:
        shaped = [s.with_bits(w, a) for s in layers]
        measured = [bf.measure(s) for s in shaped]
        predicted = proxy.predict_layers(shaped)
        assert mape(predicted, measured) <= max(5.0, 2 * reported)


def test_a_given_algorithm_is_fitted_without_comparing(small_profile, tmp_path):
    proxy = fit_proxy(small_profile, "bitfusion", "cycles", algorithms={"linear": "xgboost"})
    assert proxy.kinds["linear"].algorithm == "xgboost"
    assert proxy.kinds["linear"].holdout_mape == {}  # not compared: no held-out score
    assert proxy.kinds["conv2d"].holdout_mape  # compared as usual
    loaded = LatencyProxy.load(proxy.save(tmp_path / "p.json"))
    assert loaded.feature_set == "bitfusion"
    layers = [layer for layer, _ in small_profile[:30]]
    assert loaded.predict_layers(layers) == pytest.approx(proxy.predict_layers(layers))


def _record(model, plan, scale, factor=1.0):
    """A synthetic program of one quantize and two linear nodes: 20 per input element, 5 per
    MAC, all times ``factor``."""
    from mico.hw.modelprof import ModelRecord
    from mico.hw.opshape import OpShape

    ic, oc = 16 * scale, 8 * scale
    quant = OpShape("q", "quantize", in_elements=ic, out_elements=ic, in_bits=32, out_bits=8)
    fc1 = OpShape("fc1", "linear", "fc1", ic, oc, in_bits=8, out_bits=8, w_bits=8,
                  macs=ic * oc, in_channels=ic, out_channels=oc, path="linear")  # fmt: skip
    fc2 = OpShape("fc2", "linear", "fc2", oc, 4, in_bits=8, w_bits=8, macs=oc * 4,
                  in_channels=oc, out_channels=4, path="linear")  # fmt: skip
    nodes = ((quant, factor * 20 * ic), (fc1, factor * 5 * fc1.macs), (fc2, factor * 5 * fc2.macs))
    return ModelRecord(model, plan, sum(v for _, v in nodes) + 300, nodes, 0.0)


@pytest.fixture
def lines_only(monkeypatch):
    """Proxies compare only the ridge line (and the ratio proxy its group means): the tests of
    the ratio's plumbing need no forests, whose comparison fold by fold took 20-30 s."""
    import mico.hw.proxy as proxy_module

    monkeypatch.setattr(proxy_module, "ALGORITHMS", {"linear": proxy_module._Linear})
    monkeypatch.setattr(proxy_module, "RATIO_CANDIDATES", ("groups", "linear"))


def test_ratio_proxy_scales_its_base_by_the_learned_ratio(lines_only):
    from mico.hw.proxy import fit_ratio_proxy

    names = [f"m{i}" for i in range(8)]
    base_records = [_record(n, "W8A8", i + 1) for i, n in enumerate(names)]
    # the cycle-accurate target: 1.5 cycles per instruction everywhere
    records = [_record(n, "W8A8", i + 1, factor=1.5) for i, n in enumerate(names)]
    base = fit_proxy([], "rv32", "instructions", models=base_records[1:], holdout=0.5)
    proxy = fit_ratio_proxy(records[1:], base_records, base, "vexriscv", "cycles", holdout=0.5)
    assert proxy.base is base and proxy.programs == 7
    ops = [op for op, _ in records[0].nodes]
    ratios = [p / b for p, b in zip(proxy.predict_ops(ops), base.predict_ops(ops), strict=True)]
    assert ratios == pytest.approx([1.5] * 3, rel=0.02)
    loaded = LatencyProxy.from_data(proxy.to_data())
    assert loaded.base is not None and loaded.predict_ops(ops) == pytest.approx(
        proxy.predict_ops(ops)
    )


def _paths_record(model, scale, cpi=None):
    """A program of two linear nodes of different kernel paths, the plain one (``linear``) and
    the lanes; with ``cpi`` (path -> cycles per instruction) its cycles, else its instructions
    (4 per MAC on the plain path, 2 on the lanes)."""
    from mico.hw.modelprof import ModelRecord
    from mico.hw.opshape import OpShape

    ic, oc = 16 * scale, 8 * scale
    plain = OpShape("fc1", "linear", "fc1", ic, oc, in_bits=8, out_bits=8, w_bits=8,
                    macs=ic * oc, in_channels=ic, out_channels=oc, path="linear")  # fmt: skip
    lanes = OpShape("fc2", "linear", "fc2", oc, ic, in_bits=4, out_bits=8, w_bits=4,
                    macs=ic * oc, in_channels=oc, out_channels=ic, path="lanes", lane_s=16,
                    lane_n=24)  # fmt: skip
    counts = {"linear": 4.0, "lanes": 2.0}
    nodes = tuple(
        (op, counts[op.path] * op.macs * (cpi[op.path] if cpi else 1.0)) for op in (plain, lanes)
    )
    return ModelRecord(model, "W8A8", sum(v for _, v in nodes) + 300, nodes, 0.0)


def test_ratio_proxy_predicts_a_held_out_model_within_its_reported_error():
    """The ratio proxy's cycles per instruction are learned per kernel path and checked on
    held-out models: a model it never saw, larger than any it did, is predicted within the
    error it reports (a tree on the sizes would carry the nearest model's ratio instead)."""
    from mico.hw.proxy import fit_ratio_proxy

    jitter = [1.03, 0.97, 1.02, 0.98, 1.01, 0.99, 1.0]  # the models' own small differences
    base_records = [_paths_record(f"m{i}", i + 1) for i in range(7)]
    records = [
        _paths_record(f"m{i}", i + 1, {"linear": 1.3 * j, "lanes": 2.0 / j})
        for i, j in enumerate(jitter)
    ]
    # fitted on m0..m5, m6 (the largest, CPI 1.3 and 2.0) held out
    base = fit_proxy([], "rv32", "instructions", models=base_records[:6], holdout=0.5)
    proxy = fit_ratio_proxy(records[:6], base_records[:6], base, "vexriscv", "cycles",
                            candidates=("groups", "linear"))  # fmt: skip
    kind = proxy.kinds["linear"]
    assert kind.algorithm == "groups" and set(kind.holdout_mape) == {"groups", "linear"}
    reported = kind.holdout_mape["groups"]
    assert 0 < reported < 5
    held_out = records[6]
    ops = [op for op, _ in held_out.nodes]
    for (op, cycles), instructions, predicted in zip(
        held_out.nodes, base.predict_ops(ops), proxy.predict_ops(ops), strict=True
    ):
        ratio = predicted / instructions  # the cycles per instruction it predicts
        assert mape([ratio], [cycles / (instructions or 1)]) < 1.5 * reported + 0.5, op.path
    loaded = LatencyProxy.from_data(proxy.to_data())
    assert loaded.predict_ops(ops) == pytest.approx(proxy.predict_ops(ops))


def test_sampled_1d_layers_get_their_own_regressor():
    from mico.hw.proxy import OWN_REGRESSOR_SHAPES

    bf = backend("bitfusion")
    shapes = sample_shapes(["conv1d"], OWN_REGRESSOR_SHAPES, seed=4, include_zoo=False)
    shapes += sample_shapes(["conv2d"], 12, seed=4, include_zoo=False)
    rows = [(s.with_bits(8, 8), bf.measure(s.with_bits(8, 8))) for s in shapes]
    proxy = fit_proxy(rows, "bitfusion", "cycles", holdout=0.5)
    n_1d = sum(s.kind == "conv1d" for s in shapes)
    assert n_1d >= OWN_REGRESSOR_SHAPES  # distinct 1-D shapes, one row each
    assert len(proxy.kinds["conv2d"].rows) == len(shapes) - n_1d  # no 1-D row
    assert len(proxy.kinds["conv1d"].rows) == len(shapes)  # its own and the 2-D ones
    few = fit_proxy(rows[:5] + rows[-12:], "bitfusion", "cycles", holdout=0.5)
    assert "conv1d" not in few.kinds  # five 1-D shapes: they share conv2d's regressor


def test_profile_fits_vexriscv_as_a_ratio_over_rv32_only_when_the_programs_match(lines_only):
    """`mico profile --target vexriscv` saves the ratio proxy when rv32 counted the same
    programs (same model, plan and kernel files), and says why it fits a direct one when not."""
    from dataclasses import replace

    from mico.hw.proxy import fit_target_proxy

    names = [f"m{i}" for i in range(6)]
    rv32 = [_record(n, "W8A8", i + 1) for i, n in enumerate(names)]
    vex = [_record(n, "W8A8", i + 1, factor=1.5) for i, n in enumerate(names)]
    proxy, kind = fit_target_proxy([], vex, "vexriscv", "cycles", base_rows=[], base_records=rv32)
    assert kind.startswith("ratio proxy over rv32's (6 of 6 programs")
    assert proxy.base is not None and proxy.base.target == "rv32"
    ops = [op for op, _ in vex[0].nodes]
    ratios = [
        p / b for p, b in zip(proxy.predict_ops(ops), proxy.base.predict_ops(ops), strict=True)
    ]
    assert ratios == pytest.approx([1.5] * 3, rel=0.05)

    # rv32 counted other kernels: no partner, a direct proxy and the command that fixes it
    stale = [replace(r, key=replace(r.key, kernels={"mico_conv2d.c": "old"})) for r in rv32]
    fresh = [replace(r, key=replace(r.key, kernels={"mico_conv2d.c": "new"})) for r in vex]
    proxy, kind = fit_target_proxy([], fresh, "vexriscv", "cycles", base_records=stale)
    assert proxy.base is None
    assert "mico profile --target rv32" in kind
    # other targets are always fitted directly
    assert fit_target_proxy([], rv32, "rv32", "instructions")[1] == "direct proxy"


def test_path_traits_and_row_alignment_as_features() -> None:
    """The depthwise pair forms' families and the popcount paths are features a line can use,
    and a weight row that starts inside a byte is told from a row of whole words."""
    from mico.hw.proxy import path_traits, row_alignment

    assert path_traits("dwp_k5_tab") == (0.0, 2.0, 2.0)
    assert path_traits("dwp_k_thr") == (0.0, 1.0, 1.0)
    assert path_traits("dwp") == (0.0, 0.0, 0.0)
    assert path_traits("bin_swar") == path_traits("dwbs") == (1.0, 0.0, 0.0)
    assert path_traits("lanes") == (0.0, 0.0, 0.0)
    odd = OpShape("fc", "linear", w_bits=4, macs=35904, in_channels=561, out_channels=64)
    whole = OpShape("fc", "linear", w_bits=4, macs=4096, in_channels=64, out_channels=64)
    assert (row_alignment(odd), row_alignment(whole)) == (2.0, 5.0)
    named = dict(zip(FEATURES, features(odd), strict=True))
    assert named["row_align"] == 2.0 and named["path_popcount"] == 0.0


def test_single_layer_rows_train_but_do_not_score() -> None:
    """Beside whole programs, the held-out score of an algorithm counts the programs' nodes
    only; without programs every row counts."""
    from mico.hw.proxy import ALGORITHMS, _fit_kind

    ops = [OpShape(f"l{i}", "linear", w_bits=8, in_bits=8, macs=100 * (i + 1),
                   in_channels=10 + i, out_channels=10) for i in range(12)]  # fmt: skip
    rows = [(op, 5.0 * op.macs * (1 + (i % 3))) for i, op in enumerate(ops)]
    every = _fit_kind("linear", rows, 0, 0.2, every_fold=True)
    programs = _fit_kind("linear", rows, 0, 0.2, scored=[i % 2 == 0 for i in range(12)],
                         every_fold=True)  # fmt: skip
    assert set(every.holdout_mape) == set(programs.holdout_mape) == set(ALGORITHMS)
    assert every.holdout_mape != programs.holdout_mape
    none = _fit_kind("linear", rows, 0, 0.2, scored=[False] * 12, every_fold=True)
    assert none.holdout_mape == every.holdout_mape  # none named: every row counts


def test_grouped_forest_carries_a_paths_cost_and_round_trips(tmp_path) -> None:
    """The grouped forest predicts a path's mean cost per MAC for a size its rows lack, and a
    proxy keeping it is saved as rows and refitted alike on load."""
    ops = [OpShape(f"l{i}", "linear", w_bits=8, in_bits=8, macs=m, in_channels=m // 8,
                   out_channels=8, path=path)
           for i, (m, path) in enumerate((m, p) for m in (512, 1024, 2048, 4096)
                                         for p in ("linear", "bin_swar"))]  # fmt: skip
    rows = [(op, op.macs * (8.0 if op.path == "linear" else 1.0)) for op in ops]
    proxy = fit_proxy(rows, "rv32", "instructions", algorithms={"linear": "grouped"})
    assert proxy.kinds["linear"].algorithm == "grouped"
    big = [OpShape("big", "linear", w_bits=8, in_bits=8, macs=65536, in_channels=8192,
                   out_channels=8, path=p) for p in ("linear", "bin_swar")]  # fmt: skip
    slow, fast = proxy.predict_ops(big)
    assert slow / 65536 == pytest.approx(8.0, rel=0.2) and fast / 65536 == pytest.approx(1, rel=0.2)
    loaded = LatencyProxy.load(proxy.save(tmp_path / "p.json"))
    assert loaded.predict_ops(big) == pytest.approx([slow, fast], rel=1e-9)
