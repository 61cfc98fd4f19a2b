"""``mico generate``: text generation with a language model, from Python and from a C program
that runs the whole loop on the target (host, or rv32 under qemu), token for token, and the
first token where they part.

Each step runs the model on the window of the last ``seq_len`` tokens (right-padded: a causal
model's logits at a position never see the positions after it) and chooses the next token with
:mod:`mico.sampling` (greedy, or seeded top-k sampling whose integer arithmetic C shares). The C
program (:mod:`mico.codegen.generate_c`) is built from the model's dynamic-mode (or static-mode)
project; the Python side runs the graph the C was emitted from (the reference executor). Without
a tokenizer of its own the model reads UTF-8 bytes (ids 0..255).

The prompt reaches the C program as text at run time (stdin on the host, ``prompt.txt`` through
semihosting on rv32) and is encoded there by the tokenizer's BPE encoder in C; Python encodes
the same bytes with :meth:`~mico.data.ByteBPETokenizer.encode_bytes` and both prompt ids are
kept (:attr:`Generation.c_prompt_ids`). A prompt longer than the window is not cut: the windows
slide over it, on both sides alike (the model sees the last ``seq_len`` tokens).
"""

from __future__ import annotations

import shlex
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from mico.data import ByteBPETokenizer
from mico.errors import BuildError, ConfigError
from mico.sampling import Sampler

Log = Callable[[str], None]
#: the longest prompt a generation program takes unless asked (bytes; it sizes its buffers)
DEFAULT_MAX_PROMPT_BYTES = 512


@dataclass
class Generation:
    """The prompt's ids (Python's encoder and C's) and the tokens each side generated."""

    prompt_ids: list[int]
    python_ids: list[int] = field(default_factory=list)
    c_ids: list[int] = field(default_factory=list)
    c_text: bytes = b""  # the text the C program printed (its own decoding of c_ids)
    c_prompt_ids: list[int] | None = None  # the prompt as the C program encoded it
    c_logit_hashes: list[int] = field(default_factory=list)  # per step, bit-exact fingerprint
    instructions: list[int] = field(default_factory=list)  # per step on rv32 (qemu instret)
    kv_cache: bool = False  # whether the C program decoded from a KV cache
    memory: dict[str, int | bool] = field(default_factory=dict)  # the program's RAM, in bytes

    @property
    def prompt_agrees(self) -> bool:
        """Whether C encoded the prompt into the ids Python did (True before C has run)."""
        return self.c_prompt_ids is None or self.c_prompt_ids == self.prompt_ids

    @property
    def first_difference(self) -> int | None:
        """The index (among generated tokens) where Python and C first differ, or None."""
        for i, (a, b) in enumerate(zip(self.python_ids, self.c_ids, strict=False)):
            if a != b:
                return i
        return (
            None
            if len(self.python_ids) == len(self.c_ids)
            else min(len(self.python_ids), len(self.c_ids))
        )


def _window(ids: list[int], seq_len: int) -> tuple[np.ndarray, int]:
    """The last ``seq_len`` ids right-padded with 0, and the position of the last real one."""
    tail = ids[-seq_len:]
    window = np.zeros((1, seq_len), dtype=np.float32)
    window[0, : len(tail)] = tail
    return window, len(tail) - 1


