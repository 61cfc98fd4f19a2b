"""Write a lowered graph as a self-contained C project.

Files: ``<name>.h`` (API), ``<name>.c`` (the arena and the run function), ``<name>_weights.h``
(packed weights and parameters, const: they go to flash), the kernel sources the graph needs,
``main.c`` (runs the model over a file of float32 samples) and a ``Makefile``.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from mico.codegen import emit_f32 as _emit_f32  # noqa: F401  (attaches the float emit rules)
from mico.codegen import emit_llama as _emit_llama  # noqa: F401  (static LLaMa ops)
from mico.codegen import emitters as _emitters  # noqa: F401  (attaches the emit rules)
from mico.codegen import weights_c as _weights_c
from mico.codegen.context import EmitContext
from mico.codegen.makefile import makefile
from mico.codegen.planner import ArenaPlan, plan_graph, storage_bytes
from mico.errors import BuildError, CompileError, PlanError, UnsupportedOpError
from mico.ir.analyzer import find_rule
from mico.ir.dtypes import DataType
from mico.ir.graph import Graph, Node

HEADERS = ["mico_nn.h", "mico_f32.h"]
INPUT_CHECK = "mico_check.c"  # every project: run() refuses NaN and Inf inputs
_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
MAX_ALIGN = 64  # beyond 8 bytes (a union with uint64_t) the arena base is aligned at run time


@dataclass
class CProject:
    """A generated C project and what it costs."""

    directory: Path
    name: str
    files: list[str]
    arena: ArenaPlan
    flash: dict[str, int]
    input_shape: tuple[int, ...]
    output_shape: tuple[int, ...]
    output_scale: float
    schedule: list[dict] = field(default_factory=list)
    output_dtype: str = "int32"  # numpy name of the output element type: int32 or float32
    weights_file: str | None = None  # --weights-file: the file main.c loads (<name>.bin)
    #: patch-based execution of the first layers (mico.codegen.patch_plan): chosen or not, the
    #: arena with and without, the recomputed MACs
    patch: dict[str, Any] | None = None
    #: what the kernel paths were chosen for (mico.codegen.linked_paths.PREFERENCES)
    prefer: str = "speed"

    @property
    def weight_bytes(self) -> int:
        return self.flash["weights"]

    @property
    def const_bytes(self) -> int:
        return sum(self.flash.values())


def emit_rule(node: Node) -> Callable[[Node, EmitContext], list[str]]:
    """The ``emit`` rule of ``node``'s op (overloads matched explicitly), or a clear error."""
    rule = find_rule(node.op, "emit")
    if rule is None:
        where = f", in {node.origin}," if node.origin else ""
        raise UnsupportedOpError(
            f"op '{node.op}' at '{node.name}'{where} has no C implementation (no emit rule). "
            "Register one with @MiCoOpRegistry.register_function(<torch function>) or "
            "register_module(<module class>) from mico.codegen, or attach it with "
            f"OpRegistry.attach('{node.op}', 'emit', fn)"
        )
    return rule


def _numpy(tensor: object) -> np.ndarray:
    detach = getattr(tensor, "detach", None)
    return detach().cpu().numpy() if detach is not None else np.asarray(tensor)


#: names whose files or executable would collide with the project's fixed files (main.c,
#: Makefile, the make targets, the kernels' mico_* files, the run files inputs.bin, outputs.bin,
#: intermediates.bin); compared ignoring case, as macOS and Windows file systems do
RESERVED_NAMES = frozenset(
    {"main", "makefile", "mico", "run", "clean", "force", "inputs", "outputs", "intermediates"}
)
MAX_NAME = 48  # "<NAME>_OUTPUT_SCALE" stays within C99's 63 significant characters


def check_model_name(name: str) -> None:
    """Refuse a model name that is not a C identifier or would overwrite a project file."""
    if not isinstance(name, str):
        raise CompileError(f"model name must be a string, got {type(name).__name__}")
    shown = repr(name[:60] + ("..." if len(name) > 60 else ""))
    if not _NAME.match(name):
        raise CompileError(
            f"model name {shown} is not a C identifier; use letters, digits and _ (e.g. 'model')"
        )
    if len(name) > MAX_NAME:
        raise CompileError(
            f"model name {shown} is {len(name)} characters long; use at most {MAX_NAME}"
        )
    if name.startswith("_"):
        raise CompileError(
            f"model name {shown} starts with '_' (reserved in C); start it with a letter"
        )
    lower = name.lower()
    if lower in RESERVED_NAMES or lower.startswith("mico_"):
        raise CompileError(
            f"model name {shown} is reserved: its files would overwrite the project's own "
            f"({', '.join(sorted(RESERVED_NAMES))} and mico_* are taken); choose another "
            f"--name, e.g. 'net_{name}'"
        )


def _check(graph: Graph, name: str, align: int) -> None:
    check_model_name(name)
    if align < 1 or align > MAX_ALIGN or align & (align - 1):
        raise CompileError(f"align must be a power of two from 1 to {MAX_ALIGN}, got {align}")
    if len(graph.inputs) != 1 or graph.inputs[0].type.dtype not in INPUT_TYPES:
        raise CompileError(
            "the C backend needs exactly one graph input: float32 features, or int64 token ids "
            "(which the C program takes as exact float32 integers)"
        )
    if len(graph.outputs) != 1 or graph.outputs[0].type.dtype not in OUTPUT_TYPES:
        raise CompileError(
            "the C backend needs exactly one graph output, float32 (dynamic mode) or int32 "
            "(static mode: a quantized layer's accumulator)"
        )


