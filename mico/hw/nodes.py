"""Per-node cost of a generated C program, measured on the program itself.

The generated ``<name>_run`` marks the end of every node with ``MICO_DUMP`` when compiled with
``MICO_DEBUG`` (``make DEBUG=1``). A copy of the project is made with ``#define MICO_DEBUG`` at
the top of ``<name>.c`` and a profiling ``main.c`` whose ``mico_debug_dump`` is a marker that
copies nothing, built by the target's own ``build`` and run on one sample:

* rv32 (qemu-system-riscv32 ``-icount``): the marker reads the ``instret`` CSR on entry and on
  exit, so each node's count is the instructions retired between two markers, the markers'
  own bodies excluded (the call and a few register moves of each marker remain);
* VexRiscv (verilator): the same program; the bench notes the clock cycle at which each
  ``instret`` read retires, so each node's figure is the cycles between two markers;
* host (callgrind): collection runs only inside ``<name>_run`` and a profile part is dumped
  after each marker, so each part is one node plus its marker (a call and two stores, about
  15 instructions). The host program runs a warm-up inference first, whose parts are
  dropped: the host kernels lay out each layer's weights on its first call, once per run.

The first node's figure also holds ``<name>_run``'s input check; what follows the last node
(copying the output to the caller) is reported as ``tail``. The project's own build is left
untouched.
"""

from __future__ import annotations

import dataclasses
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mico.codegen.makefile import QEMU_RV32
from mico.codegen.project import CProject
from mico.errors import BuildError
from mico.hw.objcache import build_for
from mico.targets.io import TAIL, exit_status, require_tools, run_program, text

MARKER = "mico_debug_dump"
_NODE = re.compile(r"^node (\S+) (\d+)\s*$", re.M)
_TAIL_LINE = re.compile(r"^tail (\d+)\s*$", re.M)
_SUMMARY = re.compile(r"^summary:\s*(\d+)\s*$", re.M)
_TRIGGER = re.compile(r"^desc: Trigger: (.*)$", re.M)


@dataclass(frozen=True)
class NodeCosts:
    """What each node of one inference cost, in schedule order, and what followed them."""

    nodes: tuple[tuple[str, int], ...]  # (node name, instructions)
    tail: int  # after the last node: the output copy and return

    @property
    def total(self) -> int:
        return sum(count for _, count in self.nodes) + self.tail


def profiling_main(name: str) -> str:
    """The ``main.c`` of the instrumented copy: one sample, a marker per node, counts printed."""
    up = name.upper()
    return f"""/* main.c - written by mico latency: run {name}_run once on the first sample of
 * inputs.bin; {MARKER} (called after every node in a DEBUG=1 build) marks node ends. */
#include <stdio.h>

#include "mico_nn.h"
#include "{name}.h"

#define MICO_MAX_NODES 4096

static const char *mico_names[MICO_MAX_NODES];
static unsigned long mico_counts[MICO_MAX_NODES];
static unsigned long mico_nodes;
static unsigned long mico_last;

#if defined(__riscv)
static unsigned long mico_instret(void)
{{
    unsigned long value;
    __asm__ volatile(".insn i 0x73, 2, %0, zero, -1022" : "=r"(value));
    return value;
}}
#else
static unsigned long mico_instret(void) /* the host counts under callgrind instead */
{{
    return 0;
}}
#endif

void {MARKER}(const char *name, const void *data, size_t bytes);
__attribute__((noinline)) void {MARKER}(const char *name, const void *data, size_t bytes)
{{
    unsigned long now = mico_instret();
    (void)data;
    (void)bytes;
    if (mico_nodes < MICO_MAX_NODES) {{
        mico_names[mico_nodes] = name;
        mico_counts[mico_nodes] = now - mico_last;
    }}
    mico_nodes++;
    mico_last = mico_instret();
}}

int main(void)
{{
    static float input[{up}_INPUT_SIZE];
    static {name}_output_t output[{up}_OUTPUT_SIZE];
    unsigned long k, tail;
    int status;
    FILE *in = fopen("inputs.bin", "rb");
    if (!in || fread(input, sizeof input, 1, in) != 1) {{
        fprintf(stderr, "error: cannot read one sample from inputs.bin\\n");
        return 1;
    }}
    fclose(in);
#ifdef {up}_WEIGHTS_BYTES /* compiled with --weights-file: load {name}.bin first */
    {{
        static union {{
            uint64_t align;
            uint8_t bytes[{up}_WEIGHTS_BYTES];
        }} blob;
        FILE *w = fopen("{name}.bin", "rb");
        size_t got = w ? fread(blob.bytes, 1, sizeof blob.bytes, w) : 0;
        if (w) {{
            fclose(w);
        }}
        if ({name}_load_weights(blob.bytes, got) != {up}_WEIGHTS_OK) {{
            fprintf(stderr, "error: {name}.bin: the weights file is missing or refused\\n");
            return 1;
        }}
    }}
#endif
#if !defined(__riscv) /* host: a warm-up inference first (one-time work, such as the host
                       * kernels' weight layout, is not per inference); its counts are dropped */
    if ({name}_run(input, output) != {up}_OK) {{
        fprintf(stderr, "error: the warm-up {name}_run failed\\n");
        return 1;
    }}
    {MARKER}("(warm-up tail)", 0, 0); /* a profile part of its own: the warm-up's tail */
    mico_nodes = 0;
#endif
    mico_last = mico_instret();
    status = {name}_run(input, output);
    tail = mico_instret() - mico_last;
    if (status != {up}_OK) {{
        fprintf(stderr, "error: {name}_run returned %d\\n", status);
        return 1;
    }}
    for (k = 0; k < mico_nodes && k < MICO_MAX_NODES; k++) {{
        printf("node %s %lu\\n", mico_names[k], mico_counts[k]);
    }}
    printf("tail %lu\\n", tail);
    return 0;
}}
"""


