"""A latency budget measured on rv32 (qemu instructions of the scheme's own C program) is
searched end to end when the model's latency falls with the widths, and refused first where it
does not. On a CNN of 32 channels on 8x8 digits, the register-tiled 4-bit lanes beat W8A8's
byte kernels, and 3-bit weights (no lanes: the plain kernels) do not: the search runs over 1
and 8 bits (the binary layers' popcount kernels), 4 and 8 bits are accepted, 3 and 8 refused."""

from __future__ import annotations

import pytest
import torch

from mico.errors import PlanError
from mico.models import SmallCNN
from mico.search import MiCoEval
from mico.search.study import StudyConfig, sqlite_url
from mico.search.tune import parse_budgets, tune
from mico.targets import rv32

pytestmark = pytest.mark.skipif(
    not rv32.available(),
    reason="rv32 toolchain missing: apt-get " + rv32.missing_tools_hint(),
)


def test_latency_budget_search_on_rv32(digits_split, tmp_path):
    torch.manual_seed(0)
    model = SmallCNN(channels=(32, 32))
    train_loader, test_loader = digits_split.loaders(batch_size=64, seed=0)
    ev = MiCoEval(model, 1, train_loader, test_loader, None, latency_target="rv32",
                  data_name="digits")  # fmt: skip
    with pytest.raises(PlanError, match=r"does not fall with fewer bits.*--bits 8"):
        ev.check_latency_falls_with_bits([3, 8])
    ev.check_latency_falls_with_bits([4, 8])
    bits = [1, 8]
    ev.check_latency_falls_with_bits(bits)  # what `mico tune` checks before searching
    w1a1, w8a8 = (ev.eval_latency([q] * 6) for q in bits)
    assert w1a1 < w8a8
    limit = (w1a1 + w8a8) / 2
    config = StudyConfig(sqlite_url(tmp_path / "study.db"), "rv32")
    # the classifier held at W8A8 (few schemes to measure: each is a build and a qemu run)
    result = tune(ev, parse_budgets(f"latency={limit:.0f}"), "nlp", 4, bits, 0,
                  lambda _m: None, study=config, fixed_layers={-1: 8})  # fmt: skip
    assert result.costs["latency"] <= limit
    # the recorded cost is the instructions the best plan's own program retires under qemu
    assert result.costs["latency"] == ev.eval_latency(result.best_scheme)
    assert all(row["latency"] <= limit for row in result.trials if row["feasible"])
    assert result.best_scheme[2] == result.best_scheme[5] == 8