OUTPUT_TYPES = {DataType.INT32: ("int32_t", "int32"), DataType.FP32: ("float", "float32")}
#: graph inputs the C program takes; token ids travel as exact float32 integers
INPUT_TYPES = (DataType.FP32, DataType.INT64)


def _segment_macros(graph: Graph, up: str) -> str:
    """Where each output of a several-output model sits in the one output buffer."""
    segments = getattr(graph, "output_segments", None) or []
    if len(segments) < 2:
        return ""
    lines = ["/* The model's outputs, flattened one after another in the output buffer. */"]
    for seg in segments:
        name = f"{up}_{seg['name'].upper()}"
        lines.append(f"#define {name}_OFFSET {seg['offset']} /* shape {seg['shape']} */")
        lines.append(f"#define {name}_SIZE {seg['size']}")
    return "\n".join(lines) + "\n\n"


def _token_note(x: Any) -> str:
    return ": token ids as exact integers" if x.type.dtype == DataType.INT64 else ""


def _input_check(ctx: Any, up: str) -> str:
    """The run function's first test: finite inputs, and for token models valid token ids."""
    text = (
        f"    if (mico_first_nonfinite(input, {up}_INPUT_SIZE) != {up}_INPUT_SIZE) {{\n"
        f"        return {up}_ERR_NONFINITE;\n    }}\n"
    )
    vocab = ctx.__dict__.get("token_vocab")
    if vocab is not None:
        text += (
            f"    if (mico_first_bad_token(input, {up}_INPUT_SIZE, {int(vocab)}) != "
            f"{up}_INPUT_SIZE) {{\n        return {up}_ERR_TOKEN;\n    }}\n"
        )
    return text


def _out_ctype(graph: Graph) -> str:
    return OUTPUT_TYPES[graph.outputs[0].type.dtype][0]


def _header(name: str, graph: Graph, arena: ArenaPlan, layout: Any = None) -> str:
    up = name.upper()
    api = "" if layout is None else _weights_c.header_api(name, layout)
    x, y = graph.inputs[0], graph.outputs[0]
    return f"""/* {name}.h - generated by mico. */
#ifndef {up}_H
#define {up}_H

#include <stdint.h>

#define {up}_INPUT_SIZE {x.type.numel} /* float32 {list(x.type.shape)}{_token_note(x)} */
#define {up}_OUTPUT_SIZE {y.type.numel} /* {_out_ctype(graph)} {list(y.type.shape)} */
#define {up}_ARENA_BYTES {arena.size}

{_segment_macros(graph, up)}/* Real value = output * {up}_OUTPUT_SCALE (1 for float outputs). */
extern {"float" if layout else "const float"} {up}_OUTPUT_SCALE;
typedef {_out_ctype(graph)} {name}_output_t;

/* What {name}_run returns. */
#define {up}_OK 0
#define {up}_ERR_NONFINITE 1 /* an input element is NaN or Inf: nothing was computed */
#define {up}_ERR_OVERFLOW 2 /* an activation overflowed float32 (dynamic mode): input too large */
#define {up}_ERR_TOKEN 3 /* a token id is not an integer in [0, vocabulary): nothing computed */

/* Run the model on one sample: {up}_OK, or {up}_ERR_NONFINITE (output untouched) when an
 * input element is NaN or Inf, which mico refuses as its Python side does, or
 * {up}_ERR_OVERFLOW (output untouched) when an activation overflowed float32.
 * Reentrant only with itself: it uses one static arena. */
int {name}_run(const float *input, {name}_output_t *output);
{api}
#endif /* {up}_H */
"""


def _source(name: str, graph: Graph, ctx: EmitContext, body: list[str], layout: Any = None) -> str:
    up = name.upper()
    const, loader, guard = "const ", "", ""
    if layout is not None:  # --weights-file
        const, loader = "", _weights_c.loader_source(name, layout)
        guard = _weights_c.run_guard(up)
    out = graph.outputs[0]
    lines = "\n".join(f"    {line}" for line in body)
    reset, check = _overflow_reset(ctx), _overflow_check(ctx, up)
    return f"""/* {name}.c - generated by mico: {len(graph.nodes)} ops, one static arena. */
#include <string.h>

#include "mico_nn.h"
#include "mico_f32.h"
#include "{name}.h"
#include "{name}_weights.h"

#ifdef MICO_DEBUG
/* the debug build (make DEBUG=1) records every intermediate tensor: see main.c */
void mico_debug_dump(const char *name, const void *data, size_t bytes);
#define MICO_DUMP(name, data, bytes) mico_debug_dump(name, data, bytes)
#else
#define MICO_DUMP(name, data, bytes) ((void)0)
#endif

{_declarations(ctx)}{_arena(ctx.plan)}
{const}float {up}_OUTPUT_SCALE = {float(out.scale or 1.0)!r}f;
{loader}
int {name}_run(const float *input, {name}_output_t *output)
{{
{_arena_base(ctx.plan)}
{guard}{_input_check(ctx, up)}{reset}{lines}
{check}    memcpy(output, {ctx.buffer(out)}, sizeof({name}_output_t) * {up}_OUTPUT_SIZE);
    return {up}_OK;
}}
"""


