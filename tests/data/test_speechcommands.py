"""Speech Commands: a small folder of real WAV files plus split lists, read back."""

import wave

import numpy as np
import pytest

from mico.data import load_dataset, read_speechcommands, speechcommands
from mico.errors import DatasetError

SR = 16000


def write_wav(path, pcm, width=2):
    path.parent.mkdir(parents=True, exist_ok=True)
    with wave.open(str(path), "wb") as handle:
        handle.setnchannels(1)
        handle.setsampwidth(width)
        handle.setframerate(SR)
        handle.writeframes(pcm.tobytes())


def make_speech(root, words=("yes", "no", "cat"), per_word=3, seed=0):
    """Word folders with clips 0..per_word-1; clip 0 is in the test list, clip 1 in validation."""
    rng = np.random.default_rng(seed)
    folder = root / "SpeechCommands" / "speech_commands_v0.02"
    clips = {}
    for word in words:
        for i in range(per_word):
            length = [SR, SR // 2, SR + 300][i % 3]  # exact, short (padded), long (cropped)
            pcm = rng.integers(-2000, 2000, length).astype("<i2")
            rel = f"{word}/clip{i}_nohash_0.wav"
            write_wav(folder / rel, pcm)
            clips[rel] = pcm
    write_wav(folder / "_background_noise_" / "noise.wav", np.zeros(SR * 2, "<i2"))
    (folder / "testing_list.txt").write_text("".join(f"{w}/clip0_nohash_0.wav\n" for w in words))
    (folder / "validation_list.txt").write_text("".join(f"{w}/clip1_nohash_0.wav\n" for w in words))
    return folder, clips


def expected_wave(pcm):
    out = np.zeros(SR, np.float32)
    n = min(SR, len(pcm))
    out[:n] = pcm[:n].astype(np.float32) / 32768
    return out


def test_waveforms_round_trip_with_official_splits(tmp_path):
    _, clips = make_speech(tmp_path)
    split = read_speechcommands(tmp_path, features="waveform", words=("yes", "no"))
    assert split.classes == ("yes", "no") and split.num_classes == 2
    # train: clip2 of each word (clip0 is test, clip1 validation, dropped by default)
    assert split.x_train.shape == (2, 1, SR) and split.x_train.dtype == np.float32
    assert sorted(split.y_train.tolist()) == [0, 1] and split.y_train.dtype == np.int64
    assert split.x_test.shape == (2, 1, SR)
    for x, y in zip(split.x_train, split.y_train, strict=True):
        word = split.classes[y]
        np.testing.assert_array_equal(x[0], expected_wave(clips[f"{word}/clip2_nohash_0.wav"]))
    for x, y in zip(split.x_test, split.y_test, strict=True):
        word = split.classes[y]
        np.testing.assert_array_equal(x[0], expected_wave(clips[f"{word}/clip0_nohash_0.wav"]))


def test_validation_can_join_training(tmp_path):
    _, clips = make_speech(tmp_path)
    split = read_speechcommands(tmp_path, features="waveform", words=("no",), validation="train")
    assert split.x_train.shape == (2, 1, SR)
    np.testing.assert_array_equal(
        split.x_train[0, 0], expected_wave(clips["no/clip1_nohash_0.wav"])
    )  # padded at the end


def test_mfcc_features_shape(tmp_path):
    make_speech(tmp_path)
    split = load_dataset("speechcommands", root=tmp_path, words=("yes", "no", "cat"))
    assert split.x_train.shape == (3, 1, 49, 10) and split.x_test.shape == (3, 1, 49, 10)
    assert split.x_train.dtype == np.float32 and np.isfinite(split.x_train).all()


def test_unknown_class_and_all_words(tmp_path):
    make_speech(tmp_path)
    split = read_speechcommands(tmp_path, features="waveform", words=("yes",), unknown=True)
    assert split.classes == ("yes", "_unknown_")
    assert sorted(split.y_test.tolist()) == [0, 1, 1]  # no and cat are unknown
    every = read_speechcommands(tmp_path, features="waveform", words=None)
    assert every.classes == ("cat", "no", "yes")  # _background_noise_ is not a word


def test_dataset_folder_given_directly_and_limit(tmp_path):
    folder, _ = make_speech(tmp_path, per_word=6)
    split = read_speechcommands(folder, features="waveform", words=("yes", "no"), limit=3)
    assert len(split.y_train) == 3 and len(split.y_test) == 2
    again = read_speechcommands(folder, features="waveform", words=("yes", "no"), limit=3)
    np.testing.assert_array_equal(again.x_train, split.x_train)


def test_speechcommands_loader(tmp_path):
    make_speech(tmp_path, per_word=5)
    train, _ = speechcommands(batch_size=2, root=tmp_path, words=("yes", "no", "cat"))
    x, y = next(iter(train))
    assert tuple(x.shape) == (2, 1, 49, 10) and tuple(y.shape) == (2,)
    train, _ = speechcommands(batch_size=2, root=tmp_path, features="waveform", words=("yes",))
    assert tuple(next(iter(train))[0].shape) == (2, 1, SR)


def test_missing_folder_lists_expected_layout(tmp_path):
    with pytest.raises(DatasetError) as info:
        read_speechcommands(tmp_path)
    message = str(info.value)
    for part in ("SpeechCommands/speech_commands_v0.02", "testing_list.txt", "validation_list.txt"):
        assert part in message
    assert "<word>/<clip>.wav" in message


def test_missing_list_and_missing_word_are_named(tmp_path):
    folder, _ = make_speech(tmp_path)
    with pytest.raises(
        DatasetError, match=r"words up, down, .*, go have no .*available: cat, no, yes"
    ):
        read_speechcommands(tmp_path)  # default KWS words: only yes and no exist here
    (folder / "testing_list.txt").unlink()
    with pytest.raises(DatasetError, match=r"missing .*speech_commands_v0.02/testing_list\.txt"):
        read_speechcommands(tmp_path, words=("yes",))


def test_bad_wav_in_dataset_is_named(tmp_path):
    folder, _ = make_speech(tmp_path)
    write_wav(folder / "yes" / "clip2_nohash_0.wav", np.zeros(100, np.uint8), width=1)
    with pytest.raises(DatasetError, match=r"yes/clip2_nohash_0\.wav.*only 16-bit PCM"):
        read_speechcommands(tmp_path, words=("yes",))


def test_bad_options():
    with pytest.raises(DatasetError, match="features"):
        read_speechcommands(features="spectrogram")
    with pytest.raises(DatasetError, match="validation"):
        read_speechcommands(validation="keep")
    with pytest.raises(DatasetError, match="sequence of words"):
        read_speechcommands(words="yes")
