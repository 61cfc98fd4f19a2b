"""The weights file (--weights-file): format round trip, errors, and the behaviour that matters:
one built program runs another model's weights (same architecture and plan) bit for bit."""

from __future__ import annotations

import copy
import json
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.codegen.compile import compile_model
from mico.codegen.weights_file import (
    HEADER_BYTES,
    MAGIC,
    Constant,
    encode,
    plan_layout,
    read_weights_file,
    write_weights_file,
)
from mico.errors import WeightsFileError
from mico.quant import QuantPlan
from mico.quant.arithmetic import QFormat
from mico.quant.packing import pack
from mico.targets import host, rv32

PLAN = "conv1=8/8,conv2=4/4,fc=2/8"
NUMPY = {"uint8_t": "<u1", "int32_t": "<i4", "int64_t": "<i8", "float": "<f4"}


# ------------------------------------------------------------------------------ format
@st.composite
def constants(draw) -> list[Constant]:
    out = []
    for i in range(draw(st.integers(0, 6))):
        ctype = draw(st.sampled_from(sorted(NUMPY)))
        n = draw(st.integers(0, 40))
        kind = draw(st.sampled_from(["weights", "bias", "scales", "params"]))
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        if ctype == "uint8_t" and draw(st.booleans()):  # packed codes
            fmt = QFormat(draw(st.integers(1, 8)), draw(st.booleans()))
            codes = rng.integers(fmt.qmin, fmt.qmax + 1, n)
            data = pack(codes, fmt).tobytes()
            out.append(Constant(f"c{i}", kind, ctype, data, fmt.bits, fmt.signed, 0, n, "packed"))
            continue
        values = rng.integers(0, 256, n * np.dtype(NUMPY[ctype]).itemsize, dtype=np.uint8)
        if ctype == "float":
            values = rng.standard_normal(n).astype("<f4").view(np.uint8)
        out.append(Constant(f"c{i}", kind, ctype, values.tobytes()))
    return out


@settings(max_examples=40, deadline=None)
@given(constants(), st.sampled_from([8, 16, 64]))
def test_write_then_read_gives_back_every_constant(tmp_path_factory, items, align):
    path = tmp_path_factory.mktemp("wf") / "m.bin"
    layout = plan_layout(items, "m", {"code": "x"}, align)
    write_weights_file(path, layout, items)
    read = read_weights_file(path, layout.fingerprint_hex)
    assert read.model == "m" and read.fingerprint == layout.fingerprint
    assert [e.name for e in read.entries] == [c.name for c in items]
    for c, e in zip(items, read.entries, strict=True):
        assert e.offset % align == 0 and (e.kind, e.ctype, e.bits) == (c.kind, c.ctype, c.bits)
        assert read.arrays[c.name].tobytes() == c.data
        if c.layout == "packed":
            fmt = QFormat(c.bits, c.signed)
            assert pack(read.codes(c.name), fmt).tobytes() == c.data


def _small_file(tmp_path: Path) -> tuple[Path, bytes, str]:
    items = [Constant("w", "weights", "uint8_t", bytes(range(10)), 4, True, 0, 20, "packed"),
             Constant("b", "bias", "int32_t", np.arange(3, dtype="<i4").tobytes())]  # fmt: skip
    layout = plan_layout(items, "m", {})
    path = tmp_path / "m.bin"
    write_weights_file(path, layout, items)
    return path, encode(layout, items), layout.fingerprint_hex


def _with(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new) :]


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: b"PK\3\4" + d[4:], "is not a mico weights file"),
        (lambda d: _with(d, 8, (7).to_bytes(4, "little")), "has format version 7"),
        (lambda d: d[:200], "is truncated: 200 bytes of"),
        (lambda d: d[:50], "is truncated: 50 bytes, shorter than the header"),
        (lambda d: d + b"\0", "1 bytes after its end"),
        (lambda d: _with(d, len(d) - 1, b"\xff"), "is corrupt: the data's CRC-32"),
        # entry 0's offset (bytes 32..40 of the entry) far beyond the file
        (lambda d: _with(d, HEADER_BYTES + 32, (10**6).to_bytes(8, "little")),
         "lies outside the data section"),
    ],
)  # fmt: skip
def test_a_damaged_file_is_a_clear_error(tmp_path, damage, message):
    path, data, _ = _small_file(tmp_path)
    path.write_bytes(damage(data))
    with pytest.raises(WeightsFileError, match=message) as info:
        read_weights_file(path)
    assert str(path) in str(info.value) and "mico export-weights" in str(info.value)