DYNAMIC_KERNEL = "mico_bit_f32.c"  # its run-time scales can overflow: see mico_dyn_overflow


def _overflow_reset(ctx: EmitContext) -> str:
    return "    mico_dyn_overflow = 0;\n" if DYNAMIC_KERNEL in ctx.kernels else ""


def _overflow_check(ctx: EmitContext, up: str) -> str:
    if DYNAMIC_KERNEL not in ctx.kernels:
        return ""
    return f"    if (mico_dyn_overflow) {{\n        return {up}_ERR_OVERFLOW;\n    }}\n"


def _write_blob(path: Path, blobs: list[tuple[str, bytes]], align: int) -> list[dict]:
    """Every constant's bytes in one file (seed 000's ``<name>.bin``), each at an aligned
    offset; the index says where. The C project itself keeps the constants in flash."""
    index, chunks, offset = [], [], 0
    for symbol, data in blobs:
        pad = -offset % align
        chunks.append(b"\0" * pad + data)
        offset += pad
        index.append({"symbol": symbol, "offset": offset, "bytes": len(data)})
        offset += len(data)
    path.write_bytes(b"".join(chunks))
    return index


def _declarations(ctx: EmitContext) -> str:
    if not ctx.declarations:
        return ""
    return (
        "/* kernels supplied by registered handlers */\n"
        + "\n".join(ctx.declarations[k] for k in sorted(ctx.declarations))
        + "\n\n"
    )


def _arena(plan: ArenaPlan) -> str:
    size = max(plan.size, 1)
    if plan.align <= 8:
        return f"""static union {{
    uint64_t align;
    uint8_t bytes[{size}];
}} mico_arena;

#define MICO_ARENA(offset) ((void *)(mico_arena_base + (offset)))
"""
    raw = size + plan.align - 1
    return f"""static uint8_t mico_arena_raw[{raw}]; /* aligned to {plan.align} bytes in run() */

#define MICO_ARENA(offset) ((void *)(mico_arena_base + (offset)))
"""


def _arena_base(plan: ArenaPlan) -> str:
    if plan.align <= 8:
        return "    uint8_t *mico_arena_base = mico_arena.bytes;\n    (void)mico_arena_base;"
    mask = plan.align - 1
    return (
        "    uint8_t *mico_arena_base = (uint8_t *)(((uintptr_t)mico_arena_raw + "
        f"{mask}u) & ~(uintptr_t){mask}u);\n    (void)mico_arena_base;"
    )


def _weights_header(name: str, ctx: EmitContext) -> str:
    up = name.upper()
    body = "\n\n".join(ctx.definitions)
    return f"""/* {name}_weights.h - generated by mico: constants, placed in flash. */
#ifndef {up}_WEIGHTS_H
#define {up}_WEIGHTS_H

#include <math.h>

#include "mico_nn.h"
#include "mico_f32.h"

{body}

#endif /* {up}_WEIGHTS_H */
"""


