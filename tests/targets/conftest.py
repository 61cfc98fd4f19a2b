"""Fixtures of the target tests: one small static-mode model lowered once, its Python reference
outputs, and projects whose ``main.c`` misbehaves on purpose (abort, endless loop, memory and
undefined-behaviour errors) to exercise the error paths."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from mico.codegen import emit_c_project
from mico.codegen.project import CProject
from mico.execute import run_graph
from mico.ir.graph import Graph
from mico.pipeline import lower_model, quantize_ptq
from mico.quant import QuantPlan

PLAN = "conv1=8/8,conv2=4/4,fc=2/8"

# Replacement main.c files: each compiles warning-free with -std=c99 -Wall -Wextra -Werror and
# hides the fault from the compiler (argc, a volatile pointer) so only the run time sees it.
BAD_MAINS = {
    "abort": """#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "about to abort\\n");
    abort();
}
""",
    "loop": """int main(int argc, char **argv)
{
    volatile unsigned long spins = 0;
    (void)argc;
    (void)argv;
    for (;;)
        spins++;
}
""",
    "exit3": """#include <stdio.h>
int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    fprintf(stderr, "cannot open the samples\\n");
    return 3;
}
""",
    "use_after_free": """#include <stdlib.h>
static int *volatile kept;
int main(int argc, char **argv)
{
    int *p = malloc(4 * sizeof(int));
    (void)argv;
    if (!p)
        return 2;
    p[0] = 1;
    kept = p;
    free(p);
    return kept[argc % 4];
}
""",
    "signed_overflow": """#include <limits.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    volatile int big = INT_MAX;
    int sum = big + argc;
    (void)argv;
    printf("%d\\n", sum);
    return 0;
}
""",
}


@pytest.fixture(scope="session")
def static_graph(trained_cnn, calibration_batches) -> Graph:
    """SmallCNN quantized with a mixed plan and lowered to the integer-only graph."""
    qmodel = quantize_ptq(trained_cnn, QuantPlan.parse(PLAN), calibration_batches)
    return lower_model(qmodel, torch.zeros(1, 1, 8, 8), "cnn")


@pytest.fixture(scope="session")
def samples(digits_split) -> np.ndarray:
    return np.asarray(digits_split.x_test[:40], dtype=np.float32)


@pytest.fixture(scope="session")
def reference(static_graph, samples) -> np.ndarray:
    """What the Python reference executor computes on ``samples``."""
    return run_graph(static_graph, samples)[0].numpy()


@pytest.fixture(scope="module")
def project(static_graph, tmp_path_factory) -> CProject:
    """The model's C project, emitted once per test module (builds share it)."""
    return emit_c_project(static_graph, tmp_path_factory.mktemp("cnn"), "cnn")


@pytest.fixture
def bad_project(static_graph, tmp_path) -> Callable[[str], CProject]:
    """``bad_project(kind)``: a fresh project whose main.c is ``BAD_MAINS[kind]``."""

    def make(kind: str) -> CProject:
        project = emit_c_project(static_graph, Path(tmp_path) / kind, "cnn")
        (project.directory / "main.c").write_text(BAD_MAINS[kind])
        return project

    return make
