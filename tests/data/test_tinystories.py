"""TinyStories: text files with <|endoftext|> separators written into tmp_path, tokenized."""

import numpy as np
import pytest

from mico.data import (
    ByteBPETokenizer,
    iter_stories,
    load_dataset,
    read_tinystories,
    tinystories,
    token_windows,
)
from mico.errors import DatasetError

TRAIN = [
    "Once upon a time, there was a little dog named Max. Max liked to run.",
    "Sue had a red hat. She wore it to the park and met a friendly bird.",
    "The sun was hot. Tim and Ann went to the sea to swim and play.",
    "Ben found a shiny stone. He gave it to his mom, and she smiled.",
] * 6
VALID = ["A cat sat on a mat. It was happy.", "The end of the story was nice."] * 4


def write_stories(folder, train=TRAIN, valid=VALID):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "TinyStories-train.txt").write_text("\n<|endoftext|>\n".join(train) + "\n")
    (folder / "TinyStories-valid.txt").write_text("<|endoftext|>".join(valid))


def test_windows_round_trip_to_the_text(tmp_path):
    write_stories(tmp_path)
    split = read_tinystories(tmp_path, seq_len=16, vocab_size=300)
    tok = split.metadata["tokenizer"]
    assert split.num_classes == tok.vocab_size == 300
    assert split.x_train.shape[1] == 16 and split.y_train.shape == split.x_train.shape
    assert split.x_train.dtype == np.int64 and split.y_train.dtype == np.int64
    np.testing.assert_array_equal(split.y_train[:, :-1], split.x_train[:, 1:])
    np.testing.assert_array_equal(split.y_train[:-1, -1], split.x_train[1:, 0])
    stream = np.concatenate([split.x_train.ravel(), split.y_train[-1, -1:]])
    expected = "<|endoftext|>".join(TRAIN) + "<|endoftext|>"
    assert expected.startswith(tok.decode(stream))
    assert len(tok.decode(stream)) > len(expected) - 80  # only the last partial window is cut
    assert tok.decode(split.x_test[0]).startswith(VALID[0][:10])


def test_stories_are_limited_and_tokenizer_can_be_given(tmp_path):
    write_stories(tmp_path / "TinyStories")
    tok = ByteBPETokenizer.train(TRAIN[:4], vocab_size=280)
    tok.save(tmp_path / "tok.json")
    split = load_dataset(
        "tinystories", root=tmp_path, seq_len=8, max_stories=2, tokenizer=tmp_path / "tok.json"
    )
    assert split.num_classes == 280
    ids = np.concatenate([split.x_train.ravel(), split.y_train[-1, -1:]])
    text = tok.decode(ids)
    assert TRAIN[0] in text and TRAIN[2] not in text
    assert split.metadata["tokenizer"].merges == tok.merges


def test_iter_stories_across_read_blocks(tmp_path, monkeypatch):
    import mico.data.stories as stories

    monkeypatch.setattr(stories, "_READ_BLOCK", 7)  # separators straddle block boundaries
    write_stories(tmp_path)
    assert list(iter_stories(tmp_path / "TinyStories-train.txt")) == TRAIN
    assert list(iter_stories(tmp_path / "TinyStories-valid.txt", limit=3)) == VALID[:3]


def test_token_windows():
    x, y = token_windows(np.arange(11), 5)
    np.testing.assert_array_equal(x, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9]])
    np.testing.assert_array_equal(y, [[1, 2, 3, 4, 5], [6, 7, 8, 9, 10]])
    with pytest.raises(DatasetError, match="too few for one window of seq_len=20"):
        token_windows(np.arange(11), 20)


def test_tinystories_loader(tmp_path):
    write_stories(tmp_path)
    train, _test = tinystories(batch_size=4, seq_len=8, root=tmp_path, vocab_size=300)
    x, y = next(iter(train))
    assert tuple(x.shape) == (4, 8) and tuple(y.shape) == (4, 8)
    assert x.dtype == y.dtype and not x.dtype.is_floating_point


def test_missing_files_list_expected_layout(tmp_path):
    with pytest.raises(DatasetError) as info:
        read_tinystories(tmp_path)
    assert "TinyStories-train.txt" in str(info.value)
    assert "TinyStories-valid.txt" in str(info.value)
    write_stories(tmp_path)
    (tmp_path / "TinyStories-valid.txt").unlink()
    with pytest.raises(DatasetError, match=r"missing .*TinyStories-valid\.txt"):
        read_tinystories(tmp_path)


def test_empty_or_binary_files_are_named(tmp_path):
    write_stories(tmp_path)
    (tmp_path / "TinyStories-valid.txt").write_text("<|endoftext|>\n")
    with pytest.raises(DatasetError, match=r"TinyStories-valid\.txt.*holds no stories"):
        read_tinystories(tmp_path)
    (tmp_path / "TinyStories-valid.txt").write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(DatasetError, match=r"TinyStories-valid\.txt.*not UTF-8"):
        read_tinystories(tmp_path)