def _instrumented(project: CProject, sample: np.ndarray, root: Path) -> CProject:
    """A copy of ``project`` under ``root`` with the profiling main and one sample."""
    copy = dataclasses.replace(project, directory=root / "project")
    shutil.copytree(project.directory, copy.directory)
    (copy.directory / "main.c").write_text(profiling_main(project.name))
    source = copy.directory / f"{project.name}.c"
    # what make DEBUG=1 does (-DMICO_DEBUG), in the source: every target's own build works
    source.write_text("#define MICO_DEBUG 1 /* mico latency: a marker after every node */\n"
                      + source.read_text())  # fmt: skip
    from mico.targets.io import write_samples

    if write_samples(project, np.asarray(sample)[None], copy.directory / "inputs.bin") != 1:
        raise BuildError("per-node profiling needs one sample")
    return copy


def _parse(console: str, program: str) -> NodeCosts:
    nodes = tuple((name, int(count)) for name, count in _NODE.findall(console))
    tail = _TAIL_LINE.search(console)
    if tail is None:
        raise BuildError(f"{program} printed no node counts:\n{console[-TAIL:]}")
    return NodeCosts(nodes, int(tail.group(1)))


def rv32_node_costs(project: CProject, sample: np.ndarray, timeout: float = 600) -> NodeCosts:
    """Instructions of every node of one inference on rv32 (qemu ``-icount``, ``instret``)."""
    from mico.targets import rv32

    require_tools("rv32", rv32.TOOLS)
    with tempfile.TemporaryDirectory(prefix="mico-nodes-rv32-") as tmp:
        copy = _instrumented(project, sample, Path(tmp))
        elf = build_for(copy, "rv32", timeout=timeout)
        command = [*shlex.split(QEMU_RV32), "-kernel", str(elf)]
        try:
            result = subprocess.run(
                command, cwd=copy.directory, capture_output=True, text=True,
                timeout=timeout, check=False,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:
            output = (text(exc.stdout) + text(exc.stderr))[-TAIL:]
            raise BuildError(
                f"qemu ran the instrumented {elf.name} for more than {timeout:g} s:\n{output}"
            ) from None
        console = result.stdout + result.stderr
        if result.returncode != 0:
            raise BuildError(
                f"the instrumented {elf.name} under qemu failed "
                f"({exit_status(result.returncode)}):\n{console[-TAIL:]}"
            )
    return _parse(console, f"the instrumented {elf.name}")


def host_node_costs(project: CProject, sample: np.ndarray, timeout: float = 600) -> NodeCosts:
    """Instructions of every node of one inference on the host, counted by callgrind."""
    from mico.targets import host

    host.require_valgrind()
    with tempfile.TemporaryDirectory(prefix="mico-nodes-host-") as tmp:
        copy = _instrumented(project, sample, Path(tmp))
        require_tools(
            "host", {"make": "make", host.DEFAULT_CC: host.compiler_package(host.DEFAULT_CC)}
        )
        exe = build_for(copy, "host", timeout=timeout)
        out = Path(tmp) / "callgrind.out"
        command = [
            "valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
            f"--toggle-collect={copy.name}_run", f"--dump-after={MARKER}",
            "--dump-instr=no", "--dump-line=no", str(exe),
        ]  # fmt: skip
        env = {**os.environ, "LD_BIND_NOW": "1"}
        result = run_program(command, f"the instrumented {exe.name} under callgrind", timeout,
                             cwd=copy.directory, env=env)  # fmt: skip
        names = [name for name, _ in _NODE.findall(result.stdout)]
        parts = sorted(Path(tmp).glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
        counts, tail = [], 0
        for part in [*parts, out]:
            data = part.read_text(errors="replace")
            trigger, summary = _TRIGGER.search(data), _SUMMARY.search(data)
            if trigger is None or summary is None:
                continue
            if trigger.group(1).startswith("--dump-after"):
                counts.append(int(summary.group(1)))
            elif "termination" in trigger.group(1):
                tail = int(summary.group(1))
    # the warm-up inference's markers and the one after it come first: the measured
    # inference's are the last ones
    if len(counts) != 2 * len(names) + 1:
        raise BuildError(
            f"callgrind saw {len(counts)} node markers in a warm-up and a measured inference "
            f"but the program named {len(names)} nodes"
        )
    return NodeCosts(tuple(zip(names, counts[len(names) + 1 :], strict=True)), tail)


def vexriscv_variant(isa: str) -> str:
    """The VexRiscv variant whose programs are built for ``isa`` (rv32imac: IMAC)."""
    from mico.targets.vexriscv import DEFAULT_VARIANT, VARIANTS

    for variant in (DEFAULT_VARIANT, *VARIANTS):
        if VARIANTS[variant].split()[0] == f"-march={isa}":
            return variant
    known = ", ".join(sorted({v.split()[0].removeprefix("-march=") for v in VARIANTS.values()}))
    raise BuildError(f"no VexRiscv variant runs {isa} programs; variants run {known}")


def vexriscv_node_costs(
    project: CProject, sample: np.ndarray, isa: str = "rv32imac", timeout: float = 600
) -> NodeCosts:
    """Clock cycles of every node of one inference on the VexRiscv core (verilator).

    The bench notes the cycle at which every ``instret`` read retires; the markers read it on
    entry and exit, so a node's cycles run from the previous marker's exit to its own entry.
    """
    from mico.targets import vexriscv

    variant = vexriscv_variant(isa)
    with tempfile.TemporaryDirectory(prefix="mico-nodes-vexriscv-") as tmp:
        copy = _instrumented(project, sample, Path(tmp))
        elf = build_for(copy, "vexriscv", variant, timeout=timeout)
        sim = vexriscv.simulate(elf, variant, cwd=copy.directory, timeout=timeout)
    program = f"the instrumented {elf.name} on VexRiscv {variant}"
    if sim.status != 0:
        output = (sim.stdout + sim.stderr)[-TAIL:]
        raise BuildError(f"{program} failed (exit {sim.status}):\n{output}")
    names = [name for name, _ in _NODE.findall(sim.stdout)]
    cycles = sim.marks[:, 0]
    if len(cycles) != 2 * len(names) + 2:
        raise BuildError(
            f"{program} named {len(names)} nodes but the bench saw {len(cycles)} instret reads "
            f"(expected {2 * len(names) + 2})"
        )
    nodes = tuple((name, int(cycles[1 + 2 * k] - cycles[2 * k])) for k, name in enumerate(names))
    return NodeCosts(nodes, int(cycles[-1] - cycles[-2]))


def node_costs(
    project: CProject,
    runner: str,
    sample: np.ndarray,
    isa: str = "rv32imac",
    timeout: float = 600,
) -> NodeCosts:
    """Per-node cost of one inference of ``project`` with a target runner (see
    :mod:`mico.targets.catalog`): instructions with ``host`` and ``qemu-rv32``, clock cycles
    with ``verilator-vexriscv`` (whose variant ``isa`` selects)."""
    if runner == "qemu-rv32":
        return rv32_node_costs(project, sample, timeout)
    if runner == "host":
        return host_node_costs(project, sample, timeout)
    if runner == "verilator-vexriscv":
        return vexriscv_node_costs(project, sample, isa, timeout)
    raise BuildError(
        f"per-node costs are measured with the host, qemu-rv32 and verilator-vexriscv runners, "
        f"not '{runner}'"
    )
