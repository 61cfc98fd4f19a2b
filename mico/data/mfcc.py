"""MFCC features in numpy/scipy, for keyword-spotting models such as DS-CNN.

The pipeline is the classic one (as in "Hello Edge", Zhang et al. 2017): optional
pre-emphasis, framing without padding, a periodic Hann window, power spectrum ``|rFFT|^2``,
a triangular mel filterbank (HTK mel scale), ``log(energy + eps)``, and a DCT-II (orthonormal)
keeping the first coefficients. With the defaults a 1 s clip at 16 kHz gives 49 frames of 10.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from scipy.fft import dct

from mico.errors import DatasetError

LOG_EPS = 1e-6  # floor inside the log so silent frames stay finite


def hz_to_mel(hz: np.ndarray | float) -> np.ndarray:
    """HTK mel scale: ``2595 * log10(1 + f / 700)``."""
    return 2595.0 * np.log10(1.0 + np.asarray(hz, dtype=np.float64) / 700.0)


def mel_to_hz(mel: np.ndarray | float) -> np.ndarray:
    """Inverse of :func:`hz_to_mel`."""
    return 700.0 * (10.0 ** (np.asarray(mel, dtype=np.float64) / 2595.0) - 1.0)


def mel_filterbank(
    n_mels: int, n_fft: int, sample_rate: int, fmin: float = 20.0, fmax: float | None = None
) -> np.ndarray:
    """Triangular filters ``(n_mels, n_fft // 2 + 1)``, centres evenly spaced in mel.

    Each triangle rises from its lower neighbour's centre to 1 at its own centre and falls to
    0 at the next centre, evaluated at the FFT bin frequencies.
    """
    fmax = sample_rate / 2 if fmax is None else fmax
    if n_mels < 1 or n_fft < 2 or not 0.0 <= fmin < fmax <= sample_rate / 2:
        raise DatasetError(
            f"bad mel filterbank: n_mels={n_mels}, n_fft={n_fft}, fmin={fmin}, fmax={fmax} "
            f"(need n_mels >= 1 and 0 <= fmin < fmax <= sample_rate / 2 = {sample_rate / 2})"
        )
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))
    bins = np.fft.rfftfreq(n_fft, d=1.0 / sample_rate)
    lower, centre, upper = edges[:-2, None], edges[1:-1, None], edges[2:, None]
    rising = (bins[None, :] - lower) / (centre - lower)
    falling = (upper - bins[None, :]) / (upper - centre)
    return np.maximum(0.0, np.minimum(rising, falling)).astype(np.float32)


def hann_window(length: int) -> np.ndarray:
    """The periodic Hann window (what ``torch.hann_window`` and STFT code use)."""
    return (0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(length) / length)).astype(np.float32)


def frame_signal(signal: np.ndarray, frame_length: int, hop_length: int) -> np.ndarray:
    """Frames ``(..., n_frames, frame_length)`` of the last axis, no padding."""
    if signal.shape[-1] < frame_length:
        raise DatasetError(
            f"signal of {signal.shape[-1]} samples is shorter than one frame ({frame_length})"
        )
    return sliding_window_view(signal, frame_length, axis=-1)[..., ::hop_length, :]


def mfcc(
    signal: np.ndarray,
    sample_rate: int = 16000,
    frame_ms: float = 40.0,
    hop_ms: float = 20.0,
    n_mels: int = 40,
    n_mfcc: int = 10,
    fmin: float = 20.0,
    fmax: float | None = 4000.0,
    n_fft: int | None = None,
    preemphasis: float | None = None,
) -> np.ndarray:
    """MFCCs of ``signal`` (``(..., samples)``) as float32 ``(..., n_frames, n_mfcc)``.

    ``n_fft`` defaults to the frame length (640 at 16 kHz, 40 ms); ``preemphasis`` (e.g. 0.97)
    applies ``y[t] = x[t] - a * x[t-1]`` first.
    """
    frame_length = round(sample_rate * frame_ms / 1000.0)
    hop_length = round(sample_rate * hop_ms / 1000.0)
    n_fft = frame_length if n_fft is None else n_fft
    if hop_length < 1 or n_fft < frame_length:
        raise DatasetError(
            f"bad MFCC framing: frame {frame_length}, hop {hop_length}, n_fft {n_fft} samples "
            "(need hop >= 1 and n_fft >= frame length)"
        )
    if not 1 <= n_mfcc <= n_mels:
        raise DatasetError(f"n_mfcc must be between 1 and n_mels ({n_mels}), got {n_mfcc}")
    x = np.asarray(signal, dtype=np.float32)
    if preemphasis:
        x = np.concatenate([x[..., :1], x[..., 1:] - preemphasis * x[..., :-1]], axis=-1)
    frames = frame_signal(x, frame_length, hop_length) * hann_window(frame_length)
    power = np.abs(np.fft.rfft(frames, n=n_fft, axis=-1)) ** 2
    energies = power @ mel_filterbank(n_mels, n_fft, sample_rate, fmin, fmax).T
    log_mel = np.log(energies + LOG_EPS)
    return dct(log_mel, type=2, norm="ortho", axis=-1)[..., :n_mfcc].astype(np.float32)


def num_frames(
    num_samples: int, sample_rate: int = 16000, frame_ms: float = 40.0, hop_ms: float = 20.0
) -> int:
    """How many frames :func:`mfcc` yields for ``num_samples`` samples (49 for 1 s at 16 kHz)."""
    frame_length = round(sample_rate * frame_ms / 1000.0)
    hop_length = round(sample_rate * hop_ms / 1000.0)
    return 1 + (num_samples - frame_length) // hop_length
