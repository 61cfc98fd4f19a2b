"""The byte-level BPE tokenizer: exact round trips, training, save/load."""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mico.data import ByteBPETokenizer
from mico.data.bpe import CHUNK_PATTERN
from mico.errors import DatasetError

CORPUS = [
    "Once upon a time, there was a little girl named Lily. She liked to play outside.",
    "One day, Tom saw a big red ball in the park. He was very happy!",
    "The cat and the dog were friends. They played together every day.",
    'Lily said, "Can I play with the ball?" Tom said, "Yes, you can!"',
    "Ünïcödé wörds — and emoji 🐱🐶 — also appear sometimes.",
] * 5


@pytest.fixture(scope="module")
def tokenizer():
    return ByteBPETokenizer.train(CORPUS, vocab_size=400)


def test_training_reaches_the_vocab_size_and_compresses(tokenizer):
    assert tokenizer.vocab_size == 400
    assert len(tokenizer.merges) == 400 - 256 - 1
    text = CORPUS[0]
    ids = tokenizer.encode(text)
    assert len(ids) < len(text.encode("utf-8")) / 2
    assert all(0 <= i < tokenizer.vocab_size for i in ids)
    assert tokenizer.decode(ids) == text


def test_training_is_deterministic(tokenizer):
    assert ByteBPETokenizer.train(CORPUS, vocab_size=400).merges == tokenizer.merges


@settings(max_examples=200, deadline=None)
@given(st.text())
def test_round_trip_of_any_text(tokenizer, text):
    ids = tokenizer.encode(text)
    assert tokenizer.decode(ids) == text
    assert tokenizer.decode_bytes(ids) == text.encode("utf-8")
    assert "".join(CHUNK_PATTERN.findall(text)) == text


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(max_size=40), min_size=1, max_size=5), st.text(max_size=60))
def test_round_trip_with_tokenizers_trained_on_any_text(corpus, text):
    trained = ByteBPETokenizer.train(corpus, vocab_size=300)
    assert trained.vocab_size <= 300
    assert trained.decode(trained.encode(text)) == text


def test_special_token(tokenizer):
    text = "a story<|endoftext|>another"
    plain = tokenizer.encode(text)
    assert tokenizer.eot_id not in plain  # by default the marker is ordinary text
    special = tokenizer.encode(text, allow_special=True)
    assert special.count(tokenizer.eot_id) == 1
    assert tokenizer.eot_id == tokenizer.vocab_size - 1
    assert tokenizer.decode(special) == text == tokenizer.decode(plain)


def test_save_load_round_trip(tokenizer, tmp_path):
    path = tmp_path / "tok.json"
    tokenizer.save(path)
    loaded = ByteBPETokenizer.load(path)
    assert loaded.merges == tokenizer.merges and loaded.vocab_size == tokenizer.vocab_size
    assert loaded.special_tokens == tokenizer.special_tokens
    text = "Lily and Tom played with the red ball. 🐶"
    assert loaded.encode(text) == tokenizer.encode(text)
    assert json.loads(path.read_text())["format"] == "mico-byte-bpe"


def test_bad_tokenizer_files_are_named(tmp_path):
    path = tmp_path / "tok.json"
    path.write_text("{not json")
    with pytest.raises(DatasetError, match=r"tok\.json.*not a JSON tokenizer"):
        ByteBPETokenizer.load(path)
    path.write_text(json.dumps({"format": "mico-byte-bpe", "merges": [[1, 2, 3]]}))
    with pytest.raises(DatasetError, match=r"tok\.json.*\[int, int\] pairs"):
        ByteBPETokenizer.load(path)
    path.write_text(json.dumps({"format": "mico-byte-bpe", "merges": [[1, 900]]}))
    with pytest.raises(DatasetError, match=r"tok\.json.*merge 0 \(1, 900\)"):
        ByteBPETokenizer.load(path)
    path.write_text(json.dumps({"merges": []}))
    with pytest.raises(DatasetError, match=r"tok\.json.*not a mico-byte-bpe tokenizer"):
        ByteBPETokenizer.load(path)
    with pytest.raises(DatasetError, match=r"missing\.json does not exist"):
        ByteBPETokenizer.load(tmp_path / "missing.json")


def test_bad_ids_and_sizes(tokenizer):
    with pytest.raises(DatasetError, match=r"token id 400 outside the vocabulary \(0\.\.399\)"):
        tokenizer.decode([1, 400])
    with pytest.raises(DatasetError, match="vocab_size must be at least 257"):
        ByteBPETokenizer.train("abc", vocab_size=100)
