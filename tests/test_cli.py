"""The ``mico`` command as a user runs it."""

import json

import pytest
from typer.testing import CliRunner

from mico.cli import app

runner = CliRunner()


def test_help_lists_commands():
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "demo" in result.output and "models" in result.output


def test_demo_help_documents_options():
    result = runner.invoke(app, ["demo", "--help"])
    assert result.exit_code == 0
    for option in ("--out", "--seed", "--plan", "--epochs"):
        assert option in result.output


def test_models_lists_layer_names():
    result = runner.invoke(app, ["models", "--layers"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    row = next(i for i, line in enumerate(lines) if line.startswith("small_cnn "))
    assert lines[row + 1].strip() == "layers: conv1, conv2, fc"


@pytest.mark.parametrize(
    ("plan", "expected"),
    [
        (
            "conv1=8/8,conv2=0/4,fc=2/8",
            "layer 'conv2': weight bit-width is 0, outside the allowed range 1..8",
        ),
        (
            "conv1=8/8,conv2=4/9,fc=2/8",
            "layer 'conv2': activation bit-width is 9, outside the allowed range 1..8",
        ),
        (
            "conv1=8/8,conv2=4/4",
            "the plan has 2 layer(s) but the model has 3 quantizable layers "
            "(conv1, conv2, fc): no bit-widths for fc",
        ),
        ("conv1=8/8,conv2=4/4,fc=2/8,fc2=8/8", "unknown layer(s) fc2"),
        ("conv1=8", "is not of the form layer=W/A"),
    ],
)
def test_bad_plan_stops_before_any_work(plan, expected, tmp_path):
    out = tmp_path / "demo"
    result = runner.invoke(app, ["demo", "--out", str(out), "--plan", plan])
    assert result.exit_code == 2
    assert expected in result.output
    assert "epoch" not in result.output  # nothing was trained
    assert not out.exists()


@pytest.mark.slow
def test_demo_end_to_end_with_an_odd_plan(tmp_path):
    out = tmp_path / "demo"
    result = runner.invoke(
        app,
        [
            "demo",
            "--out",
            str(out),
            "--epochs",
            "3",
            "--seed",
            "1",
            "--plan",
            "conv1=8/8,conv2=3/5,fc=1/8",
        ],
    )
    assert result.exit_code == 0, result.output
    assert "C/Python agreement, exact integers" in result.output
    report = json.loads((out / "report.json").read_text())
    metrics = report["metrics"]
    assert metrics["samples"] == 360
    assert metrics["exact_agreement"] == 360 and metrics["top1_agreement"] == 360
    assert metrics["c_accuracy"] == metrics["quantized_python_accuracy"]
    assert report["plan"] == {
        "conv1": {"w": 8, "a": 8},
        "conv2": {"w": 3, "a": 5},
        "fc": {"w": 1, "a": 8},
    }
    # in-place ops may take the arena below the bound of separate buffers
    assert metrics["arena_bytes"] > 0 and metrics["arena_lower_bound"] > 0
    assert metrics["flash_weight_bytes"] < metrics["fp32_weight_bytes"] / 4
    assert (out / "plan.yaml").read_text().startswith("conv1: {w: 8, a: 8}")
    assert "| FP32 accuracy (Python) |" in (out / "report.md").read_text()
    assert (out / "digits_cnn").is_file()  # the built program
    # a YAML plan file works the same way, and the old output is replaced atomically
    result = runner.invoke(
        app,
        ["demo", "--out", str(out), "--epochs", "1", "--quiet", "--plan", str(out / "plan.yaml")],
    )
    assert result.exit_code == 0, result.output
    assert "epoch" not in result.output
    assert json.loads((out / "report.json").read_text())["options"]["epochs"] == 1
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".demo")]


def test_demo_exits_nonzero_when_c_disagrees(tmp_path, monkeypatch):
    import mico.pipeline

    real_run = mico.pipeline.host.run

    def corrupted_run(project, samples):
        out = real_run(project, samples)
        out[3, 0] += 1  # one integer of one sample is off
        return out

    monkeypatch.setattr(mico.pipeline.host, "run", corrupted_run)
    out = tmp_path / "demo"
    result = runner.invoke(app, ["demo", "--out", str(out), "--epochs", "1", "--quiet"])
    assert result.exit_code == 1
    assert "disagrees with the Python reference on 1 sample(s)" in result.output
    metrics = json.loads((out / "report.json").read_text())["metrics"]
    assert metrics["exact_agreement"] == 359  # the report is kept for inspection


def test_models_table_lists_every_zoo_model_with_its_dataset():
    from mico.models import model_names

    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert lines[0].split()[:3] == ["model", "input", "dataset"]
    rows = {line.split()[0]: line.split() for line in lines[1:] if not line.startswith(" ")}
    assert set(rows) == set(model_names())
    assert rows["lenet"][1:3] == ["1x28x28", "mnist"]
    assert rows["small_cnn"][4] == "3"  # quantizable layers


def test_datasets_lists_offline_and_on_disk_sets():
    result = runner.invoke(app, ["datasets"])
    assert result.exit_code == 0
    assert {"digits", "mnist1d", "mnist", "cifar10", "tinystories"} <= set(result.output.split())


