"""The proxies label each conv / linear node by the kernel the code generator emits for it on
the target (its ISA extensions included), and latency searches build their programs with the
target's extensions: binary layers (W1A1) take ``bin_swar`` on rv32 and ``bin_cpop`` on
rv32zbb, in the labels and in the measured program alike."""

from __future__ import annotations

import re

import pytest
import torch

from mico.hw.layers import LayerShape
from mico.hw.measure import generation_extensions, latency_kind
from mico.hw.opshape import graph_op_shapes, kernel_path, op_from_layer
from mico.hw.proxy import fit_proxy

#: a conv of 16 -> 32 channels on 16x16 (73,728 MACs: above every path's size threshold)
CONV = LayerShape("conv", "conv2d", 16, 32, (3, 3), (1, 1), 1, (16, 16), (16, 16))
LINEAR = LayerShape("fc", "linear", 512, 256, (1, 1), (1, 1), 1, (1, 1), (1, 1))


def _lowered(shape: LayerShape, bits: str):
    from mico.hw.programs import single_layer
    from mico.pipeline import lower_model, quantize_ptq
    from mico.quant import QuantConfig, QuantPlan

    torch.manual_seed(0)
    model, sample = single_layer(shape)
    model.eval()
    x = torch.randn(4, *sample)
    quantized = quantize_ptq(model, QuantPlan.parse(f"layer={bits}"), [x],
                             QuantConfig(act_mode="static"))  # fmt: skip
    return lower_model(quantized, x[:1], "layer", calibration=[x]), x


def test_kernel_path_names() -> None:
    assert kernel_path("mico_qconv2d_tiled_s8") == "tiled_s8"
    assert kernel_path("mico_qconv2d_tiled") == "tiled"
    assert kernel_path("mico_qconv2d_depthwise3x3") == "depthwise3x3"
    assert kernel_path("mico_qlinear") == "linear"
    assert kernel_path("mico_qlinear_s8") == "linear_s8"
    assert kernel_path("mico_qlinear_sub4") == kernel_path("mico_qlinear_sub2") == "sub"
    assert kernel_path("mico_qlinear_sub4t") == kernel_path("mico_qlinear_sub2t") == "sub_t"
    assert kernel_path("mico_qconv2d_tiled_sub4") == kernel_path("mico_qconv2d_tiled_sub2")
    assert kernel_path("mico_qconv2d_tiled_sub2") == "tiled_sub"
    assert kernel_path("mico_qconv2d_lanes_w4g2") == "lanes"
    assert kernel_path("mico_qlinear_lanes_w2g4") == "lanes"
    assert kernel_path("mico_qconv2d_dwl_s8") == "dwlanes"
    # the depthwise pair path: one label per family of forms (K lanes, 5 lanes or pairs;
    # outputs by thresholds, by table or requantized), whatever the stride and the read
    assert kernel_path("mico_qconv2d_dwp_f1_s_k5_l_r5_x") == "dwp_k5_tab"
    assert kernel_path("mico_qconv2d_dwp_f2_r_k_n") == "dwp_k_tab"
    assert kernel_path("mico_qconv2d_dwp_f1_r_k_t") == "dwp_k_thr"
    assert kernel_path("mico_qconv2d_dwp_f1_s_k5_q") == "dwp_k5"
    assert kernel_path("mico_qconv2d_dwp_f2_g_t") == "dwp_thr"
    assert kernel_path("mico_qconv2d_dwp_f1_s_q_r5") == "dwp"
    assert kernel_path("mico_qconv2d_dwp_f1") == "dwp"  # the entry point of any form
    assert kernel_path("mico_qconv2d_dw8_f2") == "dw8_f2"
    assert kernel_path("mico_qconv2d_dwbs_s2") == "dwbs"
    assert kernel_path("mico_qconv2d_dw4") == "dw4"  # rows of 5 codes of 4 bits
    assert kernel_path("mico_qconv2d_dw4s") == "dw4"  # (signed codes)
    assert kernel_path("mico_qconv2d_bin_cpop") == "bin_cpop"
    assert kernel_path("mico_qlinear_bin_swar") == "bin_swar"
    # the sign-weight sums (ternary / binary weights on wide codes): one path, by width
    assert kernel_path("mico_qconv2d_addsub2") == kernel_path("mico_qconv2d_addsub1") == "addsub"
    assert kernel_path("mico_qconv2d_some_new_path") == "some_new_path"  # a path added later


