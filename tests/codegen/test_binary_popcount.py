"""The popcount kernels of binary layers (mico_binary.c: 1-bit weights times 1-bit activations,
unsigned {0, 1} or binary {-1, +1}) against the Python integer arithmetic, through the C
program of benchmarks/kernels_rv32.py: both popcount paths (portable SWAR and Zbb's cpop),
channel and tap counts that fill no word, padding, stride 2, activations all 0 / all 1,
saturating multipliers, 1-bit outputs (thresholds) and wider ones (requantization); the weight
layout and the thresholds against the plain packing and the reference requantization; the
kernel the generator picks from a target's ISA extensions; a small model compiled end to end;
one case of each path on rv32 under qemu."""

from __future__ import annotations

import functools
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.codegen import binary_plan
from mico.codegen.binary_plan import (
    MAX_WORDS,
    MIN_MACS,
    binary_kernel,
    popcount_path,
    takes_binary,
    thresholds,
)
from mico.ir.ops.mico_ops import finish, out_spec
from mico.quant.arithmetic import QFormat
from mico.quant.packing import binary_row_words, pack, pack_binary_rows
from mico.targets import rv32
from tests.benchmark_modules import load_benchmark

kernels_rv32 = load_benchmark("kernels_rv32")

needs_gcc = pytest.mark.skipif(
    shutil.which("gcc") is None, reason="needs gcc (apt-get install gcc)"
)

W1 = QFormat(1, True)
U1 = QFormat(1, False)
B1 = QFormat(1, True)
PATHS = {"swar": (), "cpop": ("zbb",)}


def check(
    layers, target: str = "host", extensions: tuple[str, ...] = (), results=None
) -> list[str]:
    """Run every layer's chosen path (one program) unless ``results`` holds their runs; all
    must equal the reference exactly. Returns the kernel each layer took."""
    kernels = []
    if results is None:
        results = kernels_rv32.run_layers(layers, target, ("chosen",), extensions=extensions)
    for layer, ((kernel, _, out),) in zip(layers, results, strict=True):
        ref = layer.reference().ravel()
        assert np.array_equal(out, ref), (kernel, np.flatnonzero(out != ref)[:10])
        kernels.append(kernel)
    return kernels


# ----------------------------------------------------------------------------- layout, tables
@settings(max_examples=60, deadline=None)
@given(out=st.integers(1, 5), taps=st.integers(1, 100), seed=st.integers(0, 2**16))
def test_pack_binary_rows_is_the_plain_packing_per_row(out, taps, seed):
    """Row o: the bytes pack() gives codes[o], then zero bits up to whole 32-bit words."""
    codes = np.random.default_rng(seed).choice([-1, 1], size=(out, taps))
    words = pack_binary_rows(codes, W1)
    n = binary_row_words(taps)
    assert words.dtype == np.uint32 and words.shape == (out * n,)
    rows = words.reshape(out, n).astype("<u4").view(np.uint8).reshape(out, 4 * n)
    for o in range(out):
        plain = pack(codes[o], W1)
        assert np.array_equal(rows[o, : plain.size], plain)
        assert not rows[o, plain.size :].any()
        tail = taps % 8
        if tail:  # the last plain byte holds no bits past the row
            assert plain[-1] >> tail == 0


def test_pack_binary_rows_refuses_other_codes():
    with pytest.raises(ValueError, match="binary"):
        pack_binary_rows(np.zeros((2, 3), dtype=int), QFormat(2, True))
    with pytest.raises(ValueError, match="outside"):
        pack_binary_rows(np.full((2, 3), 2), W1)


@settings(max_examples=60, deadline=None)
@given(
    taps=st.integers(1, 300),
    relu=st.booleans(),
    binary_out=st.booleans(),
    seed=st.integers(0, 2**16),
    real_log2=st.floats(-12, 4),
)
def test_thresholds_reproduce_the_reference_requantization(taps, relu, binary_out, seed, real_log2):
    """Bit 1 exactly from the threshold on, for every sum a layer can produce."""
    rng = np.random.default_rng(seed)
    c = 6
    fmt = B1 if binary_out else U1
    bias = rng.integers(-2 * taps, 2 * taps + 1, size=c)
    real = 2.0 ** (real_log2 + rng.uniform(-1, 1, size=c))
    shift = np.clip(np.floor(30 - np.log2(real)).astype(np.int64), 1, 62)
    m = np.clip(np.round(real * 2.0**shift), 0, 2**31 - 1).astype(np.int64)
    spec = out_spec(fmt, 1.0, list(m), list(shift))
    thr = thresholds(bias, spec, relu, taps)
    assert thr is not None and thr.shape == (c,)
    s = np.arange(-taps, taps + 1)
    codes = finish(bias[:, None] + s[None, :], spec, relu, axis=0).numpy()
    stored = codes > 0 if binary_out else codes == 1
    assert np.array_equal(stored, s[None, :] >= thr[:, None])


