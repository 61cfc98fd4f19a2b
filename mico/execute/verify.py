"""Agreement between the C program's outputs and the Python reference."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

DEFAULT_RTOL = 1e-5


@dataclass(frozen=True)
class Agreement:
    """How many samples agree, and by how much the others differ.

    ``exact`` counts samples whose every output is identical (bit for bit); ``within_tolerance``
    those whose largest difference is at most ``rtol`` times the sample's largest reference
    magnitude (for integer outputs only exact counts); ``top1`` those with the same arg-max.
    """

    samples: int
    exact: int
    top1: int
    max_abs_diff: float
    within_tolerance: int = 0
    max_rel_diff: float = 0.0
    rtol: float = 0.0

    @property
    def exact_rate(self) -> float:
        return self.exact / self.samples if self.samples else 1.0

    @property
    def top1_rate(self) -> float:
        return self.top1 / self.samples if self.samples else 1.0

    @property
    def all_exact(self) -> bool:
        return self.exact == self.samples

    @property
    def all_within_tolerance(self) -> bool:
        return self.within_tolerance == self.samples

    def summary(self) -> str:
        n = self.samples
        text = (
            f"{self.exact}/{n} bit-exact, top-1 {self.top1}/{n}, max abs diff {self.max_abs_diff:g}"
        )
        if self.rtol:
            text += (
                f", {self.within_tolerance}/{n} within rtol {self.rtol:g} "
                f"(max rel diff {self.max_rel_diff:.3g})"
            )
        return text


def compare_outputs(
    c_out: np.ndarray, reference: np.ndarray, rtol: float = DEFAULT_RTOL
) -> Agreement:
    """Compare per-sample outputs of shape ``(N, ...)``: integers exactly, floats to ``rtol``."""
    c, ref = np.asarray(c_out), np.asarray(reference)
    if c.shape != ref.shape:
        raise ValueError(f"C outputs have shape {c.shape}, the reference {ref.shape}")
    floating = np.issubdtype(c.dtype, np.floating) or np.issubdtype(ref.dtype, np.floating)
    work = np.float64 if floating else np.int64
    flat_c = c.reshape(len(c), -1).astype(work)
    flat_r = ref.reshape(len(ref), -1).astype(work)
    same = np.all((flat_c == flat_r) | (np.isnan(flat_c) & np.isnan(flat_r)), axis=1)
    exact = int(same.sum())
    top1 = int((flat_c.argmax(axis=1) == flat_r.argmax(axis=1)).sum()) if flat_c.size else len(c)
    diff = np.abs(flat_c - flat_r)
    max_abs = diff.max(initial=0)
    if not floating:
        return Agreement(len(c), exact, top1, int(max_abs), exact, 0.0, 0.0)
    diff = np.where(np.isnan(diff), np.inf, diff)
    diff[same] = 0.0
    scale = np.maximum(np.abs(flat_r).max(axis=1, initial=0), np.finfo(np.float32).tiny)
    rel = diff.max(axis=1, initial=0) / scale
    within = int((rel <= rtol).sum())
    return Agreement(
        len(c),
        exact,
        top1,
        float(diff.max(initial=0)),
        within,
        float(rel.max(initial=0)),
        rtol,
    )