def _main(name: str, weights: bool = False) -> str:
    up = name.upper()
    reader = _weights_c.main_reader(name) + "\n" if weights else ""
    exit_weights = "#define MICO_EXIT_WEIGHTS 6 /* the weights file is missing or refused */\n"
    exit_weights = exit_weights if weights else ""
    usage = " [WEIGHTS]" if weights else ""
    extra_arg = "\n        weights_path = argc == 4 ? argv[3] : weights_path;" if weights else ""
    load = (
        "    if (mico_read_weights(weights_path)) {\n        return MICO_EXIT_WEIGHTS;\n    }\n"
        if weights
        else ""
    )
    argc_ok = "argc == 3 || argc == 4" if weights else "argc == 3"
    weights_note = (
        f"\n * --weights-file: usage {name} [INPUTS OUTPUTS [WEIGHTS]]; WEIGHTS (default {name}.bin"
        " in the\n * working directory, always that name on bare metal) is the weights file the"
        " model\n * reads its constants from; 6: it is missing or refused."
        if weights
        else ""
    )
    declare = f'    const char *weights_path = "{name}.bin";\n' if weights else ""
    return f"""/* main.c - generated by mico: run {name} on a file of float32 samples.
 * usage: {name} [INPUTS OUTPUTS]   (no arguments: inputs.bin and outputs.bin in the working
 * directory; any other count is a usage error). On bare metal (rv32, semihosting, which passes
 * no usable arguments) the arguments are ignored and those two names are always used.
 * INPUTS holds N >= 1 samples of {up}_INPUT_SIZE float32; OUTPUTS receives N rows of
 * {up}_OUTPUT_SIZE {name}_output_t (native byte order). On RISC-V (bare metal, semihosting) each
 * inference's retired-instruction count (the instret CSR) is printed as "instret N".
 * Exit status: 0 every sample ran; 1 a file is missing, unreadable, empty or ends inside a
 * sample; 2 wrong arguments; 3 a sample holds NaN or Inf; 4 a sample overflows float32 inside
 * the model (3 and 4: OUTPUTS has the rows of the samples before it).{weights_note} */
#include <stdio.h>
#include <string.h>

#include "mico_nn.h"
#include "{name}.h"

#define MICO_EXIT_IO 1
#define MICO_EXIT_USAGE 2
#define MICO_EXIT_NONFINITE 3
#define MICO_EXIT_OVERFLOW 4
#define MICO_EXIT_TOKEN 5
{exit_weights}#define MICO_SHOWN_SAMPLES 8 /* samples whose top-1 index is printed */

#ifdef MICO_DEBUG
/* Debug build: every intermediate tensor of every sample is appended to intermediates.bin
 * as records [uint32 name length][name][uint32 byte count][bytes]. */
static FILE *mico_debug_file;

void mico_debug_dump(const char *name, const void *data, size_t bytes);
void mico_debug_dump(const char *name, const void *data, size_t bytes)
{{
    unsigned int n = (unsigned int)strlen(name);
    unsigned int b = (unsigned int)bytes;
    if (!mico_debug_file) {{
        return;
    }}
    fwrite(&n, sizeof n, 1, mico_debug_file);
    fwrite(name, 1, n, mico_debug_file);
    fwrite(&b, sizeof b, 1, mico_debug_file);
    fwrite(data, 1, bytes, mico_debug_file);
}}
#endif

#if defined(__riscv)
static unsigned long mico_instret(void)
{{
    unsigned long value;
    /* csrr value, instret (0xC02), encoded for assemblers without the zicsr name */
    __asm__ volatile(".insn i 0x73, 2, %0, zero, -1022" : "=r"(value));
    return value;
}}
#endif

#if defined(__riscv) && !defined(__linux__) && defined(MICO_STACK_PROBE) && MICO_STACK_PROBE > 0
/* Stack high-water mark (bare metal, make TARGET=rv32): before each inference the
 * MICO_STACK_PROBE bytes below main's stack pointer (never the heap's first 64 KiB) are
 * painted; after it, the lowest word no longer holding the paint is as deep as the inference's
 * stack went. Painting and scanning run outside the instret window and call nothing, so they
 * neither use the stack they measure nor change the instruction counts. */
#define MICO_STACK_PAINT 0xC5A3E1B7u
extern char __heap_start[];
#define MICO_STACK_SP(sp) __asm__ volatile("mv %0, sp" : "=r"(sp))
#define MICO_STACK_FLOOR(sp) \
    ((sp) - MICO_STACK_PROBE > (unsigned long)__heap_start + 65536u \
         ? (sp) - MICO_STACK_PROBE : (unsigned long)__heap_start + 65536u)
#endif

{reader}int main(int argc, char **argv)
{{
    static float input[{up}_INPUT_SIZE];
    static {name}_output_t output[{up}_OUTPUT_SIZE];
    const char *in_path = "inputs.bin";
    const char *out_path = "outputs.bin";
{declare}    FILE *in;
    FILE *out;
    size_t got;
    long samples = 0;

#if defined(__riscv) && !defined(__linux__)
    (void)argc; /* bare metal: semihosting passes no usable arguments */
    (void)argv;
#else
    if ({argc_ok}) {{
        in_path = argv[1];
        out_path = argv[2];{extra_arg}
    }} else if (argc > 1) {{
        fprintf(stderr, "usage: %s [INPUTS OUTPUTS{usage}]  (float32 samples in, outputs out; "
                        "no arguments: inputs.bin outputs.bin)\\n", argv[0]);
        return MICO_EXIT_USAGE;
    }}
#endif
{load}#ifdef MICO_DEBUG
    mico_debug_file = fopen("intermediates.bin", "wb");
    if (!mico_debug_file) {{
        perror("intermediates.bin");
        return MICO_EXIT_IO;
    }}
#endif
    in = fopen(in_path, "rb");
    if (!in) {{
        perror(in_path);
        return MICO_EXIT_IO;
    }}
    out = fopen(out_path, "wb");
    if (!out) {{
        perror(out_path);
        fclose(in);
        return MICO_EXIT_IO;
    }}
    /* whole bytes, so that a file ending inside a float is caught too */
    while ((got = fread(input, 1, sizeof input, in)) == sizeof input) {{
        int status;
#if defined(__riscv)
#if !defined(__linux__) && defined(MICO_STACK_PROBE) && MICO_STACK_PROBE > 0
        unsigned long sp, floor;
        volatile unsigned int *word;
        MICO_STACK_SP(sp);
        sp &= ~15ul;
        floor = MICO_STACK_FLOOR(sp);
        for (word = (volatile unsigned int *)floor; (unsigned long)word < sp; word++) {{
            *word = MICO_STACK_PAINT;
        }}
#endif
        unsigned long start = mico_instret();
        status = {name}_run(input, output);
        printf("instret %lu\\n", mico_instret() - start);
#if !defined(__linux__) && defined(MICO_STACK_PROBE) && MICO_STACK_PROBE > 0
        for (word = (volatile unsigned int *)floor;
             (unsigned long)word < sp && *word == MICO_STACK_PAINT; word++) {{
        }}
        /* "stack > N": the inference reached the bottom of the painted region */
        printf("stack %s%lu\\n", (unsigned long)word == floor ? "> " : "",
               sp - (unsigned long)word);
#endif
#else
        status = {name}_run(input, output);
#endif
        if (status == {up}_ERR_NONFINITE) {{
            fprintf(stderr, "error: %s: sample %ld element %lu is NaN or Inf; mico refuses "
                            "non-finite inputs: clean or drop the sample\\n", in_path, samples,
                    (unsigned long)mico_first_nonfinite(input, {up}_INPUT_SIZE));
            fclose(in);
            fclose(out);
            return MICO_EXIT_NONFINITE;
        }}
        if (status == {up}_ERR_TOKEN) {{
            fprintf(stderr, "error: %s: sample %ld holds a token id that is not an integer "
                            "in [0, vocabulary)\\n", in_path, samples);
            fclose(in);
            fclose(out);
            return MICO_EXIT_TOKEN;
        }}
        if (status == {up}_ERR_OVERFLOW) {{
            fprintf(stderr, "error: %s: sample %ld overflows float32 inside the model (an "
                            "activation reached Inf); scale the inputs down\\n", in_path,
                    samples);
            fclose(in);
            fclose(out);
            return MICO_EXIT_OVERFLOW;
        }}
        if (samples < MICO_SHOWN_SAMPLES) {{ /* readable: the top-1 index of the first samples */
            unsigned long best = 0, k;
            for (k = 1; k < {up}_OUTPUT_SIZE; k++) {{
                if (output[k] > output[best]) {{
                    best = k;
                }}
            }}
            printf("sample %ld: top-1 index %lu of %d outputs\\n", samples, best,
                   {up}_OUTPUT_SIZE);
        }}
        if (fwrite(output, sizeof({name}_output_t), {up}_OUTPUT_SIZE, out) != {up}_OUTPUT_SIZE) {{
            perror(out_path);
            fclose(in);
            fclose(out);
            return MICO_EXIT_IO;
        }}
        samples++;
    }}
    if (ferror(in)) {{
        perror(in_path);
        fclose(in);
        fclose(out);
        return MICO_EXIT_IO;
    }}
    fclose(in);
    if (fclose(out) != 0) {{
        perror(out_path);
        return MICO_EXIT_IO;
    }}
    if (got != 0) {{
        fprintf(stderr, "error: %s: ends inside sample %ld (%lu of %lu bytes); a sample is "
                        "%d float32\\n", in_path, samples, (unsigned long)got,
                (unsigned long)sizeof input, {up}_INPUT_SIZE);
        return MICO_EXIT_IO;
    }}
    if (samples == 0) {{
        fprintf(stderr, "error: %s holds no samples; write N >= 1 samples of %d float32\\n",
                in_path, {up}_INPUT_SIZE);
        return MICO_EXIT_IO;
    }}
#ifdef MICO_DEBUG
    fclose(mico_debug_file);
#endif
    fprintf(stderr, "%ld samples\\n", samples);
    return 0;
}}
"""


