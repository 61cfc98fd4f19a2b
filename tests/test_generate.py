"""mico generate: greedy generation from Python and from the model's C program, compared."""

from __future__ import annotations

import json
import math
import subprocess

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from mico.cli import app
from mico.codegen.bpe_c import ENCODE_TAG, PROMPT_FILE, build_encoder
from mico.codegen.generate_c import PROMPT_TAG
from mico.data import ByteBPETokenizer
from mico.errors import ConfigError
from mico.generate import Generation, check_prompt, decode, generate
from mico.models import from_zoo
from mico.models.llama import LLaMa
from mico.models.wrap import from_torch
from mico.quant import QuantConfig, quantize_model
from mico.sampling import EXP2_LUT, Sampler, _weight
from mico.targets import rv32

runner = CliRunner()


@pytest.mark.slow
def test_c_generates_the_same_tokens_as_python(tmp_path):
    torch.manual_seed(0)
    model = from_zoo("tinyllama")
    result = generate(model, "Once", 6, work_dir=tmp_path / "lm", log=lambda _m: None)
    assert len(result.python_ids) == len(result.c_ids) == 6
    assert result.python_ids == result.c_ids and result.first_difference is None
    assert result.c_prompt_ids == result.prompt_ids == [79, 110, 99, 101]
    assert result.kv_cache and result.memory["kv_cache"] == 65536  # 2 x 2 layers x 4 x 64 x 16
    assert all(0 <= t < 512 for t in result.c_ids)
    assert (tmp_path / "lm" / "lm.c").is_file()


@pytest.mark.slow
def test_cli_prints_both_texts():
    result = runner.invoke(app, ["generate", "tinyllama", "--prompt", "Hi", "--tokens", "3"])
    assert result.exit_code == 0, result.output
    assert "python: " in result.output and "C (host): " in result.output
    assert "the C program generated the same 3 tokens" in result.output


@pytest.mark.slow
def test_cli_generates_with_the_static_integer_program():
    """--mode static: the zoo model quantized (--plan) and calibrated on the prompt's window, its
    integer-only program generating from a KV cache of codes, token for token as Python."""
    result = runner.invoke(app, ["generate", "tinyllama", "--mode", "static", "--plan", "4/8",
                                 "--prompt", "Once", "--tokens", "4", "--top-k", "8",
                                 "--temperature", "0.8"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "quantized 4/8 (static mode), static scales calibrated on the prompt's window" in (
        result.output
    )
    assert "compiling the model to C (static mode)" in result.output
    assert "KV cache 16384 B" in result.output  # 2 layers x (K + V) x 64 positions x 64 codes
    assert "the C program generated the same 4 tokens" in result.output


def test_first_difference_and_decoding():
    assert Generation([1], [5, 6, 7], [5, 9, 7]).first_difference == 1
    assert Generation([1], [5, 6], [5, 6, 7]).first_difference == 2
    from mico.data import ByteBPETokenizer

    assert decode(ByteBPETokenizer(special_tokens=()), [72, 105, 300]) == "Hi<300>"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["generate", "small_cnn"], "needs a language model"),
        (["generate", "tinyllama", "--tokens", "0"], "--tokens must be from 1 to 10000"),
        (["generate", "tinyllama", "--prompt", ""], "the prompt is empty"),
        (["generate", "tinyllama", "--prompt", "x" * 513], "at most 512"),
        (["generate", "tinyllama", "--target", "arm"], "is not one mico generate runs on"),
        (["generate", "tinyllama", "--top-k", "0"], "--top-k must be an integer from 1"),
        (["generate", "tinyllama", "--temperature", "-1"], "--temperature must be from 0"),
        (["generate", "tinyllama", "--sample-seed", "-3"], "--sample-seed must be from 0"),
        (["generate"], "give a zoo model name or --checkpoint"),
        (["generate", "tinyllama", "--mode", "fixed"], "--mode 'fixed': choose dynamic or static"),
    ],
)
def test_bad_requests_are_one_line_errors(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert message in result.output and "Traceback" not in result.output


def test_generate_refuses_models_without_tokens():
    with pytest.raises(ConfigError, match="needs a language model"):
        generate(from_zoo("mlp"), "ab", 2, log=lambda _m: None)


class TinyLM(torch.nn.Module):
    """A causal toy language model: embedding, a per-position mixer, logits over ``vocab``."""

    def __init__(self, vocab: int = 40) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 8)
        self.mix = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, vocab)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(torch.tanh(self.mix(self.embed(ids.long()))) * 4)


