"""The KV cache of the static (integer-only) tinyllama generation program
(:mod:`mico.codegen.decode_static_c`): the cached program's int32 logits equal the uncached
program's bit for bit at every step (while cached, and after the window slides, when it runs the
full window), and its tokens equal Python's; on rv32 too, in fewer instructions per token."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mico.generate import generate
from mico.targets import rv32

_spec = importlib.util.spec_from_file_location(
    "_transformer_static", Path(__file__).with_name("test_transformer_static.py")
)
_static = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_static)  # the calibrated static tinyllamas of those tests

#: 40 byte tokens + 32 generated: the last 8 steps are past the 64-token window
PROMPT = "Once upon a time there was a little cat."
TOKENS = 32


def _both(plan, directory: Path, target: str = "host", tokens: int = TOKENS, prompt=PROMPT,
          **kw):  # fmt: skip
    """The static program with and without the cache: (cached, uncached) generations."""
    model, calibration, _ = _static.static_llama(plan)
    return [generate(model, prompt, tokens, target=target, work_dir=directory / str(kv),
                     log=lambda _m: None, kv_cache=kv, mode="static",
                     calibration=[calibration], **kw) for kv in (True, False)]  # fmt: skip


@pytest.mark.parametrize(
    ("plan", "weights_file"),
    [("8/8", False), ("mixed", True)],  # a weights file: its param structs are bound at load
)
def test_the_static_kv_cache_is_bit_exact(tmp_path, plan, weights_file):
    on, off = _both(_static.MIXED if plan == "mixed" else plan, tmp_path,
                    weights_file=weights_file)  # fmt: skip
    assert on.kv_cache and not off.kv_cache
    assert len(on.c_logit_hashes) == TOKENS
    assert on.c_logit_hashes == off.c_logit_hashes  # every step, cached and past the window
    assert on.c_ids == off.c_ids == on.python_ids
    memory = on.memory
    assert memory["kv_cache"] == 2 * 2 * 4 * 64 * 16  # k and v, layers, heads, positions, hd
    assert memory["kv_in_arena"] and memory["kv_extra_ram"] == 0
    report = json.loads((tmp_path / "True" / "generate.json").read_text())
    assert report["memory"] == memory and report["kv_cache"]
    source = (tmp_path / "True" / "generate.c").read_text()
    assert "decode_static_c" in source and "mico_f32_" not in source.split("gen_decode")[1]
    if plan == "mixed":  # binary weights on 8-bit codes: the sign tables, given scratch in the
        # window's arena and, one row at a time, in the decode step's own (not the arena's)
        program = (tmp_path / "True" / "lm.c").read_text()
        assert "MicoLinear p_ = " in program and "mico_qlinear_sign_lut(&p_, " in program
        decode = source.split("gen_decode")[1]
        assert "p.scratch = KV_SCRATCH(" in decode and "mico_qlinear_sign_lut(&p, " in decode


def test_the_static_plan_says_why_it_refuses(tmp_path):
    from mico.codegen.decode_static_c import static_decode_plan

    model, _, _ = _static.static_llama("8/8")
    (tmp_path / "llm.c").write_text("int llm_run(const float *input, int32_t *output)\n{\n}\n")
    assert "not a sequence of kernel calls" in static_decode_plan(model, tmp_path, "llm", 1 << 20)
    attention = model.layers[0].attention
    attention.n_kv_heads = attention.n_heads // 2
    assert "grouped-query" in static_decode_plan(model, tmp_path, "llm", 1 << 20)


def test_a_node_that_is_not_one_plain_call_is_refused_not_skipped():
    """A node whose code under its comment is a block (a kernel given planned scratch through a
    local copy of its params) is refused by name: skipped, the decode step would leave its
    output stale and every later code wrong."""
    from mico.codegen.decode_static_c import Refused, parse_run

    run = (
        "int llm_run(const float *input, int32_t *output)\n{\n"
        "    /* fc1: mico.qlinear -> int8[1, 4, 16] */\n"
        "    mico_qlinear(&fc1_params, MICO_ARENA(0), MICO_ARENA(64));\n"
        "    /* fc2: mico.qlinear -> int8[1, 4, 16] */\n"
        "    { MicoLinear p_ = fc2_params; p_.scratch = MICO_ARENA(256);\n"
        "      mico_qlinear_sign_lut(&p_, MICO_ARENA(64), MICO_ARENA(128)); }\n"
        "    memcpy(output, MICO_ARENA(128), sizeof(int32_t) * 64);\n}\n"
    )
    with pytest.raises(Refused, match="fc2's code in llm_run is not one kernel call"):
        parse_run(run, "llm")
    plain = run.replace(
        "{ MicoLinear p_ = fc2_params; p_.scratch = MICO_ARENA(256);\n"
        "      mico_qlinear_sign_lut(&p_, MICO_ARENA(64), MICO_ARENA(128)); }",
        "mico_qlinear_sign_lut(&fc2_params, MICO_ARENA(64), MICO_ARENA(128));",
    )
    calls, out = parse_run(plain, "llm")
    assert [c.node for c in calls] == ["fc1", "fc2"] and out == 128
    # the call as the generator gives it planned scratch (emitters._scratch_call): followed,
    # its params named by their symbol, the scratch kept apart from the arena arguments
    planned = run.replace(
        "{ MicoLinear p_ = fc2_params; p_.scratch = MICO_ARENA(256);\n"
        "      mico_qlinear_sign_lut(&p_, MICO_ARENA(64), MICO_ARENA(128)); }",
        "{\n        MicoLinear p_ = fc2_params;\n        p_.scratch = MICO_ARENA(256);\n"
        "        p_.scratch_bytes = 3072;\n"
        "        mico_qlinear_sign_lut(&p_, MICO_ARENA(64), MICO_ARENA(128));\n    }",
    )
    calls, out = parse_run(planned, "llm")
    assert [c.node for c in calls] == ["fc1", "fc2"] and out == 128
    assert calls[1].args == ["&fc2_params", "MICO_ARENA(64)", "MICO_ARENA(128)"]
    assert calls[1].scratch == ("MICO_ARENA(256)", 3072) and calls[0].scratch is None
    # a kernel the decode step cannot size scratch for is refused by name
    with pytest.raises(Refused, match="fc2 gives mico_qlinear_s8 planned scratch"):
        parse_run(planned.replace("mico_qlinear_sign_lut(&p_", "mico_qlinear_s8(&p_"), "llm")


@pytest.mark.slow
@pytest.mark.skipif(not rv32.available(), reason=rv32.missing_tools_hint())
@pytest.mark.parametrize("plan", ["8/8", "mixed"])  # mixed: the sign tables given scratch
def test_the_static_kv_cache_on_rv32(tmp_path, plan):
    plan = _static.MIXED if plan == "mixed" else plan
    on, off = _both(plan, tmp_path, target="rv32", tokens=4, prompt="Once upon")
    assert on.c_logit_hashes == off.c_logit_hashes and on.c_ids == off.c_ids == on.python_ids
    assert len(on.instructions) == len(off.instructions) == 4
    assert max(on.instructions[1:]) * 20 < min(off.instructions)  # one position, not 64


def test_every_kernel_the_decode_step_repeats_has_its_rule():
    """Each kernel the decode step accepts (its output argument is known) has an emit rule, and
    the linear entry points called as mico_qlinear is (bytes, word kernels, sign tables) are
    repeated by mico_qlinear's rule: none is accepted and then missing at emission."""
    from mico.codegen import decode_static_c as d

    for kind in d._OUT_ARG:
        assert hasattr(d._Builder, "emit_" + kind.removeprefix("mico_")), kind
    for func in d._PLAIN_LINEAR:
        call = d._Call("n", "mico.qlinear", 8, (1, 4), func, ["&p", "x", "y"])
        assert call.func_kind == "mico_qlinear" and call.out_arg == 2