def _data_files(name: str) -> tuple[str, ...]:
    """The non-source files of a project: manifest, weights blob, bundled samples."""
    return ("mico.json", f"{name}.bin", "inputs.bin")


#: how many samples a project bundles in inputs.bin for `make run`
BUNDLED_SAMPLES = 4


def _bundled_inputs(graph: Graph, samples: Any) -> tuple[np.ndarray, str]:
    """The float32 samples `make run` reads, and where they came from (for mico.json)."""
    shape = tuple(int(d) for d in graph.inputs[0].type.shape[1:])
    if samples is not None:
        x = np.asarray(samples, dtype=np.float32).reshape(-1, *shape)[:BUNDLED_SAMPLES]
        if len(x) and np.isfinite(x).all():
            return x, f"{len(x)} of the samples the project was built with"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BUNDLED_SAMPLES, *shape)).astype(np.float32)
    return x, f"{BUNDLED_SAMPLES} seeded random samples (no data was given)"


def _emit_nodes(
    graph: Graph,
    align: int,
    isa_extensions: Sequence[str] = (),
    patch: str = "off",
    prefer: str = "speed",
) -> tuple[ArenaPlan, EmitContext, list[str], list[dict], dict[str, Any]]:
    """Plan the arena and run every node's emit rule: the project's contents, before files.
    ``patch="auto"`` runs the first layers in row bands when that lowers the arena
    (:mod:`mico.codegen.patch_plan`); the last item returned says what was chosen.
    ``prefer="size"``: the plain kernels only (:mod:`mico.codegen.linked_paths`)."""
    from mico.codegen import patch_plan
    from mico.codegen.linked_paths import check_preference, ungated_layers

    patch_plan.check_patch_mode(patch)
    check_preference(prefer)
    extensions = tuple(str(e).lower() for e in isa_extensions)
    # small layers take the fast paths the program's other layers link anyway
    ungated = ungated_layers(graph.nodes, extensions) if prefer == "speed" else frozenset()
    choice = SimpleNamespace(isa_extensions=extensions, prefer=prefer, ungated=ungated)
    emitted = _emit_placed(graph, align, patch, choice, ())
    patched = bool(emitted[4].get("patched"))
    placement = place_scratch(graph, align, choice, *emitted[:3], patched=patched)
    if placement["stack"]:
        emitted = _emit_placed(graph, align, patch, choice, tuple(placement["stack"]))
    emitted[1].scratch_placement = placement
    return emitted