#: the labels of the kernel paths the C kernels declare (a new entry point must get one of
#: these, or a label of its own added here and, for a family by width, to opshape._FAMILIES)
DECLARED_LABELS = {
    "conv2d", "tiled", "tiled_s8", "tiled_sub", "narrow_s8", "depthwise3x3", "elementwise", "host",
    "linear", "linear_s8", "sub", "sub_t", "dw8_f1", "dw8_f2", "dwbs", "dwp", "dw4", "bin_swar",
    "bin_cpop", "addsub", "sign_lut",
}  # fmt: skip


def _declared_entry_points() -> list[str]:
    """The conv / linear entry points ``mico_nn.h`` declares as plain prototypes (the lanes,
    pixel lanes and pair forms are declared through macros, and labelled by family above)."""
    from importlib import resources

    header = resources.files("mico.csrc").joinpath("mico_nn.h").read_text()
    return sorted(set(re.findall(r"\bvoid\s+(mico_q(?:conv2d|linear)\w*)\s*\(", header)))


def test_every_declared_entry_point_has_a_path_label() -> None:
    """Each kernel the C library declares maps to a path label the proxies know, so a kernel
    split by width (``mico_qconv2d_addsub2`` / ``_addsub1``, ``tiled_sub4`` / ``_sub2``) is one
    path in the profiles' nodes and the features, not a label per width."""
    kernels = _declared_entry_points()
    assert {"mico_qconv2d_addsub2", "mico_qconv2d_addsub1", "mico_qlinear_sub4"} <= set(kernels)
    labels = {k: kernel_path(k) for k in kernels}
    unknown = {k: v for k, v in labels.items() if v not in DECLARED_LABELS}
    assert not unknown, f"entry points without a known path label: {unknown}"


@pytest.mark.parametrize(
    "bits, path, kernel",
    [("2/8", "addsub", "mico_qconv2d_addsub2"), ("2/6", "addsub", "mico_qconv2d_addsub2"),
     ("1/8", "sign_lut", "mico_qconv2d_sign_lut"), ("1/6", "sign_lut", "mico_qconv2d_sign_lut")],
)  # fmt: skip
def test_sign_weight_layers_are_labelled(bits: str, path: str, kernel: str, tmp_path) -> None:
    """Ternary (2-bit signed codes) weights on 5- to 8-bit codes, in a one-group conv of 144
    taps, take the sign-weight sums (``addsub``), binary ones the sign tables (``sign_lut``):
    the node of a lowered graph and a layer known by its shape alone both say so, and the
    generated program calls that kernel."""
    from mico.codegen import emit_c_project

    w, a = (int(b) for b in bits.split("/"))
    assert op_from_layer(CONV.with_bits(w, a), in_signed=True).path == path
    assert op_from_layer(CONV.with_bits(w, a), in_signed=False, out_bits=8).path == path
    graph, x = _lowered(CONV, bits)
    (conv,) = [op for op in graph_op_shapes(graph) if op.is_mac]
    assert conv.path == path and conv.w_bits == w
    project = emit_c_project(graph, tmp_path, "layer", sample_inputs=x[:1])
    source = (project.directory / "layer.c").read_text()
    assert re.search(rf"\b{kernel}\(", source)
    # on 4-bit codes the lanes keep the layer
    assert op_from_layer(CONV.with_bits(w, 4), in_signed=True).path not in ("addsub", "sign_lut")


def test_target_extensions_and_kinds() -> None:
    assert latency_kind("rv32zbb") == "rv32"
    assert latency_kind("rv32") == "rv32"
    assert latency_kind("bitfusion") == "bitfusion"
    assert "zbb" in generation_extensions("rv32zbb")
    assert "zbb" not in generation_extensions("rv32")
    import mico.deploy as deploy

    choose = getattr(deploy, "generation_extensions", deploy.device_extensions)
    assert generation_extensions("host") == tuple(choose(["host"]))  # as mico verify does


