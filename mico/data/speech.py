"""Google Speech Commands (v0.02) read from its folder of WAV files, as waveforms or MFCCs.

The official split lists are used: files named in ``testing_list.txt`` are the test set, those
in ``validation_list.txt`` the validation set, every other file is training data.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from mico.data.mfcc import mfcc
from mico.data.paths import corrupt, data_root, not_found
from mico.data.split import DatasetSplit
from mico.data.wav import fix_length, read_wav
from mico.errors import DatasetError

SAMPLE_RATE = 16000
CLIP_SAMPLES = SAMPLE_RATE  # every clip is padded or cropped to 1 s
KWS_WORDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
UNKNOWN = "_unknown_"
SPLIT_LISTS = ("validation_list.txt", "testing_list.txt")
SPEECH_SUBDIRS = ("SpeechCommands/speech_commands_v0.02", "speech_commands_v0.02")
_MFCC_CHUNK = 512  # clips converted at once, bounding memory
SPEECH_LAYOUT = (
    "<root>/SpeechCommands/speech_commands_v0.02/validation_list.txt",
    "<root>/SpeechCommands/speech_commands_v0.02/testing_list.txt",
    "<root>/SpeechCommands/speech_commands_v0.02/<word>/<clip>.wav   (yes/, no/, up/, ...)",
    "(or <root>/speech_commands_v0.02/..., or that folder itself given as root)",
)


def speech_folder(root: str | os.PathLike[str] | None = None) -> Path:
    """The dataset folder: ``<root>/SpeechCommands/speech_commands_v0.02``, or ``root`` itself."""
    base = data_root(root)
    candidates = [base / sub for sub in SPEECH_SUBDIRS] + [base]
    for folder in candidates:
        if all((folder / name).is_file() for name in SPLIT_LISTS):
            return folder
    missing: Path = candidates[0]
    for folder in candidates:
        if folder.is_dir() and any((folder / name).is_file() for name in SPLIT_LISTS):
            missing = next(folder / n for n in SPLIT_LISTS if not (folder / n).is_file())
            break
    raise not_found("Speech Commands", missing, candidates, SPEECH_LAYOUT)


def read_speechcommands(
    root: str | os.PathLike[str] | None = None,
    features: Literal["mfcc", "waveform"] = "mfcc",
    words: Sequence[str] | None = KWS_WORDS,
    unknown: bool = False,
    validation: Literal["drop", "train", "test"] = "drop",
    limit: int | None = None,
    seed: int = 0,
) -> DatasetSplit:
    """Keyword clips as float32 ``(N, 1, 49, 10)`` MFCCs or ``(N, 1, 16000)`` waveforms.

    ``words`` picks the classes in label order (default the 10 KWS words; ``None`` means every
    word folder, sorted). ``unknown=True`` adds a last ``_unknown_`` class holding the other
    words. The validation list is dropped by default, or merged into ``train``/``test``.
    ``limit`` keeps a random subset (drawn with ``seed``) of at most that many clips per split,
    for quick experiments.
    """
    if features not in ("mfcc", "waveform"):
        raise DatasetError(f"features must be 'mfcc' or 'waveform', got {features!r}")
    if validation not in ("drop", "train", "test"):
        raise DatasetError(f"validation must be 'drop', 'train' or 'test', got {validation!r}")
    if isinstance(words, str):
        raise DatasetError(f"words must be a sequence of words, e.g. ('yes', 'no'), got {words!r}")
    folder = speech_folder(root)
    available = sorted(
        p.name for p in folder.iterdir() if p.is_dir() and not p.name.startswith("_")
    )
    if not available:
        raise not_found("Speech Commands", folder / "<word>/", [folder], SPEECH_LAYOUT)
    classes = tuple(available if words is None else words)
    absent = [w for w in classes if w not in available]
    if absent or not classes:
        raise DatasetError(
            f"Speech Commands words {', '.join(absent) or '(none given)'} have no folder in "
            f"{folder}; "
            f"available: {', '.join(available)}"
        )
    others = [w for w in available if w not in classes] if unknown else []
    label_of = {w: i for i, w in enumerate(classes)}
    label_of.update({w: len(classes) for w in others})
    if unknown:
        classes = (*classes, UNKNOWN)

    val_list = _read_list(folder / "validation_list.txt")
    test_list = _read_list(folder / "testing_list.txt")
    parts: dict[str, list[tuple[Path, int]]] = {"train": [], "test": []}
    for word in sorted(label_of):
        for clip in sorted((folder / word).glob("*.wav")):
            rel = f"{word}/{clip.name}"
            if rel in test_list:
                part = "test"
            elif rel in val_list:
                if validation == "drop":
                    continue
                part = validation
            else:
                part = "train"
            parts[part].append((clip, label_of[word]))
    arrays = {}
    for part, clips in parts.items():
        if limit is not None and len(clips) > limit:
            keep = np.random.default_rng(seed).choice(len(clips), size=limit, replace=False)
            clips = [clips[i] for i in np.sort(keep)]
        if not clips:
            raise not_found(
                "Speech Commands", f"{part} clips for {', '.join(classes)}", [folder], SPEECH_LAYOUT
            )
        arrays[part] = (_features(clips, features), np.array([y for _, y in clips], np.int64))
    return DatasetSplit(
        "speechcommands",
        *arrays["train"],
        *arrays["test"],
        num_classes=len(classes),
        classes=classes,
        metadata={"folder": str(folder), "features": features, "sample_rate": SAMPLE_RATE},
    )


def speech_features(waveforms: np.ndarray, features: str = "mfcc") -> np.ndarray:
    """``(N, 16000)`` clips as model inputs: ``(N, 1, 49, 10)`` MFCCs or ``(N, 1, 16000)``."""
    if features == "waveform":
        return waveforms[:, None, :].astype(np.float32)
    chunks = [
        mfcc(waveforms[start : start + _MFCC_CHUNK], sample_rate=SAMPLE_RATE)
        for start in range(0, len(waveforms), _MFCC_CHUNK)
    ]
    return np.concatenate(chunks)[:, None, :, :]


def _features(clips: list[tuple[Path, int]], features: str) -> np.ndarray:
    """Read and convert the clips chunk by chunk, so MFCC mode never holds every waveform."""
    chunks = []
    for start in range(0, len(clips), _MFCC_CHUNK):
        batch = clips[start : start + _MFCC_CHUNK]
        waves = np.empty((len(batch), CLIP_SAMPLES), dtype=np.float32)
        for i, (path, _) in enumerate(batch):
            samples, _ = read_wav(path, sample_rate=SAMPLE_RATE, channels=1)
            waves[i] = fix_length(samples, CLIP_SAMPLES)
        chunks.append(speech_features(waves, features))
    return np.concatenate(chunks)


def _read_list(path: Path) -> set[str]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise corrupt(path, f"cannot read the split list ({error})") from error
    return {line.strip().replace("\\", "/") for line in text.splitlines() if line.strip()}