def _emit_placed(
    graph: Graph, align: int, patch: str, choice: SimpleNamespace, stack: tuple[str, ...]
) -> tuple[ArenaPlan, EmitContext, list[str], list[dict], dict[str, Any]]:
    """:func:`_emit_nodes` with the scratch of the kernel families ``stack`` left on their
    stacks (:func:`place_scratch` chooses them)."""
    from mico.codegen import patch_plan, scratch

    extensions, prefer, ungated = choice.isa_extensions, choice.prefer, choice.ungated
    scratch.clear(graph.nodes)
    patches = patch_plan.choose_patches(graph, align) if patch == "auto" else None
    # the kernels' working memory in the arena, sized per layer (mico.codegen.scratch); a
    # patch stage's plan keeps it on the kernels' stacks, and is taken only when its arena is
    # below the whole-tensor plan with the scratch
    scratch.annotate(graph.nodes, choice)
    scratch.keep_on_stack(graph.nodes, choice, stack)
    whole = plan_graph(graph, align)
    if patches is not None and patches.arena.size >= whole.size:
        patches = None
    if patches is not None:
        scratch.clear(graph.nodes)
    arena = patches.arena if patches is not None else whole
    ctx = EmitContext(arena, graph.inputs)
    ctx.isa_extensions = extensions
    ctx.weights = {k: _numpy(v) for k, v in getattr(graph, "weights", {}).items()}
    ctx.prefer = prefer
    if prefer == "speed":
        ctx.ungated = ungated
    ctx.need(INPUT_CHECK)
    body: list[str] = []
    schedule: list[dict] = []
    nodes = graph.nodes
    if patches is not None:
        body.extend(patch_plan.emit_stage(patches, ctx))
        schedule += [{"node": n.name, "op": n.op, "output": str(n.output.type),
                      "offset": arena.offsets.get(n.output.name), "patch": True}
                     for n in patches.stage]  # fmt: skip
        nodes = graph.nodes[len(patches.stage) :]
        summary = {"mode": patch, **patches.summary(), "arena_without_patches": whole.size}
    else:
        summary = patch_plan.no_patch_summary(graph, arena, patch)
    for node in nodes:
        ctx.node = node
        statements = emit_rule(node)(node, ctx)
        if statements:
            body.append(f"/* {node.name}: {node.op} -> {node.output.type} */")
            body.extend(statements)
            out_value = node.output
            body.append(
                f'MICO_DUMP("{node.name}", {ctx.buffer(out_value)}, {storage_bytes(out_value)});'
            )
        base = node.output.storage()
        schedule.append(
            {
                "node": node.name,
                "op": node.op,
                "output": str(node.output.type),
                "offset": arena.offsets.get(base.name),
            }
        )
    scratch.clear(graph.nodes)  # the graph is left as it came (a later plan_graph plans no scratch)
    return arena, ctx, body, schedule, summary


_CALLED = re.compile(r"\b(mico_[a-z0-9_]+)\s*\(")


def place_scratch(
    graph: Graph,
    align: int,
    choice: SimpleNamespace,
    arena: ArenaPlan,
    ctx: EmitContext,
    body: list[str],
    patched: bool = False,
) -> dict[str, Any]:
    """Where the kernels' working memory goes (:mod:`mico.codegen.scratch`), chosen per kernel
    family (``lanes``, ``narrow``, ``sign_lut``, ``sign_lut_linear``, ``addsub``: every layer
    of a family alike, since its stack fallback's frame is the same for every layer): in the
    arena, or on the
    stack (no scratch passed, the kernel's stack fallback). The choice makes arena + the rv32
    stack bound of the kernels the run calls (:func:`mico.hw.stack.kernel_bound`) the least; a
    tie keeps the arena. The
    lanes' plain kernel is left out of the bound when every lanes layer takes a fast path
    (:data:`~mico.codegen.scratch.PATH_FALLBACKS`).
    ``arena``, ``ctx``, ``body``: the emission with every family in the arena. Without the rv32
    toolchain (no frames to bound), or when the kernels' stack cannot be bounded (``why``),
    every family stays in the arena. ``patched``: the program
    runs its first layers in bands (:mod:`mico.codegen.patch_plan`), whose kernels take their
    stack fallbacks.

    Returns ``stack`` (the families left on the stack), ``excluded`` (the stack fallbacks the
    program never enters), ``mode`` and, when compared, the ``candidates`` (arena, stack
    bound) by families on the stack and the ``chosen`` one's. The program's whole RAM adds
    the run function's frame, the static data and the runtime's
    (:func:`mico.hw.stack.program_ram`, the search's ``ram_total``)."""
    from itertools import combinations

    from mico.codegen import scratch

    fallbacks = scratch.STACK_FALLBACKS
    planned = scratch_sizes(arena)
    present = sorted({f for n in graph.nodes if n.name in planned
                      for f in [scratch.node_family(n, choice)] if f})  # fmt: skip
    # a family whose every layer takes its fast path never calls its plain kernel
    families: dict[str, list[int]] = {}
    for node in graph.nodes:
        family = scratch.node_family(node, choice)
        if family in scratch.PATH_FALLBACKS:
            families.setdefault(family, []).append(scratch.node_scratch(node, choice))
    taken = [scratch.PATH_FALLBACKS[f] for f, sizes in sorted(families.items()) if all(sizes)]
    result: dict[str, Any] = {"mode": scratch.PLACEMENT, "stack": [], "candidates": {}}
    if scratch.PLACEMENT not in scratch.PLACEMENTS:
        raise PlanError(
            f"scratch placement must be one of {', '.join(scratch.PLACEMENTS)}; got "
            f"{scratch.PLACEMENT!r}"
        )
    if patched:
        result["excluded"] = []
        return result
    if scratch.PLACEMENT == "stack":
        result["stack"] = present
    elif scratch.PLACEMENT == "auto" and present:
        from mico.hw import codesize
        from mico.hw.stack import kernel_bound

        try:
            codesize.require_tools()
        except BuildError:
            present = []  # no toolchain: no frames to compare with
        entries = sorted({m.group(1) for line in body for m in _CALLED.finditer(line)})
        kernels = sorted(ctx.kernels)
        best: tuple[int, list[str]] | None = None
        try:
            for r in range(len(present) + 1):
                for subset in combinations(present, r):
                    size = arena.size if not subset else _arena_with_stack(graph, align, choice,
                                                                           subset)  # fmt: skip
                    excluded = [*taken, *(fallbacks[f] for f in fallbacks if f not in subset)]
                    bound = kernel_bound(entries, kernels, excluded)
                    result["candidates"][",".join(subset) or "-"] = [size, bound]
                    if best is None or size + bound < best[0]:
                        best = (size + bound, list(subset))
        except CompileError as exc:  # no bound (recursion, a dynamic frame): the arena
            best = None
            result["candidates"] = {}
            result["why"] = f"no stack bound: {exc}"
        result["stack"] = best[1] if best is not None else []
        if best is not None:  # what the choice costs: its arena and its kernels' stack bound
            result["chosen"] = result["candidates"][",".join(best[1]) or "-"]
    on_stack = result["stack"]
    result["excluded"] = [*taken, *(fallbacks[f] for f in fallbacks if f not in on_stack)]
    return result