def generate(
    model: nn.Module,
    prompt: str | bytes,
    tokens: int,
    target: str = "host",
    work_dir: str | Path | None = None,
    log: Log = print,
    sampler: Sampler | None = None,
    token_text: list[bytes] | None = None,
    timeout: float = 900,
    tokenizer: ByteBPETokenizer | None = None,
    max_prompt_bytes: int = DEFAULT_MAX_PROMPT_BYTES,
    kv_cache: bool | None = None,
    weights_file: bool = False,
    mode: str = "dynamic",
    calibration: list[torch.Tensor] | None = None,
) -> Generation:
    """Continue ``prompt`` by ``tokens`` tokens in Python and in C on ``target``.

    The C side is one program (``generate.c``) that runs the whole loop on the target: the
    prompt's encoding (``tokenizer``, default bytes), windows, the model, the sampler (greedy by
    default; ``sampler`` for seeded top-k sampling) and the text (``token_text``: each id's
    bytes, default the tokenizer's). Python runs the same loop on the reference graph. A prompt
    (``str``: its UTF-8 bytes) may have up to ``max_prompt_bytes`` bytes. ``kv_cache``: decode
    one position per token from a KV cache (:mod:`mico.codegen.decode_c`) while the context fits
    the window; None uses it where the model allows, True insists (ConfigError if it cannot).
    ``weights_file``: the program reads every weight from ``lm.bin`` in its working directory
    (:mod:`mico.codegen.weights_file`), none is compiled in. ``mode="static"``: the integer-only
    program of a model quantized with static activation scales and calibrated (``calibration``:
    token-id batches for the lowering, default the prompt's window); its logits are int32 codes
    of the output scale and its KV cache holds codes (:mod:`mico.codegen.decode_static_c`).
    """
    from mico.codegen.compile import compile_model, token_vocabulary
    from mico.codegen.decode_c import decode_plan

    if target not in GENERATE_TARGETS:
        raise ConfigError(
            f"--target {target!r} is not one mico generate runs on; use "
            f"{' or '.join(GENERATE_TARGETS)}"
        )
    vocab = token_vocabulary(model)
    seq_len = int(getattr(model, "default_input_shape", (0,))[-1])
    if vocab is None or not seq_len or getattr(model, "task", "") != "language":
        raise ConfigError("mico generate needs a language model (token ids in, logits out)")
    if not 1 <= tokens <= 10_000:
        raise ConfigError(f"--tokens must be from 1 to 10000, got {tokens}")
    tokenizer = tokenizer if tokenizer is not None else ByteBPETokenizer(special_tokens=())
    data = prompt_bytes(prompt)
    prompt_ids = check_prompt(data, tokenizer, vocab, max_prompt_bytes)
    sampler = sampler or Sampler()
    model = model.eval()
    example = torch.from_numpy(_window(prompt_ids, seq_len)[0])
    with tempfile.TemporaryDirectory(prefix="mico-generate-") as tmp:
        out_dir = Path(work_dir) if work_dir is not None else Path(tmp) / "model"
        log(f"compiling the model to C ({mode} mode) in {out_dir}")
        compiled = compile_model(model, example, out_dir, "lm", mode=mode, force=False,
                                 weights_file=weights_file, calibration=calibration)  # fmt: skip
        result = Generation(list(prompt_ids))
        plan = None
        if kv_cache is not False:
            project = compiled.project
            plan = decode_plan(model, project.directory, project.name, project.arena.size)
            if isinstance(plan, str):
                if kv_cache:
                    raise ConfigError(f"--kv-cache: {plan}")
                log(f"no KV cache: {plan}")
                plan = None
            elif plan.seq_len != seq_len:
                plan = None
        result.kv_cache = plan is not None
        result.memory = generation_memory(compiled.project.arena.size, plan, max_prompt_bytes,
                                          tokens)  # fmt: skip
        # a static program's logits are int32 codes: the temperature applies to code x scale
        unit = compiled.project.output_scale if mode == "static" else 1.0
        python_side = Sampler(sampler.top_k, sampler.temperature, sampler.seed, unit)
        context = list(prompt_ids)
        for _ in range(tokens):
            window, last = _window(context, seq_len)
            logits = np.asarray(compiled.reference(window)).reshape(seq_len, -1)
            next_id = python_side.pick(logits[last])
            result.python_ids.append(next_id)
            context.append(next_id)
        c_side = Sampler(sampler.top_k, sampler.temperature, sampler.seed, unit)
        text = token_text if token_text is not None else token_texts(tokenizer)
        log(f"running the generation loop in C on {target}")
        program = _Program(tokenizer, max_prompt_bytes, tokens, c_side, vocab, seq_len,
                           text[:vocab], plan, weights_file)  # fmt: skip
        out = _run_in_c(compiled.project, program, data, target, timeout)
        result.c_prompt_ids, result.c_ids, result.c_text = out.prompt_ids, out.ids, out.text
        result.c_logit_hashes, result.instructions = out.hashes, out.instructions
        _write_report(compiled.project.directory / "generate.json", result, program, target)
    return result


