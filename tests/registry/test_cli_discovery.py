"""The discovery verbs: list-modules, search, info, docs (output and exit codes)."""

from __future__ import annotations

from typer.testing import CliRunner

from mico.cli import app

runner = CliRunner()


def test_list_modules_filters_by_category_and_hardware():
    result = runner.invoke(app, ["list-modules", "--category", "model", "--hardware", "rv32"])
    assert result.exit_code == 0, result.output
    assert "small_cnn" in result.output and "resnet8" in result.output
    assert "tinyllama" in result.output  # both modes deploy it
    static_only = runner.invoke(app, ["list-modules", "--tag", "dynamic-mode-only"])
    assert "tinyllama" not in static_only.output and "small_cnn" not in static_only.output
    assert "conv2d" not in result.output


def test_list_modules_by_tag_and_unknown_category():
    result = runner.invoke(app, ["list-modules", "--tag", "QUANTIZED"])
    assert result.exit_code == 0
    assert "bit-conv2d" in result.output and "small_cnn" not in result.output
    bad = runner.invoke(app, ["list-modules", "--category", "modle"])
    assert bad.exit_code == 2
    assert "error: no module has category 'modle'; categories:" in bad.output
    assert "Traceback" not in bad.output


def test_search_finds_and_misses():
    result = runner.invoke(app, ["search", "keyword spotting"])
    assert result.exit_code == 0
    assert "dscnn" in result.output
    miss = runner.invoke(app, ["search", "quantum teleporter"])
    assert miss.exit_code == 1
    assert "no module matches 'quantum teleporter'" in miss.output


def test_info_shows_metadata_and_fields_and_suggests_on_typos():
    result = runner.invoke(app, ["info", "small_cnn"])
    assert result.exit_code == 0
    for text in (
        "mico.models.cnn.SmallCNN",
        "Input shape: (1, 8, 8)",
        "Dataset: digits",
        "num_classes",
    ):
        assert text in result.output
    alias = runner.invoke(app, ["info", "BitLinear"])
    assert alias.exit_code == 0 and "bit-linear" in alias.output
    typo = runner.invoke(app, ["info", "smal_cnn"])
    assert typo.exit_code == 2
    assert "no module named 'smal_cnn' is registered; did you mean 'small_cnn'" in typo.output


def test_docs_writes_pages_and_check_detects_staleness(tmp_path):
    out = tmp_path / "reference"
    result = runner.invoke(app, ["docs", "--out", str(out)])
    assert result.exit_code == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "modules.md", "ops.md"]
    assert "### small_cnn" in (out / "modules.md").read_text()
    assert "| `tensor.add` |" in (out / "ops.md").read_text()
    assert runner.invoke(app, ["docs", "--out", str(out), "--check"]).exit_code == 0
    (out / "ops.md").write_text("edited by hand\n")
    stale = runner.invoke(app, ["docs", "--out", str(out), "--check"])
    assert stale.exit_code == 1 and "stale reference page(s)" in stale.output
    assert "ops.md" in stale.output


def test_docs_leaves_other_files_alone(tmp_path):
    out = tmp_path / "reference"
    out.mkdir()
    (out / "notes.md").write_text("mine")
    assert runner.invoke(app, ["docs", "--out", str(out)]).exit_code == 0
    assert (out / "notes.md").read_text() == "mine"


def test_version_and_verbose_tracebacks():
    from mico import __version__

    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.output.strip() == f"mico {__version__}"
    quiet = runner.invoke(app, ["info", "nope"])
    assert quiet.exit_code == 2 and "Traceback" not in quiet.output
    loud = runner.invoke(app, ["--verbose", "info", "nope"])
    assert loud.exit_code == 2
    assert "Traceback" in loud.output and "error: no module named 'nope'" in loud.output
    runner.invoke(app, ["info", "small_cnn"])  # the flag does not stick to later commands
    again = runner.invoke(app, ["info", "nope"])
    assert "Traceback" not in again.output


def test_datasets_says_which_are_offline():
    result = runner.invoke(app, ["datasets"])
    assert result.exit_code == 0
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:]}
    for name in ("digits", "mnist1d", "synthetic", "synthetic_tokens"):
        assert "offline" in rows[name]
    for name in ("mnist", "cifar10", "speechcommands", "tinystories"):
        assert "--root / $MICO_DATA" in rows[name]
