"""The inference arithmetic of a quantized layer, as the C kernels compute it.

A quantized layer multiplies integer codes: ``acc = sum(code_x * code_w)`` exactly (an int32
in C), then rescales in float32, ``y = float32(acc) * (s_x * s_w[c]) + bias[c]`` -- one rounding
per operation, in this order. Fake-quantized training computes the same value up to float
rounding (a float convolution of ``codes * scale`` products); in eval mode the Bit* layers and
the ``mico.bit_*`` operators compute this exact form, so the C output can be held to Python.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

FLOAT32_EXACT = 2**24  # every integer of magnitude below this is exact in float32

Accumulate = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def accumulate(op: Accumulate, x_codes: torch.Tensor, w_codes: torch.Tensor) -> torch.Tensor:
    """``op(x_codes, w_codes)`` (a bias-free conv or linear) computed exactly, as float64.

    float32 is exact when no partial sum can reach 2**24; otherwise the products are summed in
    float64, exact for any int32 accumulator.
    """
    per_output = w_codes[0].numel() if w_codes.dim() else 1
    x_max = float(x_codes.abs().max()) if x_codes.numel() else 0.0
    w_max = float(w_codes.abs().max()) if w_codes.numel() else 0.0
    bound = per_output * x_max * w_max
    dtype = torch.float32 if bound < FLOAT32_EXACT else torch.float64
    acc = op(_as(x_codes, dtype), _as(w_codes, dtype))
    return _as(acc, torch.float64)


def _as(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    return t if t.dtype == dtype else t.to(dtype)


def rescale(
    acc: torch.Tensor,
    act_scale: torch.Tensor,
    weight_scale: torch.Tensor,
    bias: torch.Tensor | None,
    channel_dim: int,
) -> torch.Tensor:
    """``float32(acc) * (s_x * s_w[c]) + bias[c]`` in float32, as ``mico_f32.h`` does.

    ``act_scale`` is a scalar or per-sample ``(N, 1, ...)`` tensor, ``weight_scale`` one scale
    or one per output channel; ``channel_dim`` is the output's channel axis.
    """
    shape = [1] * acc.dim()
    shape[channel_dim] = -1
    sw = weight_scale.detach().to(torch.float32).reshape(-1)
    sw = sw.reshape(shape) if sw.numel() > 1 else sw.reshape(())
    scale = act_scale.detach().to(torch.float32) * sw
    out = acc.to(torch.float32) * scale
    if bias is not None:
        out = out + bias.detach().to(torch.float32).reshape(shape)
    return out