def tiny_lm(vocab: int = 40):
    torch.manual_seed(3)
    model = from_torch(TinyLM(vocab), (6,), input_dtype=torch.long)
    model.task = "language"
    return model


@pytest.mark.parametrize(
    "sampler",
    [Sampler(), Sampler(top_k=5, temperature=0.7, seed=11), Sampler(top_k=40, temperature=3.0)],
    ids=["greedy", "top5", "all-hot"],
)
def test_the_c_loop_samples_the_same_tokens_as_python(tmp_path, sampler):
    text = [bytes([97 + i % 26]) for i in range(30)]  # ids 30..39 have no text: <id>
    result = generate(tiny_lm(), b"\x01\x02\x03", 12, work_dir=tmp_path / "lm", log=lambda _m: None,
                      sampler=sampler, token_text=text)  # fmt: skip
    assert result.python_ids == result.c_ids and len(result.c_ids) == 12
    expected = b"".join(text[i] if i < 30 else f"<{i}>".encode() for i in result.c_ids)
    assert result.c_text == expected  # the C program decodes its own tokens
    if not sampler.greedy:  # the seed makes sampling reproducible
        again = generate(tiny_lm(), b"\x01\x02\x03", 12, work_dir=tmp_path / "again",
                         log=lambda _m: None, sampler=Sampler(sampler.top_k, sampler.temperature,
                                                              sampler.seed))  # fmt: skip
        assert again.c_ids == result.c_ids


def test_sampling_draws_from_the_top_k_only_and_follows_the_seed():
    logits = np.linspace(-3, 3, 50).astype(np.float32)
    top = set(np.argsort(-logits)[:4].tolist())
    draws = [Sampler(top_k=4, temperature=1.0, seed=s).pick(logits) for s in range(1, 200)]
    assert set(draws) <= top and len(set(draws)) == 4  # all four drawn, nothing else
    counts = np.bincount(draws, minlength=50)
    assert counts[49] > counts[48] > counts[46]  # likelier tokens drawn more often
    a, b = Sampler(top_k=4, seed=9), Sampler(top_k=4, seed=9)
    assert [a.pick(logits) for _ in range(20)] == [b.pick(logits) for _ in range(20)]


def test_ties_and_greedy_take_the_lowest_id():
    logits = np.array([0.5, 2.0, 2.0, 1.0], dtype=np.float32)
    assert Sampler().pick(logits) == 1
    assert Sampler(top_k=3, temperature=0).pick(logits) == 1  # temperature 0: greedy


@given(st.integers(-256 * 20, 0))
def test_weights_are_powers_of_two_in_fixed_point(q):
    w = _weight(q)
    if q < -256 * 16:
        assert w == 0
    else:
        exact = 65536 * 2 ** (q / 256)
        assert abs(w - exact) <= 1 + exact * 2**-15  # table rounding, then shifts
    assert EXP2_LUT[0] == 65536 and EXP2_LUT[255] < 131072


@pytest.mark.slow
def test_the_c_loop_runs_on_rv32(tmp_path):
    if not rv32.available():
        pytest.skip("rv32 toolchain missing: " + rv32.missing_tools_hint())
    sampler = Sampler(top_k=6, temperature=0.9, seed=5)
    result = generate(tiny_lm(), b"\x04\x05", 6, target="rv32", work_dir=tmp_path / "lm",
                      log=lambda _m: None, sampler=sampler)  # fmt: skip
    assert result.c_ids == result.python_ids and (tmp_path / "lm" / "lm_generate.elf").is_file()
    assert result.c_prompt_ids == [4, 5]  # read from prompt.txt through semihosting


# --- the prompt's BPE encoding in C -------------------------------------------------------------

CORPUS = (
    'Once upon a time, Lily saw a big dog. She said: "Hello!" The dog ran away...\n\n'
    "Ünïcödé wörds, café crème; naïve 日本語の話 — and  spaces\t\ttoo.   Ends with spaces.  "
)
LIMIT = 64  # bytes the encoder-only program takes


@pytest.fixture(scope="module")
def bpe() -> ByteBPETokenizer:
    tokenizer = ByteBPETokenizer.train(CORPUS * 4, vocab_size=360, special_tokens=())
    assert len(tokenizer.merges) > 60  # merges across words, spaces and non-ASCII letters
    return tokenizer


@pytest.fixture(scope="module")
def encoder(bpe, tmp_path_factory) -> list[str]:
    return build_encoder(tmp_path_factory.mktemp("bpe"), bpe, LIMIT)