@pytest.mark.parametrize("shape", [CONV, LINEAR], ids=["conv", "linear"])
def test_binary_layer_labels(shape: LayerShape) -> None:
    """A layer known only by its shape: W1A1 is binary, labelled by the target's popcount."""
    w1a1 = shape.with_bits(1, 1)
    rv32 = op_from_layer(w1a1, in_signed=True, extensions=generation_extensions("rv32"))
    zbb = op_from_layer(w1a1, in_signed=True, extensions=generation_extensions("rv32zbb"))
    assert (rv32.path, zbb.path) == ("bin_swar", "bin_cpop")
    # the other widths keep their paths on both targets
    for w, a in ((8, 8), (4, 4), (2, 8)):
        other = shape.with_bits(w, a)
        assert op_from_layer(other, True, None, ("zbb",)).path == op_from_layer(other, True).path
        assert not op_from_layer(other, True).path.startswith("bin_")


def test_graph_labels_are_the_emitted_calls(tmp_path) -> None:
    """On a lowered graph each label is the call the generated program makes for the target."""
    from mico.codegen import emit_c_project

    graph, x = _lowered(CONV, "1/1")
    for target, path in (("rv32", "bin_swar"), ("rv32zbb", "bin_cpop")):
        exts = generation_extensions(target)
        (conv,) = [op for op in graph_op_shapes(graph, exts) if op.is_mac]
        assert conv.path == path
        project = emit_c_project(graph, tmp_path / target, "layer", sample_inputs=x[:1],
                                 isa_extensions=exts)  # fmt: skip
        source = (project.directory / "layer.c").read_text()
        assert re.search(rf"\bmico_qconv2d_{path}\(", source)
    # W8A8 and W4A4 graphs: the byte path and the lanes, as emitted
    for bits, path in (("8/8", "tiled_s8"), ("4/4", "lanes")):
        graph, _ = _lowered(CONV, bits)
        (conv,) = [op for op in graph_op_shapes(graph) if op.is_mac]
        assert conv.path == path


def test_proxy_keeps_its_target_extensions(tmp_path) -> None:
    """A proxy fitted for rv32zbb labels layers with cpop, saved and loaded alike."""
    from mico.hw.proxy import LatencyProxy

    rows = [(CONV.with_bits(w, a), 1000.0 * w * a + 5000.0) for w in (1, 2, 4, 8)
            for a in (1, 2, 4, 8)]  # fmt: skip
    proxy = fit_proxy(rows, "rv32zbb", "instructions")
    assert proxy.extensions == generation_extensions("rv32zbb")
    loaded = LatencyProxy.load(proxy.save(tmp_path / "p.json"))
    assert loaded.extensions == proxy.extensions
    assert fit_proxy(rows, "rv32", "instructions").extensions == generation_extensions("rv32")


@pytest.mark.parametrize("target, path", [("rv32", "bin_swar"), ("rv32zbb", "bin_cpop")])
def test_latency_search_builds_with_target_extensions(
    target: str, path: str, digits_split, monkeypatch
) -> None:
    """MiCoEval(constraint='latency', latency_target=...) builds the scheme's program with
    the target's extensions: a W1A1 scheme calls the popcount kernel of that target."""
    from mico.codegen import compile as compile_module
    from mico.models import SmallCNN
    from mico.search import MiCoEval
    from mico.targets import rv32

    if not rv32.available():
        pytest.skip("rv32 toolchain missing: apt-get " + rv32.missing_tools_hint())
    sources: list[str] = []
    real = compile_module.compile_model

    def spy(*args, **kwargs):
        compiled = real(*args, **kwargs)
        sources.append((compiled.project.directory / "model.c").read_text())
        return compiled

    monkeypatch.setattr(compile_module, "compile_model", spy)
    torch.manual_seed(0)
    model = SmallCNN(channels=(32, 32))
    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    ev = MiCoEval(model, 1, train_loader, test_loader, None, constraint="latency",
                  latency_target=target, data_name="digits")  # fmt: skip
    assert ev.eval_constraint([1] * 6) > 0
    assert len(sources) == 1
    assert re.search(rf"\bmico_q(conv2d|linear)_{path}\(", sources[0])
    other = "bin_cpop" if path == "bin_swar" else "bin_swar"
    assert other not in sources[0]


