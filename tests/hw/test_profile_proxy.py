"""Profiles (resumable CSVs of layer latencies) and the proxies fitted on them."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from mico.cli import app
from mico.errors import ConfigError
from mico.hw import LatencyProxy, fit_proxy, layer_cycles, mape, model_layer_shapes
from mico.hw.measure import backend
from mico.hw.profile import bit_pairs, read_profile, run_profile, sample_shapes

runner = CliRunner()


@pytest.fixture(scope="module")
def profile_rows(tmp_path_factory):
    path = tmp_path_factory.mktemp("profile") / "bitfusion.csv"
    bf = backend("bitfusion")
    shapes = sample_shapes(["conv2d", "linear"], 80, seed=1, include_zoo=False)
    run_profile(bf.measure, shapes, bit_pairs(bf.bits), path, log=lambda _m: None)
    return read_profile(path)


def test_sampled_shapes_are_valid_and_reproducible():
    a = sample_shapes(["conv2d", "dwconv2d", "conv1d", "linear"], 40, seed=3, include_zoo=False)
    b = sample_shapes(["conv2d", "dwconv2d", "conv1d", "linear"], 40, seed=3, include_zoo=False)
    assert a == b and len(a) >= 30
    for s in a:
        assert s.macs > 0 and s.out_size[0] >= 1 and s.out_size[1] >= 1
        if s.kind == "dwconv2d":
            assert s.groups == s.in_channels == s.out_channels
    with pytest.raises(ConfigError, match="unknown layer kind"):
        sample_shapes(["conv3d"], 4)


def test_zoo_layers_are_included():
    shapes = sample_shapes(["dwconv2d"], 1, seed=0)
    assert any(s.in_channels == 64 and s.kernel == (3, 3) for s in shapes)  # dscnn's blocks


def test_profile_resumes_and_never_measures_twice(tmp_path):
    path = tmp_path / "p.csv"
    calls = []
    dying = [True]

    def measure(layer):
        calls.append(layer)
        if dying[0] and len(calls) == 7:
            raise RuntimeError("killed")  # the run dies mid-profile
        return float(layer_cycles(layer).cycles)

    shapes = sample_shapes(["linear"], 4, seed=0, include_zoo=False)
    pairs = bit_pairs((2, 8))
    with pytest.raises(RuntimeError, match="killed"):
        run_profile(measure, shapes, pairs, path, log=lambda _m: None)
    assert len(read_profile(path)) == 6  # every finished row was flushed
    calls.clear()
    dying[0] = False
    result = run_profile(measure, shapes, pairs, path, log=lambda _m: None)
    assert result.reused == 6 and result.measured == len(shapes) * 4 - 6
    assert len(calls) == result.measured
    rows = read_profile(path)
    assert len(rows) == len(shapes) * 4
    for layer, latency in rows:
        assert latency == layer_cycles(layer).cycles


def test_damaged_profile_is_a_clear_error(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("kind,oops\nconv2d,1\n")
    with pytest.raises(ConfigError, match=r"has columns.*move it away"):
        read_profile(path)


def test_proxy_predicts_held_out_layers_within_its_reported_error(profile_rows):
    proxy = fit_proxy(profile_rows, "bitfusion", "cycles", seed=0)
    assert set(proxy.kinds) == {"conv2d", "linear"}
    for model in proxy.kinds.values():
        assert model.algorithm in ("forest", "xgboost")
        assert 0 <= model.holdout_mape[model.algorithm] < 40
    # a layer the profile never saw: within 3x the reported held-out error, or 25 %
    bf = backend("bitfusion")
    fresh = sample_shapes(["conv2d"], 12, seed=99, include_zoo=False)
    fresh = [s.with_bits(4, 4) for s in fresh]
    predicted = proxy.predict_layers(fresh)
    measured = [bf.measure(s) for s in fresh]
    reported = proxy.kinds["conv2d"].holdout_mape[proxy.kinds["conv2d"].algorithm]
    assert mape(predicted, measured) < max(25.0, 3 * reported)


def test_proxy_round_trips_through_json(profile_rows, tmp_path):
    proxy = fit_proxy(profile_rows, "bitfusion", "cycles", seed=0)
    proxy.overhead = 12.0
    path = proxy.save(tmp_path / "proxy.json")
    assert json.loads(path.read_text())["target"] == "bitfusion"
    loaded = LatencyProxy.load(path)
    layers = [layer for layer, _ in profile_rows[:20]]
    assert np.allclose(loaded.predict_layers(layers), proxy.predict_layers(layers))
    assert loaded.predict_model(layers) == pytest.approx(proxy.predict_model(layers))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ConfigError, match="cannot be read"):
        LatencyProxy.load(tmp_path / "bad.json")


def test_proxy_refuses_a_kind_it_never_saw(profile_rows):
    from mico.models import from_zoo

    proxy = fit_proxy(profile_rows, "bitfusion", "cycles")
    model = from_zoo("dscnn")
    with pytest.raises(ConfigError, match=r"no model of 'dwconv2d' layers.*--ops dwconv"):
        proxy.predict_model(model_layer_shapes(model, model.example_input()))


def test_cli_profile_writes_and_resumes(tmp_path):
    out = tmp_path / "bf.csv"
    args = [
        "profile",
        "--target",
        "bitfusion",
        "--ops",
        "linear",
        "--samples",
        "12",
        "-o",
        str(out),
        "-q",
    ]
    first = runner.invoke(app, args)
    assert first.exit_code == 0, first.output
    assert "linear" in first.output and "held-out MAPE" in first.output
    assert (tmp_path / "bf.proxy.json").is_file()
    second = runner.invoke(app, args)
    assert ": 0 measured," in second.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--target", "rv99"], "no per-layer latency backend for target 'rv99'"),
        (["--ops", "conv3d"], "unknown --ops entry 'conv3d'"),
        (["--ops", ","], "--ops is empty"),
    ],
)
def test_cli_profile_bad_arguments(tmp_path, args, message):
    result = runner.invoke(app, ["profile", *args, "-o", str(tmp_path / "x.csv")])
    assert result.exit_code == 2 and message in result.output
    assert not (tmp_path / "x.csv").exists()
