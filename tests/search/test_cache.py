"""The evaluation cache: whole keys (ternary apart from 2 bits), kept across runs, shared by
processes writing at once; MiCoEval reuses a value instead of evaluating again."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from mico.errors import ConfigError
from mico.search import MiCoEval
from mico.search.cache import KEY_FIELDS, EvalCache, default_cache_path

KEY = {
    "model": "small_cnn",
    "checkpoint": "abc123",
    "data": "digits:seed=0",
    "mode": "static/tensor",
    "target": "bitfusion",
    "objective": "ptq_acc:epochs=1:lr=0.0001",
    "scheme": "conv1=2/8,conv2=8/8",
}


def test_values_are_kept_under_the_whole_key(tmp_path):
    cache = EvalCache(tmp_path / "c.sqlite")
    cache.put(KEY, 0.75)
    assert cache.get(KEY) == 0.75
    for field, other in [("model", "lenet"), ("checkpoint", "abc124"), ("data", "mnist:seed=0"),
                         ("mode", "dynamic/tensor"), ("target", "vexriscv"),
                         ("objective", "qat_acc:epochs=1:lr=0.0001"),
                         ("scheme", "conv1=1.58/8,conv2=8/8")]:  # fmt: skip
        assert cache.get({**KEY, field: other}) is None, field
    ternary = {**KEY, "scheme": "conv1=1.58/8,conv2=8/8"}
    cache.put(ternary, 0.5)
    assert (cache.get(KEY), cache.get(ternary)) == (0.75, 0.5)
    assert (cache.hits, cache.misses) == (3, 7)
    cache.close()
    again = EvalCache(tmp_path / "c.sqlite")  # another run
    assert again.get(ternary) == 0.5 and len(again) == 2
    with pytest.raises(ConfigError, match="needs scheme"):
        again.get({f: "x" for f in KEY_FIELDS if f != "scheme"})


def test_default_path_and_unusable_file(tmp_path, monkeypatch):
    monkeypatch.setenv("MICO_CACHE", str(tmp_path / "x"))  # the cache folder
    assert default_cache_path() == tmp_path / "x" / "evaluations.sqlite"
    monkeypatch.delenv("MICO_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_path() == tmp_path / "xdg" / "mico" / "evaluations.sqlite"
    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(ConfigError, match="cannot use the evaluation cache"):
        EvalCache(tmp_path / "file" / "c.sqlite")


WRITER = """
import sys
from mico.search.cache import EvalCache
key = {key!r}
cache = EvalCache(sys.argv[1])
worker = int(sys.argv[2])
for i in range(150):
    cache.put({{**key, "scheme": f"s{{i}}"}}, float(i))  # both write every key...
    cache.put({{**key, "scheme": f"w{{worker}}-{{i}}"}}, float(worker))  # ...and their own
"""


def test_two_processes_write_at_once(tmp_path):
    path = str(tmp_path / "shared.sqlite")
    EvalCache(path).close()
    code = WRITER.format(key=KEY)
    procs = [subprocess.Popen([sys.executable, "-c", code, path, str(w)], stderr=subprocess.PIPE)
             for w in (1, 2)]  # fmt: skip
    errors = [p.communicate(timeout=120)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    cache = EvalCache(path)
    assert len(cache) == 150 + 2 * 150
    assert all(cache.get({**KEY, "scheme": f"s{i}"}) == float(i) for i in range(150))
    assert cache.get({**KEY, "scheme": "w2-149"}) == 2.0
    rows = sqlite3.connect(path).execute("SELECT COUNT(DISTINCT key) FROM evaluations").fetchone()
    assert rows[0] == 450


def test_evaluator_reuses_cached_values(trained_cnn, digits_split, tmp_path):
    cache = EvalCache(tmp_path / "c.sqlite")

    def make(seed: int = 0) -> MiCoEval:  # fresh loaders: the seed's first shuffle calibrates
        train_loader, test_loader = digits_split.loaders(batch_size=64, seed=seed)
        return MiCoEval(trained_cnn, 1, train_loader, test_loader, None, cache=cache,
                        data_name=f"digits:seed={seed}", model_name="small_cnn")  # fmt: skip

    first = make()
    n = first.n_layers
    value = first.eval_f([4] * n + [8] * n)
    assert not first.last_from_cache and len(cache) == 1
    second = make()  # a new run: the value comes from the file, not an evaluation
    second.eval_ptq_acc = None  # evaluating would now fail
    assert second.eval_f([4] * n + [8] * n) == value and second.last_from_cache
    key = second.cache_key([4] * n + [8] * n)
    assert key["scheme"] == "conv1=4/8,conv2=4/8,fc=4/8" and key["model"] == "small_cnn"
    ternary = second.cache_key([1.58] + [4] * (n - 1) + [8] * n)
    assert ternary["scheme"].startswith("conv1=1.58/8") and ternary != key
    assert make(seed=1).cache_key([4] * n + [8] * n)["data"] != key["data"]