def test_verify_per_layer_counts_target_files_of_counted_runners(monkeypatch) -> None:
    """mico verify --per-layer on rv32zbb counts nodes (as on rv32), not 'counts nothing'."""
    from mico import deploy
    from mico.hw import latency

    called: list[str] = []

    def fake(compiled, sample, target, timeout=600):
        called.append(target)
        raise RuntimeError("stop here")

    monkeypatch.setattr(latency, "per_layer", fake)
    with pytest.raises(RuntimeError, match="stop here"):
        deploy.per_layer_hook(None, [[0.0]], "rv32zbb", lambda _m: None)
    assert called == ["rv32zbb"]
    assert "skipped" in deploy.per_layer_hook(None, [[0.0]], "rv64", lambda _m: None)


def _dwp_forms() -> list[str]:
    """Every entry point of ``MICO_DWP_FORMS`` in mico_nn.h (the C kernels' list)."""
    from importlib import resources

    header = resources.files("mico.csrc").joinpath("mico_nn.h").read_text()
    start, end = header.index("#define MICO_DWP_FORMS"), header.index("#define MICO_DWP_DECLARE")
    block = header[start:end]
    return [f"mico_qconv2d_dwp_f{sf}{suffix}" for sf, suffix in
            re.findall(r"X\((\d),\s*(\w*),", block)]  # fmt: skip


def test_every_depthwise_pair_form_is_labelled_by_its_family() -> None:
    """Each form the C kernels declare gets the label of its lanes and outputs, so forms of
    different costs are told apart and forms of one family share a label."""
    forms = _dwp_forms()
    assert len(forms) >= 40
    labels = set()
    for kernel in forms:
        label = kernel_path(kernel)
        suffix = kernel.removeprefix("mico_qconv2d_dwp_f")[1:].split("_")
        lanes = "_k5" if "k5" in suffix else "_k" if "k" in suffix else ""
        out = "_tab" if {"l", "n"} & set(suffix) else "_thr" if "t" in suffix else ""
        assert label == "dwp" + lanes + out, kernel
        labels.add(label)
    assert labels == {"dwp", "dwp_thr", "dwp_k", "dwp_k_thr", "dwp_k_tab", "dwp_k5",
                      "dwp_k5_thr", "dwp_k5_tab"}  # fmt: skip


def _dw(h: int, w: int, bits: tuple[int, int]) -> LayerShape:
    return LayerShape("dw", "dwconv2d", 16, 16, (3, 3), (1, 1), 16, (h, w), (h, w)).with_bits(*bits)


@pytest.mark.parametrize(
    ("shape", "in_signed", "out_bits", "label"),
    [
        (_dw(25, 5, (4, 4)), False, 8, "dwp_k5"),  # dscnn's planes: words of 5 lanes
        (_dw(25, 5, (4, 4)), False, 2, "dwp_k5_tab"),  # 4 output codes: words of K lanes, table
        (_dw(25, 5, (4, 3)), False, 4, "dwp_k5_tab"),  # 5..16 codes: a table per channel
        (_dw(25, 5, (4, 4)), False, 4, "dw4"),  # 4-bit codes in and out: rows of 5
        (_dw(25, 5, (4, 4)), True, 8, "dwp_k"),  # signed codes: K lanes, not 5
        (_dw(25, 5, (4, 4)), True, 4, "dwp_k_tab"),
        (_dw(25, 5, (4, 8)), False, 8, "dwp"),  # 8-bit codes: pairs
        (_dw(25, 5, (4, 8)), False, 2, "dwp_thr"),
        (_dw(16, 16, (2, 2)), False, 2, "dwbs"),  # the bit-sliced path
        (_dw(16, 16, (8, 8)), False, 8, "dw8_f1"),  # the byte path
    ],
)
def test_depthwise_layers_carry_their_form_family(shape, in_signed, out_bits, label) -> None:
    """A depthwise layer's label is the family of the form the generator emits for it."""
    from mico.hw.opshape import emitted_kernel, layer_node

    op = op_from_layer(shape, in_signed=in_signed, out_bits=out_bits)
    assert op.path == label
    kernel, _, _ = emitted_kernel(layer_node(shape, in_signed, out_bits))
    assert kernel_path(kernel) == label