def _write_report(path: Path, result: Generation, program: _Program, target: str) -> None:
    """``generate.json`` beside the program: its settings, memory and what it generated."""
    import json

    report = {
        "target": target,
        "tokens": program.tokens,
        "max_prompt_bytes": program.max_prompt_bytes,
        "sampler": {
            "top_k": program.sampler.top_k,
            "temperature": program.sampler.temperature,
            "seed": program.sampler.seed,
            "logit_scale": program.sampler.logit_scale,
        },
        "merges": len(program.tokenizer.merges),
        "kv_cache": result.kv_cache,
        "memory": result.memory,
        "prompt_ids": result.prompt_ids,
        "c_prompt_ids": result.c_prompt_ids,
        "python_ids": result.python_ids,
        "c_ids": result.c_ids,
        "instructions_per_token": result.instructions,
    }
    path.write_text(json.dumps(report, indent=2) + "\n")


def generation_memory(
    arena: int, plan: Any, max_prompt_bytes: int, tokens: int
) -> dict[str, int | bool]:
    """The generation program's RAM beside the model's arena: the KV cache and its scratch
    (laid over the arena when they fit, see :mod:`mico.codegen.decode_c`) and the prompt and
    context buffers (the prompt's bytes, then one int32 id per prompt byte and token)."""
    memory: dict[str, int | bool] = {"model_arena": arena, "kv_cache": 0, "decode_scratch": 0,
                                     "kv_in_arena": False, "kv_extra_ram": 0}  # fmt: skip
    if plan is not None:
        memory.update(plan.memory())
    memory["prompt_buffers"] = (max_prompt_bytes + 1) + 4 * (max_prompt_bytes + tokens)
    memory["total_ram"] = arena + int(memory["kv_extra_ram"]) + memory["prompt_buffers"]
    return memory


def prompt_bytes(prompt: str | bytes) -> bytes:
    """The bytes of a prompt: a ``str``'s UTF-8 (an undecodable command-line byte, which Python
    holds as a lone surrogate, becomes that byte again)."""
    if isinstance(prompt, bytes | bytearray):
        return bytes(prompt)
    return prompt.encode("utf-8", "surrogateescape")


def check_prompt(
    data: bytes, tokenizer: ByteBPETokenizer, vocab: int, max_prompt_bytes: int
) -> list[int]:
    """The prompt's ids, or ConfigError for what the C program would refuse too: an empty
    prompt, one over ``max_prompt_bytes`` bytes, a token beyond the model's vocabulary."""
    if not 1 <= max_prompt_bytes <= 1 << 20:
        raise ConfigError(f"--max-prompt-bytes must be from 1 to {1 << 20}, got {max_prompt_bytes}")
    if not data:
        raise ConfigError("the prompt is empty; give at least one character")
    if len(data) > max_prompt_bytes:
        raise ConfigError(
            f"the prompt has {len(data)} bytes; the generation program takes at most "
            f"{max_prompt_bytes} (raise the limit with --max-prompt-bytes)"
        )
    ids = tokenizer.encode_bytes(data)
    if max(ids) >= vocab:
        raise ConfigError(
            f"the prompt has token id {max(ids)}, beyond the model's vocabulary of {vocab} "
            "(is the tokenizer the model's?)"
        )
    return ids


def token_texts(tokenizer: ByteBPETokenizer) -> list[bytes]:
    """Each id's bytes, for the C program's decoding table."""
    return [tokenizer.decode_bytes([i]) for i in range(tokenizer.vocab_size)]


@dataclass
class _Program:
    """What the generation program is compiled with."""

    tokenizer: ByteBPETokenizer
    max_prompt_bytes: int
    tokens: int
    sampler: Sampler
    vocab: int
    seq_len: int
    token_text: list[bytes]
    decode: Any = None  # a mico.codegen.decode_c.DecodePlan: the KV-cached decode step
    weights_file: bool = False  # the weights are read from <name>.bin at run time


@dataclass
class _COutput:
    """What the generation program printed."""

    prompt_ids: list[int]
    ids: list[int]
    text: bytes
    hashes: list[int]
    instructions: list[int]


GENERATE_TARGETS = ("host", "rv32")