def test_thresholds_only_for_requantized_one_bit_outputs():
    bias = np.zeros(4, dtype=np.int64)
    assert thresholds(bias, None, False, 9) is None  # int32 accumulators
    assert thresholds(bias, out_spec(QFormat(2, False), 1.0, [1 << 30], [31]), True, 9) is None
    assert thresholds(bias, out_spec(U1, 1.0, [1 << 30], [31]), True, 9) is not None


def test_kernel_follows_the_isa_extensions():
    """Zbb in the target's extensions: cpop; any other ISA: the portable SWAR count."""
    assert popcount_path(()) == "swar"
    assert popcount_path(["zicsr"]) == "swar"
    assert popcount_path(["zicsr", "zbb"]) == "cpop"
    assert popcount_path(["ZBB"]) == "cpop"
    assert binary_kernel("mico_qconv2d", ["zicsr", "zbb"]) == "mico_qconv2d_bin_cpop"
    assert binary_kernel("mico_qlinear", ["zicsr"]) == "mico_qlinear_bin_swar"


def test_which_layers_take_the_popcount_kernels():
    assert takes_binary(W1, U1, 144) and takes_binary(W1, B1, 144, k_w=3)
    assert not takes_binary(QFormat(2, True), U1, 144)  # ternary / 2-bit weights
    assert not takes_binary(W1, QFormat(2, False), 144)  # wider activations
    assert not takes_binary(W1, U1, 144, groups=2)
    assert not takes_binary(W1, U1, 144, dil_w=2)
    assert not takes_binary(W1, U1, 33 * 33, k_w=33)
    assert not takes_binary(W1, U1, 32 * MAX_WORDS + 1)
    assert takes_binary(W1, U1, 144, macs=MIN_MACS)  # small layers keep the other kernels
    assert not takes_binary(W1, U1, 144, macs=MIN_MACS - 1)
    # linear layers from LINEAR_MIN_MACS (their kernel is a fraction of the conv path's code)
    linear = binary_plan.LINEAR_MIN_MACS
    assert takes_binary(W1, U1, 256, macs=linear, min_macs=linear)
    assert not takes_binary(W1, U1, 256, macs=linear - 1, min_macs=linear)


# ----------------------------------------------------------------------------- kernels on host
def _conv(a_fmt, seed, o_fmt=None, **shape):
    """A conv layer; binary outputs without a ReLU (after one, every output would be +1)."""
    shape.setdefault("relu", not (o_fmt or a_fmt).binary)
    return kernels_rv32.random_layer("conv", W1, a_fmt, o_fmt=o_fmt, seed=seed, **shape)


