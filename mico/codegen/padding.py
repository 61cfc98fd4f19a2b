"""Padding as a gather: the input element each output element copies, or -1 for the fill value.

One table serves every mode torch pads with (``constant``, ``reflect``, ``replicate``,
``circular``) and both C modes (floats and codes), and the copy is exact, so the C output equals
the reference by construction. The table costs 4 bytes of flash per output element of a sample.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mico.errors import UnsupportedOpError

NUMPY_MODES = {
    "constant": "constant",
    "reflect": "reflect",
    "replicate": "edge",
    "circular": "wrap",
}


def pad_index(shape: Sequence[int], pads: Sequence[int], mode: str, where: str) -> np.ndarray:
    """Indices into one sample of ``shape`` (no batch) for torch's ``pad`` list (last dim
    first: left, right, then the dim before, ...); -1 marks fill positions."""
    if mode not in NUMPY_MODES:
        raise UnsupportedOpError(f"{where} pads in mode '{mode}'; use {', '.join(NUMPY_MODES)}")
    pads = [int(p) for p in pads]
    if len(pads) % 2 or len(pads) // 2 > len(shape):
        raise UnsupportedOpError(f"{where} has pad {pads} for a sample of shape {list(shape)}")
    if any(p < 0 for p in pads):
        raise UnsupportedOpError(f"{where} has negative padding {pads} (cropping); use a slice")
    widths = [(0, 0)] * len(shape)
    for k in range(len(pads) // 2):
        widths[len(shape) - 1 - k] = (pads[2 * k], pads[2 * k + 1])
    index = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(tuple(shape))
    if mode == "constant":
        padded = np.pad(index, widths, mode="constant", constant_values=-1)
    else:
        for dim, (lo, hi) in enumerate(widths):
            limit = shape[dim] - (1 if mode == "reflect" else 0)
            if max(lo, hi) > limit and mode != "replicate":
                raise UnsupportedOpError(
                    f"{where} pads dim {dim} of size {shape[dim]} by {max(lo, hi)} in mode "
                    f"'{mode}'; torch allows at most {limit}"
                )
        padded = np.pad(index, widths, mode=NUMPY_MODES[mode])
    return padded.reshape(-1).astype(np.int32)