def _run_in_c(
    project: Any, program: _Program, prompt: bytes, target: str, timeout: float
) -> _COutput:
    """Build ``generate.c`` with the model's sources for ``target``, run it on ``prompt``
    (stdin on the host, ``prompt.txt`` on rv32), read its prompt ids, ids and text."""
    from mico.codegen.bpe_c import PROMPT_FILE
    from mico.codegen.generate_c import (
        HASH_TAG,
        IDS_TAG,
        INSTRET_TAG,
        PROMPT_TAG,
        TEXT_TAG,
        write_generation_program,
    )
    from mico.targets.io import TAIL, exit_status, require_tools, run_make

    directory = Path(project.directory)
    source = write_generation_program(
        directory, project.name, program.tokenizer, program.max_prompt_bytes, program.tokens,
        program.sampler, program.vocab, program.seq_len, program.token_text, program.decode,
        weights_file=program.weights_file,
    )  # fmt: skip
    (directory / PROMPT_FILE).write_bytes(prompt)
    skip = {"main.c", f"{project.name}.c"} if program.decode is not None else {"main.c"}
    model_sources = [f for f in project.files if f.endswith(".c") and f not in skip]
    srcs = "SRCS=" + " ".join([*model_sources, source])
    if target == "host":
        from mico.targets import host

        require_tools("host", host.TOOLS)
        exe = "lm_generate"
        run_make(project, ["TARGET=host", srcs, f"EXE={exe}"], 300, f"building {source}")
        command = [str(directory / exe)]
    else:
        from mico.targets import rv32

        require_tools("rv32", rv32.TOOLS)
        exe = "lm_generate.elf"
        run_make(project, ["TARGET=rv32", srcs, f"EXE={exe}"], 300, f"building {source}")
        command = [*shlex.split(rv32.QEMU_RV32), "-kernel", str(directory / exe)]
    try:
        done = subprocess.run(
            command,
            cwd=directory,
            input=prompt if target == "host" else b"",
            capture_output=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        raise BuildError(
            f"the generation program ran for more than {timeout:g} s on {target} and was "
            "stopped; ask for fewer --tokens"
        ) from None
    console = done.stdout + done.stderr  # qemu's semihosting console is stderr
    if done.returncode != 0:
        raise BuildError(
            f"the generation program failed on {target} ({exit_status(done.returncode)}):\n"
            f"{console.decode('utf-8', 'replace')[-TAIL:]}"
        )
    lines = console.splitlines()

    def line(tag: str) -> bytes | None:
        return next((ln[len(tag) :] for ln in lines if ln.startswith(tag.encode())), None)

    prompt_line, ids_line = line(PROMPT_TAG), line(IDS_TAG)
    at = console.find(TEXT_TAG.encode())
    if prompt_line is None or ids_line is None or at < 0:
        raise BuildError(f"the generation program on {target} printed no {IDS_TAG} line")
    size, _, rest = console[at + len(TEXT_TAG) + 1 :].partition(b" ")  # "<bytes> <text>"
    numbers = [[int(t) for t in (line(tag) or b"").split()] for tag in (HASH_TAG, INSTRET_TAG)]
    return _COutput([int(t) for t in prompt_line.split()], [int(t) for t in ids_line.split()],
                    rest[: int(size)], *numbers)  # fmt: skip


def tokenizer_for(model: nn.Module, checkpoint_extra: dict | None = None) -> ByteBPETokenizer:
    """The model's tokenizer: the one its checkpoint carries, else bytes (ids 0..255)."""
    extra = checkpoint_extra or {}
    path = extra.get("tokenizer")
    if isinstance(path, str) and Path(path).is_file():
        return ByteBPETokenizer.load(path)
    return ByteBPETokenizer(special_tokens=())


def decode(tokenizer, ids: list[int]) -> str:
    """Text of ``ids``; an id the tokenizer does not know shows as ``<id>`` (an untrained
    model's vocabulary may be larger than its byte tokenizer's)."""
    parts: list[str] = []
    run: list[int] = []
    for token in ids:
        if token < tokenizer.vocab_size:
            run.append(token)
            continue
        if run:
            parts.append(tokenizer.decode(run))
            run = []
        parts.append(f"<{token}>")
    if run:
        parts.append(tokenizer.decode(run))
    return "".join(parts)