def _arena_with_stack(
    graph: Graph, align: int, choice: SimpleNamespace, families: Sequence[str]
) -> int:
    """Bytes of the whole-tensor arena with the scratch of ``families`` on the stack."""
    from mico.codegen import scratch

    scratch.annotate(graph.nodes, choice)
    scratch.keep_on_stack(graph.nodes, choice, families)
    try:
        return plan_graph(graph, align).size
    finally:
        scratch.clear(graph.nodes)


def stack_excluded(graph: Graph, align: int = 8, prefer: str = "speed") -> list[str]:
    """The kernels' stack fallbacks the program :func:`emit_c_project` writes for ``graph``
    never enters (every layer that could take one gets its scratch from the arena)."""
    return list(_emit_nodes(graph, align, prefer=prefer)[1].scratch_placement["excluded"])


def scratch_sizes(arena: ArenaPlan) -> dict[str, int]:
    """Bytes of kernel working memory the plan holds, by node (its ``<node>.scratch`` buffers,
    counted in the arena's size)."""
    return {b.name.removesuffix(".scratch"): b.size for b in arena.buffers
            if b.name.endswith(".scratch")}  # fmt: skip


def project_costs(
    graph: Graph, align: int = 8, prefer: str = "speed"
) -> tuple[int, dict[str, int]]:
    """The arena bytes and the constants by kind (as :func:`project_flash`) of the project
    :func:`emit_c_project` writes for ``graph`` (no ISA extensions, no patches): one emission,
    so the arena counts the kernels' working memory planned in it (:mod:`mico.codegen.scratch`),
    as the compiled project's does."""
    arena, ctx = _emit_nodes(graph, align, prefer=prefer)[:2]
    return arena.size, dict(ctx.flash)


def project_flash(graph: Graph, align: int = 8, prefer: str = "speed") -> dict[str, int]:
    """The flash bytes by kind (weights, bias, scales, params) of the project
    :func:`emit_c_project` writes for ``graph``: the same emission, no file written."""
    return project_costs(graph, align, prefer)[1]


@dataclass(frozen=True)
class ModelProgram:
    """What :func:`emit_c_project` writes for a graph that its run function's object is made
    of, from one emission: the sources, the kernels it links and where the scratch went."""

    #: ``<name>.c``, its headers and mico's headers, by file name
    files: dict[str, str]
    #: the kernel sources of ``mico/csrc`` it links
    kernels: list[str]
    #: the handlers' own kernel files
    extra_kernels: list[str]
    #: bytes of the arena (``arena_bytes`` of ``mico.json``)
    arena: int
    #: ``scratch_placement`` of ``mico.json`` (:func:`place_scratch`)
    scratch_placement: dict[str, Any]


def model_program(
    graph: Graph, name: str = "model", align: int = 8, prefer: str = "speed"
) -> ModelProgram:
    """The model's part of the program :func:`emit_c_project` writes for ``graph`` (no ISA
    extensions, no patches), no project written: what the flash and stack estimates compile."""
    _check(graph, name, align)
    arena, ctx, body, _, _ = _emit_nodes(graph, align, prefer=prefer)
    files = {
        f"{name}.h": _header(name, graph, arena),
        f"{name}.c": _source(name, graph, ctx, body),
        f"{name}_weights.h": _weights_header(name, ctx),
    }
    kernel_dir = resources.files("mico.csrc")
    for header in HEADERS:
        files[header] = (kernel_dir / header).read_text()
    return ModelProgram(files, sorted(ctx.kernels), sorted(ctx.extra_kernels), arena.size,
                        dict(ctx.scratch_placement))  # fmt: skip