def c_encode(command: list[str], data: bytes) -> tuple[int, list[int] | str]:
    done = subprocess.run(command, input=data, capture_output=True, check=False)
    out = done.stdout.decode()
    if done.returncode:
        return done.returncode, out
    return 0, [int(t) for t in out.split(ENCODE_TAG)[1].split()]


PIECES = ["a", "e", "Lily", "café", " ", "  ", "\n", "\t", "é", "日本", ".", "!", "_", "1",
          "\u00a0", "\u2003", "\u3000", "😀", "—"]  # fmt: skip
RAW = [b"\xff", b"\x80", b"\xc3", b"\xed\xa0\x80", b"\xe0\x80\xaf", b"\xf4\x90\x80\x80", b"\x00"]
prompts = st.one_of(
    st.binary(max_size=LIMIT),  # any bytes, mostly invalid UTF-8
    st.text(max_size=20).map(lambda t: t.encode("utf-8")[:LIMIT]),  # any code points
    st.lists(st.sampled_from([p.encode() for p in PIECES] + RAW), max_size=24).map(
        lambda parts: b"".join(parts)[:LIMIT]
    ),  # what the merges and the chunk rules care about
)


@settings(max_examples=250, deadline=None)
@given(prompts)
def test_the_c_encoder_gives_pythons_ids(encoder, bpe, data):
    assert c_encode(encoder, data) == (0, bpe.encode_bytes(data))


def test_the_c_encoder_on_text_empty_and_over_the_limit(encoder, bpe):
    text = "Once upon a time, Lily said: café!  日本語\n"
    assert bpe.encode_bytes(text.encode()) == bpe.encode(text)  # bytes and str agree
    status, ids = c_encode(encoder, text.encode())
    assert status == 0 and ids == bpe.encode(text) and len(ids) < len(text.encode()) // 2
    assert c_encode(encoder, b"") == (0, [])
    assert c_encode(encoder, b"x" * LIMIT)[0] == 0
    status, message = c_encode(encoder, b"x" * (LIMIT + 1))
    assert status == 4 and f"more than {LIMIT} bytes" in message
    with pytest.raises(ConfigError, match=f"at most {LIMIT} .*--max-prompt-bytes"):
        check_prompt(b"x" * (LIMIT + 1), bpe, 512, LIMIT)
    with pytest.raises(ConfigError, match="the prompt is empty"):
        check_prompt(b"", bpe, 512, LIMIT)


def test_generation_encodes_the_prompt_in_c(tmp_path, bpe):
    """A BPE prompt longer than the window (6 tokens): both sides slide over it alike; the
    program also takes the prompt as its argument and refuses one over its limit."""
    prompt = "Once upon a time, Lily said: café crème, 日本語の話!"
    result = generate(tiny_lm(bpe.vocab_size), prompt, 5, work_dir=tmp_path / "lm",
                      log=lambda _m: None, tokenizer=bpe, max_prompt_bytes=80)  # fmt: skip
    assert result.c_prompt_ids == result.prompt_ids == bpe.encode(prompt)
    assert len(result.prompt_ids) > 6 and result.c_ids == result.python_ids
    assert result.c_text == bpe.decode_bytes(result.c_ids)
    program = str(tmp_path / "lm" / "lm_generate")
    argument = subprocess.run([program, prompt], capture_output=True, check=True).stdout
    assert f"{PROMPT_TAG} {' '.join(map(str, result.prompt_ids))}\n".encode() in argument
    too_long = subprocess.run([program], input=b"y" * 81, capture_output=True, check=False)
    assert too_long.returncode == 4 and b"--max-prompt-bytes" in too_long.stdout
    with pytest.raises(ConfigError, match="at most 80"):
        generate(tiny_lm(bpe.vocab_size), "y" * 81, 1, log=lambda _m: None, tokenizer=bpe,
                 max_prompt_bytes=80)  # fmt: skip
    with pytest.raises(ConfigError, match="beyond the model's vocabulary of 40"):
        generate(tiny_lm(), "Lily", 1, log=lambda _m: None, tokenizer=bpe)


@pytest.mark.slow
def test_the_c_encoder_on_rv32(tmp_path, bpe):
    if not rv32.available():
        pytest.skip("rv32 toolchain missing: " + rv32.missing_tools_hint())
    command = build_encoder(tmp_path, bpe, LIMIT, target="rv32")
    data = "Lily: café 日本!\t\t ".encode() + b"\xff\xc3"
    (tmp_path / PROMPT_FILE).write_bytes(data)
    done = subprocess.run(command, cwd=tmp_path, capture_output=True, timeout=120, check=True)
    line = next(ln for ln in (done.stdout + done.stderr).decode().splitlines() if ENCODE_TAG in ln)
    assert [int(t) for t in line.split(ENCODE_TAG)[1].split()] == bpe.encode_bytes(data)