def test_the_fingerprint_must_be_the_projects(tmp_path):
    path, _, fp = _small_file(tmp_path)
    assert read_weights_file(path, fp).entry("w").bits == 4
    with pytest.raises(WeightsFileError, match="belongs to another model, plan or mico build"):
        read_weights_file(path, "00" * 32)
    with pytest.raises(WeightsFileError, match="cannot be read"):
        read_weights_file(tmp_path / "missing.bin")


# ------------------------------------------------------------------------------ C program
def _model_b(model: torch.nn.Module) -> torch.nn.Module:
    """Other weights, the same architecture: every parameter moved by seeded noise."""
    other = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for p in other.parameters():
            p.add_(0.3 * p.abs().mean() * torch.randn(p.shape, generator=gen))
    return other


def _compile(model, batches, out: Path, plan: str = PLAN, weights_file: bool = True):
    from mico.pipeline import quantize_ptq

    quantized = quantize_ptq(model, QuantPlan.parse(plan), batches)
    return compile_model(quantized, torch.zeros(1, 1, 8, 8), out, "cnn", "static",
                         calibration=batches, weights_file=weights_file)  # fmt: skip


@pytest.fixture(scope="module")
def built(trained_cnn, calibration_batches, tmp_path_factory):
    """Model A compiled with --weights-file and built once; B and another plan compiled."""
    root = tmp_path_factory.mktemp("weights")
    a = _compile(trained_cnn, calibration_batches, root / "a")
    host.build(a.project)
    b = _compile(_model_b(trained_cnn), calibration_batches, root / "b")
    other = _compile(
        trained_cnn, calibration_batches, root / "other", plan="conv1=4/8,conv2=4/8,fc=4/8"
    )
    return a, b, other


def test_the_same_binary_runs_another_models_weights_bit_for_bit(built, digits_split):
    a, b, _ = built
    samples = digits_split.x_test[:64]
    file_a, file_b = (c.project.directory / "cnn.bin" for c in (a, b))
    assert read_weights_file(file_b).fingerprint == read_weights_file(file_a).fingerprint
    assert file_a.read_bytes() != file_b.read_bytes()
    out_a = host.run(a.project, samples)
    out_b = host.run(a.project, samples, weights=file_b)  # A's program, B's file
    np.testing.assert_array_equal(out_a, a.reference(samples))
    np.testing.assert_array_equal(out_b, b.reference(samples))
    assert not np.array_equal(out_a, out_b)
    sources = (a.project.directory / "cnn_weights.h").read_text()
    assert "static const uint8_t conv1_weight" not in sources  # nothing compiled in


def test_per_layer_bit_widths_are_read_from_the_table(built):
    a, _, other = built
    bits = read_weights_file(a.project.directory / "cnn.bin").layer_bits()
    assert bits == {layer: int(wa.split("/")[0]) for layer, wa in
                    (item.split("=") for item in PLAN.split(","))}  # fmt: skip
    assert set(read_weights_file(other.project.directory / "cnn.bin").layer_bits().values()) == {4}
    manifest = json.loads((a.project.directory / "mico.json").read_text())["weights_file"]
    assert manifest["format"] == "mico-weights" and len(manifest["fingerprint"]) == 64


def _run_c(project, weights: Path) -> subprocess.CompletedProcess[str]:
    d = project.directory
    return subprocess.run([str(d / "cnn"), str(d / "inputs.bin"), str(d.parent / "out.bin"),
                           str(weights)], capture_output=True, text=True, check=False)  # fmt: skip


def test_the_c_program_refuses_bad_files(built, tmp_path):
    a, _, other = built
    good = (a.project.directory / "cnn.bin").read_bytes()
    cases = {
        "other.bin": ((other.project.directory / "cnn.bin").read_bytes(), "another model, plan"),
        "short.bin": (good[:-9], "wrong size (truncated"),
        "corrupt.bin": (_with(good, len(good) - 5, b"\x55"), "is corrupt"),
        "text.bin": (b"hello, world\n" * 20, "not a mico weights file"),
        "version.bin": (_with(good, 8, b"\x09"), "another weights-file format version"),
    }
    for name, (data, message) in cases.items():
        (tmp_path / name).write_bytes(data)
        done = _run_c(a.project, tmp_path / name)
        assert done.returncode == 6, (name, done.stderr)
        assert message in done.stderr and name in done.stderr and "export-weights" in done.stderr
    missing = _run_c(a.project, tmp_path / "missing.bin")
    assert missing.returncode == 6 and "cannot be opened" in missing.stderr