def model_sources(
    graph: Graph, name: str = "model", align: int = 8, prefer: str = "speed"
) -> tuple[dict[str, str], list[str], list[str]]:
    """The files that compile to ``<name>.c``'s object as :func:`emit_c_project` writes them
    (``<name>.c``, its headers and mico's headers), the kernel sources of ``mico/csrc`` it
    links and the handlers' own kernel files: what a flash estimate compiles, no project
    written. ``prefer`` as for :func:`emit_c_project`."""
    program = model_program(graph, name, align, prefer)
    return program.files, program.kernels, program.extra_kernels


def emit_c_project(
    graph: Graph,
    directory: str | Path,
    name: str = "model",
    align: int = 8,
    sample_inputs: Any = None,
    weights_file: bool = False,
    isa_extensions: Sequence[str] = (),
    patch: str = "off",
    prefer: str = "speed",
) -> CProject:
    """Write ``graph`` (lowered, integer-only) as a C project into ``directory``.

    ``sample_inputs`` (float32, a batch of the model's input) become the bundled
    ``inputs.bin`` that ``make run`` reads; without them a few seeded random samples are used.
    ``weights_file``: no constant is compiled in; ``<name>.bin`` is a weights file
    (:mod:`mico.codegen.weights_file`) the program loads at run time, replaceable by another
    of the same layout without recompiling.
    ``isa_extensions``: the target ISA's extensions (a target file's ``extensions``), which
    pick ISA-specific kernel paths: ``zbb`` gives binary layers one ``cpop`` per word.
    ``patch``: ``"auto"`` runs the first layers in row bands when that lowers the arena
    (:mod:`mico.codegen.patch_plan`), ``"off"`` keeps whole tensors.
    ``prefer``: ``"speed"`` (the fast kernel paths, each behind its size gate) or ``"size"``
    (the plain kernels only: the least code in flash, every layer slower).
    """
    _check(graph, name, align)
    arena, ctx, body, schedule, patched = _emit_nodes(graph, align, isa_extensions, patch, prefer)
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    kernel_dir = resources.files("mico.csrc")
    kernels = sorted(ctx.kernels)
    for file in HEADERS + kernels:
        with resources.as_file(kernel_dir / file) as src:
            shutil.copyfile(src, out / file)
    x, y = graph.inputs[0], graph.outputs[0]
    layout = constants = None
    if weights_file:
        io = {"input": [str(x.type.dtype), list(x.type.shape)], "arena": arena.size,
              "output": [str(y.type.dtype), list(y.type.shape)]}  # fmt: skip
        layout, constants = _weights_c.plan_file(name, ctx, body, io, float(y.scale or 1.0), align)
    files = {
        f"{name}.h": _header(name, graph, arena, layout),
        f"{name}.c": _source(name, graph, ctx, body, layout),
        f"{name}_weights.h": _weights_header(name, ctx)
        if layout is None
        else _weights_c.weights_header(name, ctx, layout),
        "main.c": _main(name, layout is not None),
        "Makefile": makefile(name, ["main.c", f"{name}.c", *kernels, *sorted(ctx.extra_kernels)]),
    }
    for file, text in files.items():
        (out / file).write_text(text)
    if layout is None:
        index = _write_blob(out / f"{name}.bin", ctx.blobs, max(align, 4))
        weights_info: dict[str, Any] = {"file": f"{name}.bin", "constants": index}
    else:
        from mico.codegen.weights_file import write_weights_file

        write_weights_file(out / f"{name}.bin", layout, constants or [])
        weights_info = _weights_c.manifest(name, layout)
    manifest = {
        "name": name,
        "input_shape": list(x.type.shape),
        "output_shape": list(y.type.shape),
        "output_scale": y.scale,
        "output_dtype": OUTPUT_TYPES[y.type.dtype][1],
        "arena_bytes": arena.size,
        "arena_lower_bound": arena.lower_bound,
        # kernels' working memory planned in the arena (mico.codegen.scratch), per node
        "kernel_scratch": scratch_sizes(arena),
        # arena or stack for that memory, by kernel family (project.place_scratch)
        "scratch_placement": getattr(ctx, "scratch_placement", None),
        "flash": ctx.flash,
        "weights_file": weights_info,
        "patch": patched,
        "prefer": prefer,
    }
    manifest["outputs"] = getattr(graph, "output_segments", None) or [
        {"name": "output", "shape": list(y.type.shape[1:]), "offset": 0, "size": y.type.numel}
    ]
    bundled, origin = _bundled_inputs(graph, sample_inputs)
    bundled.tofile(out / "inputs.bin")
    manifest["inputs_bin"] = origin
    (out / "mico.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return CProject(
        out,
        name,
        sorted([*files, *HEADERS, *kernels, *ctx.extra_kernels, *_data_files(name)]),
        arena,
        dict(ctx.flash),
        tuple(x.type.shape),
        tuple(y.type.shape),
        float(y.scale or 1.0),
        schedule,
        OUTPUT_TYPES[y.type.dtype][1],
        None if layout is None else f"{name}.bin",
        patched,
        prefer,
    )