def test_train_quantizes_and_writes_checkpoints(tmp_path):
    from mico.train import load_checkpoint

    out = tmp_path / "run"
    result = runner.invoke(
        app,
        [
            "train", "small_cnn", "--out", str(out), "--epochs", "2", "--no-progress",
            "--plan", "conv1=8/8,conv2=4/4,fc=1.58/8", "--method", "qat", "--qat-epochs", "1",
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == [
        ".mico-output", "costs.md", "fp32.pt", "metrics.json", "plan.yaml", "quantized.pt"
    ]  # fmt: skip
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["plan"] == "conv1=8/8,conv2=4/4,fc=1.58/8"
    assert 0.0 <= metrics["quantized_accuracy"] <= 1.0
    model = load_checkpoint(out / "quantized.pt")
    assert [layer.w_bits for layer in model.get_qlayers()] == [8, 4, 1.58]
    assert "| fc | Linear | 64 | 10 | 1.58 | 8 |" in (out / "costs.md").read_text()


def test_train_fp32_only_float_costs(tmp_path):
    out = tmp_path / "fp"
    result = runner.invoke(
        app, ["train", "lenet", "--dataset", "digits", "--resize", "28", "--epochs", "1",
              "--out", str(out), "--no-progress"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "| conv1 | Conv2d | 1x28x28 | 6x28x28 | 32 | 32 |" in (out / "costs.md").read_text()


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["train", "lenet"], "MNIST data not found"),
        (["train", "lenet", "--dataset", "digits"], "(1, 28, 28) but dataset 'digits' gives"),
        (["train", "small_cnn", "--plan", "conv1=9/8"], "layer 'conv1': weight bit-width is 9"),
        (["train", "resnet1000"], "unknown model 'resnet1000'"),
    ],
)
def test_train_bad_input_exits_2_with_a_clear_message(tmp_path, monkeypatch, args, needle):
    monkeypatch.setenv("MICO_DATA", str(tmp_path / "empty"))
    out = tmp_path / "never"
    result = runner.invoke(app, [*args, "--out", str(out), "--epochs", "0"])
    assert result.exit_code == 2
    assert needle in result.output
    assert not out.exists()


def test_ops_list_shows_categories_and_rules():
    result = runner.invoke(app, ["ops", "list"])
    assert result.exit_code == 0
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[1:-1]}
    assert rows["tensor.add"] == ["TensorOp", "-", "execute,infer"]  # no C mode: IR-level op
    assert rows["tile.mul"][0] == "TileOp"
    assert "mico.bit_conv2d" in rows
    assert "schema" in result.output.splitlines()[-1]


def test_ops_list_filters_by_category_and_search():
    tiles = runner.invoke(app, ["ops", "list", "--category", "TileOp"])
    names = [line.split()[0] for line in tiles.output.splitlines()[1:-1]]
    assert names == ["tile.add", "tile.div", "tile.mul", "tile.sub"]
    pools = runner.invoke(app, ["ops", "list", "--search", "pool"])
    assert "tensor.max_pool2d" in pools.output and "tensor.add" not in pools.output


def test_ops_info_registered_aten_and_unknown():
    info = runner.invoke(app, ["ops", "info", "tensor.add"])
    assert info.exit_code == 0
    assert "lhs: TensorType" in info.output and "rhs: TensorType" in info.output
    aten = runner.invoke(app, ["ops", "info", "aten.conv2d.default"])
    assert aten.exit_code == 0
    assert "schema-driven" in aten.output and "aten::conv2d(Tensor input" in aten.output
    unknown = runner.invoke(app, ["ops", "info", "tensor.ad"])
    assert unknown.exit_code == 2
    assert "op 'tensor.ad' is not registered; did you mean 'tensor.add'" in unknown.output


def test_ops_list_shows_the_c_modes_of_each_op():
    result = runner.invoke(app, ["ops", "list", "--mode", "static"])
    assert result.exit_code == 0
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:-1]}
    assert "dynamic,static" in rows["aten.relu.default"]
    assert "static" in rows["aten.clamp.default"]  # lowered without a registry entry
    assert "dynamic,static" in rows["aten.sigmoid.default"]  # a lookup table in static mode
    every = runner.invoke(app, ["ops", "list"])
    exp = next(line for line in every.output.splitlines() if line.startswith("aten.exp."))
    assert exp.split()[2] == "dynamic"  # float-only so far
    bad = runner.invoke(app, ["ops", "list", "--mode", "fast"])
    assert bad.exit_code == 2 and "use --mode dynamic or --mode static" in bad.output


def test_every_command_documents_an_example_and_takes_quiet_where_it_logs():
    commands = [c.name or c.callback.__name__ for c in app.registered_commands]
    for command in [*commands, "ops list", "ops info"]:
        result = runner.invoke(app, [*command.split(), "--help"])
        assert result.exit_code == 0, command
        assert "Example:" in result.output, f"`mico {command} --help` shows no example"
    for command in ("demo", "train", "compile", "verify", "run", "profile"):
        assert "--quiet" in runner.invoke(app, [command, "--help"]).output, command


def test_quiet_compile_prints_only_the_summary(tmp_path):
    result = runner.invoke(
        app, ["compile", "mlp", "--plan", "4/4", "-q", "-o", str(tmp_path / "c")]
    )
    assert result.exit_code == 0
    assert result.output.count("\n") == 1 and result.output.startswith("wrote ")


@pytest.mark.parametrize("module", ["mico", "mico.cli"])
def test_python_dash_m_has_every_command(module):
    """`python -m mico` and `python -m mico.cli` are the `mico` command, the commands other
    modules register (profile, latency, targets) included: run as __main__, cli.py is a second
    copy of the module whose app had none of them."""
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", module, "profile", "--help"],
                            capture_output=True, text=True, check=False, timeout=120)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "Usage:" in result.stdout and "profile" in result.stdout