def test_run_refuses_before_a_successful_load(built, tmp_path):
    a, _, _ = built
    d = a.project.directory
    (tmp_path / "t.c").write_text("""#include <stdio.h>
#include <string.h>
#include "cnn.h"
static union { unsigned long long a; uint8_t b[CNN_WEIGHTS_BYTES + 8]; } blob;
int main(int argc, char **argv) {
    static float x[CNN_INPUT_SIZE];
    static cnn_output_t y[CNN_OUTPUT_SIZE];
    FILE *f = fopen(argv[1], "rb");
    size_t n = fread(blob.b, 1, sizeof blob.b, f);
    (void)argc;
    fclose(f);
    printf("%d", cnn_run(x, y));
    printf(" %d", cnn_load_weights(blob.b, n - 1));
    printf(" %d", cnn_run(x, y));
    memmove(blob.b + 1, blob.b, n); /* misaligned */
    printf(" %d", cnn_load_weights(blob.b + 1, n));
    memmove(blob.b, blob.b + 1, n);
    printf(" %d", cnn_load_weights(blob.b, n));
    printf(" %d\\n", cnn_run(x, y));
    return 0;
}
""")
    sources = [str(d / f) for f in a.project.files if f.endswith(".c") and f != "main.c"]
    exe = tmp_path / "t"
    subprocess.run(["gcc", "-std=c99", "-Wall", "-Wextra", "-Werror", f"-I{d}", "-o", str(exe),
                    str(tmp_path / "t.c"), *sources, "-lm"], check=True)  # fmt: skip
    done = subprocess.run([str(exe), str(d / "cnn.bin")], capture_output=True, text=True,
                          check=True)  # fmt: skip
    # no weights: ERR_NO_WEIGHTS (4); short: ERR_SIZE (4); misaligned: ERR_ALIGN (6); then OK
    assert done.stdout.split() == ["4", "4", "4", "6", "0", "0"]


def test_export_weights_refuses_another_layout_and_names_it(built, tmp_path):
    from mico.deploy import DeployOptions, export_weights

    a, _, _ = built
    options = DeployOptions(model="small_cnn", plan="4/8", mode="static", samples=8)
    with pytest.raises(WeightsFileError, match=r"fingerprint mismatch\): 'conv1_weight' is"):
        export_weights(options, a.project.directory, tmp_path / "x.bin", log=lambda _m: None)
    assert not (tmp_path / "x.bin").exists()


@pytest.mark.skipif(not rv32.available(), reason="rv32 toolchain missing: " +
                    rv32.missing_tools_hint())  # fmt: skip
def test_the_rv32_program_runs_another_models_weights(built, digits_split):
    a, b, _ = built
    samples = digits_split.x_test[:4]
    rv32.build(a.project)
    run = rv32.run(a.project, samples, weights=b.project.directory / "cnn.bin")
    np.testing.assert_array_equal(run.outputs, b.reference(samples))


def test_without_the_option_nothing_changes(trained_cnn, calibration_batches, tmp_path):
    plain = _compile(trained_cnn, calibration_batches, tmp_path / "plain", weights_file=False)
    d = plain.project.directory
    assert plain.project.weights_file is None
    assert "static const uint8_t conv1_weight" in (d / "cnn_weights.h").read_text()
    assert "load_weights" not in (d / "cnn.h").read_text() + (d / "main.c").read_text()
    assert not (d / "cnn.bin").read_bytes().startswith(MAGIC)


