"""Training loops: fit records, NaN detection, seeding, accuracy over sequences, MiCoModel's
``train_loop`` / ``test`` and QAT after ``set_qscheme``."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from mico.models.base import MiCoModel
from mico.quant import BitConv1d, BitLinear, bit_layers, float_mode
from mico.train import accuracy, default_loss, fit, predict, seed_everything, train


class TinyNet(MiCoModel):
    """Conv1d -> ReLU -> dropout -> Linear over 6-step, 1-channel sequences."""

    default_input_shape = (1, 6)

    def __init__(self, width: int = 4, num_classes: int = 3, dropout: float = 0.0) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, width, 3, padding=1)
        self.drop = nn.Dropout(dropout)
        self.fc = nn.Linear(width * 6, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.drop(torch.relu(self.conv(x)).flatten(1)))


class TinyLM(MiCoModel):
    """Token embedding -> Linear head: (N, T) tokens to (N, T, V) logits."""

    default_input_shape = (5,)
    input_dtype = torch.long
    task = "language"

    def __init__(self, vocab: int = 7) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, 8)
        self.head = nn.Linear(8, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.embed(x))


def _dataset(n: int = 96, seed: int = 0) -> TensorDataset:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 1, 6, generator=g)
    y = (x[:, 0, :2].sum(dim=1) > 0).long() + (x[:, 0, 4] > 1).long()  # learnable, 3 classes
    return TensorDataset(x, y)


def _loaders(shuffle: bool = True) -> tuple[DataLoader, DataLoader]:
    return (
        DataLoader(_dataset(), batch_size=16, shuffle=shuffle),
        DataLoader(_dataset(48, seed=1), batch_size=16),
    )


# --------------------------------------------------------------------------- fit


def test_fit_returns_one_record_per_epoch() -> None:
    torch.manual_seed(0)
    model = TinyNet()
    train_loader, test_loader = _loaders()
    lines: list[str] = []
    history = fit(model, train_loader, 4, lr=1e-2, test_loader=test_loader, log=lines.append)
    assert [r["epoch"] for r in history] == [1, 2, 3, 4]
    for record in history:
        assert set(record) == {"epoch", "loss", "seconds", "test_accuracy"}
        assert math.isfinite(record["loss"]) and record["loss"] > 0
        assert record["seconds"] >= 0
        assert 0.0 <= record["test_accuracy"] <= 1.0
    assert history[-1]["loss"] < history[0]["loss"]
    assert history[-1]["test_accuracy"] == accuracy(model, test_loader)
    assert len(lines) == 4
    assert lines[0].startswith("epoch 1/4") and "loss" in lines[0] and "test acc" in lines[0]
    assert not model.training  # left in eval mode


def test_fit_without_test_loader_and_zero_epochs() -> None:
    model = TinyNet()
    history = fit(model, _loaders()[0], 1)
    assert len(history) == 1
    assert "test_accuracy" not in history[0]
    before = {k: v.clone() for k, v in model.state_dict().items()}
    assert fit(model, _loaders()[0], 0) == []
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [({"epochs": -1}, "epochs must be >= 0"), ({"epochs": 1, "lr": 0.0}, "learning rate")],
)
def test_fit_rejects_bad_arguments(kwargs: dict[str, float], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        fit(TinyNet(), _loaders()[0], **kwargs)  # type: ignore[arg-type]


def test_nan_loss_raises_floating_point_error() -> None:
    model = TinyNet()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def nan_loss(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(output, target) * float("nan")

    with pytest.raises(FloatingPointError) as info:
        fit(model, _loaders()[0], 2, lr=0.5, loss_fn=nan_loss)
    assert "nan" in str(info.value)
    assert "epoch 1" in str(info.value)
    assert "learning rate" in str(info.value)
    # the non-finite loss never reached the weights
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items())


def test_exploding_training_raises_floating_point_error() -> None:
    class Exploding(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(6, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(x.flatten(1)) * torch.tensor(float("inf"))

    with pytest.raises(FloatingPointError, match="epoch 1"):
        fit(Exploding(), _loaders()[0], 1)


def _train_once(seed: int) -> tuple[dict[str, torch.Tensor], list[float]]:
    seed_everything(seed)
    model = TinyNet(dropout=0.3)
    history = fit(model, _loaders(shuffle=True)[0], 2, lr=1e-2)
    return model.state_dict(), [r["loss"] for r in history]


def test_seed_everything_makes_training_repeat_exactly() -> None:
    state_a, loss_a = _train_once(123)
    state_b, loss_b = _train_once(123)
    assert loss_a == loss_b
    assert all(torch.equal(state_a[k], state_b[k]) for k in state_a)
    state_c, _ = _train_once(124)
    assert any(not torch.equal(state_a[k], state_c[k]) for k in state_a)


def test_train_returns_the_model_in_eval_mode() -> None:
    model = TinyNet()
    out = train(model, _loaders()[0], 1, lr=1e-2)
    assert out is model
    assert not model.training


def test_predict_concatenates_outputs() -> None:
    model = TinyNet().eval()
    loader = DataLoader(_dataset(20), batch_size=6)
    out = predict(model, loader)
    assert out.shape == (20, 3)
    with torch.no_grad():
        assert torch.allclose(out, model(_dataset(20).tensors[0]), atol=1e-6)


# --------------------------------------------------------------------------- accuracy


class _Echo(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_accuracy_counts_every_sequence_position() -> None:
    logits = torch.zeros(3, 4, 5)
    predicted = torch.tensor([[0, 1, 2, 3], [4, 4, 4, 4], [1, 1, 0, 0]])
    logits.scatter_(2, predicted.unsqueeze(-1), 1.0)
    target = predicted.clone()
    target[0, 0] = 1  # 3 of the 12 positions are wrong
    target[1, 3] = 0
    target[2, 1] = 2
    loader = DataLoader(TensorDataset(logits, target), batch_size=2)
    assert accuracy(_Echo(), loader) == pytest.approx(9 / 12)


def test_accuracy_for_classifiers() -> None:
    logits = torch.eye(4)[[0, 1, 2, 3, 0]]
    target = torch.tensor([0, 1, 2, 0, 1])
    assert accuracy(_Echo(), DataLoader(TensorDataset(logits, target), batch_size=3)) == 3 / 5


def test_default_loss_averages_every_position() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 3, 5)
    target = torch.randint(0, 5, (2, 3))
    per_position = [
        F.cross_entropy(logits[i, t : t + 1], target[i, t : t + 1])
        for i in range(2)
        for t in range(3)
    ]
    assert float(default_loss(logits, target)) == pytest.approx(
        float(torch.stack(per_position).mean()), rel=1e-6
    )
    flat = torch.randn(4, 5)
    labels = torch.tensor([0, 1, 2, 3])
    assert torch.equal(default_loss(flat, labels), F.cross_entropy(flat, labels))


# --------------------------------------------------------------------------- MiCoModel API


def test_train_loop_and_test(capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    model = TinyNet()
    train_loader, test_loader = _loaders()
    history = model.train_loop(3, train_loader, test_loader, lr=1e-2)
    assert len(history) == 3
    assert all("test_accuracy" in r for r in history)
    printed = capsys.readouterr().out
    assert "epoch 3/3" in printed  # verbose by default
    acc = model.test(test_loader)
    assert acc == history[-1]["test_accuracy"]
    assert 0.0 <= acc <= 1.0
    quiet = TinyNet().train_loop(1, train_loader, verbose=False)
    assert len(quiet) == 1
    assert capsys.readouterr().out == ""


def test_set_qscheme_then_training_runs_qat() -> None:
    torch.manual_seed(0)
    model = TinyNet()
    assert model.n_layers == 2
    model.set_qscheme([[8] * model.n_layers, [8] * model.n_layers])
    layers = bit_layers(model)
    assert isinstance(model.conv, BitConv1d) and isinstance(model.fc, BitLinear)
    assert all(m.qconfig.act_mode == "dynamic" and m.mode == "quant" for m in layers.values())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    train_loader, test_loader = _loaders()
    history = model.train_loop(3, train_loader, test_loader, lr=1e-2, verbose=False)
    assert len(history) == 3
    assert all(math.isfinite(r["loss"]) for r in history)
    assert history[-1]["loss"] < history[0]["loss"]
    assert not torch.equal(model.conv.weight, before["conv.weight"])
    # still quantized after training: the output differs from the float computation
    x = _dataset(8).tensors[0]
    with torch.no_grad():
        quant_out = model(x)
        with float_mode(model):
            float_out = model(x)
    assert not torch.equal(quant_out, float_out)
    assert model.test(test_loader) == history[-1]["test_accuracy"]


def test_low_bit_qat_weights_stay_on_the_grid() -> None:
    torch.manual_seed(0)
    model = TinyNet()
    model.set_qscheme([[2, 2], [4, 4]])
    model.train_loop(2, _loaders()[0], lr=1e-2, verbose=False)
    with torch.no_grad():
        wq = model.fc.quant_weight()
    codes = wq / model.fc.weight_scale
    assert set(torch.round(codes).unique().tolist()) <= {-1.0, 0.0, 1.0}


def test_language_model_train_loop_counts_every_token() -> None:
    torch.manual_seed(0)
    model = TinyLM()
    assert model.n_layers == 1
    tokens = torch.randint(0, 7, (32, 5), generator=torch.Generator().manual_seed(0))
    targets = (tokens + 1) % 7  # next token is a fixed function of the token
    loader = DataLoader(TensorDataset(tokens, targets), batch_size=8, shuffle=True)
    history = model.train_loop(15, loader, loader, lr=5e-2, verbose=False)
    assert history[-1]["loss"] < history[0]["loss"]
    assert model.test(loader) == history[-1]["test_accuracy"]
    assert model.test(loader) > 0.9
