"""Reading 16-bit PCM WAV files with the standard library, and fixing their length."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np

from mico.data.paths import corrupt

PCM16_SCALE = 32768.0  # int16 full scale: samples map to [-1, 1)


def read_wav(
    path: str | Path, sample_rate: int | None = None, channels: int | None = 1
) -> tuple[np.ndarray, int]:
    """A mono (or ``channels``-channel) 16-bit PCM WAV as float32 in [-1, 1), and its rate.

    Multi-channel audio comes back as ``(frames, channels)``. Anything other than 16-bit PCM,
    a different ``sample_rate``/``channels`` than required, or a truncated file raises a
    DatasetError naming the file.
    """
    path = Path(path)
    try:
        with wave.open(str(path), "rb") as handle:
            rate = handle.getframerate()
            width = handle.getsampwidth()
            count = handle.getnchannels()
            frames = handle.getnframes()
            raw = handle.readframes(frames)
    except (wave.Error, EOFError, OSError) as error:
        raise corrupt(path, f"not a readable WAV file ({error})") from error
    if width != 2:
        raise corrupt(path, f"{8 * width}-bit samples; only 16-bit PCM WAV is supported")
    if channels is not None and count != channels:
        raise corrupt(path, f"{count} channels, expected {channels}")
    if sample_rate is not None and rate != sample_rate:
        raise corrupt(path, f"sample rate {rate} Hz, expected {sample_rate} Hz (resample it first)")
    if len(raw) != frames * width * count:
        raise corrupt(
            path,
            f"truncated: the header declares {frames} frames, the file holds "
            f"{len(raw) // (width * count)}",
        )
    samples = np.frombuffer(raw, dtype="<i2").astype(np.float32) / PCM16_SCALE
    if count > 1:
        samples = samples.reshape(-1, count)
    return samples, rate


def fix_length(signal: np.ndarray, length: int) -> np.ndarray:
    """Crop the end off, or pad zeros at the end, so the last axis has ``length`` samples."""
    have = signal.shape[-1]
    if have >= length:
        return signal[..., :length]
    pad = [(0, 0)] * (signal.ndim - 1) + [(0, length - have)]
    return np.pad(signal, pad)