# ------------------------------------------------------------------------------ generation
def test_the_generation_program_reads_its_weights_from_the_file(tmp_path):
    """mico generate --weights-file: the KV-cached program gives Python's 32 tokens, and the
    same executable given another LLaMa's lm.bin gives that model's tokens."""
    from mico.codegen.generate_c import IDS_TAG
    from mico.generate import generate
    from mico.models.llama import LLaMa

    def llama(seed: int) -> LLaMa:
        torch.manual_seed(seed)
        return LLaMa(dim=16, n_layers=2, n_heads=2, vocab_size=300, max_seq_len=8, hidden_dim=24)

    runs = {}
    for seed in (5, 6):
        runs[seed] = generate(llama(seed), b"Hi", 32, work_dir=tmp_path / str(seed),
                              log=lambda _m: None, weights_file=True)  # fmt: skip
        assert runs[seed].kv_cache and runs[seed].c_ids == runs[seed].python_ids
    assert runs[5].python_ids != runs[6].python_ids
    a = tmp_path / "5"
    assert "static const float" not in (a / "lm_weights.h").read_text()
    (a / "lm.bin").write_bytes((tmp_path / "6" / "lm.bin").read_bytes())
    done = subprocess.run([str(a / "lm_generate")], input=b"Hi", cwd=a, capture_output=True,
                          check=True)  # fmt: skip
    line = next(ln for ln in done.stdout.decode("latin-1").splitlines() if ln.startswith(IDS_TAG))
    assert [int(t) for t in line[len(IDS_TAG) :].split()] == runs[6].python_ids
    (a / "lm.bin").write_bytes(b"MICOWTS\0" + bytes(200))
    bad = subprocess.run([str(a / "lm_generate")], input=b"Hi", cwd=a, capture_output=True)
    assert bad.returncode == 6 and b"format version" in bad.stderr


def test_export_weights_from_a_checkpoint_on_the_command_line(
    trained_cnn, calibration_batches, digits_split, tmp_path
):
    """The user's path: compile checkpoint A with --weights-file, build once, export
    checkpoint B's file with `mico export-weights`, run A's program on it: B's reference."""
    from typer.testing import CliRunner

    from mico.cli import app
    from mico.deploy import DeployOptions, compile_from_options
    from mico.quant import QuantConfig, calibrate, quantize_model
    from mico.train.checkpoint import save_checkpoint

    def checkpoint(model: torch.nn.Module, path: Path) -> Path:
        model = copy.deepcopy(model)
        quantize_model(model, PLAN, QuantConfig(act_mode="static"))
        model.eval()
        calibrate(model, calibration_batches)
        return save_checkpoint(model, path)

    a = checkpoint(trained_cnn, tmp_path / "a.pt")
    b = checkpoint(_model_b(trained_cnn), tmp_path / "b.pt")
    runner = CliRunner()
    project = tmp_path / "proj"
    done = runner.invoke(app, ["compile", "--checkpoint", str(a), "--weights-file", "-o",
                               str(project), "--name", "cnn", "-q"])  # fmt: skip
    assert done.exit_code == 0, done.output
    compiled_b, _ = compile_from_options(
        DeployOptions(checkpoint=b, out_dir=tmp_path / "ref_b", name="cnn"), log=lambda _m: None
    )
    done = runner.invoke(app, ["export-weights", "--checkpoint", str(b), "--project",
                               str(project), "-o", str(tmp_path / "b.bin"), "-q"])  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "conv1=8, conv2=4, fc=2" in done.output
    from mico.codegen.project import CProject

    ran = CProject(project, "cnn", [], compiled_b.project.arena, {}, (1, 1, 8, 8), (1, 10), 1.0,
                   weights_file="cnn.bin")  # fmt: skip
    host.build(ran)
    samples = digits_split.x_test[:32]
    out = host.run(ran, samples, weights=tmp_path / "b.bin")
    np.testing.assert_array_equal(out, compiled_b.reference(samples))


@pytest.mark.slow
@pytest.mark.skipif(not rv32.available(), reason="rv32 toolchain missing: " +
                    rv32.missing_tools_hint())  # fmt: skip
def test_the_generation_program_reads_its_weights_on_rv32(tmp_path):
    """The same on bare metal: lm.bin read through semihosting, 32 tokens equal to Python."""
    from mico.generate import generate
    from mico.models.llama import LLaMa

    torch.manual_seed(5)
    model = LLaMa(dim=16, n_layers=2, n_heads=2, vocab_size=300, max_seq_len=8, hidden_dim=24)
    result = generate(model, b"Hi", 32, target="rv32", work_dir=tmp_path / "lm",
                      log=lambda _m: None, weights_file=True)  # fmt: skip
    assert result.kv_cache and result.c_ids == result.python_ids
    assert "static const float" not in (tmp_path / "lm" / "lm_weights.h").read_text()