# --- the KV cache -------------------------------------------------------------------------------


def small_llama():
    torch.manual_seed(5)
    return LLaMa(dim=16, n_layers=2, n_heads=2, vocab_size=300, max_seq_len=8, hidden_dim=24)


def test_the_kv_cache_decodes_bit_for_bit(tmp_path):
    """Cached and uncached C programs print bit-identical logits at every step (also after the
    window slides, where the cached one runs the full window), and Python's tokens."""
    runs = {}
    for cached in (True, False):
        runs[cached] = generate(small_llama(), b"Hi \xc3\xa9", 7, work_dir=tmp_path / str(cached),
                                log=lambda _m: None, kv_cache=cached,
                                sampler=Sampler(top_k=4, temperature=0.8, seed=2))  # fmt: skip
    on, off = runs[True], runs[False]
    assert on.kv_cache and not off.kv_cache
    assert on.c_ids == off.c_ids == on.python_ids and len(on.c_logit_hashes) == 7
    assert on.c_logit_hashes == off.c_logit_hashes  # 5 prompt + 7 tokens: slides past 8
    memory = on.memory
    assert memory["kv_cache"] == 2 * 2 * 2 * 8 * 8 * 4  # k and v, layers, heads, positions, hd
    assert memory["kv_in_arena"] and memory["kv_extra_ram"] == 0
    assert memory["decode_scratch"] == 4 * (7 * 16 + 2 * 8 + 2 * 24 + 2 + 300)
    assert off.memory["kv_cache"] == 0
    report = json.loads((tmp_path / "True" / "generate.json").read_text())
    assert report["memory"] == memory and report["kv_cache"] and report["c_ids"] == on.c_ids
    assert "#define GEN_KV_CACHE 0" in (tmp_path / "False" / "generate.c").read_text()


def test_the_kv_cache_is_refused_where_it_cannot_be_exact(tmp_path):
    with pytest.raises(ConfigError, match=r"--kv-cache: .*LLaMA layout, not"):
        generate(tiny_lm(), b"\x01", 1, log=lambda _m: None, kv_cache=True)
    notes: list[str] = []
    result = generate(tiny_lm(), b"\x01", 2, work_dir=tmp_path / "auto", log=notes.append)
    assert not result.kv_cache and any("no KV cache" in n for n in notes)
    assert result.c_ids == result.python_ids
    quantized = small_llama()  # activation scales over the window: no exact one-row decode
    quantize_model(quantized, "8/8", QuantConfig(act_mode="dynamic"))
    with pytest.raises(ConfigError, match="not a float layer"):
        generate(quantized, b"Hi", 1, work_dir=tmp_path / "q", log=lambda _m: None, kv_cache=True)


@pytest.mark.slow
def test_the_kv_cache_on_rv32_costs_fewer_instructions(tmp_path):
    if not rv32.available():
        pytest.skip("rv32 toolchain missing: " + rv32.missing_tools_hint())
    runs = [generate(small_llama(), "ab", 3, target="rv32", work_dir=tmp_path / str(kv),
                     log=lambda _m: None, kv_cache=kv) for kv in (True, False)]  # fmt: skip
    on, off = runs
    assert on.c_ids == off.c_ids == on.python_ids and on.c_logit_hashes == off.c_logit_hashes
    assert len(on.instructions) == len(off.instructions) == 3
    assert max(on.instructions[1:]) * 3 < min(off.instructions)  # one position, not eight


def test_the_sampler_weighs_real_logits_of_static_codes():
    """Static programs give int32 codes of the output scale: the sampler's constant folds the
    scale in, so codes at scale s sample as the real logits do at scale 1."""
    real = Sampler(8, 0.7, 3)
    codes = Sampler(8, 0.7, 3, logit_scale=0.125)
    assert codes.scale == np.float32(math.log2(math.e) * 0.125 / 0.7)
    logits = np.linspace(-2, 2, 64).astype(np.float32)
    picks_real = [real.pick(logits) for _ in range(20)]
    picks_codes = [codes.pick(logits / np.float32(0.125)) for _ in range(20)]
    assert picks_real == picks_codes
    with pytest.raises(ConfigError, match="logit scale must be positive"):
        Sampler(8, 0.7, 3, logit_scale=0.0)