def _edge_layers(a_fmt: QFormat) -> list:
    """Odd channel and tap counts, padding 0..2, stride 2, 1x1 / 5x5 / 1xK-like shapes,
    1-bit outputs (thresholds) and 2-, 8-bit outputs (requantized), saturating scales."""
    layers = [
        _conv(a_fmt, 1, in_c=5, out_c=3, hw=7, k=3, pad=1),  # K = 45: one word and a half
        _conv(a_fmt, 2, in_c=33, out_c=7, hw=6, k=3, pad=1),  # K = 297: 10 words, 2 chunks
        _conv(a_fmt, 3, in_c=3, out_c=5, hw=9, k=3, pad=1, stride=2),
        _conv(a_fmt, 4, in_c=4, out_c=6, hw=8, k=5, pad=2),
        _conv(a_fmt, 5, in_c=70, out_c=9, hw=5, k=1),  # pointwise, 3 words, 25 pixels
        _conv(a_fmt, 6, in_c=8, out_c=4, hw=6, k=3),  # no padding
        _conv(a_fmt, 7, in_c=6, out_c=4, hw=11, k=3, pad=1, stride=2),
        _conv(a_fmt, 8, in_c=9, out_c=5, hw=7, k=3, pad=1, o_fmt=QFormat(2, False)),
        _conv(a_fmt, 9, in_c=9, out_c=5, hw=7, k=1, o_fmt=QFormat(8, True), relu=False),
        _conv(a_fmt, 10, in_c=9, out_c=5, hw=7, k=3, pad=1, extreme=True),
        _conv(a_fmt, 11, in_c=12, out_c=5, hw=6, k=3, pad=1, extreme=True,
              o_fmt=QFormat(4, False)),
        _conv(a_fmt, 12, in_c=16, out_c=4, hw=40, k=1),  # pointwise, blocks across rows
        _conv(a_fmt, 19, in_c=66, out_c=3, hw=4, k=3, pad=1),  # K = 594: no bit-sliced counts
        _conv(a_fmt, 13, in_c=2, out_c=3, hw=40, k=3, pad=1),  # 40-pixel rows: two blocks
    ]  # fmt: skip
    layers[-1].x = layers[-1].x[:, :3, :]  # 3 x 40 inputs
    layers += [  # binary outputs without a ReLU: thresholds inside the sums' range
        _conv(a_fmt, 16, in_c=10, out_c=6, hw=7, k=3, pad=1, o_fmt=B1, relu=False),
        _conv(a_fmt, 17, in_c=40, out_c=6, hw=7, k=1, o_fmt=B1, relu=False),
        kernels_rv32.random_layer("linear", W1, a_fmt, in_c=77, out_c=9, rows=2, seed=18,
                                  o_fmt=B1, relu=False),
    ]  # fmt: skip
    zeros = _conv(a_fmt, 14, in_c=7, out_c=4, hw=5, k=3, pad=1)
    zeros.x[:] = a_fmt.qmin  # all 0 (unsigned) / all -1 (binary)
    ones = _conv(a_fmt, 15, in_c=7, out_c=4, hw=5, k=3, pad=1)
    ones.x[:] = a_fmt.qmax
    layers += [zeros, ones]
    for i, (in_f, out_f, rows) in enumerate(((256, 64, 1), (45, 7, 3), (1000, 40, 2), (1, 3, 1))):
        layers.append(kernels_rv32.random_layer("linear", W1, a_fmt, in_c=in_f, out_c=out_f,
                                                rows=rows, seed=20 + i,
                                                relu=not a_fmt.binary))  # fmt: skip
    layers.append(kernels_rv32.random_layer("linear", W1, a_fmt, in_c=50, out_c=6, seed=30,
                                            o_fmt=QFormat(8, True), relu=False))  # fmt: skip
    layers.append(kernels_rv32.random_layer("linear", W1, a_fmt, in_c=50, out_c=6, seed=31,
                                            extreme=True))  # fmt: skip
    return layers


A_FMTS = {"a01": U1, "a-+1": B1}


@pytest.fixture(scope="module")
def host_runs() -> dict[str, tuple[list, list]]:
    """Both activation formats' edge layers built into one program per popcount path and run
    once (two builds instead of four): per ``path a_fmt``, the layers and their runs."""
    runs = {}
    for path, extensions in PATHS.items():
        groups = {name: _edge_layers(a_fmt) for name, a_fmt in A_FMTS.items()}
        every = [layer for layers in groups.values() for layer in layers]
        results = iter(kernels_rv32.run_layers(every, "host", ("chosen",), extensions=extensions))
        for name, layers in groups.items():
            runs[f"{path} {name}"] = (layers, [next(results) for _ in layers])
    return runs


@needs_gcc
@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("a_fmt", sorted(A_FMTS))
def test_kernels_bit_exact_on_host(a_fmt, path, host_runs):
    layers, results = host_runs[f"{path} {a_fmt}"]
    kernels = check(layers, results=results)
    assert all(k.endswith(f"_bin_{path}") for k in kernels), kernels
    assert any(layer.thresholds() is not None for layer in layers)
    assert any(layer.thresholds() is None for layer in layers)


