"""WAV reading (stdlib ``wave`` files) and the numpy MFCC pipeline."""

import wave

import numpy as np
import pytest
from scipy.fft import dct

from mico.data import mel_filterbank, mfcc, read_wav
from mico.data.mfcc import hann_window, num_frames
from mico.data.wav import fix_length
from mico.errors import DatasetError

SR = 16000


def write_wav(path, samples, rate=SR, width=2, channels=1):
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(channels)
        handle.setsampwidth(width)
        handle.setframerate(rate)
        handle.writeframes(np.asarray(samples).tobytes())


def test_wav_round_trip(tmp_path):
    pcm = np.array([0, 1, -1, 32767, -32768, 1234], dtype="<i2")
    write_wav(tmp_path / "a.wav", pcm)
    samples, rate = read_wav(tmp_path / "a.wav", sample_rate=SR)
    assert rate == SR and samples.dtype == np.float32
    np.testing.assert_array_equal(samples * 32768, pcm.astype(np.float32))
    assert samples.min() >= -1.0 and samples.max() < 1.0


def test_wav_format_errors_name_the_file(tmp_path):
    write_wav(tmp_path / "8bit.wav", np.full(10, 128, np.uint8), width=1)
    with pytest.raises(DatasetError, match=r"8bit\.wav.*8-bit samples; only 16-bit PCM"):
        read_wav(tmp_path / "8bit.wav")
    write_wav(tmp_path / "stereo.wav", np.zeros(20, "<i2"), channels=2)
    with pytest.raises(DatasetError, match=r"stereo\.wav.*2 channels, expected 1"):
        read_wav(tmp_path / "stereo.wav")
    stereo, _ = read_wav(tmp_path / "stereo.wav", channels=None)
    assert stereo.shape == (10, 2)
    write_wav(tmp_path / "8k.wav", np.zeros(8, "<i2"), rate=8000)
    with pytest.raises(DatasetError, match=r"8k\.wav.*8000 Hz, expected 16000 Hz"):
        read_wav(tmp_path / "8k.wav", sample_rate=SR)
    (tmp_path / "junk.wav").write_bytes(b"RIFF\x00\x00not a wave file at all")
    with pytest.raises(DatasetError, match=r"junk\.wav.*not a readable WAV"):
        read_wav(tmp_path / "junk.wav")


def test_truncated_wav_is_named(tmp_path):
    write_wav(tmp_path / "cut.wav", np.arange(100, dtype="<i2"))
    data = (tmp_path / "cut.wav").read_bytes()
    (tmp_path / "cut.wav").write_bytes(data[:-40])
    with pytest.raises(DatasetError, match=r"cut\.wav.*truncated.*100 frames.*80"):
        read_wav(tmp_path / "cut.wav")


def test_fix_length_pads_and_crops_at_the_end():
    np.testing.assert_array_equal(fix_length(np.array([1.0, 2.0]), 4), [1, 2, 0, 0])
    np.testing.assert_array_equal(fix_length(np.array([1.0, 2.0, 3.0]), 2), [1, 2])


def test_mel_filterbank_shape_and_triangles():
    bank = mel_filterbank(40, 640, SR, fmin=20, fmax=4000)
    assert bank.shape == (40, 321) and bank.dtype == np.float32
    assert bank.min() >= 0 and bank.max() <= 1
    freqs = np.fft.rfftfreq(640, 1 / SR)
    assert bank[:, freqs > 4000].sum() == 0 and bank[:, freqs < 20].sum() == 0
    peaks = freqs[bank.argmax(1)]
    assert np.all(np.diff(peaks) >= 0)  # centres rise with the band index
    with pytest.raises(DatasetError, match="fmax"):
        mel_filterbank(40, 640, SR, fmin=100, fmax=9000)


def test_mfcc_shape_for_one_second():
    clip = np.random.default_rng(0).normal(size=SR).astype(np.float32) * 0.1
    features = mfcc(clip)
    assert features.shape == (49, 10) and features.dtype == np.float32
    assert num_frames(SR) == 49
    batch = mfcc(np.stack([clip, clip[::-1]]))
    assert batch.shape == (2, 49, 10)
    np.testing.assert_allclose(batch[0], features, rtol=1e-5, atol=1e-4)


def test_tone_differs_from_silence():
    t = np.arange(SR) / SR
    tone = (0.5 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)
    silence = np.zeros(SR, np.float32)
    tone_features, silent_features = mfcc(tone), mfcc(silence)
    assert np.isfinite(silent_features).all()
    assert np.abs(tone_features - silent_features).mean() > 1.0
    # silence is flat: every frame equal, only the 0th (energy) coefficient non-zero
    np.testing.assert_allclose(silent_features[:, 1:], 0.0, atol=1e-4)
    assert tone_features[:, 0].mean() > silent_features[:, 0].mean() + 5  # more energy


def test_mfcc_matches_a_direct_computation_of_one_frame():
    rng = np.random.default_rng(1)
    clip = rng.uniform(-0.5, 0.5, SR).astype(np.float32)
    frame_index = 7
    start = frame_index * 320
    frame = clip[start : start + 640].astype(np.float64)
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(640) / 640)  # periodic Hann
    power = np.abs(np.fft.rfft(frame * window)) ** 2
    energies = mel_filterbank(40, 640, SR, 20.0, 4000.0).astype(np.float64) @ power
    log_mel = np.log(energies + 1e-6)
    n = np.arange(40)
    basis = np.cos(np.pi * np.outer(np.arange(10), 2 * n + 1) / 80)  # DCT-II
    scale = np.full(10, np.sqrt(2 / 40))
    scale[0] = np.sqrt(1 / 40)  # orthonormal
    expected = scale * (basis @ log_mel)
    np.testing.assert_allclose(mfcc(clip)[frame_index], expected, rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(expected, dct(log_mel, norm="ortho")[:10], atol=1e-9)
    np.testing.assert_allclose(hann_window(640), window, atol=1e-7)


def test_preemphasis_changes_features_and_bad_settings_are_errors():
    clip = np.random.default_rng(2).normal(size=SR).astype(np.float32)
    assert not np.allclose(mfcc(clip), mfcc(clip, preemphasis=0.97))
    with pytest.raises(DatasetError, match="n_mfcc"):
        mfcc(clip, n_mfcc=50)
    with pytest.raises(DatasetError, match="shorter than one frame"):
        mfcc(clip[:100])