# ----------------------------------------------------------------------------- a whole model
@functools.cache
def _w1a1_graph(signed_mid: bool):
    """A small conv net at W1A1 (8-bit input layer; every other layer has enough MACs for the
    popcount kernels), lowered for static mode; and samples (made once per module: the tests
    only read them).
    Without a ReLU between two convolutions the middle activations are binary {-1, +1}."""
    import torch
    from torch import nn

    from mico.ir import extract_ir
    from mico.models import from_torch
    from mico.passes import lower_static
    from mico.quant import calibrate

    torch.manual_seed(3)
    mid = nn.Identity() if signed_mid else nn.ReLU()
    net = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(),
        nn.Conv2d(16, 24, 3, padding=1), mid,
        nn.Conv2d(24, 24, 3, padding=1, groups=24), mid,  # the bit-sliced depthwise path
        nn.Conv2d(24, 20, 3, padding=1, stride=2), nn.ReLU(),
        nn.Conv2d(20, 32, 1), nn.ReLU(),
        nn.Flatten(), nn.Linear(32 * 8 * 8, 16),
    )  # fmt: skip
    model = from_torch(net, input_shape=(3, 16, 16))
    n = 6
    model.set_qscheme([[1] * n, [8] + [1] * (n - 1)], act_mode="static")
    example = model.example_input()
    gen = torch.Generator().manual_seed(4)
    batches = [torch.randn((8, *example.shape[1:]), generator=gen)]
    model.eval()  # no BatchNorm to fold
    calibrate(model, batches)
    graph = lower_static(extract_ir(model, example), batches)
    return graph, torch.randn((3, *example.shape[1:]), generator=gen)


@needs_gcc
@pytest.mark.parametrize("signed_mid", [False, True], ids=["relu", "no-relu"])
def test_compiled_w1a1_model_is_bit_exact(signed_mid, tmp_path):
    """The generator emits the popcount kernels (SWAR: no ISA extensions given), and the
    program (ASan + UBSan) equals the Python reference."""
    from mico.codegen import emit_c_project
    from mico.execute import run_graph
    from mico.targets import host

    graph, samples = _w1a1_graph(signed_mid)
    project = emit_c_project(graph, tmp_path / "c", "m")
    source = (project.directory / "m.c").read_text()
    assert source.count("_bin_swar(") == 5 and "_bin_cpop(" not in source, source
    if signed_mid:
        assert any(
            node.inputs[0].qformat == B1 for node in graph.nodes if node.op == "mico.qconv2d"
        )
    host.build(project, sanitize=True)
    reference = run_graph(graph, samples)[0].numpy()
    c_out = host.run(project, samples.numpy())
    assert np.array_equal(c_out.reshape(reference.shape), reference)


@needs_gcc
def test_zbb_extensions_pick_cpop_and_stay_bit_exact(tmp_path):
    """Given a target's extensions with Zbb, every binary layer calls the cpop kernels; the
    program equals the reference on host and, when the rv32 tools are there, under qemu (the
    kernels encode cpop themselves: the rv32imac build needs no other flag)."""
    from mico.codegen import emit_c_project
    from mico.execute import run_graph
    from mico.targets import host
    from mico.targets.catalog import get_target

    extensions = get_target("rv32").extensions
    assert popcount_path(extensions) == "swar"  # the rv32imac target has no Zbb
    graph, samples = _w1a1_graph(False)
    project = emit_c_project(graph, tmp_path / "c", "m", isa_extensions=(*extensions, "zbb"))
    source = (project.directory / "m.c").read_text()
    assert source.count("_bin_cpop(") == 5 and "_bin_swar(" not in source, source
    reference = run_graph(graph, samples)[0].numpy()
    host.build(project)
    assert np.array_equal(host.run(project, samples.numpy()).reshape(reference.shape), reference)
    if rv32.available():
        rv32.build(project)
        on_device = rv32.run(project, samples.numpy()).outputs
        assert np.array_equal(on_device.reshape(reference.shape), reference)


# ----------------------------------------------------------------------------- rv32
@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
@pytest.mark.parametrize("path", sorted(PATHS))
def test_rv32_bit_exact_and_cheaper_than_plain(path):
    """On rv32imac (qemu's rv32 CPU runs Zbb's cpop): bit-exact, and fewer instructions than
    the plain kernels."""
    layers = [
        _conv(U1, 40, in_c=16, out_c=8, hw=6, k=3, pad=1),
        _conv(B1, 41, in_c=16, out_c=8, hw=6, k=3, pad=1),
        kernels_rv32.random_layer("linear", W1, U1, in_c=96, out_c=16, seed=42),
    ]
    results = kernels_rv32.run_layers(layers, "rv32", extensions=PATHS[path])
    for layer, ((kernel, count, out), (_, plain_count, plain_out)) in zip(
        layers, results, strict=True
    ):
        ref = layer.reference().ravel()
        assert kernel.endswith(f"_bin_{path}")
        assert np.array_equal(out, ref) and np.array_equal(plain_out, ref)
        assert count < plain_count
